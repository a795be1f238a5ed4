"""Oracle calibration against the real Docker Engine and the real grader, through the CLI:

- `rollouts verify` reports a task whose oracle fails only through the boundary (its tests
  compare the tested code's user id with their own: the boundary runs it as another user) and
  one whose oracle is wrong, and grades each oracle again in the fallback, which tells them
  apart; `rollouts tasks list` shows the cached outcomes;
- `rollouts collect` calibrates at first use and grades the samples of the uncalibrated task
  in the fallback, flagged `unguarded`, instead of 0;
- real-package tasks (tests/real_tasks.py: PyPI sdists, their projects' own tests): every
  oracle scores 1 unflagged or is reported, and the fallback scores each 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from service.trajectory import from_arrow
from tests.ci import unavailable
from tests.real_tasks import PACKAGES, DownloadFailed, build_real_tasks

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
CAMEL = ROOT / "examples" / "tasks" / "camel-to-snake"

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
export PYTHONPATH=/app
cd /app
python3 -m pytest -q -p no:cacheprovider /tests/test_solution.py
rc=$?
[ $rc -eq 0 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
"""
# fn() is the user id of the process it runs in, and the tests expect their own: true when the
# tested code runs in the tests' process (plain pytest, the fallback), never through the
# boundary, whose tested process runs under another user id.
OWN_UID_TEST = """import os

from solution import fn


def test_uid():
    assert fn() == os.getuid()
"""
OWN_UID = "import os\n\n\ndef fn():\n    return os.getuid()\n"
WRONG = "def fn():\n    return -1\n"


def make_task(root: Path, name: str, solution: str) -> Path:
    task = root / name
    shutil.copytree(CAMEL, task)
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "tests" / "test_solution.py").write_text(OWN_UID_TEST)
    (task / "instruction.md").write_text("Write fn() in /app/solution.py.\n")
    solve = f"#!/bin/bash\ncat > /app/solution.py <<'EOF'\n{solution}EOF\n"
    (task / "solution" / "solve.sh").write_text(solve)
    return task


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "clients.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def verify(tasks: Path, cache: Path) -> tuple[dict[str, dict], dict, str]:
    proc = cli("verify", "--tasks", str(tasks), "--json", "--concurrency", "4",
               "--calibration-cache", str(cache))  # fmt: skip
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    rows = {x["task_id"]: x for x in lines if "task_id" in x}
    return rows, lines[-1]["summary"], proc.stderr


def test_verify_reports_uncalibrated_tasks_and_how_the_fallback_grades_them(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(CAMEL, tasks / "camel-to-snake")
    make_task(tasks, "own-uid", OWN_UID)  # right, but not through the boundary
    make_task(tasks, "wrong-oracle", WRONG)
    cache = tmp_path / "calibration.json"
    rows, summary, stderr = verify(tasks, cache)

    camel = rows["camel-to-snake"]
    assert (camel["reward"], camel["flags"], camel["calibration"]) == (1.0, [], "calibrated")
    assert "fallback" not in camel
    own, wrong = rows["own-uid"], rows["wrong-oracle"]
    assert (own["reward"], own["calibration"]) == (0.0, "uncalibrated")
    assert own["fallback"] == {"reward": 1.0, "status": "ok", "flags": ["unguarded"]}
    assert (wrong["reward"], wrong["calibration"]) == (0.0, "uncalibrated")
    assert wrong["fallback"] == {"reward": 0.0, "status": "ok", "flags": ["unguarded"]}
    assert summary["flagged"] == {"uncalibrated": ["own-uid", "wrong-oracle"]}
    assert "uncalibrated" in stderr and "own-uid, wrong-oracle" in stderr

    listed = cli("tasks", "list", str(tasks), "--json", "--calibration-cache", str(cache))
    got = {r["id"]: r["calibration"] for r in map(json.loads, listed.stdout.splitlines())}
    assert got == {"camel-to-snake": "calibrated", "own-uid": "uncalibrated",
                   "wrong-oracle": "uncalibrated"}  # fmt: skip
    assert "2 uncalibrated task(s)" in listed.stderr
    # Without a cache entry, nothing is claimed.
    other = cli("tasks", "list", str(tasks), "--json", "--calibration-cache", str(tmp_path / "x"))
    assert {r["calibration"] for r in map(json.loads, other.stdout.splitlines())} == {None}


def test_collect_grades_an_uncalibrated_tasks_samples_in_the_fallback(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "own-uid", OWN_UID)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}  # collect keeps calibrations there
    proc = cli("collect", "--tasks", str(tasks / "own-uid"), "--out", str(tmp_path / "out"),
               "--n-samples", "2", "--min-group-size", "2", "--p-correct", "1", "--seed", "3",
               env=env)  # fmt: skip
    trajs = from_arrow(pq.read_table(proc.stdout.strip().splitlines()[-1]))
    # The stand-in typed the oracle: through the boundary that is a 0 whatever the agent did;
    # in the fallback, the 1 plain pytest gives, flagged.
    assert [(t.status.value, t.reward, t.reward_flags) for t in trajs] == [
        ("ok", 1.0, ["unguarded"])
    ] * 2
    assert all("calibration fallback" in t.verifier_output for t in trajs)
    cached = json.loads((tmp_path / "cache" / "rollouts" / "calibration.json").read_text())
    assert [c["outcome"] for c in cached["calibrations"].values()] == ["uncalibrated"]


# The tasks the boundary cannot grade, each reported by calibration for a reason that is a
# capability it withholds (docs/reliability.md, Real tasks): their oracles must still score 1
# in the fallback. Every other real task must calibrate.
REPORTED = {
    # six tests the interpreter's own machinery: `__code__`, `__self__` of the tests'
    # functions, a unittest.TestCase handed to the module, `six.moves` imports, metaclasses.
    "real-six",
    # tabulate's tests check `type(tabulate)` is a function and read its `inspect.signature`:
    # introspection of the solution's functions is never answered across.
    "real-tabulate",
}


def test_real_package_oracles_score_one_unflagged_or_are_reported(tmp_path: Path) -> None:
    try:
        build_real_tasks(tmp_path / "tasks", PACKAGES)
    except DownloadFailed as e:
        unavailable(f"the real-package sdists could not be downloaded: {e}")
    rows, summary, _ = verify(tmp_path / "tasks", tmp_path / "calibration.json")
    assert set(rows) == {p.task_id for p in PACKAGES}
    for task_id, row in sorted(rows.items()):
        print(task_id, json.dumps(row))  # the outcomes, for the record (pytest -s)
    calibrated = {t: (r["calibration"], r["reward"], r["flags"], r["status"])
                  for t, r in rows.items() if t not in REPORTED}  # fmt: skip
    assert calibrated == {t: ("calibrated", 1.0, [], "ok") for t in calibrated}
    for task_id in REPORTED:
        # Reported, and the oracle is right: its project's tests pass in the fallback.
        row = rows[task_id]
        assert row["calibration"] == "uncalibrated", row
        assert task_id in summary["flagged"]["uncalibrated"]
        assert row["fallback"] == {"reward": 1.0, "status": "ok", "flags": ["unguarded"]}
