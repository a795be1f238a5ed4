"""Oracle calibration: does the grader give a task's own reference solution a clean 1?

The boundary between the tests and the agent's code (verifier.py, verifier_runtime/) can fail a
correct solution when the tests need something it does not reproduce. Such a false 0 is as
harmful to the policy as a forged 1, and silent. So before a task's samples are graded, its
oracle (solution/solve.sh) is graded once through the same path (run_oracle: agent container,
then verifier) and the outcome is kept by *calibration key*: the task's tests, oracle,
environment and verifier timeout, the grader's version and the runtime and image override. A
key is calibrated once; a new grader or changed tests calibrate again.

- `calibrated`: the oracle scored 1 with no flag. Samples are graded through the boundary.
- `uncalibrated`: anything else the tests decided (a reward below 1, a flag, the tests' own
  timeout). Samples are graded in the fallback (the tests and the agent's code in one process,
  `plain` in verifier.py), flagged `unguarded`, or dropped when their request says so.
- No result: the task has no oracle, or calibration itself hit an infrastructure fault (nothing
  is cached then, and the next use tries again). Samples are graded through the boundary, as
  without calibration.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandboxes.backend import LABEL_CALIBRATION, SandboxBackend, Verdict
from sandboxes.oracle import OracleResult, run_oracle
from sandboxes.task import Task

log = logging.getLogger(__name__)

CALIBRATED = "calibrated"
UNCALIBRATED = "uncalibrated"
CALIBRATION_FILE = "calibration.json"  # in the service's data dir
# Oracles graded at once by one Calibrator: each holds an agent and a verifier container.
MAX_CONCURRENT_CALIBRATIONS = 2
# How much of the verifier's output a record keeps (the end: where pytest says what failed).
OUTPUT_TAIL = 2000


def default_cache_path() -> Path:
    """The CLI's calibration cache (`rollouts verify`, `rollouts tasks list`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rollouts" / CALIBRATION_FILE


def calibration_key(task: Task, grader_version: str, setting: str = "") -> str:
    """sha256 of what decides the oracle's grade: the tests (Task.tests_digest), the oracle's
    files, the environment (Task.env_hash), the verifier timeout, the grader's version, and
    `setting` (the runtime and image override the sandboxes use)."""
    h = hashlib.sha256()
    for part in (
        task.tests_digest,
        task.env_hash,
        repr(task.config.verifier_timeout_sec),
        grader_version,
        setting,
    ):
        h.update(part.encode() + b"\0")
    for name in sorted(task.solution_files):
        h.update(name.encode() + b"\0" + hashlib.sha256(task.solution_files[name]).digest())
    return h.hexdigest()


def sandbox_setting(runtime: str | None, image: str | None) -> str:
    """The part of a calibration key that comes from how sandboxes are run, not the task."""
    return f"runtime={runtime or ''};image={image or ''}"


@dataclass(frozen=True)
class Calibration:
    """How the grader graded one task's oracle."""

    task_id: str
    key: str
    outcome: str  # CALIBRATED or UNCALIBRATED
    reward: float | None
    status: str  # the oracle run's Verdict
    flags: list[str] = field(default_factory=list)
    why: str = ""  # one line, for an uncalibrated task
    output: str = ""  # the end of the verifier's output, for an uncalibrated task
    grader_version: str = ""
    setting: str = ""  # sandbox_setting() of the run
    at: float = 0.0

    @property
    def calibrated(self) -> bool:
        return self.outcome == CALIBRATED


def judge(
    task: Task, key: str, result: OracleResult, grader_version: str, setting: str = ""
) -> Calibration | None:
    """The calibration an oracle run makes; None when the run says nothing about the grader
    (an infrastructure fault: engine, image, a container removed from outside)."""
    if result.verdict is Verdict.infrastructure:
        return None
    clean = (
        result.verdict is Verdict.graded
        and result.reward is not None
        and result.reward >= 1.0
        and not result.flags
    )
    why = ""
    if not clean:
        flags = f", flags {', '.join(result.flags)}" if result.flags else ""
        why = f"the oracle scored {result.reward} (status {result.verdict.value}{flags})"
    return Calibration(
        task_id=task.id,
        key=key,
        outcome=CALIBRATED if clean else UNCALIBRATED,
        reward=result.reward,
        status=result.verdict.value,
        flags=list(result.flags),
        why=why,
        output="" if clean else result.output[-OUTPUT_TAIL:],
        grader_version=grader_version,
        setting=setting,
        at=time.time(),
    )


