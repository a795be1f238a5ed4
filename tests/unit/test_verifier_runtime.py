"""The verifier runtime on this machine, without Docker: a workspace laid out by view.py, tests run
by pytest (or a plain script) in one process, the workspace's code in the tested process.

Here the tested process runs as the same user (the test machine's Python is not reachable by
the verifier's unprivileged user), so Landlock is the layer that holds; tests/docker runs the
same code in a verifier container under its own user id.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import sandboxes
from sandboxes.tasks import iter_tasks
from tests import task_styles

RUNTIME = Path(sandboxes.__file__).parent / "verifier_runtime"
BOUNDARY = Path(__file__).parents[1] / "fixtures" / "boundary"
EXAMPLES = Path(__file__).parents[2] / "examples" / "tasks"
TESTED_UID = 64000  # trusted.TESTED_UID


@dataclass
class Run:
    rc: int
    output: str
    events: list[dict]

    def named(self, event: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == event]


class Layout:
    """The verifier container's folders under `root`: lib (the runtime), workspace, app,
    tests and logs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in ("lib", "workspace", "app", "tests", "logs"):
            (root / name).mkdir(parents=True)
        for f in RUNTIME.glob("*.py"):
            shutil.copy(f, root / "lib" / f.name)
        self.report = root / "logs" / "report.jsonl"

    def files(self, folder: str, files: dict[str, str | bytes]) -> None:
        for name, content in files.items():
            path = self.root / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())

    def view(self) -> dict:
        r = self.root
        argv = [r / "workspace", r / "app", r / "tests", r / "view.json", self.report]
        subprocess.run([sys.executable, "-I", r / "lib" / "view.py", *argv], check=True)
        return json.loads((r / "view.json").read_text())

    def run(self, *argv: str | Path, timeout: float = 120, cwd: Path | None = None) -> Run:
        env = {
            "ROLLOUTS_VIEW_MANIFEST": str(self.root / "view.json"),
            "PATH": "/usr/bin:/bin",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # this venv's plugins: seconds per start
        }
        # Its own session, killed whole at the end: no tested process outlives the run, and a
        # runtime that started tested processes from tested ones would not leave that chain
        # running on this machine (no container's process limit ends it here).
        p = subprocess.Popen(
            [str(a) for a in argv],
            cwd=cwd or self.root / "app",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = p.communicate(timeout=timeout)
        finally:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
        lines = self.report.read_text().splitlines() if self.report.exists() else []
        return Run(p.returncode, out + err, [json.loads(line) for line in lines])

    def passes(
        self, workspace: dict[str, str], tests: dict[str, str], passed: int, *extra: str
    ) -> Run:
        """Lay out `workspace` and `tests`, run pytest (`extra`: its options), and check that
        exactly `passed` tests passed and none failed."""
        self.files("workspace", workspace)
        self.files("tests", tests)
        self.view()
        run = self.pytest(*extra)
        assert run.rc == 0, run.output
        assert f"{passed} passed" in run.output, run.output
        return run

    def pytest(self, *extra: str, app: Path | None = None, timeout: float = 120) -> Run:
        """The bundled tasks' way: pytest in an isolated interpreter, /app (or the folder
        `app`, run from there) last on sys.path."""
        code = (
            f"import sys; sys.path.append({str(app or self.root / 'app')!r}); import pytest; "
            "sys.exit(pytest.main(sys.argv[1:]))"
        )
        tests = self.root / "tests"
        return self.run(
            sys.executable, "-I", "-c", code, "-q", "-p", "no:cacheprovider", *extra, tests,
            cwd=app, timeout=timeout,
        )  # fmt: skip


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "verifier")


@pytest.fixture
def outside_tmp() -> Iterator[Layout]:
    """A layout outside /tmp (which the tested process may write): for what it must not reach."""
    root = Path(tempfile.mkdtemp(prefix="rollouts-runtime-", dir="/run"))
    try:
        yield Layout(root / "verifier")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _oracle_files(task_dir: Path) -> dict[str, str]:
    """The files a bundled oracle writes (`cat > /app/NAME <<'EOF' ... EOF`)."""
    solve = (task_dir / "solution" / "solve.sh").read_text()
    found = re.findall(r"cat > /app/(\S+) <<'EOF'\n(.*?)\nEOF", solve, re.S)
    assert found, f"{task_dir.name}: no file in its solve.sh"
    return {name: body + "\n" for name, body in found}


# ---- honest tests are unaffected ------------------------------------------------------------


def test_honest_tests_see_the_solution_as_in_their_own_process(layout: Layout) -> None:
    layout.files("workspace", {"solution.py": (BOUNDARY / "solution.py").read_text()})
    layout.files("tests", {"test_semantics.py": (BOUNDARY / "semantics_cases.py").read_text()})
    assert layout.view()["modules"] == ["solution"]
    run = layout.pytest()
    assert run.rc == 0, run.output
    (isolated,) = run.named("isolated")
    assert isolated["landlock"] >= 1 and isolated["tested_pid"] != isolated["pid"]
    assert run.named("value_hack") == []


_LAZY_SOLUTION = """
import sys


def loaded():
    return sorted(sys.modules)


def shout(text):
    import logging  # first imported by this call, which logs at once

    logging.getLogger("late").warning("shouted %s", text)
    return text
"""

_LAZY_TEST = """
import logging
import subprocess
import sys

import solution

# What the tested process does not load before its code asks (tested.py, codec.py): each of
# these is, or imports, the regular expressions, or is the socket module's enum conversions.
UNUSED = {"logging", "re", "json", "pickle", "socket", "traceback", "dis", "runpy", "base64"}


def test_the_tested_process_starts_without_what_its_code_does_not_use():
    bare = subprocess.run(
        [sys.executable, "-I", "-B", "-c", "import sys; print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    assert (set(solution.loaded()) - set(bare)) & UNUSED == set()


def test_a_record_logged_by_the_call_that_first_imports_logging_reaches_the_tests(caplog):
    caplog.set_level(logging.WARNING)
    assert solution.shout("late") == "late"
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("late", "shouted late")]
    assert "logging" in solution.loaded()
"""


def test_the_tested_process_loads_what_its_code_uses_when_it_does(layout: Layout) -> None:
    layout.passes({"solution.py": _LAZY_SOLUTION}, {"test_lazy.py": _LAZY_TEST}, 2)


_STRAY_SOLUTION = """
import importlib.util


def shout(text):
    importlib.util.find_spec("logging")  # a lookup first: it must not use up the hook
    import logging

    logging.getLogger("stray").warning("shouted %s", text)
    return text


def echo(data):
    return data


def fail():
    raise ValueError("expected")
"""

_STRAY_TEST = """
import logging
import os
import sys

import pytest

# The workspace first on the path (a PYTHONPATH=/app task): its stray files are named like
# modules of the standard library that the tested process imports only when used.
sys.path.insert(0, next(p for p in sys.path if os.path.exists(os.path.join(p, "solution.py"))))

import solution


def test_stray_files_named_like_the_standard_library_are_not_what_it_imports(caplog):
    caplog.set_level(logging.WARNING)
    assert solution.shout("it") == "it"
    assert [r.getMessage() for r in caplog.records] == ["shouted it"]
    assert solution.echo(b"\\x00\\xff") == b"\\x00\\xff"
    with pytest.raises(ValueError, match="expected"):
        solution.fail()
"""


def test_the_tested_process_imports_the_standard_library_not_a_stray_file(
    layout: Layout,
) -> None:
    """The tested process imports logging, base64, traceback, ... only when used (tested.py
    `_DEFERRED`): a workspace file of such a name, first on its path, is still not what it
    imports (`_Stdlib`), as when they were imported at its start; and the logging hook is not
    used up by a lookup that imports nothing."""
    stray = "raise RuntimeError('the workspace file, not the standard library')\n"
    names = ("logging", "base64", "traceback", "json", "pickle", "re")
    workspace = {"solution.py": _STRAY_SOLUTION, **{f"{n}.py": stray for n in names}}
    layout.passes(workspace, {"test_stray.py": _STRAY_TEST}, 1)


_CLOSURE = """
import importlib.machinery
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("_rollouts_tested", sys.argv[1])
tested = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tested
spec.loader.exec_module(tested)
before = set(sys.modules)
for name in sorted(tested._DEFERRED):
    try:
        __import__(name)
    except ImportError:
        pass
new = {name.split(".")[0] for name in set(sys.modules) - before}
found = importlib.machinery.PathFinder.find_spec
print(" ".join(sorted(n for n in new - tested._DEFERRED if found(n, tested._STDLIB))))
"""


def _pythons() -> list[str]:
    """This interpreter and every other CPython 3.8+ on PATH (the tested process runs under
    the task image's)."""
    found = [sys.executable]
    for minor in range(8, 14):
        path = shutil.which(f"python3.{minor}")
        if path and subprocess.run([path, "-c", ""], capture_output=True).returncode == 0:
            found.append(path)  # (a pyenv shim of a version not selected here fails: left out)
    return found


