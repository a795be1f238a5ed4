"""The tests phase through the process boundary against plain pytest, per task (issue 37, 0).

For each task the same test files run twice, side by side and interleaved, on the same machine
and interpreter: once as a verification runs them (the upload the service makes with
verifier.write_upload, laid out by the verifier script's steps: the runtime with its bytecode,
the workspace, the tests with the pytest guard as their conftest.py, /app laid out by view.py,
each module a stub, the module's code in a tested process over the socket), once plain (the
module itself on PYTHONPATH, one process). Both are laid out afresh before every run, as every
verification starts in a fresh container: no bytecode of the module or of the tests is left
from a run before. Reported per task: the ratio boundary / plain of pytest's own session time
(collection and tests, what the boundary adds to), of the whole command's wall time
(interpreter starts included) and of the CPU time of all its processes (the tested one
included: this process is their subreaper), medians of the repeats, and both outcomes (a task
whose tests fail through the boundary says so).

Tasks: the real-package ones of tests/real_tasks.py (inflection, parse, six, more-itertools:
their projects' own tests, from the pinned PyPI sdists in the cache that module fills), and
`synthetic-calls`, made here: thousands of small calls, iterators and generators passed both
ways (the tests' pure iterators walked item by item by the solution too), callbacks, a
parametrized suite; and `synthetic-files`: files the tests write in their tmp_path and hand
over by name, one by one and as a folder (a grant each, to the tested user: only where it is
another user, in the container).

    python -m benchmarks.boundary_calls [--repeats N] [--only TASK ...] [--json PATH]

`--docker RUNTIME ...` runs the same comparison inside a container of the sandbox base image
under each OCI runtime named (runc, runsc): what the issue's target asks, the tests phase
against plain pytest in the same container, with the image's interpreter and pytest, the
tested process switched to its own user as in a verification, and, under gVisor, every system
call through the sentry. There the boundary's runs are laid out at a verification's own paths
(/app, /tests, /rollouts, /logs, each a tmpfs as in a verifier container), where the pytest
guard takes part; elsewhere it does nothing (it acts only as /tests/conftest.py). The tasks
and their uploads go in through a mounted folder and this module runs there (`--inside`, the
repository mounted read-only), so both arms share the container.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import sandboxes

RUNTIME = Path(sandboxes.__file__).parent / "verifier_runtime"
REPO = Path(__file__).resolve().parents[1]

SYNTHETIC_SOLUTION = """
def add(a, b):
    return a + b


def scale(values, k):
    return [v * k for v in values]


def squares(n):
    for i in range(n):
        yield i * i


def total(iterable):
    return sum(iterable)


def pairs(iterable):
    it = iter(iterable)
    for a in it:
        yield a, next(it, None)


def apply(fn, values):
    return [fn(v) for v in values]


def keep(pred, iterable):
    return (x for x in iterable if pred(x))


def count_items(iterable):
    n = 0
    for _ in iterable:
        n += 1
    return n


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self, by=1):
        self.n += by
        return self.n
"""

SYNTHETIC_TESTS = """
import itertools

import pytest

import solution


def test_many_small_calls():
    for i in range(3000):
        assert solution.add(i, 1) == i + 1


def test_generator_consumed_by_the_tests():
    assert list(solution.squares(5000))[-1] == 4999 ** 2
    assert sum(solution.squares(3000)) == sum(i * i for i in range(3000))


def test_tests_iterators_consumed_by_the_solution():
    assert solution.total(iter(range(3000))) == sum(range(3000))
    assert solution.total(x for x in range(3000)) == sum(range(3000))


def test_iterators_both_ways():
    got = list(solution.pairs(solution.keep(lambda x: x % 3, iter(range(1500)))))
    assert len(got) == 500


def test_the_solution_walks_the_tests_iterators_item_by_item():
    assert solution.count_items(iter(range(20000))) == 20000
    assert solution.count_items(itertools.permutations(range(7))) == 5040


def test_callbacks():
    assert solution.apply(lambda v: v + 1, list(range(2000)))[-1] == 2000


def test_object_methods():
    c = solution.Counter()
    for _ in range(1500):
        c.bump()
    assert c.n == 1500


