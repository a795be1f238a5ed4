"""Grade stored samples again without re-running the agent: `rollouts regrade` and
`POST /v1/rollouts/{id}/regrade`.

Each selected sample's final workspace (kept by the store, service/store/workspaces.py) goes
to a fresh verifier container, as at collection, with the task's tests as they are now (or as
a given tasks path has them) and this code's grader. The new grading is recorded on the
trajectory; once a group's selected samples are done the group is settled: its new gradings
are served and its advantages recomputed in one transaction (before that, leases, exports and
the web view see the old grading whole), and a group a trainer already had is offered as a
regraded group. A group out to a trainer (leased, not yet acknowledged) is settled by its
ack; a group left unsettled by a killed regrade, when the store opens again
(service/store/regrades.py, docs/regrade.md, docs/delivery.md).

A grading is keyed by (grader version, tests digest): a sample whose latest grading already
has the key is not graded again. So a regrade that was killed resumes where it stopped when
run again, adding no grading twice, and its report covers what the killed run did too (the
change of every selected sample whose latest grading has the key, from the grading before).
An infrastructure fault (engine, container) records nothing: the sample keeps its grading
and is listed as failed.

Calibration is honoured as at collection (sandboxes/calibration.py): a task whose oracle does
not score 1 unflagged through the boundary has its samples graded in the fallback, flagged
`unguarded`, or, when their rollout's request said `"uncalibrated": "drop"`, recorded as
`cancelled` (masked) with the reason, never graded 0 through the boundary whatever the agent
did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sandboxes.backend import SandboxBackend, Verdict
from sandboxes.calibration import Calibration, Calibrator
from sandboxes.task import Task
from sandboxes.verifier import default_grader
from sandboxes.workspace_snapshot import SnapshotError
from service.episode import status_of
from service.sample import UNCALIBRATED_DROP
from service.store import Store
from service.store.regrades import Candidate
from service.trajectory import Grading, Status, VerifierFile, is_masked
from service.wire import RolloutRequest

log = logging.getLogger(__name__)

CONCURRENCY = 2  # verifications at once by default: one machine's engine
# (rollout id, request's tasks path, task ids) -> those tasks by id; raises a ClientError
# naming what to fix when they cannot be read.
TaskSource = Callable[[str, str, list[str]], Awaitable[dict[str, Task]]]


@dataclass(frozen=True)
class Change:
    """What a regrade changed of one sample: its served grading before and after."""

    trajectory_id: str
    task_id: str
    before_reward: float | None
    after_reward: float | None
    before_status: str
    after_status: str
    added_flags: list[str]
    removed_flags: list[str]

    @property
    def changed(self) -> bool:
        return (
            self.before_reward != self.after_reward
            or self.before_status != self.after_status
            or bool(self.added_flags or self.removed_flags)
        )

    @property
    def kind(self) -> str:
        """`0→1`-style for a reward that moved, `newly flagged`, `masked`/`unmasked`, or
        `flags` (only flags went away)."""
        if is_masked(self.before_status) != is_masked(self.after_status):
            return "masked" if is_masked(self.after_status) else "unmasked"
        if self.before_reward != self.after_reward:
            return f"{_fmt(self.before_reward)}→{_fmt(self.after_reward)}"
        if self.added_flags:
            return "newly flagged"
        return "status" if self.before_status != self.after_status else "flags"


def _fmt(x: float | None) -> str:
    return "masked" if x is None else f"{x:g}"


@dataclass
class RegradeReport:
    selected: int = 0  # samples the selection holds
    regraded: int = 0  # gradings recorded by this run
    already: int = 0  # latest grading already by this grader on these tests (not graded again)
    no_workspace: int = 0  # no final workspace kept (masked before verification, or too old)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (trajectory id, why)
    changes: list[Change] = field(default_factory=list)  # of the selected samples, by id
    groups_offered: int = 0  # regraded groups offered to trainers that had them

    def add(self, change: Change) -> None:
        if change.changed:
            self.changes.append(change)

    def to_json(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "regraded": self.regraded,
            "already_graded": self.already,
            "no_workspace": self.no_workspace,
            "failed": [{"trajectory_id": t, "why": why} for t, why in self.failed],
            "changes": [{**c.__dict__, "kind": c.kind} for c in self.changes],
            "groups_offered": self.groups_offered,
        }


@dataclass
class Plan:
    """What a regrade will grade: the selected samples and their tasks, read up front so that
    a task that cannot be found stops it before anything is verified."""

    candidates: list[Candidate]
    tasks: dict[tuple[str, str], Task]  # (rollout id, task id) -> task
    # rollout id -> its request's `uncalibrated` choice ("fallback" or "drop")
    uncalibrated: dict[str, str] = field(default_factory=dict)


async def plan(
    store: Store,
    tasks: TaskSource,
    *,
    rollout_id: str | None = None,
    task_ids: list[str] | None = None,
) -> Plan:
    """The samples of `rollout_id` (None: every rollout) and of `task_ids` (None: every task)
    that have a stored payload, with their tasks from `tasks`."""
    selected = await store.regrade_candidates(rollout_id, task_ids or None)
    by_rollout: dict[str, set[str]] = {}
    for c in selected:
        by_rollout.setdefault(c.rollout_id, set()).add(c.task_id)
    loaded: dict[tuple[str, str], Task] = {}
    uncalibrated: dict[str, str] = {}
    for rid, ids in by_rollout.items():
        request = RolloutRequest.model_validate_json(await store.rollout_request(rid))
        uncalibrated[rid] = request.uncalibrated
        for task_id, task in (await tasks(rid, request.tasks.path, sorted(ids))).items():
            loaded[(rid, task_id)] = task
    return Plan(selected, loaded, uncalibrated)


def grader_version_of(backend: SandboxBackend) -> str:
    """The version of the grader `backend` grades with (on Ray: this code's, as on its nodes)."""
    grader = getattr(backend, "grader", None)
    return (grader or default_grader()).version


@dataclass
class RegradeJob:
    """A regrade running in the service (POST /v1/rollouts/{id}/regrade), and its outcome."""

    rollout_id: str
    report: RegradeReport = field(default_factory=RegradeReport)
    state: str = "running"  # running / done / failed
    error: str | None = None
    task: asyncio.Task[None] | None = None

    def status(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "state": self.state,
            "error": self.error,
            **self.report.to_json(),
        }


async def run(
    store: Store,
    backend: SandboxBackend,
    the_plan: Plan,
    *,
    grader_version: str,
    concurrency: int = CONCURRENCY,
    on_offer: Callable[[], None] = lambda: None,
    report: RegradeReport | None = None,
    calibrator: Calibrator | None = None,
) -> RegradeReport:
    """Grade the plan's samples again with `backend` (whose grader is `grader_version`), at
    most `concurrency` at once; settle each group when its samples are done (gradings and
    advantages served together). `report` (filled
    as it goes, for a caller that shows progress) is returned. A failure of the store (not of
    a verification) ends it; run it again to resume. `calibrator`: each task's oracle is
    calibrated (once per key, cached) before its samples are graded, and an uncalibrated
    task's samples are graded as collection grades them (the module's docstring); None:
    every sample through the boundary."""
    report = report or RegradeReport()
    report.selected = len(the_plan.candidates)
    queue = list(reversed(the_plan.candidates))  # popped in store order
    left: dict[str, int] = {}
    for c in the_plan.candidates:
        left[c.group_id] = left.get(c.group_id, 0) + 1

    async def one(c: Candidate) -> None:
        task = the_plan.tasks[(c.rollout_id, c.task_id)]
        history = await store.grading_history(c.trajectory_id)
        key = (grader_version, task.tests_digest)
        if history and _key(history[-1]) == key:
            report.already += 1
            if len(history) >= 2:
                report.add(_change(c, history[-2], history[-1]))
        elif not c.kept:
            report.no_workspace += 1
        else:
            # Shared by the task's samples: its oracle runs once, whoever asks first.
            cal = await asyncio.shield(calibrator.start(task)) if calibrator else None
            choice = the_plan.uncalibrated.get(c.rollout_id, "")
            await _grade(store, backend, c, task, report, cal, choice, grader_version)

    async def worker() -> None:
        while queue:
            c = queue.pop()
            await one(c)
            left[c.group_id] -= 1
            if left[c.group_id] == 0:  # its last sample: advantages again, maybe an offer
                settled = await store.settle_regraded([c.group_id])
                offered = sum(s.offered for s in settled)
                report.groups_offered += offered
                if offered:
                    on_offer()

    # At most `concurrency` samples at once; a group settles as soon as its last one is done.
    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    report.changes.sort(key=lambda ch: ch.trajectory_id)
    return report


def _key(grading: dict[str, Any]) -> tuple[str, str]:
    return grading.get("grader_version", ""), grading.get("tests_digest", "")


def _dropped(task: Task, cal: Calibration, grader_version: str) -> tuple[Grading, str]:
    """The grading of a sample whose uncalibrated task its request drops: `cancelled` (masked,
    no advantage), as collection would have left it, with the reason."""
    why = (
        f"[rollouts] not graded: task {cal.task_id} is uncalibrated ({cal.why}) and the "
        "request drops uncalibrated tasks"
    )
    grading = Grading(
        reward=None,
        status=Status.cancelled,
        grader_version=grader_version,
        tests_digest=task.tests_digest,
        graded_at=time.time(),
    )
    return grading, why


def _change(c: Candidate, before: dict[str, Any], after: dict[str, Any]) -> Change:
    b_flags, a_flags = before.get("reward_flags") or [], after.get("reward_flags") or []
    return Change(
        c.trajectory_id,
        c.task_id,
        before.get("reward"),
        after.get("reward"),
        before.get("status") or "",
        after.get("status") or "",
        [f for f in a_flags if f not in b_flags],
        [f for f in b_flags if f not in a_flags],
    )


async def _grade(
    store: Store,
    backend: SandboxBackend,
    c: Candidate,
    task: Task,
    report: RegradeReport,
    cal: Calibration | None = None,
    uncalibrated: str = "",
    grader_version: str = "",
) -> None:
    try:
        kept = await store.load_workspace(c.trajectory_id)
    except SnapshotError as e:  # the store's own fault, never the sample's: not graded
        report.failed.append((c.trajectory_id, f"kept workspace unreadable: {e}"))
        return
    if kept is None:  # deleted by retention since the plan was made
        report.no_workspace += 1
        return
    plain = cal is not None and not cal.calibrated
    if plain and uncalibrated == UNCALIBRATED_DROP:
        grading, output = _dropped(task, cal, grader_version)
    else:
        labels = {"rollouts.rollout_id": c.rollout_id, "rollouts.trajectory_id": c.trajectory_id}
        result = await backend.verify(task, kept.tar, labels, plain=plain)
        if result.verdict is Verdict.infrastructure:
            report.failed.append((c.trajectory_id, result.output[-500:]))
            return
        graded = Status(kept.graded_status)
        status = graded if result.verdict is Verdict.graded else status_of(result.verdict)
        grading = Grading(
            reward=result.reward,
            status=status,
            reward_flags=list(result.flags),
            verifier_files=[VerifierFile(path=p, content=t) for p, t in result.files.items()],
            grader_version=result.grader_version,
            tests_digest=result.tests_digest or task.tests_digest,
            graded_at=time.time(),
        )
        output = result.output
    recorded = await store.record_grading(c.trajectory_id, grading, output)
    if recorded is None:  # another regrade recorded this key meanwhile
        report.already += 1
        return
    report.regraded += 1
    # From what it served before (a sample masked at collection has no grading to compare).
    previous = {
        "reward": recorded.before_reward,
        "status": recorded.before_status,
        "reward_flags": recorded.before_flags,
    }
    report.add(_change(c, previous, grading.model_dump(mode="json")))