@pytest.mark.parametrize("python", _pythons())
def test_what_the_tested_process_imports_only_when_used_is_closed_under_imports(
    python: str,
) -> None:
    """Every module of the standard library that the deferred modules import (tested.py
    `_DEFERRED`, which come from the standard library's folders only) is deferred too: else
    a workspace file of its name would stand in for it (`sre_parse.py` on 3.10 as `logging`
    is imported), where the tested process once imported it at its start."""
    out = subprocess.run(
        [python, "-I", "-c", _CLOSURE, str(RUNTIME / "tested.py")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == [], out.stdout


_WHO_SOLUTION = """
import os


def ids():
    return os.getresuid()
"""

_WHO_TEST = """
import solution


def test_who():
    print("IDS %r" % (solution.ids(),))
"""


def test_the_report_names_the_user_the_tested_code_runs_as(layout: Layout) -> None:
    """As root the tested process makes itself the tested user (tested.py `_become`), unless
    that user could not read the interpreter's folders (as on a machine whose Python lies
    under /root), where it stays root and the report names no user: what it says is so."""
    run = layout.passes({"solution.py": _WHO_SOLUTION}, {"test_who.py": _WHO_TEST}, 1, "-s")
    (isolated,) = run.named("isolated")
    found = re.search(r"IDS (\(\d+, \d+, \d+\))", run.output)
    assert found, run.output
    uid = isolated["uid"] if isolated["uid"] is not None else os.getuid()
    assert json.loads(found.group(1).replace("(", "[").replace(")", "]")) == [uid] * 3


def _oracle_run(root: Path, task_dir: Path, style: str) -> Run:
    layout = Layout(root)
    task = task_styles.styled(next(iter_tasks(task_dir)), style)
    layout.files("workspace", _oracle_files(task_dir))
    tests = {k: v for k, v in task.test_files.items() if k != "test.sh"}
    if style == "plain":  # its script finds the solution in /app: here, in this layout's app
        tests = {
            k: v.replace(b'"/app"', repr(str(root / "app")).encode()) for k, v in tests.items()
        }
    layout.files("tests", tests)
    layout.view()
    if style == "plain":
        return layout.run(sys.executable, root / "tests" / "run_checks.py")
    if style == "copied":  # its test.sh's copy of /app, the tests run from there
        shutil.copytree(root / "app", root / "app-copy")
        return layout.pytest(app=root / "app-copy")
    return layout.pytest()


def test_every_oracle_passes_unflagged(tmp_path: Path) -> None:
    """The value-hack detector's false positives over every oracle in the repository (the
    bundled tasks, and camel-to-snake in each test style): none."""
    cases = [(t, "bundled") for t in sorted(EXAMPLES.iterdir())]
    cases += [(EXAMPLES / "camel-to-snake", style) for style in task_styles.STYLES[1:]]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda c: _oracle_run(tmp_path / f"{c[0].name}-{c[1]}", *c), cases))
    failed = {
        f"{task_dir.name} ({style})": run.output[-600:]
        for (task_dir, style), run in zip(cases, runs, strict=True)
        if run.rc != 0 or not run.named("isolated") or run.named("value_hack")
    }
    assert failed == {}


_COPY_WORKSPACE = {
    "solution.py": "def fn(x):\n    return x * 2\n",
    "pkg/__init__.py": "from .mod import g\n",
    "pkg/mod.py": "def g():\n    return __file__\n",
}
_COPY_TEST = """
import pkg
import solution


def test_the_copy_reaches_the_workspace_modules():
    assert solution.fn(2) == 4
    assert pkg.g().endswith("/workspace/pkg/mod.py")
"""


def test_tests_that_import_a_copy_of_app_reach_the_solution(layout: Layout) -> None:
    """A test.sh that copies /app and runs the tests from the copy: the copy's stubs are not in
    /app, so the tested process finds them on its path too; there a stub makes the workspace's
    module (tested.py, _StubsHere), where loading the runtime would start a tested process from
    the tested process, and so on: one tested process, the workspace's modules."""
    layout.files("workspace", _COPY_WORKSPACE)
    layout.files("tests", {"test_copy.py": _COPY_TEST})
    layout.view()
    copy = layout.root / "copy"
    shutil.copytree(layout.root / "app", copy)
    run = layout.pytest(app=copy, timeout=60)
    assert run.rc == 0, run.output
    assert len(run.named("isolated")) == 1, run.events


_BY_PATH_TEST = """
import importlib.util
import os
import sys


def _by_path(name):
    app = next(p for p in sys.path if os.path.exists(os.path.join(p, "solution.py")))
    spec = importlib.util.spec_from_file_location(name, os.path.join(app, "solution.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (not in sys.modules: that is the caller's to do)
    return module


def test_loaded_by_path():
    assert _by_path("loaded").fn(2) == 4
    assert "loaded" not in sys.modules
"""


def test_tests_that_load_the_solution_by_its_path_reach_it(layout: Layout) -> None:
    """`spec_from_file_location` + `module_from_spec` + `exec_module` of /app/solution.py,
    never put in sys.modules (a common way for tests to load a file): the stub finds its module
    object by its namespace and attaches it (it raised "load the workspace module with import"
    before: the correct solution failed). Unflagged: running a stub is no read of it."""
    layout.files("workspace", {"solution.py": _COPY_WORKSPACE["solution.py"]})
    layout.files("tests", {"test_by_path.py": _BY_PATH_TEST})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output
    assert run.named("stub_read") == [] and len(run.named("isolated")) == 1, run.events


_CARRIED_SOLUTION = """
import os
import sys


def seen():
    return sys.argv[1:], os.getcwd()


def change():
    sys.argv = ["mine"]
    os.chdir("/")
"""
_CARRIED_TEST = """
import ctypes
import os
import sys

import solution


def test_the_tests_command_line_and_folder_are_the_solutions(tmp_path, monkeypatch):
    workspace = solution.seen()[1]
    monkeypatch.setattr(sys, "argv", ["prog", "--name", "x"])
    monkeypatch.chdir(tmp_path)
    assert solution.seen() == (["--name", "x"], str(tmp_path))
    solution.change()  # one way: ours stay as they are, and are sent again once changed
    assert sys.argv == ["prog", "--name", "x"] and os.getcwd() == str(tmp_path)
    assert solution.seen() == ([], "/")
    monkeypatch.undo()
    assert solution.seen() == (sys.argv[1:], workspace)


def test_a_folder_changed_by_c_code_reaches_the_solution(tmp_path):
    libc = ctypes.CDLL(None)
    here = os.getcwd()
    try:
        for sub in ("a", "b"):  # (the second call of chdir looks nothing up)
            (tmp_path / sub).mkdir()
            assert libc.chdir(str(tmp_path / sub).encode()) == 0
            assert solution.seen()[1] == str(tmp_path / sub)
    finally:
        os.chdir(here)
"""


def test_the_tests_command_line_and_working_folder_reach_the_solution(layout: Layout) -> None:
    """`sys.argv` and the working folder as the tests have them at each call (carried.py): a
    command-line `main()` after `monkeypatch.setattr(sys, "argv", ...)`, relative paths after
    `monkeypatch.chdir(tmp_path)`; /app is the tested process's workspace. Sent when the tests'
    change; what the tested code changes stays its own and never comes back. (Under another
    user, the folder is handed over: tests/docker, test_paths_*.)"""
    layout.files("workspace", {"solution.py": _CARRIED_SOLUTION})
    layout.files("tests", {"test_carried.py": _CARRIED_TEST})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output


_DATA_SOLUTION = """
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def load_config():
    with open(os.path.join(HERE, "config.json")) as f:
        return json.load(f)


def set_option(key, value):
    config = load_config()
    config[key] = value
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump(config, f)


def total(name):
    with open(os.path.join("data", name)) as f:
        return sum(int(line) for line in f)


def save_report(text):
    with open("report.txt", "w") as f:
        f.write(text)
    # What the tests' processes would load or obey stays in the workspace.
    for name in ("conftest.py", "sitecustomize.py", "evil.pth", "helper.py"):
        with open(name, "w") as f:
            f.write("raise SystemExit(3)\\n")


class Log:
    def __init__(self, name):
        self.file = open(name, "w")

    def add(self, line):
        self.file.write(line + "\\n")

    def close(self):
        self.file.close()
"""
_DATA_TEST = """
import json
import os
from pathlib import Path

import solution


def test_a_config_the_tests_write_is_read_beside_the_module():
    Path("config.json").write_text(json.dumps({"size": 3}))
    assert solution.load_config() == {"size": 3}
    with open(os.path.join(os.getcwd(), "config.json"), "w") as f:
        json.dump({"size": 4}, f)
    assert solution.load_config() == {"size": 4}


def test_the_solution_changes_it_and_the_tests_read_it():
    Path("config.json").write_text(json.dumps({"size": 3}))
    solution.set_option("mode", "fast")
    assert json.loads(Path("config.json").read_text()) == {"size": 3, "mode": "fast"}


def test_a_folder_of_data_the_tests_write():
    os.makedirs("data", exist_ok=True)
    Path("data", "numbers.txt").write_text("1\\n2\\n3\\n")
    assert solution.total("numbers.txt") == 6


def test_a_file_the_solution_writes_by_a_relative_name():
    solution.save_report("all good")
    assert os.path.exists("report.txt")
    assert Path("report.txt").read_text() == "all good"
    for name in ("conftest.py", "sitecustomize.py", "evil.pth", "helper.py"):
        assert not os.path.exists(name), name


def test_a_file_it_keeps_open_across_calls():
    log = solution.Log("log.txt")
    log.add("a")
    log.add("b")
    log.close()
    assert Path("log.txt").read_text() == "a\\nb\\n"
    assert "log.txt" in os.listdir(".")
"""


def test_data_files_the_tests_and_the_solution_write_in_app_reach_the_other(
    layout: Layout,
) -> None:
    """In one process /app is one folder: a file the tests write there is what the solution
    reads beside its module or by a relative name, and what it writes by a relative name the
    tests read in /app. Here the tested process's /app is its workspace, kept in step at each
    call where a side wrote (datafiles.py); module files and the rest a runner would load
    never reach /app. (Each test failed before: FileNotFoundError.)"""
    run = layout.passes({"solution.py": _DATA_SOLUTION}, {"test_data.py": _DATA_TEST}, 5)
    assert not run.named("sync_failed"), run.events


