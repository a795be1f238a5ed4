"""Rollout requests -> groups of samples -> a group runner, under bounded concurrency.

Higher `priority` runs first, then first come first served. A group whose n samples exceed the
free sample slots is run in chunks, so `max_concurrent_samples` holds for any n. A sample holds
its slot for its episode only: when the runner says the episode is over, the sample moves to
one of as many slots for verifying and committing, and the next sample starts generating while
it verifies (the policy server need not wait for the tests). Every sample
ends as one committed trajectory: from the runner, or `cancelled` when its rollout is
cancelled, or a masked `sandbox_error` if the runner broke its contract (raised, or returned
without reporting a sample).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sandboxes.task import Task
from service.errors import Busy, InvalidRequest
from service.events import EventHub
from service.metrics import Metrics
from service.sample import SampleSpec
from service.store import (
    GroupPlan,
    PendingGroup,
    Requeued,
    Store,
    group_id_for,
    sample_trajectory_id,
)
from service.trajectory import (
    OnEpisodeEnd,
    OnTrajectory,
    Status,
    Trajectory,
    empty_trajectory,
)
from service.wire import RolloutRequest

log = logging.getLogger(__name__)

# (path, ids, limit) -> tasks, read lazily as they are taken; blocking, run in a worker thread.
TaskLoader = Callable[[str, list[str] | None, int | None], Iterable[Task]]


class GroupRunner(Protocol):
    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: OnTrajectory,
        on_episode_end: OnEpisodeEnd | None = None,
    ) -> None:
        """Runs the samples, reporting each one's trajectory through `on_trajectory`. A runner
        whose samples verify after their episode calls `on_episode_end(trajectory_id)` between
        the two (at most once per sample); one that never calls it keeps each sample's slot
        until its report."""
        ...


class QueueFull(Busy):
    """The sample queue cannot take the request now (429, Retry-After)."""

    def __init__(self, queued: int, limit: int, requested: int) -> None:
        self.queued, self.limit, self.requested = queued, limit, requested
        super().__init__(f"sample queue is full: {queued} queued + {requested} requested > {limit}")


@dataclass
class _Rollout:
    id: str
    request: RolloutRequest
    tasks: dict[str, Task]
    running: set[asyncio.Task[None]] = field(default_factory=set)
    queued: set[_Work] = field(default_factory=set)
    cancelled: bool = False


@dataclass(eq=False)
class _Work:
    rollout: _Rollout
    group_id: str
    task_id: str
    samples: list[SampleSpec]  # not yet dispatched: what this work counts in queued_samples


class _Slots:
    """A counting semaphore that can take n permits at once (a group chunk)."""

    def __init__(self, n: int) -> None:
        self.total = n
        self.free = n
        self._cond = asyncio.Condition()

    async def acquire(self, n: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= n)
            self.free -= n

    async def release(self, n: int = 1) -> None:
        async with self._cond:
            self.free += n
            self._cond.notify_all()


class Scheduler:
    def __init__(
        self,
        store: Store,
        runner: GroupRunner,
        load_tasks: TaskLoader,
        *,
        max_concurrent_samples: int,
        max_queued_samples: int,
        current_version: Callable[[], int],
        events: EventHub | None = None,
        metrics: Metrics | None = None,
        on_group_ready: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.runner = runner
        self.load_tasks = load_tasks
        self.max_concurrent = max_concurrent_samples
        self.max_queued = max_queued_samples
        self.current_version = current_version
        self.events = events or EventHub()
        self.metrics = metrics
        self.on_group_ready = on_group_ready
        self.queued_samples = 0
        self.running_samples = 0
        self._rollouts: dict[str, _Rollout] = {}
        self._queue: asyncio.PriorityQueue[tuple[int, int, _Work]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        self._slots = _Slots(max_concurrent_samples)  # samples in their episode
        self._finishing = _Slots(max_concurrent_samples)  # samples verifying or committing
        self._dispatcher: asyncio.Task[None] | None = None

    # -- lifecycle

    async def start(self) -> None:
        """Start dispatching, first re-queueing samples a previous process left unfinished."""
        self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="scheduler")
        pending = await self.store.pending_groups()
        if pending:
            log.info("resuming %d unfinished groups", len(pending))
            await self._resume(pending)

    async def aclose(self) -> None:
        """Stop everything in flight. Unfinished samples stay pending in the store and are run
        again by the next process (the backend's reaper removes their old sandboxes)."""
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        running = [t for r in self._rollouts.values() for t in r.running]
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    # -- requests

    def admission(self, n_samples: int) -> Callable[[int], None]:
        """A check for a request whose tasks are being read (in a worker thread): called with
        the number of tasks read so far, it raises as soon as they cannot be queued, so a
        request that will be refused never costs more than the queue's room in reading.
        InvalidRequest (too_many_samples) past the queue's size, QueueFull past the room it
        has now. `submit` checks again exactly."""
        queued, limit = self.queued_samples, self.max_queued

        def admit(tasks: int) -> None:
            n = tasks * n_samples
            if n > limit:
                raise InvalidRequest(
                    f"the request selects at least {tasks} tasks x {n_samples} samples = {n}, "
                    f"more than the server's queue capacity ({limit}); submit fewer tasks",
                    field=("body", "n_samples"),
                    kind="too_many_samples",
                )
            if queued + n > limit:
                raise QueueFull(queued, limit, n)

        return admit

    async def submit(
        self,
        request: RolloutRequest,
        tasks: list[Task],
        *,
        idempotency: tuple[str, str] | None = None,
    ) -> str:
        """Queue tasks x n_samples; the rollout id. With `idempotency` (key, request digest),
        a key the store already holds returns that rollout's id and queues nothing (Conflict
        when the digest differs)."""
        n = len(tasks) * request.n_samples
        if self.queued_samples + n > self.max_queued:
            raise QueueFull(self.queued_samples, self.max_queued, n)
        rollout_id = uuid.uuid4().hex[:16]
        plans: list[GroupPlan] = []
        for i, task in enumerate(tasks):
            gid = group_id_for(rollout_id, i)
            ids = [sample_trajectory_id(gid, k) for k in range(request.n_samples)]
            plans.append(GroupPlan(gid, task.id, ids))
        created = await self.store.create_rollout(
            rollout_id,
            request.model_dump_json(),
            request.priority,
            request.advantage.to_config(),
            plans,
            idempotency=idempotency,
        )
        if created != rollout_id:  # the same request, already submitted under this key
            return created
        self.events.publish(rollout_id, "submitted", {"id": rollout_id})
        ctx = _Rollout(rollout_id, request, {t.id: t for t in tasks})
        self._rollouts[rollout_id] = ctx
        for plan in plans:
            specs = [self._spec(ctx, plan.group_id, plan.task_id, k, tid)
                     for k, tid in enumerate(plan.trajectory_ids)]  # fmt: skip
            self._enqueue(_Work(ctx, plan.group_id, plan.task_id, specs))
        return rollout_id

    async def cancel(self, rollout_id: str) -> None:
        """In-flight samples are cancelled (the runner removes their sandboxes); every sample
        without a trajectory becomes `cancelled`. Raises store.UnknownRollout."""
        ctx = self._rollouts.get(rollout_id)
        if ctx is not None:
            ctx.cancelled = True
            for work in ctx.queued:
                # Only what was not dispatched yet: a group cut in chunks may be half running.
                self.queued_samples -= len(work.samples)
                work.samples = []
            ctx.queued.clear()
            running = list(ctx.running)
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        completed = await self.store.cancel_rollout(rollout_id, self.current_version())
        for gid in completed:
            self.events.publish(rollout_id, "group", {"group_id": gid, "state": "cancelled"})
        self.events.publish(rollout_id, "rollout", {"id": rollout_id, "status": "cancelled"})
        self._rollouts.pop(rollout_id, None)
        self._update_gauges()
        if completed:
            self.on_group_ready()

    async def requeue(self, groups: list[Requeued]) -> None:
        """Run again groups the store reset for being too stale."""
        if not groups:
            return
        request_json: dict[str, str] = {}
        pending: list[PendingGroup] = []
        for g in groups:
            if g.rollout_id not in request_json:
                request_json[g.rollout_id] = await self.store.rollout_request(g.rollout_id)
            samples = [(tid, k) for k, tid in enumerate(g.trajectory_ids)]
            pending.append(
                PendingGroup(
                    g.rollout_id, request_json[g.rollout_id], g.group_id, g.task_id, samples
                )
            )
        await self._resume(pending)

    # -- internals

    def _spec(self, ctx: _Rollout, gid: str, task_id: str, index: int, tid: str) -> SampleSpec:
        return SampleSpec(
            trajectory_id=tid,
            rollout_id=ctx.id,
            group_id=gid,
            task_id=task_id,
            sample_index=index,
            sampling=ctx.request.sampling.to_params(),
            agent=ctx.request.agent.to_limits(),
            chat_template_kwargs=ctx.request.chat_template_kwargs,
        )

    def _enqueue(self, work: _Work) -> None:
        work.rollout.queued.add(work)
        self.queued_samples += len(work.samples)
        self._queue.put_nowait((-work.rollout.request.priority, next(self._seq), work))
        self._update_gauges()

    async def _resume(self, pending: list[PendingGroup]) -> None:
        by_rollout: dict[str, list[PendingGroup]] = {}
        for g in pending:
            by_rollout.setdefault(g.rollout_id, []).append(g)
        for rollout_id, groups in by_rollout.items():
            ctx = self._rollouts.get(rollout_id)
            if ctx is None:
                request = RolloutRequest.model_validate_json(groups[0].request_json)
                ctx = _Rollout(rollout_id, request, {})
                self._rollouts[rollout_id] = ctx
            missing = sorted({g.task_id for g in groups} - set(ctx.tasks))
            if missing:
                path = ctx.request.tasks.path
                try:
                    loaded = await asyncio.to_thread(
                        lambda: list(self.load_tasks(path, missing, None))  # noqa: B023
                    )
                except Exception as e:  # noqa: BLE001 - the source changed since submission
                    log.error("rollout %s: cannot reload its tasks (%s); cancelling", rollout_id, e)
                    await self.cancel(rollout_id)
                    continue
                ctx.tasks.update({t.id: t for t in loaded})
            for g in groups:
                specs = [self._spec(ctx, g.group_id, g.task_id, k, tid) for tid, k in g.samples]
                self._enqueue(_Work(ctx, g.group_id, g.task_id, specs))

    async def _dispatch_loop(self) -> None:
        while True:
            _, _, work = await self._queue.get()
            ctx = work.rollout
            if ctx.cancelled or work not in ctx.queued:
                continue
            while work.samples and not ctx.cancelled:
                k = min(len(work.samples), self.max_concurrent)
                await self._slots.acquire(k)
                if ctx.cancelled:
                    await self._slots.release(k)
                    break
                # work.samples stays what is still queued, for cancel() to count exactly.
                chunk, work.samples = work.samples[:k], work.samples[k:]
                self.queued_samples -= k
                self.running_samples += k
                self._update_gauges()
                task = asyncio.create_task(
                    self._run_chunk(ctx, work.task_id, chunk), name=f"group {work.group_id}"
                )
                ctx.running.add(task)
                task.add_done_callback(ctx.running.discard)
            ctx.queued.discard(work)

    async def _run_chunk(self, ctx: _Rollout, task_id: str, chunk: list[SampleSpec]) -> None:
        unreported = {s.trajectory_id: s for s in chunk}
        finishing: set[str] = set()  # samples whose episode ended: they hold a finishing slot

        async def release(trajectory_id: str) -> None:
            if trajectory_id in finishing:
                finishing.discard(trajectory_id)
                await self._finishing.release(1)
            else:
                await self._slots.release(1)

        async def on_episode_end(trajectory_id: str) -> None:
            if trajectory_id not in unreported or trajectory_id in finishing:
                return
            # The finishing slot first: samples between episode and commit stay bounded.
            await self._finishing.acquire(1)
            finishing.add(trajectory_id)
            await self._slots.release(1)

        async def on_trajectory(t: Trajectory) -> None:
            if unreported.pop(t.trajectory_id, None) is None:
                log.warning("runner reported unknown or repeated trajectory %s", t.trajectory_id)
                return
            self.running_samples -= 1
            # A slot is held until the commit returns: a runner faster than the store must
            # wait, or encoded payloads (~140 KB each) pile up unbounded (1.2 GiB RSS at 2k
            # pending in the data-path benchmark, docs/performance.md).
            try:
                await self._record(t)
            finally:
                await release(t.trajectory_id)

        error: BaseException | None = None
        try:
            await self.runner.run_group(ctx.tasks[task_id], chunk, on_trajectory, on_episode_end)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a runner bug must not lose the samples
            log.exception("runner failed on task %s", task_id)
            error = e
        finally:
            left = list(unreported.values())
            unreported.clear()
            if left:
                self.running_samples -= len(left)
                for spec in left:
                    await release(spec.trajectory_id)
                self._update_gauges()
        if left and not ctx.cancelled:
            why = f"runner error: {error!r}" if error else "runner returned without this sample"
            for spec in left:
                await self._record(_failed(spec, self.current_version(), why))

    async def _record(self, t: Trajectory) -> None:
        result = await self.store.commit_trajectory(t)
        self._update_gauges()
        if result.duplicate:
            return
        generated = sum(t.loss_mask)  # 8k-token episodes: counted once per trajectory
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

    def _update_gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queued_samples.set(self.queued_samples)
            self.metrics.running_samples.set(self.running_samples)


def _failed(spec: SampleSpec, version: int, why: str) -> Trajectory:
    return empty_trajectory(
        spec.trajectory_id,
        spec.rollout_id,
        spec.group_id,
        spec.task_id,
        spec.sample_index,
        version,
        Status.sandbox_error,
        why,
    )