@pytest.mark.parametrize("k", range(200))
def test_parametrized(k):
    assert solution.scale([1, 2, 3], k) == [k, 2 * k, 3 * k]
"""

# Files the tests write in their tmp_path and hand over by name, one by one and as a folder: each
# name under a temporary folder is granted to the tested user (trusted.py, access.py).
FILES_SOLUTION = """
import os


def size(path):
    with open(path) as f:
        return len(f.read())


def names(folder):
    return sorted(os.listdir(folder))
"""

FILES_TESTS = """
import solution


def test_files_handed_over_one_by_one(tmp_path):
    for i in range(300):
        path = tmp_path / ("f%d.txt" % i)
        path.write_text("x" * i)
        assert solution.size(str(path)) == i


def test_a_folder_handed_over_whole(tmp_path):
    for i in range(300):
        (tmp_path / ("g%d.txt" % i)).write_text("y")
    assert len(solution.names(str(tmp_path))) == 300
"""


@dataclass
class Task:
    name: str
    module: dict[str, bytes]  # files of the workspace (the solution)
    tests: dict[str, bytes]  # test files
    upload: bytes = b""  # what a verification uploads for it (`with_upload`)


@dataclass
class Outcome:
    wall: float
    session: float | None  # pytest's own "in N s"
    summary: str
    cpu: float = 0.0  # user + system of every process of the run (the tested one included)


@dataclass
class TaskRuns:
    boundary: list[Outcome] = field(default_factory=list)
    plain: list[Outcome] = field(default_factory=list)


def real_tasks() -> list[Task]:
    """The real-package tasks from their sdists (downloaded into the cache on first use)."""
    sys.path.insert(0, str(REPO))
    from tests import real_tasks as rt

    out = []
    for pkg in rt.PACKAGES:
        module, tests = rt._members(pkg, rt.sdist(pkg))
        out.append(Task(pkg.task_id, module, tests))
    return out


def synthetic_tasks() -> list[Task]:
    return [
        Task(
            "synthetic-calls",
            {"solution.py": SYNTHETIC_SOLUTION.encode()},
            {"test_calls.py": SYNTHETIC_TESTS.encode()},
        ),
        Task(
            "synthetic-files",
            {"solution.py": FILES_SOLUTION.encode()},
            {"test_files.py": FILES_TESTS.encode()},
        ),
    ]


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def with_upload(task: Task, runtime: Path = RUNTIME) -> Task:
    """`task` with the upload a verification sends its verifier container, made by the service's
    own code (verifier.write_upload): the workspace, the runtime from `runtime` with its
    bytecode, and the tests with the pytest guard as tests/conftest.py."""
    from sandboxes import reward, verifier
    from sandboxes import task as task_model
    from sandboxes.workspace_tar import build_tar

    files = {f.name: f.read_bytes() for f in sorted(runtime.glob("*.py"))}
    rules = Path(reward.__file__).read_bytes()
    grader = verifier.Grader(reward.grade, files, verifier.grader_version(files, rules))
    model = task_model.Task(task.name, "", "", task_model.TaskConfig(), {}, dict(task.tests))
    out = io.BytesIO()
    verifier.write_upload(out, model, build_tar(task.module), grader)
    return dataclasses.replace(task, upload=out.getvalue())


# What a verification lays out, at `root` (verifier.py's script: folders, upload, view, which
# sets the modes). Copies of the script's, as sandboxes.verifier cannot be imported in the image
# (tests/unit/test_benchmarks_smoke.py holds _VIEW_START to the script's).
_VERIFIER_FOLDERS = {
    "logs": 0o700,
    "tests": 0o700,
    "logs/verifier": 0o755,
    "logs/rollouts-guard": 0o755,
    "app": 0o755,
    "rollouts": 0o755,
}
_VIEW_START = (
    "import importlib.machinery as m, sys; "
    'loader = m.SourceFileLoader("_rollouts_view", sys.argv[1]); '
    "view = type(sys)(loader.name); view.__file__ = loader.path; "
    "loader.exec_module(view); view.main(sys.argv[2:])"
)


def _empty(folder: Path) -> None:
    """`folder` there and empty (a mount point in the container: its contents only)."""
    folder.mkdir(parents=True, exist_ok=True)
    for child in folder.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def lay_out(task: Task, root: Path) -> None:
    """`task` as its verification lays it out, under `root`: the verifier script's steps on the
    task's upload (`with_upload`), run afresh before every run, as every verification starts
    in a fresh container. At root / (in the benchmark's container) these are a verification's
    own paths, where the pytest guard (/tests/conftest.py) takes part; anywhere else the guard
    does nothing (it acts only as /tests/conftest.py)."""
    for top in ("app", "tests", "logs", "rollouts"):
        _empty(root / top)
    for rel, mode in _VERIFIER_FOLDERS.items():
        (root / rel).mkdir(exist_ok=True)
        os.chmod(root / rel, mode)
    tar = ["tar", "-x", "--no-same-owner", "-C", str(root), "-f", "-"]
    subprocess.run(tar, input=task.upload, check=True)
    folders = ("rollouts/workspace", "app", "tests", "rollouts/view.json")
    argv = [str(root / f) for f in folders] + [str(root / "logs/rollouts-guard/report.jsonl")]
    view = str(root / "rollouts/lib/view.py")
    subprocess.run([sys.executable, "-I", "-B", "-c", _VIEW_START, view, *argv], check=True)


def lay_out_plain(task: Task, root: Path) -> None:
    """`task` for plain pytest under `root`: the module in module/, the tests in tests/."""
    for folder, files in (("module", task.module), ("tests", task.tests)):
        _empty(root / folder)
        _write(root / folder, files)


_LAY = "/lay"  # (in the container: where the tasks are laid out)
_SESSION = re.compile(r" in ([0-9.]+)s")


def _reap_all() -> None:
    """Wait for every descendant left (the tested process outlives pytest by a moment): with
    this process their subreaper, their CPU time then counts in RUSAGE_CHILDREN."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _become_subreaper() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_pytest(root: Path, boundary: bool, timeout: float) -> Outcome:
    """pytest on the task's tests: laid out by `lay_out` (PYTHONPATH=app, the stubs) or by
    `lay_out_plain` (PYTHONPATH=module, the module itself)."""
    where = root / ("app" if boundary else "module")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(where),
        "ROLLOUTS_VIEW_MANIFEST": str(root / "rollouts/view.json"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "HOME": str(root / "home"),
    }
    (root / "home").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")]
    start, cpu = time.perf_counter(), _children_cpu()
    try:
        p = subprocess.run(
            argv, cwd=where, env=env, capture_output=True, text=True, timeout=timeout
        )
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return Outcome(time.perf_counter() - start, None, f"timeout at {timeout:.0f} s")
    wall = time.perf_counter() - start
    _reap_all()
    cpu = _children_cpu() - cpu
    last = text.strip().splitlines()[-1] if text.strip() else ""
    found = _SESSION.search(last)
    return Outcome(wall, float(found.group(1)) if found else None, last.strip("= "), cpu)


def measure(
    tasks: list[Task],
    repeats: int,
    timeout: float,
    log,
    under: Path | None = None,
    verification_root: Path | None = None,
) -> dict[str, TaskRuns]:
    """`under`: where the tasks are laid out (default: a temporary folder); the boundary's
    layout at `verification_root` where given (/ in the container: a verification's paths)."""
    runs = {t.name: TaskRuns() for t in tasks}
    _become_subreaper()
    with tempfile.TemporaryDirectory(prefix="rollouts-boundary-", dir=under) as tmp:
        # (the tested user must reach the runtime and its workspace: where it cannot, the
        # tested process stays root, which a verification's does not)
        os.chmod(tmp, 0o755)
        roots = {True: verification_root or Path(tmp) / "verify", False: Path(tmp) / "plain"}
        for r in range(repeats):
            for t in tasks:
                # Alternate which goes first: the machine's load drifts.
                for boundary in (r % 2 == 0, r % 2 == 1):
                    (lay_out if boundary else lay_out_plain)(t, roots[boundary])
                    o = run_pytest(roots[boundary], boundary, timeout)
                    (runs[t.name].boundary if boundary else runs[t.name].plain).append(o)
                    kind = "boundary" if boundary else "plain"
                    log(
                        f"{t.name} {kind}: {o.wall:.2f} s wall, {o.cpu:.2f} s CPU, "
                        f"session {o.session} s: {o.summary}"
                    )
    return runs


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarize(runs: dict[str, TaskRuns]) -> dict[str, dict]:
    out = {}
    for name, r in runs.items():
        b_session = _median([o.session for o in r.boundary])
        p_session = _median([o.session for o in r.plain])
        b_wall, p_wall = _median([o.wall for o in r.boundary]), _median([o.wall for o in r.plain])
        b_cpu, p_cpu = _median([o.cpu for o in r.boundary]), _median([o.cpu for o in r.plain])
        out[name] = {
            "boundary_session_s": b_session,
            "plain_session_s": p_session,
            "session_ratio": b_session / p_session if b_session and p_session else None,
            "boundary_wall_s": b_wall,
            "plain_wall_s": p_wall,
            "wall_ratio": b_wall / p_wall if b_wall and p_wall else None,
            "boundary_cpu_s": b_cpu,
            "plain_cpu_s": p_cpu,
            "cpu_ratio": b_cpu / p_cpu if b_cpu and p_cpu else None,
            "boundary_outcome": r.boundary[-1].summary if r.boundary else "",
            "plain_outcome": r.plain[-1].summary if r.plain else "",
            "repeats": len(r.boundary),
        }
    return out


IMAGE = "rollouts-base:bookworm"  # the sandbox base image (`rollouts images build`)
# As a verifier container gets them (verifier.py): the capabilities to start the tested
# process as its own user and to end it, no others, no network, and a tmpfs each for /tmp and
# the folders a verification lays out (isolation.py), where the boundary's runs are laid out.
# The plain runs are laid out in /lay, another tmpfs.
_TMPFS = {"/tmp": 1777, "/app": 1777, "/tests": 1777, "/logs": 1777, "/rollouts": 755}
_CONTAINER_FLAGS = (
    ["--network", "none", "--cap-drop", "ALL"]
    + [f"--cap-add={c}" for c in ("SETUID", "SETGID", "KILL")]
    + [
        f
        for path, mode in {**_TMPFS, _LAY: 755}.items()
        for f in ("--tmpfs", f"{path}:rw,exec,mode={mode}")
    ]
)


def write_tasks(tasks: list[Task], folder: Path) -> None:
    """Each task's files as folder/NAME/{workspace,tests}/ and its upload as folder/NAME.tar
    (read back by `read_tasks`)."""
    for t in tasks:
        _write(folder / t.name / "workspace", t.module)
        _write(folder / t.name / "tests", t.tests)
        (folder / f"{t.name}.tar").write_bytes(t.upload)


def read_tasks(folder: Path) -> list[Task]:
    def files(top: Path) -> dict[str, bytes]:
        return {str(f.relative_to(top)): f.read_bytes() for f in top.rglob("*") if f.is_file()}

    return [
        Task(
            d.name,
            files(d / "workspace"),
            files(d / "tests"),
            (folder / f"{d.name}.tar").read_bytes(),
        )
        for d in sorted(folder.iterdir())
        if d.is_dir()
    ]


def remove_installed(tasks: list[Task]) -> None:
    """Inside the benchmark's throwaway container: remove the image's own copy of each task's
    top-level modules, as the real-package tasks' images do (tests/real_tasks.py). The
    verifier lays out no stub for a module the tests' interpreter already has (view.py), so
    the tests would import the image's release instead of the workspace's."""
    import importlib.util

    tops = {rel.split("/")[0].removesuffix(".py") for t in tasks for rel in t.module}
    for name in sorted(n for n in tops if n.isidentifier()):
        spec = importlib.util.find_spec(name)
        path = spec and (list(spec.submodule_search_locations or [])[:1] or [spec.origin])[0]
        installed = path and ("/site-packages/" in path or "/dist-packages/" in path)
        if installed and os.path.exists(path):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def in_containers(
    tasks: list[Task],
    oci_runtimes: list[str],
    repeats: int,
    timeout: float,
    image: str = IMAGE,
) -> dict[str, dict]:
    """{OCI runtime: {"meta", "tasks"}}: this module's comparison run inside a container of
    `image` under each runtime, one after the other (never side by side); `tasks` with their
    uploads (`with_upload`)."""
    found = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    if found.returncode != 0:
        raise SystemExit(f"error: no image {image}: build it with `rollouts images build`")
    out = {}
    with tempfile.TemporaryDirectory(prefix="rollouts-boundary-docker-") as tmp:
        write_tasks(tasks, Path(tmp) / "tasks")
        for oci in oci_runtimes:
            result = Path(tmp) / f"{oci}.json"
            argv = ["docker", "run", "--rm", "--runtime", oci, *_CONTAINER_FLAGS,
                    "-v", f"{REPO}:/repo:ro", "-v", f"{tmp}:/bench", "-w", "/repo",
                    "-e", "PYTHONPATH=/repo",
                    "-e", "PYTHONDONTWRITEBYTECODE=1", image,
                    "python3", "-m", "benchmarks.boundary_calls", "--inside", "/bench/tasks",
                    "--repeats", str(repeats),
                    "--timeout", str(timeout), "--json", f"/bench/{oci}.json"]  # fmt: skip
            limit = 2 * repeats * len(tasks) * timeout + 300
            proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=limit)
            if proc.returncode != 0 or not result.exists():
                raise SystemExit(f"error: the run under {oci} failed (exit {proc.returncode})")
            out[oci] = json.loads(result.read_text())
            out[oci]["meta"]["oci_runtime"] = oci
    return out