def test_a_folder_the_tests_loaded_code_from_is_never_handed_over(tmp_path: Path) -> None:
    """No path is handed over (trusted.py `_near_loaded_code`) whose grant would let the tested
    user reach a module of the tests' process: one below it, or below a folder on its way
    through folders that user may search (a helper of the tests under /tmp, their copy of the
    tests, a folder beside it in a 0755 tree). A module in another test's folder beside it,
    behind pytest's 0700 folders, does not close it (a test that imported a plugin it made in
    its tmp_path)."""
    from sandboxes.verifier_runtime import trusted

    root = tmp_path / "tmp"
    (root / "run" / "helpers").mkdir(parents=True)
    (root / "run" / "other").mkdir()
    for folder in (root, root / "run", root / "run" / "helpers", root / "run" / "other"):
        folder.chmod(0o755)  # (as a copy of the tests makes them: others may search)
    (root / "pytest-of-root" / "pytest-0" / "test_b0").mkdir(parents=True)
    for folder in (root / "pytest-of-root", root / "pytest-of-root" / "pytest-0"):
        folder.chmod(0o700)  # (as pytest makes them, each test's folder too)
    (root / "pytest-of-root" / "pytest-0" / "test_a0").mkdir(mode=0o700)
    plugin = root / "pytest-of-root" / "pytest-0" / "test_b0" / "made_plugin.py"
    plugin.write_text("X = 1\n")
    (root / "pytest-of-root" / "pytest-0" / "test_b0").chmod(0o700)
    module_file = root / "run" / "helpers" / "expected_values.py"
    module_file.write_text("EXPECTED = 42\n")
    names = []
    for name, where in (("_rollouts_probe_helpers", module_file), ("_rollouts_probe_made", plugin)):
        spec = importlib.util.spec_from_file_location(name, where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        names.append(name)
    # Modules whose __file__ is spelt other than abspath writes it: each is where abspath says.
    spelt = {
        "dots": f"/nowhere/..{root}/dots/./x.py",
        "slashes": f"{root}//slashes//x.py",
        "trailing": f"{root}/trailing/x.py/.",
    }
    for name, where in spelt.items():
        module = types.ModuleType(f"_rollouts_probe_{name}")
        module.__file__ = where
        sys.modules[module.__name__] = module
        names.append(module.__name__)
    try:
        roots = (str(root),)
        for name in spelt:
            assert trusted._near_loaded_code(str(root / name), roots), name
        helpers = root / "run" / "helpers"
        closed = (helpers, helpers / "out.txt", helpers / "deeper" / "out", root / "run")
        # (a sibling of the helpers' folder: /tmp/A/work beside /tmp/A/tests, both 0755)
        closed += (root / "run" / "other", root / "run" / "other" / "in.txt")
        for path in closed:
            assert trusted._near_loaded_code(str(path), roots), path
        mine = root / "pytest-of-root" / "pytest-0" / "test_a0"
        for path in (root / "x", mine, mine / "in.txt"):
            assert not trusted._near_loaded_code(str(path), roots), path
        assert not trusted._near_loaded_code("/tests/test_solution.py", roots)  # (no root)
    finally:
        for name in names:
            del sys.modules[name]


# ---- value hacks ----------------------------------------------------------------------------

_ALWAYS_EQUAL = """
class Any:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def fn(x):
    return Any()
"""
HACKS = {
    "object equal to anything": _ALWAYS_EQUAL,
    "str subclass equal to anything": """
class S(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def fn(x):
    return S("nope")
""",
    "never unequal": """
class N:
    def __ne__(self, other):
        return False


def fn(x):
    return N()
""",
    "mock.ANY": "from unittest import mock\n\n\ndef fn(x):\n    return mock.ANY\n",
    "both smaller and not smaller": """
class O:
    def __lt__(self, other):
        return True

    def __ge__(self, other):
        return True


def fn(x):
    return O()
""",
    "contains everything": """
class C:
    def __contains__(self, item):
        return True


def fn(x):
    return C()
""",
    # `in` beside far decoys: yes to whatever looks like neither decoy, holding nothing.
    "contains what it never held": """
class C:
    def __contains__(self, item):
        return not (isinstance(item, str) and len(item) == 16 and item.isalnum())

    def __iter__(self):
        return iter(())


def fn(x):
    return C()
""",
    "a list that contains more than it holds": """
class L(list):
    def __contains__(self, item):
        return not (isinstance(item, str) and len(item) == 16 and item.isalnum())


def fn(x):
    return L(["value"])
""",
    "equal to the tests' own objects": _ALWAYS_EQUAL + "\n\nclass Token:\n    pass\n",
    "equal by a truthy non-bool": """
class T:
    def __eq__(self, other):
        return 1

    __hash__ = object.__hash__


def fn(x):
    return T()
""",
    "no difference to anything": """
class Z:
    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__


def fn(x):
    return Z()
""",
}
HACK_TESTS = """
import unittest

import pytest

import solution


def test_equal():
    assert solution.fn("getValue") == "get_value"


def test_not_equal():
    assert not (solution.fn("getValue") != "get_value")


def test_order():
    assert solution.fn(3) < 5


def test_contains():
    assert "get" in solution.fn("getValue")


def test_equal_to_an_object():
    assert solution.fn("x") == solution.Token()


def test_approx():
    assert solution.fn(1) == pytest.approx(2.5)


class TestAlmost(unittest.TestCase):
    def test_almost(self):
        self.assertAlmostEqual(solution.fn(1), 2.5)
"""


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_value_hacks_are_caught(layout: Layout, hack: str) -> None:
    layout.files("workspace", {"solution.py": HACKS[hack]})
    layout.files("tests", {"test_hack.py": HACK_TESTS})
    layout.view()
    run = layout.pytest()
    assert run.named("value_hack"), f"{hack}: not caught\n{run.output}"
    assert run.rc == 1, run.output  # a caught comparison is False: its test fails too


def test_outcome_exceptions_of_the_tested_code_are_failures(layout: Layout) -> None:
    """pytest's skip/xfail exceptions raised by the solution fail the test (a skipped test
    counts as no failure to an exit-status-only test.sh)."""
    solution = "import pytest\n\n\ndef fn(x):\n    pytest.skip('no')\n\n\n"
    solution += "def gn(x):\n    pytest.xfail('no')\n"
    tests = "import solution\n\n\ndef test_f():\n    solution.fn(1)\n\n\n"
    tests += "def test_g():\n    solution.gn(1)\n"
    layout.files("workspace", {"solution.py": solution})
    layout.files("tests", {"test_outcomes.py": tests})
    layout.view()
    run = layout.pytest()
    assert run.rc == 1 and "2 failed" in run.output, run.output


def test_a_system_exit_cannot_end_the_tests_with_success(layout: Layout) -> None:
    layout.files("workspace", {"solution.py": "def fn(x):\n    raise SystemExit(0)\n"})
    layout.files(
        "tests",
        {
            "check.py": "import sys\nsys.path.insert(0, '.')\nimport solution\n"
            "solution.fn(1)\nprint('all good')\n"
        },
    )
    layout.view()
    run = layout.run(sys.executable, layout.root / "tests" / "check.py")
    assert run.rc == 1 and "all good" not in run.output
    assert run.named("solution_exit"), run.events


def test_a_workspace_module_run_as_a_program_runs_in_the_tested_process(layout: Layout) -> None:
    prog = "import os, sys\nprint('args', sys.argv[1:], os.getpid())\nsys.exit(3)\n"
    layout.files("workspace", {"prog.py": prog})
    layout.view()
    run = layout.run(sys.executable, layout.root / "app" / "prog.py", "a", "b")
    assert run.rc == 3 and "args ['a', 'b']" in run.output, run.output
    (isolated,) = run.named("isolated")
    assert isolated["mode"] == "main" and str(isolated["tested_pid"]) in run.output


CLI = """
import os, pathlib, sys

source, target = sys.argv[1], sys.argv[2]
pathlib.Path(target).write_text(pathlib.Path(source).read_text().upper())
# What a runner would load, written beside the output: it must never reach /app.
for name in ("planted.py", "sitecustomize.py", "conftest.py", "x.pth", "Y.PTH"):
    pathlib.Path(name).write_text("raise SystemExit(0)\\n")
os.makedirs("evil-1.0.Dist-Info", exist_ok=True)
pathlib.Path("evil-1.0.Dist-Info/entry_points.txt").write_text("[pytest11]\\nevil = planted\\n")
os.makedirs("meta", exist_ok=True)
pathlib.Path("meta/METADATA").write_text("Name: evil\\n")
"""
CLI_TESTS = """
import os
import subprocess
import sys
from pathlib import Path

APP = Path({app!r})


def test_a_program_writes_its_output_in_app_relative_to_its_cwd():
    (APP / "in.txt").write_text("abc")  # the tests' own input, in /app
    subprocess.run([sys.executable, str(APP / "cli.py"), "in.txt", "out.txt"], cwd=APP, check=True)
    assert (APP / "out.txt").read_text() == "ABC"


def test_a_program_writes_an_app_path_from_the_tests_tmp_path(tmp_path):
    (tmp_path / "in.txt").write_text("xyz")
    target = str(APP / "res.txt")
    argv = [sys.executable, str(APP / "cli.py"), "in.txt", target]
    subprocess.run(argv, cwd=tmp_path, check=True)
    assert (APP / "res.txt").read_text() == "XYZ"


def test_what_a_runner_loads_never_comes_back():
    left = {{"planted.py", "sitecustomize.py", "conftest.py", "x.pth", "Y.PTH", "meta"}}
    assert not left & set(os.listdir(APP)), os.listdir(APP)
    assert not [n for n in os.listdir(APP) if n.lower().endswith(".dist-info")]
"""


def test_a_program_the_tests_run_writes_in_app(layout: Layout) -> None:
    """A command-line program the tests run writes its output in /app (by a path relative to
    its working folder, or an absolute one) and the tests read it there; what a runner would
    load, written beside it, stays in the tested code's workspace."""
    layout.files("workspace", {"cli.py": CLI})
    layout.files("tests", {"test_cli.py": CLI_TESTS.format(app=str(layout.root / "app"))})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0 and "3 passed" in run.output, run.output
    synced = run.named("synced")
    assert {"out.txt", "res.txt"} <= {f for e in synced for f in e["copied"]}, run.events
    workspace = set(os.listdir(layout.root / "workspace"))
    assert {"planted.py", "conftest.py", "Y.PTH", "meta"} <= workspace


def _as_tested_user(script: str, *args: str) -> subprocess.CompletedProcess:
    def drop() -> None:
        os.setgroups([])
        os.setresgid(TESTED_UID, TESTED_UID, TESTED_UID)
        os.setresuid(TESTED_UID, TESTED_UID, TESTED_UID)

    return subprocess.run(
        ["/bin/sh", "-c", script, "sh", *args], preexec_fn=drop, capture_output=True, text=True
    )


@pytest.mark.skipif(os.getuid() != 0, reason="switching to the tested user needs root")
def test_the_tested_user_gets_exactly_the_folders_handed_over() -> None:
    """access.grant on a tree like pytest's (0700 folders under 0700 folders): the handed
    folder is usable, its parents only searchable, another test's folder, a folder made
    before the tests' process, and whatever a link planted in the handed folder points at
    stay closed."""
    access = _load("access")
    root = Path(tempfile.mkdtemp(prefix="rollouts-grant-"))
    try:
        root.chmod(0o1777)  # as /tmp
        older = root / "made-by-test-sh"  # e.g. test.sh's `mktemp -d` for its JUnit report
        older.mkdir(mode=0o700)
        (older / "report.xml").write_text("junit\n")
        with subprocess.Popen(["cat"], stdin=subprocess.PIPE) as tests_process:
            since = access.made_after(tests_process.pid)
            tests_process.stdin.close()
        assert older.stat().st_ctime < since
        run = root / "pytest-of-root" / "pytest-0"
        run.mkdir(mode=0o700, parents=True)
        mine, other = run / "test_a0", run / "test_b0"
        for d in (mine, other):
            d.mkdir(mode=0o700)
        (mine / "in.txt").write_text("input\n")
        (other / "secret.txt").write_text("expected\n")
        roots = (str(root),)
        assert access.grant(str(mine / "in.txt"), TESTED_UID, roots, 0.0) == str(mine)
        done = _as_tested_user('cat "$1/in.txt" && echo out > "$1/out.txt" && ls "$1"', str(mine))
        assert done.returncode == 0 and done.stdout.split() == ["input", "in.txt", "out.txt"]
        (mine / "link").symlink_to(other)
        refused = [
            access.grant(str(mine / "link" / "secret.txt"), TESTED_UID, roots, 0.0),
            access.grant(str(older / "report.xml"), TESTED_UID, roots, since),
            access.grant(str(other / "secret.txt"), TESTED_UID, roots, time.time() + 3600),
            access.grant("/tests/test_solution.py", TESTED_UID, roots, 0.0),
        ]
        assert refused == [None, None, None, None]
        for path in (other / "secret.txt", older / "report.xml", run):
            probe = _as_tested_user('cat "$1" 2>/dev/null || ls "$1"', str(path))
            assert probe.returncode != 0, (path, probe.stdout)
    finally:
        shutil.rmtree(root)


@pytest.mark.skipif(os.getuid() != 0, reason="switching to the tested user needs root")
def test_a_file_the_tests_made_in_the_temporary_folder_itself_is_handed_over_alone() -> None:
    """`tempfile.NamedTemporaryFile` and `mkstemp` make a 0600 file in /tmp itself: handed
    over, the tested user may read and write it (as the solution could in one process), but
    not unlink it (the root stays sticky, and its mode as it was). Not granted: a file made
    before the tests' process (test.sh's `mktemp`), one with a second name (a hard link), a
    link, a file another user owns, a name not made yet, a FIFO; and none unless the caller
    says a loose file may go (trusted.py: from the tests' own request, never an answer)."""
    access = _load("access")
    root = Path(tempfile.mkdtemp(prefix="rollouts-loose-"))
    try:
        root.chmod(0o1777)  # as /tmp
        older = root / "tmp.made-by-test-sh"
        older.write_text("junit\n")
        older.chmod(0o600)
        with subprocess.Popen(["cat"], stdin=subprocess.PIPE) as tests_process:
            since = access.made_after(tests_process.pid)
            tests_process.stdin.close()
        assert older.stat().st_ctime < since
        fd, made = tempfile.mkstemp(dir=root)
        os.write(fd, b"input\n")
        os.close(fd)
        linked = root / "two-names"
        linked.write_text("expected\n")
        os.link(linked, root / "second-name")
        single = root / "one-name"  # what the link below points at: refused as a link only
        single.write_text("expected\n")
        (root / "a-link").symlink_to(single)
        theirs = root / "not-ours"
        theirs.write_text("x")
        os.chown(theirs, TESTED_UID + 1, TESTED_UID + 1)
        fifo = root / "a-fifo"
        os.mkfifo(fifo)
        # (`since` is the tests' start plus a clock tick; a real test's file comes long after
        # it: each mode set again until the file's change time has passed it)
        deadline = time.monotonic() + 10
        for path in (made, linked, theirs, fifo, single):
            os.chmod(path, 0o600)
            while os.stat(path).st_ctime < since and time.monotonic() < deadline:
                os.chmod(path, 0o600)
            assert os.stat(path).st_ctime >= since and os.stat(path).st_mode & 0o777 == 0o600
        roots = (str(root),)
        anything = lambda _path: True  # noqa: E731  (the caller's word: trusted.py)
        # only where the caller says a loose file may go (never from an answer)
        assert access.grant(made, TESTED_UID, roots, since) is None
        assert access.grant(made, TESTED_UID, roots, since, lambda _path: False) is None
        assert _as_tested_user('cat "$1"', made).returncode != 0
        assert access.grant(made, TESTED_UID, roots, since, anything) == made
        assert made in access._handed
        done = _as_tested_user('cat "$1" && echo output > "$1"', made)
        assert done.returncode == 0 and done.stdout == "input\n", done.stderr
        assert Path(made).read_text() == "output\n"
        assert _as_tested_user('rm -f "$1" || exit 1; test ! -e "$1"', made).returncode != 0
        assert Path(made).exists() and stat.S_IMODE(root.stat().st_mode) == 0o1777
        refused = [
            access.grant(str(path), TESTED_UID, roots, since, anything)
            for path in (older, linked, root / "a-link", theirs, root / "to-be-made.txt", fifo)
        ]
        assert refused == [None] * 6
        assert _as_tested_user('cat "$1"', str(single)).returncode != 0
        for path in (older, linked, theirs):
            probe = _as_tested_user('cat "$1"', str(path))
            assert probe.returncode != 0, (path, probe.stdout)
    finally:
        shutil.rmtree(root)


@pytest.mark.skipif(os.getuid() != 0, reason="switching to the tested user needs root")
def test_the_tests_process_goes_nowhere_through_what_the_tested_user_made() -> None:
    """The folder of a file handed over is sticky (the tested user cannot unlink the tests'
    file beside it); a folder handed over whole is not. access.check_open refuses the tests'
    process a read through the tested user's link of what that user cannot read (another
    test's folder), even from a folder the tested user made, and every write through its
    links; a link to its own file, or to a file it was handed, reads. A file of the tests
    that the tested user's now stands for is refused to read."""
    access = _load("access")
    root = Path(tempfile.mkdtemp(prefix="rollouts-links-"))
    try:
        root.chmod(0o1777)  # as /tmp
        run = root / "pytest-of-root" / "pytest-0"
        run.mkdir(mode=0o700, parents=True)
        mine, whole, other, moved = (run / f"test_{c}0" for c in "abcd")
        for d in (mine, whole, other, moved):
            d.mkdir(mode=0o700)
        (mine / "expected.json").write_text("[1]")
        (whole / "a.txt").write_text("a")
        (other / "secret.txt").write_text("expected\n")
        (moved / "in.txt").write_text("in")
        (moved / "expected.txt").write_text("ni")
        roots = (str(root),)
        assert access.grant(str(mine / "out.json"), TESTED_UID, roots, 0.0) == str(mine)
        assert access.grant(str(whole), TESTED_UID, roots, 0.0) == str(whole)
        assert access.grant(str(moved / "in.txt"), TESTED_UID, roots, 0.0) == str(moved)
        assert mine.stat().st_mode & stat.S_ISVTX
        assert not whole.stat().st_mode & stat.S_ISVTX and not moved.stat().st_mode & stat.S_ISVTX
        # a file of the tests handed over may move; those beside it are the tests' (noted)
        done = _as_tested_user('mv "$1/in.txt" "$1/done.txt"', str(moved))
        assert done.returncode == 0 and (moved / "done.txt").exists(), done.stderr
        assert str(moved / "expected.txt") in access._theirs
        assert str(moved / "in.txt") in access._handed  # never refused: handed over
        done = _as_tested_user(
            'rm -f "$1/expected.json"; mv "$2/a.txt" "$2/b.txt" && echo mine > "$1/own" && '
            'ln -s "$3" "$1/out.json" && ln -s "$1/own" "$1/mine.json" && '
            'ln -s "$1/expected.json" "$1/theirs.json" && ln -s "$1/own" "$1/later.json" && '
            'mkdir "$1/sub" && ln -s "$3" "$1/sub/out.json"',
            str(mine),
            str(whole),
            str(other / "secret.txt"),
        )
        assert done.returncode == 0, done.stderr
        assert (mine / "expected.json").read_text() == "[1]" and (whole / "b.txt").exists()

        def check(name, mode):
            flags = os.O_RDONLY if mode == "r" else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            return access.check_open(str(mine / name), mode, flags, roots, {})

        assert "cannot read" in check("out.json", "r")
        assert "cannot read" in check("sub/out.json", "r")
        assert check("mine.json", "r") is None and check("theirs.json", "r") is None
        assert "written through" in check("later.json", "w")
        assert check("new.json", "w") is None
        assert access.check_open(str(mine / "out.json"), "r", os.O_NOFOLLOW, roots, {}) is None
        theirs = {}
        assert access.check_open(str(whole / "c.txt"), "w", os.O_WRONLY, roots, theirs) is None
        (whole / "c.txt").write_text("c")
        done = _as_tested_user('echo x > "$1/c.new" && mv "$1/c.new" "$1/c.txt"', str(whole))
        assert done.returncode == 0, done.stderr
        # handed over whole: the tested code may replace what it holds
        assert access.check_open(str(whole / "c.txt"), "r", os.O_RDONLY, roots, theirs) is None
        theirs[str(mine / "own")] = None  # as if the tests had written it
        assert "now a file of user" in access.check_open(
            str(mine / "own"), "r", os.O_RDONLY, roots, theirs
        )
    finally:
        shutil.rmtree(root)


# ---- what the tested process cannot reach ---------------------------------------------------

REACH = """
import os, signal


def attempts():
    out = {}
    report = os.environ["REPORT"]
    for name, act in (
        ("write the report", lambda: open(report, "a").write("{}\\n")),
        ("write the tests", lambda: open(os.environ["TESTS"] + "/test_reach.py", "a").write("#")),
        ("signal the tests", lambda: os.kill(os.getppid(), signal.SIGSTOP)),
        ("open the tests' descriptors", lambda: open("/proc/%d/fd/1" % os.getppid(), "w")),
        ("read the tests' memory", lambda: open("/proc/%d/mem" % os.getppid(), "rb").read(1)),
    ):
        try:
            act()
            out[name] = "done"
        except OSError as e:
            out[name] = e.errno
    return out
"""


def test_the_tested_process_reaches_nothing_of_the_tests(outside_tmp: Layout) -> None:
    layout = outside_tmp
    layout.files("workspace", {"solution.py": REACH})
    test = (
        "import os\n\nimport solution\n\n\ndef test_reach(monkeypatch):\n"
        f"    monkeypatch.setenv('REPORT', {str(layout.report)!r})\n"
        f"    monkeypatch.setenv('TESTS', {str(layout.root / 'tests')!r})\n"
        "    print('ATTEMPTS', solution.attempts())\n    assert False\n"
    )
    layout.files("tests", {"test_reach.py": test})
    layout.view()
    run = layout.pytest()
    (line,) = [x for x in run.output.splitlines() if x.startswith("ATTEMPTS")]
    attempts = eval(line.removeprefix("ATTEMPTS "))  # a dict literal printed by the solution
    assert "done" not in attempts.values(), attempts


# ---- the view: nothing in /app that a runner loads on its own -------------------------------


def test_the_view_holds_stubs_and_data_only(layout: Layout) -> None:
    layout.files(
        "workspace",
        {
            "solution.py": "x = 1\n",
            "pkg/__init__.py": "",
            "pkg/mod.py": "y = 2\n",
            "ns/inner.py": "z = 3\n",
            "data.txt": "plain data\n",
            "conftest.py": "raise SystemExit\n",
            "pytest.ini": "[pytest]\naddopts = -p evil\n",
            "pyproject.toml": "[tool.pytest.ini_options]\n",
            "sitecustomize.py": "raise SystemExit\n",
            "pytest.py": "raise SystemExit\n",
            "json.py": "raise SystemExit\n",
            "test_planted.py": "def test_ok():\n    pass\n",
            "evil.pth": "import os\n",
            "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = solution\n",
            # The same by another case (importlib.metadata folds it), or by content alone.
            "evil-2.0.DIST-INFO/entry_points.txt": "[pytest11]\nevil2 = solution\n",
            "Evil.Egg-Info/PKG-INFO": "Name: evil\n",
            "EVIL.PTH": "import os\n",
            "Conftest.PY": "raise SystemExit\n",
            "plain_folder/METADATA": "Name: evil\n",
            "plain_folder/entry_points.txt": "[pytest11]\nevil3 = solution\n",
            "__pycache__/solution.cpython-311.pyc": b"\x00bytecode",
            "helper.pyc": b"\x00bytecode",
            "bad-name/x.py": "w = 4\n",
        },
    )
    layout.files("tests", {"helpers.py": ""})
    layout.files("workspace", {"helpers.py": "shadowing a module beside the tests\n"})
    manifest = layout.view()
    app = layout.root / "app"
    present = sorted(str(p.relative_to(app)) for p in app.rglob("*") if p.is_file())
    assert present == ["data.txt", "ns/inner.py", "pkg/__init__.py", "pkg/mod.py", "solution.py"]
    assert sorted(manifest["modules"]) == ["ns.inner", "pkg", "pkg.mod", "solution"]
    stub = (app / "solution.py").read_text()
    assert "x = 1" not in stub and "attach(globals(), 'solution')" in stub
    (view,) = [json.loads(line) for line in layout.report.read_text().splitlines()]
    assert {
        "./evil-1.0.dist-info",
        "./evil-2.0.DIST-INFO",
        "./Evil.Egg-Info",
        "./plain_folder",
        "./EVIL.PTH",
        "./Conftest.PY",
        "./conftest.py",
    } <= set(view["left_out"])
    code = "from pkg import mod; import ns.inner, solution; print(mod.y, ns.inner.z, solution.x)"
    run = layout.run(sys.executable, "-I", "-c", f"import sys; sys.path.append('.'); {code}")
    assert run.rc == 0 and run.output.split() == ["2", "3", "1"], run.output


# view.py writes its JSON without the json module (its interpreter's start is every
# verification's): what json reads back must be what it meant, whatever a file name holds.
_AWKWARD = [
    "",
    'quote " and backslash \\ and slash /',
    "controls \x00\x01\n\r\t\x1f and DEL \x7f",
    "non-ASCII é ß 漢字, astral 𝄞 😀",
    "lone surrogates of undecodable names \udcff\udc80",
    "\ud800 a high one alone",
]


@pytest.mark.parametrize("text", _AWKWARD)
def test_the_views_json_is_what_json_reads(text: str) -> None:
    to_json = _load("view").to_json
    value = {text: [text, None, 0, -7, 1 << 70], "nested": {"k": {text: None}}, "empty": []}
    assert json.loads(to_json(value)) == value
    assert json.loads(to_json(text)) == text
    with pytest.raises(TypeError):
        to_json(1.5)


def _mode_tree(top: Path) -> None:
    """Folders, files and links in every mode chmod -R treats apart: no bits, read-only, some
    execute, set-id and sticky bits, a folder no one may enter, links to a file and a folder
    (never followed, never changed)."""
    modes = [0o000, 0o400, 0o640, 0o604, 0o700, 0o710, 0o751, 0o4755, 0o2644, 0o1777, 0o777]
    for i, mode in enumerate(modes):
        d = top / f"d{i}" / "inner"
        d.mkdir(parents=True)
        for j, file_mode in enumerate(modes):
            (d / f"f{j}").write_text("x")
            os.chmod(d / f"f{j}", file_mode)
        (top / f"f{i}").write_text("x")
        os.chmod(top / f"f{i}", mode)
        os.chmod(d, mode)
        os.chmod(d.parent, modes[-1 - i])
    outside = top.parent / f"{top.name}-outside"
    outside.mkdir()
    (outside / "target").write_text("x")
    os.chmod(outside / "target", 0o600)
    os.chmod(outside, 0o700)
    (top / "link-to-file").symlink_to(outside / "target")
    (top / "link-to-folder").symlink_to(outside)


def _modes_of(top: Path) -> dict[str, int]:
    out = {}
    for here, dirs, files in os.walk(top):
        for name in ["."] + dirs + files:
            path = Path(here) / name
            out[str(path.relative_to(top))] = os.lstat(path).st_mode
    return out


@pytest.mark.parametrize("chmod, add, remove", [("a+rX,go-w", 0o444, 0o022), ("a+rwX", 0o666, 0)])
def test_the_view_sets_the_modes_chmod_would(
    tmp_path: Path, chmod: str, add: int, remove: int
) -> None:
    """The verifier script leaves the runtime's and the workspace's modes to view.py (a
    program's start costs every verification): what it sets is what `chmod -R` sets, on every
    kind of mode, set-id bits kept, links neither followed nor changed."""
    ours, theirs = tmp_path / "ours" / "top", tmp_path / "chmod" / "top"
    for top in (ours, theirs):
        top.parent.mkdir()
        _mode_tree(top)
    subprocess.run(["chmod", "-R", chmod, str(theirs)], check=True)
    _load("view")._add_modes(str(ours), add, remove)
    assert _modes_of(ours) == _modes_of(theirs)
    assert os.stat(ours.parent / "top-outside" / "target").st_mode & 0o777 == 0o600


def test_awkward_file_names_reach_the_manifest_and_report(layout: Layout) -> None:
    names = {
        "modulé.py": "v = 'é'\n",
        'data "quoted" \\ file.txt': "d\n",
        "new\nline.txt": "n\n",
    }
    layout.files("workspace", names)
    undecodable = os.fsencode(layout.root / "workspace") + b"/raw\xff.txt"
    with open(undecodable, "wb") as f:
        f.write(b"r\n")
    layout.files("workspace", {"conftest.py": "", "bad name/x.py": ""})
    manifest = layout.view()
    assert manifest["modules"] == ["modulé"]
    assert manifest["sources"] == {
        str(layout.root / "app" / "modulé.py"): str(layout.root / "sources" / "modulé.py")
    }
    app = os.fsencode(layout.root / "app")
    assert sorted(os.listdir(app)) == sorted(
        [b"raw\xff.txt", b"bad name", *map(os.fsencode, names)]
    )
    (view,) = [json.loads(line) for line in layout.report.read_text().splitlines()]
    assert view["modules"] == ["modulé"] and set(view["left_out"]) == {
        "bad name/x.py",
        "./conftest.py",
    }


# ---- the codec ------------------------------------------------------------------------------


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_rollouts_{name}_test", RUNTIME / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _codec():
    return _load("codec")


def _round_trip(codec, value):
    def refuse(v):
        raise AssertionError(f"not plain: {v!r}")

    memo = codec.Memo()
    node = codec.encode(value, memo, refuse)
    msg = json.loads(json.dumps({"v": node, "t": memo.table}))
    back = codec.Memo(msg["t"])
    codec.build(back, refuse)
    return codec.decode_leaf(msg["v"], back, refuse)


def test_values_travel_exactly_however_deep_or_cyclic() -> None:
    import collections
    import datetime
    import decimal
    import fractions
    import math
    import pathlib
    import uuid

    codec = _codec()
    deep: list = [7]
    for _ in range(20_000):
        deep = [deep]
    back = _round_trip(codec, deep)
    for _ in range(20_000):
        back = back[0]
    assert back == [7]

    ring: list = [1]
    ring.append(ring)
    shared = {"k": ring}
    out = _round_trip(codec, [shared, shared, (ring, frozenset({(1, 2)}))])
    assert out[0] is out[1] and out[0]["k"][1] is out[0]["k"] and out[2][0] is out[0]["k"]
    plain = [
        True, 1, -(2**200), 2**64, 0.1, -0.0, math.inf, "é\ud800", b"\x00\xff", bytearray(b"ab"),
        3 + 4j, {1, "a"}, frozenset(), (), {(1, 2): [3]}, None, range(1, 9, 2),
        decimal.Decimal("1.10"), fractions.Fraction(1, 3), datetime.date(2026, 12, 2),
        datetime.datetime(2026, 12, 2, 1, 2, 3, tzinfo=datetime.UTC),
        datetime.timedelta(days=1, microseconds=5), uuid.UUID(int=5), pathlib.PurePosixPath("/a"),
        collections.OrderedDict(a=1), collections.Counter("aab"), collections.deque([1], maxlen=3),
        collections.defaultdict(list, {"x": [1]}),
    ]  # fmt: skip
    out = _round_trip(codec, plain)
    assert out == plain and [type(x) for x in out] == [type(x) for x in plain]
    assert math.copysign(1, out[5]) == -1 and out[-2].maxlen == 3 and out[-1]["new"] == []
    nan = _round_trip(codec, float("nan"))
    assert nan != nan


def test_frames_are_what_json_writes_and_reads_and_nothing_else() -> None:
    """The frames' coders are json's C ones made by hand (codec.py): what they write is what
    `json.dumps` writes with the frame's separators, and they read exactly one JSON object."""
    import socket

    codec = _codec()
    a, b = socket.socketpair()
    with a, b:
        frames = codec.FrameReader(b)
        msg = {"v": [1, -0.0, 1e308, 2**53 - 1, "é\ud800\n", None, True, {"k": [[]]}]}
        msg["n"] = [float("inf"), float("-inf")]
        codec.send_frame(a, msg)
        size = int.from_bytes(b.recv(4), "big")
        data = b.recv(size)
        assert data == json.dumps(msg, separators=(",", ":")).encode()
        a.sendall(size.to_bytes(4, "big") + data)
        assert json.dumps(frames.frame()) == json.dumps(msg)
        a.sendall(b"\x00\x00\x00\x09" + b'{"x":NaN}')
        nan = frames.frame()["x"]
        assert nan != nan
        for bad in [b'{"a":1} ', b' {"a":1}', b'{"a":1}{}', b"[1]", b"nul", b"{'a':1}", b"\xff"]:
            a.sendall(len(bad).to_bytes(4, "big") + bad)
            with pytest.raises(codec.ProtocolError):
                frames.frame()
        with pytest.raises(TypeError, match="not JSON serializable"):
            codec.send_frame(a, {"v": object()})


def test_frames_are_read_whole_however_they_arrive() -> None:
    """One recv takes what has come (codec.FrameReader): frames that arrive together are read
    one by one, a frame that arrives in pieces whole, one larger than a read whole."""
    import socket
    import threading

    codec = _codec()
    a, b = socket.socketpair()
    with a, b:
        frames = codec.FrameReader(b)
        codec.send_frame(a, {"n": 1})
        codec.send_frame(a, {"n": 2})
        assert [frames.frame(), frames.frame()] == [{"n": 1}, {"n": 2}]
        big = {"s": "x" * (3 << 20)}
        data = json.dumps(big, separators=(",", ":")).encode()
        raw = len(data).to_bytes(4, "big") + data + len(b"{}").to_bytes(4, "big") + b"{}"
        pieces = [raw[:2], raw[2:7], raw[7 : 1 << 20], raw[1 << 20 :]]
        writer = threading.Thread(target=lambda: [a.sendall(p) for p in pieces])
        writer.start()
        assert frames.frame() == big and frames.frame() == {}
        writer.join()
        a.close()
        with pytest.raises(codec.PeerGone):
            frames.frame()


def test_a_frame_that_may_spell_a_path_is_told_apart_however_it_escapes_the_slash() -> None:
    """The trusted side looks through a message's strings for the paths the tested code named
    (access.heard_names) only where its frame's text may hold a "/" (FrameReader): so a path
    spelled with JSON's escapes of "/" is still looked at, and a message other than the last
    frame's always is."""
    import socket

    codec = _codec()
    a, b = socket.socketpair()
    with a, b:
        frames = codec.FrameReader(b)
        for text, slashed in [
            (b'{"v":"/tmp/x"}', True),
            (b'{"v":"\\/tmp"}', True),
            (b'{"v":"\\u002ftmp"}', True),
            (b'{"v":["\\u002Ftmp"]}', True),
            (b'{"v":"tmp","k":[1,2,"a\\u0041"]}', False),
        ]:
            a.sendall(len(text).to_bytes(4, "big") + text)
            msg = frames.frame()
            assert ("/" in json.dumps(msg, ensure_ascii=False)) is slashed
            assert frames.may_hold_slash(msg) is slashed
        assert frames.may_hold_slash({"v": "tmp"})  # (not the last frame's message)


def test_a_calls_arguments_travel_in_place() -> None:
    """A call's positional arguments and keyword pairs are tuples the callee only unpacks:
    they travel in place (["T", ...]), not as table entries; what they hold is as before."""
    codec = _codec()

    def refuse(v):
        raise AssertionError(f"not plain: {v!r}")

    items = [2, 3]
    memo = codec.Memo()
    pos, kw = codec.arguments((1, items, items, (4,)), (("k", items), ("m", "x")), memo, refuse)
    assert pos[0] == "T" and kw[0] == "T" and len(memo.table) == 2  # the list and (4,)
    msg = json.loads(json.dumps({"a": [pos, kw], "t": memo.table}))
    back = codec.Memo(msg["t"])
    codec.build(back, refuse)
    got_pos, got_kw = (codec.decode_leaf(n, back, refuse) for n in msg["a"])
    assert got_pos == (1, [2, 3], [2, 3], (4,)) and got_kw == (("k", [2, 3]), ("m", "x"))
    assert got_pos[1] is got_pos[2] is got_kw[0][1]


@pytest.mark.parametrize("node", [["T", {"a": 1}], ["T", 5], ["T", [], 1], ["T"]])
def test_malformed_in_place_tuples_are_protocol_errors(node: list) -> None:
    codec = _codec()
    with pytest.raises(codec.ProtocolError):
        codec.decode_leaf(node, codec.Memo(), lambda node: None)


@pytest.mark.parametrize(
    "table",
    [
        [["t", [["@", 1]]]],  # a tuple that contains itself
        [["l", [["@", 9]]]],  # a reference to nothing
        [["zz", []]],
        [["d", [[["@", 1], 1]]]],  # an unhashable key
        ["not a node"],
        [["dq", [], -1]],
        [["N", ["m", "q"], ["a"], [], ["o", 1, None]]],  # a record with a value missing
        [["M", ["m", "q"], ["a"], [1], ["x", 1]]],  # a record whose stand-in is no reference
        [["D", ["m", "q"], [1], [1], ["o", 1, None]]],  # a field that is no name
    ],
)
def test_malformed_tables_are_protocol_errors(table: list) -> None:
    codec = _codec()
    with pytest.raises(codec.ProtocolError):
        codec.build(codec.Memo(table), lambda node: None)


# ---- `in`: judged by what the object holds ---------------------------------------------------

HONEST_CONTAINERS = """
class Words:
    \"\"\"Case-insensitive: iterates its words as given.\"\"\"

    def __init__(self, words):
        self.words = list(words)

    def __iter__(self):
        return iter(self.words)

    def __contains__(self, item):
        return item.casefold() in {w.casefold() for w in self.words}


class Text:
    def __init__(self, s):
        self.s = s

    def __iter__(self):
        return iter(self.s)

    def __contains__(self, item):
        return item in self.s


class Stream:
    \"\"\"Its iterator is its one stream: iterating it to judge `in` would consume it.\"\"\"

    def __init__(self, items):
        self.items = set(items)
        self.it = iter(sorted(items))

    def __iter__(self):
        return self.it

    def __contains__(self, item):
        return item in self.items


class Vowels:
    def __contains__(self, letter):
        return letter in "aeiou"


class Match:
    \"\"\"Indexed by position, `in` by name (parse's Result): no iteration of its own.\"\"\"

    def __init__(self, fixed, named):
        self.fixed, self.named = fixed, named

    def __getitem__(self, i):
        return self.fixed[i] if isinstance(i, int) else self.named[i]

    def __contains__(self, name):
        return name in self.named


class Tags(list):
    pass


class Index(dict):
    pass


def containers():
    words, text = Words(["Alpha", "Beta"]), Text("alphabet")
    return words, text, Stream([1, 2]), Vowels(), Tags(["x"]), Index(k=1), Match([3], {"n": 4})
"""
CONTAINER_TESTS = """
from solution import containers


def test_honest_containers():
    words, text, stream, vowels, tags, index, match = containers()
    assert "alpha" in words and "gamma" not in words
    assert "pha" in text and "phx" not in text
    assert 2 in stream and list(stream) == [1, 2]
    assert "e" in vowels and "x" not in vowels
    assert "x" in tags and "k" in index and "y" not in tags
    assert "n" in match and 3 not in match
"""


def test_honest_containers_are_believed(layout: Layout) -> None:
    """What an object holds judges a claim of `in`, up to loose equalities (case, a text's
    substrings); a stream is not iterated to judge it (that would consume it), and an object
    with `__contains__` alone is judged by the decoys."""
    layout.files("workspace", {"solution.py": HONEST_CONTAINERS})
    layout.files("tests", {"test_in.py": CONTAINER_TESTS})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0 and not run.named("value_hack"), run.output


# ---- the source of a workspace module: the agent's text, or a report ---------------------

SORTS = '''"""Sorts."""


def my_sort(items):
    return sorted(items)
'''
SOURCE_LOOKUP_TESTS = """
import ast
import inspect
import linecache

import solution


def test_lookups():
    assert "sorted(" in inspect.getsource(solution)
    assert inspect.getdoc(solution) == "Sorts."
    linecache.clearcache()
    assert "sorted(" in "".join(linecache.getlines(solution.__file__))
    assert "sorted(" in solution.__loader__.get_source("solution")
    assert [n.name for n in ast.parse(inspect.getsource(solution)).body[1:]] == ["my_sort"]
"""


def test_source_lookups_see_the_agents_text(layout: Layout) -> None:
    """inspect, linecache and the module's loader answer with the agent's text (they read
    the stub before), with nothing reported."""
    layout.files("workspace", {"solution.py": SORTS})
    layout.files("tests", {"test_source.py": SOURCE_LOOKUP_TESTS})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0 and not run.named("stub_read"), run.output


STUB_READS = {
    "open": "open(solution.__file__).read()",
    "os.open": "os.read(os.open(solution.__file__, os.O_RDONLY), 1 << 20)",
    "a loader's get_data": "solution.__spec__.loader.get_data(solution.__file__)",
    "a program": "subprocess.run(['cat', solution.__file__], capture_output=True).stdout",
    "a shell": "subprocess.run('cd %s && grep sorted solution.py' % os.path.dirname("
    "solution.__file__), shell=True, capture_output=True).stdout",
    "os.system": "os.system('wc -l ' + solution.__file__)",
}


@pytest.mark.parametrize("how", sorted(STUB_READS))
def test_every_other_read_of_a_stub_is_reported(layout: Layout, how: str) -> None:
    """A read of a stub's bytes outside the source lookup gets the stub: reported, so the
    grade of a source check that passed on it is never a silent 1 (reward.py)."""
    tests = "import os\nimport subprocess\n\nimport solution\n\n\ndef test_read():\n"
    tests += "    " + STUB_READS[how] + "\n"
    layout.files("workspace", {"solution.py": SORTS})
    layout.files("tests", {"test_read.py": tests})
    view = layout.view()
    run = layout.pytest()
    stub = next(iter(view["sources"]))
    assert run.rc == 0, run.output
    assert any(e["path"] == stub for e in run.named("stub_read")), run.events


def test_a_read_before_any_import_is_reported(layout: Layout) -> None:
    """The pytest guard starts the watch before collection: a test module that reads a stub
    before any test module imported one is reported too."""
    reads = "import os\n\nSOURCE = open(os.path.join(os.getcwd(), 'solution.py')).read()\n"
    reads += "\n\ndef test_source():\n    assert 'sorted(' not in SOURCE\n"
    imports = "import solution\n\n\ndef test_sorts():\n"
    imports += "    assert solution.my_sort([2, 1]) == [1, 2]\n"
    layout.files("workspace", {"solution.py": SORTS})
    guard = (RUNTIME / "pytest_guard.py").read_text()
    layout.files("tests", {"conftest.py": guard, "test_a.py": reads, "test_b.py": imports})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output
    assert run.named("stub_read"), run.events


def test_running_a_stub_is_no_read(layout: Layout) -> None:
    """Running the module's file (python3 /app/NAME.py) is what a stub is for: not reported."""
    solution = "import sys\n\nif __name__ == '__main__':\n    print(sys.argv[1].upper())\n"
    tests = (
        "import subprocess\nimport sys\n\nimport solution\n\n\ndef test_main():\n"
        "    out = subprocess.run([sys.executable, solution.__file__, 'ab'], capture_output=True)\n"
        "    assert out.stdout == b'AB\\n'\n"
    )
    layout.files("workspace", {"solution.py": solution})
    layout.files("tests", {"test_main.py": tests})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0 and not run.named("stub_read"), run.output


def _marks(layout: Layout) -> Path:
    """A folder both processes may write their marks in (RAN_HERE, the tests' files)."""
    marks = layout.root / "marks"
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)
    return marks


