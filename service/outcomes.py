"""What becomes of a finished sample (service/scheduler.py hands each one here): its
trajectory committed to the store and published (events, metrics), or the sample queued to run
again.

A sample masked by a fault a re-run can cure (service.trajectory.RETRYABLE_STATUSES: the
sandboxes' or the policy servers', never the agent's) runs again in a fresh sandbox under the
current policy, up to `retry_masked` times (the request's, else the service's), queued at its
group's place: ahead of groups that came after it. It is not re-run when its rollout was
cancelled, nor when max_staleness is set and its group is already too stale for it (its oldest
committed token more than max_staleness versions behind the current one: the lease would drop or
re-queue the group anyway). A trajectory's `attempts` says how many runs it took.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from sandboxes.task import Task
from service.events import EventHub
from service.metrics import Metrics
from service.sample import SampleSpec
from service.store import Store
from service.trajectory import RETRYABLE_STATUSES, Trajectory, only_last_segment, segment_outline
from service.wire import RolloutRequest

log = logging.getLogger(__name__)

# A re-run is queued once the service is ready again (every readiness check passes: a policy
# server answers, the sandboxes can be created), so that an outage does not use up a sample's
# re-runs in seconds; past this long it is delivered masked instead.
RERUN_READY_TIMEOUT_S = 600.0
RERUN_READY_POLL_S = 2.0


@dataclass
class Rollout:
    """A rollout request the scheduler holds: its tasks, its groups queued and running."""

    id: str
    request: RolloutRequest
    tasks: dict[str, Task]
    running: set[asyncio.Task[None]] = field(default_factory=set)
    queued: set[Work] = field(default_factory=set)
    cancelled: bool = False


@dataclass(eq=False)
class Work:
    """Samples of one group waiting in the scheduler's queue."""

    rollout: Rollout
    group_id: str
    task_id: str
    samples: list[SampleSpec]  # not yet started: what this work counts in queued_samples
    order: int  # its place among the works of its priority; a group's re-runs keep it


class SampleOutcomes:
    """Commits finished samples' trajectories and publishes them, or queues samples to run
    again (through `enqueue`, the scheduler's)."""

    def __init__(
        self,
        store: Store,
        rollouts: dict[str, Rollout],
        enqueue: Callable[[Work], None],
        gauges: Callable[[], None],
        *,
        current_version: Callable[[], int],
        max_staleness: Callable[[], int | None],
        retry_masked: int,
        ready: Callable[[], Awaitable[bool]] | None,
        ready_timeout_s: float,
        events: EventHub,
        metrics: Metrics | None,
        on_group_ready: Callable[[], None],
    ) -> None:
        """`rollouts`: the scheduler's, from which a finished rollout is removed; `gauges`:
        updates the scheduler's gauges after each commit. The rest: see Scheduler."""
        self.store = store
        self._rollouts = rollouts
        self._enqueue = enqueue
        self._gauges = gauges
        self.current_version = current_version
        self.max_staleness = max_staleness
        self.retry_masked = retry_masked
        self.ready = ready
        self.ready_timeout_s = ready_timeout_s
        self.events = events
        self.metrics = metrics
        self.on_group_ready = on_group_ready

    async def report(self, ctx: Rollout, work: Work, spec: SampleSpec, t: Trajectory) -> None:
        """Commit a sample's trajectory, or queue it to run again."""
        if t.attempts != spec.attempt:  # the scheduler counts the runs
            t = t.model_copy(update={"attempts": spec.attempt})
        if t.segments and ctx.request.train_segments == "last":
            t = only_last_segment(t)
        again = await self._rerun(ctx, spec, t)
        if again is None:
            await self._record(t)
            return
        rerun = Work(ctx, spec.group_id, spec.task_id, [again], work.order)
        if self.ready is None:
            self._enqueue_rerun(rerun, t)
            return
        task = asyncio.create_task(
            self._rerun_when_ready(self.ready, rerun, t), name=f"rerun {spec.group_id}"
        )
        ctx.running.add(task)
        task.add_done_callback(ctx.running.discard)

    async def _rerun_when_ready(
        self, ready: Callable[[], Awaitable[bool]], rerun: Work, masked: Trajectory
    ) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while not await ready():
            if time.monotonic() >= deadline:
                log.warning(
                    "sample %s: %s, not run again: the service was not ready within %.0f s",
                    masked.trajectory_id, masked.status.value, self.ready_timeout_s,
                )  # fmt: skip
                await self._record(masked)
                return
            await asyncio.sleep(RERUN_READY_POLL_S)
        if not rerun.rollout.cancelled:
            self._enqueue_rerun(rerun, masked)

    def _enqueue_rerun(self, rerun: Work, masked: Trajectory) -> None:
        (spec,) = rerun.samples
        log.info("sample %s: %s on attempt %d; running it again", masked.trajectory_id,
                 masked.status.value, spec.attempt - 1)  # fmt: skip
        if self.metrics is not None:
            self.metrics.sample_retries.labels(masked.status.value).inc()
        self._enqueue(rerun)

    async def _rerun(self, ctx: Rollout, spec: SampleSpec, t: Trajectory) -> SampleSpec | None:
        """The sample's next run, if a masked `t` is to be run again (see the module's doc)."""
        if t.status not in RETRYABLE_STATUSES or ctx.cancelled:
            return None
        limit = ctx.request.retry_masked
        if spec.attempt > (self.retry_masked if limit is None else limit):
            return None
        bound = self.max_staleness()
        if bound is not None:
            oldest = await self.store.oldest_version(spec.group_id)
            if oldest is not None and self.current_version() - oldest > bound:
                log.info(
                    "sample %s: %s, not run again: its group's oldest token (version %d) is "
                    "over max_staleness %d behind version %d",
                    spec.trajectory_id, t.status.value, oldest, bound, self.current_version(),
                )  # fmt: skip
                return None
        return replace(spec, attempt=spec.attempt + 1)

    async def _record(self, t: Trajectory) -> None:
        result = await self.store.commit_trajectory(t)
        self._gauges()
        if result.duplicate:
            return
        generated = t.generated_tokens()  # 8k-token episodes: counted once per trajectory
        if self.metrics is not None:
            try:
                self.metrics.observe_trajectory(t, generated)
            except Exception:  # noqa: BLE001 - committed is committed; a metric must not undo it
                log.exception("metrics failed on trajectory %s", t.trajectory_id)
        self.events.publish(
            t.rollout_id,
            "trajectory",
            {
                "trajectory_id": t.trajectory_id,
                "group_id": t.group_id,
                "task_id": t.task_id,
                "sample_index": t.sample_index,
                "status": t.status.value,
                "reward": t.reward,
                # For the web view's throughput, latency and reward-by-version plots.
                "generated_tokens": generated,
                "total_s": t.timings.total_s,
                "policy_version": t.policy_version_start,
                # The episode's outline (its tokens are leased): one entry per segment.
                "segments": segment_outline(t),
            },
        )
        if result.group_state is not None:
            self.events.publish(
                t.rollout_id,
                "group",
                {
                    "group_id": result.group_id,
                    "state": result.group_state,
                    "advantages": result.advantages,
                },
            )
            self.on_group_ready()
        if result.rollout_finished:
            self.events.publish(
                t.rollout_id, "rollout", {"id": t.rollout_id, "status": "completed"}
            )
            self._rollouts.pop(t.rollout_id, None)