def render(summary: dict[str, dict]) -> str:
    def num(v, unit=""):
        return "-" if v is None else f"{v:.2f}{unit}"

    lines = [
        "| task | plain session | boundary session | ratio | ratio (wall) | ratio (CPU) "
        "| boundary outcome |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {num(s['plain_session_s'], ' s')} | {num(s['boundary_session_s'], ' s')} "
            f"| {num(s['session_ratio'])}x | {num(s['wall_ratio'])}x | {num(s['cpu_ratio'])}x "
            f"| {s['boundary_outcome']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.boundary_calls")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="task names (real-six, synthetic-calls, ...)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per pytest run, seconds")
    parser.add_argument("--json", type=Path, help="write the per-task figures here")
    parser.add_argument(
        "--runtime", type=Path, default=RUNTIME, help="the verifier runtime folder to measure"
    )
    parser.add_argument(
        "--docker",
        nargs="+",
        metavar="OCI_RUNTIME",
        help="run inside a container of the sandbox base image under each runtime (runc runsc)",
    )
    parser.add_argument("--image", default=IMAGE, help="the container image (--docker)")
    parser.add_argument("--inside", type=Path, help=argparse.SUPPRESS)  # (in the container)
    args = parser.parse_args(argv)
    tasks = read_tasks(args.inside) if args.inside else real_tasks() + synthetic_tasks()
    if args.only:
        tasks = [t for t in tasks if t.name in args.only]
        if not tasks:
            print("error: --only names no task", file=sys.stderr)
            return 2
    if not args.inside:
        tasks = [with_upload(t, args.runtime) for t in tasks]
    if args.docker:
        found = in_containers(tasks, args.docker, args.repeats, args.timeout, args.image)
        for oci, r in found.items():
            print(f"## {oci}\n\n{render(r['tasks'])}\n")
        if args.json:
            args.json.write_text(json.dumps({"runtimes": found}, indent=1))
        return 0
    load = os.getloadavg()
    if args.inside:
        remove_installed(tasks)
    runs = measure(
        tasks,
        args.repeats,
        args.timeout,
        lambda m: print(m, file=sys.stderr),
        Path(_LAY) if args.inside else None,
        Path("/") if args.inside else None,
    )
    summary = summarize(runs)
    print(render(summary))
    if args.json:
        meta = {"load": [load, os.getloadavg()], "cpus": os.cpu_count(), "python": sys.version}
        args.json.write_text(json.dumps({"meta": meta, "tasks": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