def _ran_only_in_the_tested_process(marks: Path, run: Run) -> None:
    """The agent's code ran (its marks), and never in a process of the tests' (theirs)."""
    tests = {p.name.split("-")[1] for p in marks.glob("tests-*")}
    ran = {p.name.split("-")[1] for p in marks.glob("ran-*")}
    assert tests and ran and not tests & ran, (tests, ran, run.output)


# The agent's module, wherever it runs, leaves its process id; the tests leave theirs.
RAN_HERE = """
import os

with open(os.path.join({marks!r}, "ran-%d" % os.getpid()), "w"):
    pass


def double(x):
    import os

    open(os.path.join({marks!r}, "ran-%d" % os.getpid()), "w").close()
    return x * 2
"""
# Statements of the same kinds and names whose trees cannot be dumped (a literal past the
# digits an int may print): the check stays closed for those kinds and names.
DECOYS = """
import os

with open(os.devnull):
    _ = 0x{ones}


class _Decoy:
    def double(self):
        return 0x{ones}

""".replace("{ones}", "f" * 3600)
EXEC_TESTS = """
import ast
import importlib.util
import inspect
import linecache
import os
import runpy
import textwrap

import solution

{mark_at_collection}SHAPES = {{
    # (first: where the texts are not parsed yet, the definition alone is what a parse needs)
    "exec of a definition": lambda: exec(
        inspect.getsource(solution).split("\\n\\n\\n")[-1] + "\\nfound = double(2)\\n", {{}}
    ),
    "exec of the file": lambda: exec(open(solution.__file__).read(), {{}}),
    "exec of getsource": lambda: exec(inspect.getsource(solution), {{}}),
    "exec of linecache": lambda: exec("".join(linecache.getlines(solution.__file__)), {{}}),
    "exec of get_source": lambda: exec(solution.__loader__.get_source("solution"), {{}}),
    "compile of the tree": lambda: exec(
        compile(ast.parse(inspect.getsource(solution)), "x", "exec"), {{}}
    ),
    "exec with the tests' own lines": lambda: exec(
        "import os\\n" + inspect.getsource(solution) + "\\nfound = double(2)\\n", {{}}
    ),
    "exec of one statement": lambda: exec(
        textwrap.dedent("".join(inspect.getsourcelines(solution)[0][2:5])), {{}}
    ),
    "run_path": lambda: runpy.run_path(solution.__file__),
    "exec_module": lambda: importlib.util.spec_from_file_location(
        "again", solution.__file__
    ).loader.exec_module(importlib.util.module_from_spec(
        importlib.util.spec_from_file_location("again", solution.__file__)
    )),
}}


def test_shapes():
    {mark_in_test}
    for run in SHAPES.values():
        try:
            run()
        except Exception:
            pass
    assert solution.double(2) == 4
"""