class CalibrationCache:
    """Calibrations by key in one JSON file (written whole, atomically, after each change);
    None: in memory only. A file that does not parse is started afresh: it is only a cache."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._records: dict[str, Calibration] = {}
        if path is not None and path.is_file():
            try:
                raw = json.loads(path.read_text())
                self._records = {k: Calibration(**v) for k, v in raw["calibrations"].items()}
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                log.warning("calibration cache %s unreadable (%s); starting afresh", path, e)

    def get(self, key: str) -> Calibration | None:
        return self._records.get(key)

    def records(self) -> list[Calibration]:
        return list(self._records.values())

    def put(self, cal: Calibration) -> None:
        """Blocking (a small file): call it off the event loop."""
        self._records[cal.key] = cal
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"calibrations": {k: asdict(v) for k, v in self._records.items()}}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".calibration-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise


def read_calibrations(path: Path) -> list[Calibration]:
    """Every calibration a cache file holds (the web view, `rollouts tasks list`)."""
    return CalibrationCache(path).records()


class Calibrator:
    """Calibrates each task once per key, at its first use, and answers how its samples are
    graded. Oracle runs are asyncio tasks on the caller's loop (the sandbox calls are async and
    the cache is written in a worker thread), so calibrating never blocks the event loop; the
    samples of a task wait for its calibration only where they need it (before grading, or
    before starting when their request drops uncalibrated tasks)."""

    def __init__(
        self,
        backend: SandboxBackend,
        cache: CalibrationCache,
        *,
        grader_version: str,
        setting: str = "",
        max_concurrent: int = MAX_CONCURRENT_CALIBRATIONS,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.grader_version = grader_version
        self.setting = setting
        self._limit = asyncio.Semaphore(max_concurrent)
        self._running: dict[str, asyncio.Task[Calibration | None]] = {}
        self.runs: dict[str, int] = {CALIBRATED: 0, UNCALIBRATED: 0, "failed": 0}

    def key(self, task: Task) -> str:
        return calibration_key(task, self.grader_version, self.setting)

    def start(self, task: Task) -> asyncio.Future[Calibration | None]:
        """The task's calibration: cached, running, or started now. Resolves to None when the
        task has no oracle or its oracle run hit an infrastructure fault."""
        key = self.key(task)
        cached = self.cache.get(key)
        if cached is not None or not task.has_oracle:
            done: asyncio.Future[Calibration | None] = asyncio.get_running_loop().create_future()
            done.set_result(cached)
            return done
        running = self._running.get(key)
        if running is None:
            running = asyncio.create_task(self._calibrate(task, key))
            self._running[key] = running
        return running

    async def _calibrate(self, task: Task, key: str) -> Calibration | None:
        try:
            return await self._run(task, key)
        except Exception:  # noqa: BLE001 - a bug here must not cost the samples their grades
            self.runs["failed"] += 1
            log.exception("calibration of %s failed; its samples are graded through the "
                          "boundary", task.id)  # fmt: skip
            return None
        finally:
            # Cached now (or failed: the next use tries again); running samples hold the task.
            self._running.pop(key, None)

    async def _run(self, task: Task, key: str) -> Calibration | None:
        async with self._limit:
            labels = {
                "rollouts.rollout_id": "calibration",
                "rollouts.task_id": task.id,
                LABEL_CALIBRATION: "true",
            }
            result = await run_oracle(task, self.backend, solve_script=None, labels=labels)
        cal = judge(task, key, result, self.grader_version, self.setting)
        if cal is None:
            self.runs["failed"] += 1
            log.warning("calibration of %s failed (%s): %s", task.id, result.verdict.value,
                        result.output[-300:])  # fmt: skip
            return None
        self.runs[cal.outcome] += 1
        if not cal.calibrated:
            log.warning("task %s is uncalibrated: %s; its samples are graded in the fallback, "
                        "flagged unguarded", task.id, cal.why)  # fmt: skip
        try:
            await asyncio.to_thread(self.cache.put, cal)
        except OSError as e:  # kept in memory all the same; the file is only a cache
            log.warning("calibration cache %s not written: %s", self.cache.path, e)
        return cal

    async def aclose(self) -> None:
        """Cancel the calibrations still running (nothing of theirs is cached)."""
        running = list(self._running.values())
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def uncalibrated(self, tasks: Iterable[Task] | None = None) -> list[Calibration]:
        """The uncalibrated calibrations of this grader and setting (of `tasks` only, if given)."""
        keys = None if tasks is None else {self.key(t) for t in tasks}
        return [
            c
            for c in self.cache.records()
            if not c.calibrated
            and (c.grader_version, c.setting) == (self.grader_version, self.setting)
            and (keys is None or c.key in keys)
        ]
