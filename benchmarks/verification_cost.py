"""Cost of one verification through the verifier runtime, two checkouts side by side.

For each task (the bundled camel-to-snake oracle, and the real-package tasks of
tests/real_tasks.py), the oracle's files are laid out and graded as the verifier container
does it (view.py, pytest, the tested process), without Docker, by each checkout's own runtime
(its tests/unit/test_verifier_runtime.py Layout), alternating checkouts per repetition. Reports
wall seconds and CPU seconds (the pytest process and everything it waited for) per
verification, and each task's outcome.

    python benchmarks/verification_cost.py --old ../wt-old --new . --tasks DIR \\
        --python /path/to/python-with-pytest-only [--repeat 1]

`--python` runs the tests: an interpreter with pytest and none of the packages under test
(else view.py leaves the workspace's copy out as shadowing an installed one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_ONE = r"""
import json, resource, shutil, sys, time
from pathlib import Path
root, task, python, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
sys.path.insert(0, str(root))
from tests.unit.test_verifier_runtime import Layout, _oracle_files
shutil.rmtree(out, ignore_errors=True)
lay = Layout(out)
module = task / "solution" / "module"
if module.is_dir():
    files = {str(p.relative_to(module)): p.read_bytes() for p in module.rglob("*") if p.is_file()}
else:
    files = _oracle_files(task)
lay.files("workspace", files)
lay.files("tests", {p.name: p.read_bytes() for p in (task / "tests").iterdir()
                    if p.is_file() and p.name != "test.sh"})
sys.executable = python
lay.view()
code = (f"import sys; sys.path.append({str(out / 'app')!r}); import pytest; "
        "sys.exit(pytest.main(sys.argv[1:]))")
before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
run = lay.run(python, "-I", "-c", code, "-q", "-p", "no:cacheprovider", out / "tests",
              timeout=1800)
wall = time.perf_counter() - t0
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
tail = [l for l in run.output.splitlines() if " passed" in l or " failed" in l or "error" in l]
print(json.dumps({"rc": run.rc, "wall_s": wall, "cpu_s": cpu, "summary": (tail or [""])[-1]}))
"""


def one(root: Path, task: Path, python: str, scratch: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _ONE, str(root), str(task), python, str(scratch)],
        cwd=root, capture_output=True, text=True, timeout=2000,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"error: {root} {task.name}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, required=True)
    ap.add_argument("--tasks", type=Path, required=True, help="real-package tasks folder")
    ap.add_argument("--python", required=True)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    tasks = [args.new / "examples" / "tasks" / "camel-to-snake"]
    tasks += sorted(p for p in args.tasks.iterdir() if p.is_dir())
    if args.only:
        tasks = [t for t in tasks if t.name in args.only]
    scratch = Path("/tmp/rollouts-verification-cost")
    print("| task | checkout | outcome | wall s | CPU s |")
    print("|---|---|---|---:|---:|")
    for task in tasks:
        got: dict[str, list[dict]] = {"old": [], "new": []}
        for _ in range(args.repeat):
            for name, root in (("old", args.old), ("new", args.new)):
                got[name].append(one(root.resolve(), task, args.python, scratch / name))
        for name in ("old", "new"):
            runs = got[name]
            wall = statistics.median(r["wall_s"] for r in runs)
            cpu = statistics.median(r["cpu_s"] for r in runs)
            print(f"| {task.name} | {name} | {runs[-1]['summary']} (rc {runs[-1]['rc']}) "
                  f"| {wall:.1f} | {cpu:.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