@pytest.mark.parametrize(
    "decoys, parsed_first, name, guard",
    [
        (False, True, "double", False),
        (True, True, "double", False),
        (False, False, "double", False),
        (True, False, "double", False),
        # Spelt with a compatibility character, which the parser reads as "double": the
        # tests' compiled tree then names what the text does not hold as written.
        (False, False, "\uff44ouble", False),
        # The pytest guard, as a verification has it: the texts are watched before the test
        # module is compiled.
        (False, True, "double", True),
        (False, False, "double", True),
        (False, False, "\uff44ouble", True),
    ],
)
def test_the_agents_text_never_runs_in_the_tests_process(
    layout: Layout, decoys: bool, parsed_first: bool, name: str, guard: bool
) -> None:
    """However the tests execute what they read of a workspace module (its file: the stub;
    the text its source lookups give: refused to compile), the agent's code runs only in the
    tested process; also where the agent's text holds statements that cannot be dumped. The
    texts are parsed once a compiled statement may be one of theirs (sources.py `_parse_for`):
    at the collection (`parsed_first`: the test module holds a statement whose every name the
    text holds), or only at the first exec."""
    marks = _marks(layout)
    text = RAN_HERE.replace("\n\ndef double", (DECOYS if decoys else "") + "\n\ndef double")
    text = text.replace("def double", "def " + name)
    mark = 'open(os.path.join({marks!r}, "tests-%d" % os.getpid()), "w").close()'
    mark = mark.format(marks=str(marks))
    tests = EXEC_TESTS.format(
        marks=str(marks),
        mark_at_collection=mark + "\n" if parsed_first else "",
        mark_in_test="pass" if parsed_first else mark,
    )
    layout.files("workspace", {"solution.py": text.format(marks=str(marks))})
    layout.files("tests", {"test_exec.py": tests})
    if guard:
        layout.files("tests", {"conftest.py": (RUNTIME / "pytest_guard.py").read_text()})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output
    _ran_only_in_the_tested_process(marks, run)


# Two texts of the agent's: the tests' module names everything a comment of solution.py names,
# so its compile parses that text; helper.py stays unparsed (its lines are all it shares).
PARSED_EARLY = """
import os

# sys.path.insert


def double(x):
    import os

    open(os.path.join({marks!r}, "ran-%d" % os.getpid()), "w").close()
    return x * 2
"""
PARSED_EARLY_TESTS = """
import inspect
import os
import sys

import solution

sys.path.insert(0, "/app")


def test_exec_of_the_text_parsed_at_collection():
    open(os.path.join({marks!r}, "tests-%d" % os.getpid()), "w").close()
    found = {{}}
    try:
        exec(inspect.getsource(solution), found)
    except RuntimeError:
        pass
    assert "double" not in found
    assert solution.double(2) == 4
"""


def test_a_text_parsed_at_collection_stays_refused_while_another_waits(layout: Layout) -> None:
    """A compiled string is first checked against the lines of the texts still unparsed and
    the first lines of those parsed (sources.py `_runs_text`). With only the former, the text
    a test module's compile had parsed was in neither once another text waited: exec of its
    source ran the agent's code in the tests' process (a review found it; the runtime's
    modules load from bytecode, as in a verification, so no compile builds the lines first)."""
    import py_compile

    marks = _marks(layout)
    solution = PARSED_EARLY.format(marks=str(marks))
    layout.files("workspace", {"solution.py": solution, "helper.py": "def helper():\n    return 1"})
    guard = (RUNTIME / "pytest_guard.py").read_text()
    tests = PARSED_EARLY_TESTS.format(marks=str(marks))
    layout.files("tests", {"conftest.py": guard, "test_exec.py": tests})
    checked = py_compile.PycInvalidationMode.CHECKED_HASH  # (as verifier.runtime_bytecode)
    for f in (layout.root / "lib").glob("*.py"):
        py_compile.compile(str(f), invalidation_mode=checked, doraise=True)
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output
    _ran_only_in_the_tested_process(marks, run)


# Trees the tests build by hand around the agent's statements, compiled in a process of their
# own that watches one text (sources.py loaded by path, as the runtime loads it).
HAND_BUILT = """
import ast, importlib.util, linecache, sys, threading

spec = importlib.util.spec_from_file_location("_rollouts_sources", sys.argv[1])
sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sources)
sources.install({{"sources": {{sys.argv[2]: sys.argv[3]}}}}, lambda *a, **k: None, lambda o: False)
text = "".join(linecache.getlines(sys.argv[2]))
shape = sys.argv[4]
if shape == "a node whose fields are its own":
    tree = ast.parse(text)
    odd = ast.Expr(ast.Call(ast.Name("len", ast.Load()), [ast.Constant("")], []))
    tree.body.append(odd)
    ast.fix_missing_locations(tree)
    odd._fields = 1  # (compile reads a node's fields by their C names)
elif shape == "a text whose every line a form feed puts at the top level":
    tree = text  # (compiled as it is, as `exec(inspect.getsource(solution))` would)
elif shape == "a statement after a string that ends on a line a # begins":
    tree = "z = '''\\n#'''; double = lambda x: 2 * x\\n"  # (its second line: the agent's)
elif shape in ("the warnings module hidden", "ast.parse patched to fail"):
    from unittest import mock

    tree = ast.parse(text)
    patch = (
        mock.patch.dict(sys.modules, {{"warnings": None}})
        if shape == "the warnings module hidden"
        else mock.patch("ast.parse", side_effect=SyntaxError("patched"))
    )
    with patch:
        try:
            compile(tree, "t", "exec")
        except RuntimeError:
            pass
else:  # a repr that compiles, called by the check's own dump while it holds its lock
    class Compiles:
        def __repr__(self):
            eval("1 + 1")
            return "Compiles()"

    call = ast.Call(ast.Name("double", ast.Load()), [ast.Constant(Compiles())], [])
    tree = ast.fix_missing_locations(ast.Module([ast.Expr(call)], []))
found = {{}}


def run():
    try:
        exec(compile(tree, "t", "exec"), found)
    except Exception as e:  # noqa: BLE001
        found["refused"] = type(e).__name__


thread = threading.Thread(target=run, daemon=True)
thread.start()
thread.join(20)
print("hung" if thread.is_alive() else "ran" if "double" in found else found.get("refused"))
"""


@pytest.mark.parametrize(
    "shape, ends",
    [
        ("a node whose fields are its own", ("RuntimeError",)),
        # (a test's patch, and then the agent's text: never dropped, never read through it)
        ("the warnings module hidden", ("RuntimeError",)),
        ("ast.parse patched to fail", ("RuntimeError",)),
        ("a text whose every line a form feed puts at the top level", ("RuntimeError",)),
        ("a statement after a string that ends on a line a # begins", ("RuntimeError",)),
        # (the repr's own compile is checked, or refused where it needs the lock; then the
        # compiler refuses a constant of that type)
        ("a repr that compiles", ("RuntimeError", "TypeError")),
    ],
)
def test_hand_built_trees_around_the_agents_statements(
    tmp_path: Path, shape: str, ends: tuple[str, ...]
) -> None:
    """Review finds: a node with `_fields` of its own made the walk for names raise, and the
    raise let the agent's definition compile; a compile asked for by code the check itself
    runs (a repr) waited for ever on the check's lock; a test that hid the warnings module let
    a compile of the agent's definition through, and one that patched `ast.parse` to fail had
    the agent's text dropped for good; a text indented by form feeds (at the top level all
    the same) had none of its lines among those its statements were thought to start on.
    None runs or hangs now."""
    copy = tmp_path / "solution.py"
    # (an escape that is none: the text may warn when parsed)
    text = "def double(x):\n    return x * 2\n\n\nprint('a statement \\d')\n"
    if shape.startswith("a text whose every line"):
        text = " \x0cdouble = lambda x: 2 * x\n \x0cprint('a statement')\n"
    elif shape.startswith("a statement after a string"):
        text = "y = '''\n#'''; double = lambda x: 2 * x\n"
    copy.write_text(text)
    script = tmp_path / "compile.py"
    script.write_text(HAND_BUILT.format())
    argv = [sys.executable, "-I", script, RUNTIME / "sources.py", tmp_path / "app.py", copy, shape]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() in ends, out.stdout + out.stderr


# The agent's text with an invalid escape (a warning when parsed) and a module docstring whose
# example is written with escapes (so the text does not hold it as the docstring reads).
WARNS_WHEN_PARSED = '''"""Doubles.

>>> import os; open(os.path.join({marks!r}, "ran\\x2d%d" % os.getpid()), "w").close()
"""
import os

PATTERN = "\\d+"


def double(x):
    import os

    open(os.path.join({marks!r}, "ran-%d" % os.getpid()), "w").close()
    return x * 2
'''
WARNINGS_AS_ERRORS_TESTS = """
import doctest
import inspect
import os

import pytest

import solution


@pytest.mark.filterwarnings("error")
def test_exec_of_a_definition_with_warnings_as_errors():
    open(os.path.join({marks!r}, "tests-%d" % os.getpid()), "w").close()
    found = {{}}
    try:
        exec(inspect.getsource(solution).split("\\n\\n\\n")[-1], found)
    except RuntimeError:
        pass
    assert "double" not in found
    assert solution.double(2) == 4


def test_a_doctest_of_the_modules_docstring():
    assert "ran-" in solution.__doc__
    try:
        doctest.run_docstring_examples(solution, {{}}, name="solution")
    except RuntimeError:
        pass
"""


def test_warnings_as_errors_and_escaped_docstrings_leave_the_agents_text_refused(
    layout: Layout,
) -> None:
    """Review finds: a test that turns warnings into errors made the agent's text fail to
    parse when its parse was put off to that test's compile, so its statements were never
    refused (it is parsed with the parser's warnings ignored now); and a doctest of the stub
    module's docstring ran its example here where the text spelt it with escapes (the
    docstring adopted is heard now, as its functions' are)."""
    marks = _marks(layout)
    layout.files("workspace", {"solution.py": WARNS_WHEN_PARSED.format(marks=str(marks))})
    tests = WARNINGS_AS_ERRORS_TESTS.format(marks=str(marks))
    layout.files("tests", {"test_warned.py": tests})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output
    _ran_only_in_the_tested_process(marks, run)


WARNING_ONCE_TESTS = """
import pytest

from solution import double


def test_a_compile_of_the_tests_warns_once_and_as_theirs():
    with pytest.warns(Warning) as record:
        compile('s = "\\\\d"\\n', "generated.py", "exec")
    assert [r.filename for r in record] == ["generated.py"]
    assert double(2) == 4
"""


def test_a_compile_of_the_tests_is_not_parsed_again_while_the_texts_wait(layout: Layout) -> None:
    """A review find: while the agent's texts waited to be parsed, every compiled string with
    a blank line passed the first test (every line of theirs, the blank one too) and was
    parsed again in the hook, so its warning came twice, once from `<unknown>`."""
    layout.files("workspace", {"solution.py": "def double(x):\n\n    return x * 2\n"})
    layout.files("tests", {"test_warns.py": WARNING_ONCE_TESTS})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output


# A comment with form feeds in it: one line to the parser, three to `str.splitlines`.
SHIFTED_LINES = """import os

x = 0  #\x0c\x0copen(os.path.join({marks!r}, "ran-%d" % os.getpid()), "w").close(); y = 1

class Point:
    pass


def double(x):
    open(os.path.join({marks!r}, "ran-%d" % os.getpid()), "w").close()
    return x * 2
"""
SHIFTED_LINES_TESTS = """
import inspect
import os

import solution


def test_exec_of_a_classs_source():
    open(os.path.join({marks!r}, "tests-%d" % os.getpid()), "w").close()
    source = inspect.getsource(solution.Point)
    assert source == "class Point:\\n    pass\\n"  # (as plain Python reads the file)
    try:
        exec(source, {{}})
    except RuntimeError:
        pass
    assert solution.double(2) == 4
"""


def test_the_source_lookups_number_the_lines_as_the_parser_does(layout: Layout) -> None:
    """A review find, older than the lazy parse: the agent's text was served to linecache split
    by `str.splitlines`, which ends a line at a form feed too, so `inspect.getsource` of a
    class gave lines shifted to where the agent chose (here: its comment's tail and the class);
    an exec of such lines that hold none of its statements ran them in the tests' process."""
    marks = _marks(layout)
    layout.files("workspace", {"solution.py": SHIFTED_LINES.format(marks=str(marks))})
    layout.files("tests", {"test_shifted.py": SHIFTED_LINES_TESTS.format(marks=str(marks))})
    layout.view()
    run = layout.pytest()
    assert run.rc == 0, run.output
    _ran_only_in_the_tested_process(marks, run)
