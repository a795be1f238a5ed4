"""Rollout requests -> groups of samples -> a group runner, under bounded concurrency.

Dispatch is by the slot. At most `max_concurrent_samples` samples are in their episode, each
holding a slot; higher `priority` starts first, then first come first served. A group starts as
soon as one slot is free: all of its samples not yet started go to the runner together, so that
their first turn is one n-sample request (the shared prompt prefix), and each of them begins its
episode (sandbox, later turns) once it holds a slot: those the group started with at once, the
others as slots free, before any other group starts. A slot freed mid-wave thus starts a sample
at once instead of waiting for the slowest episode of the wave, which keeps the policy busy
through long-tail episodes; the price is that the policy may see up to n - 1 first turns beyond
the bound while a group's shared first turn generates.

A sample holds its slot for its episode only: when the runner says the episode is over, the
sample moves to one of as many slots for verifying and committing, and the next sample starts
generating while it verifies (the policy server need not wait for the tests).

A finished sample's trajectory is committed and published, or the sample runs again
(service/outcomes.py). Every sample ends as one committed trajectory: from the runner, or
`cancelled` when its rollout is cancelled, or a masked `sandbox_error` if the runner broke its
contract (raised, or returned without reporting a sample).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from sandboxes.task import Task
from service.concurrency import ConcurrencyController, WindowResult
from service.errors import Busy, InvalidRequest
from service.events import EventHub
from service.metrics import Metrics
from service.outcomes import RERUN_READY_TIMEOUT_S, Rollout, SampleOutcomes, Work
from service.sample import RETRY_MASKED, SampleSpec, sample_seed
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
    OnStart,
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
        on_start: OnStart | None = None,
    ) -> None:
        """Runs the samples, reporting each one's trajectory through `on_trajectory`. Their
        first turn may be shared; before a sample's sandbox and episode begin, the runner
        awaits `on_start(trajectory_id)`, which returns once the sample holds a slot (at once
        for those that have one); a sample that ends before (its first turn failed) need not
        call it. A runner whose samples verify after their episode calls
        `on_episode_end(trajectory_id)` between the two (at most once per sample); one that
        never calls it keeps each sample's slot until its report."""
        ...


class QueueFull(Busy):
    """The sample queue cannot take the request now (429, Retry-After)."""

    def __init__(self, queued: int, limit: int, requested: int) -> None:
        self.queued, self.limit, self.requested = queued, limit, requested
        super().__init__(f"sample queue is full: {queued} queued + {requested} requested > {limit}")


class _Slots:
    """Counted slots. A group start takes what is free, and the samples it started without one
    are owed the next free slots, one each, before another group may start."""

    def __init__(self, n: int) -> None:
        self.total = n
        self.free = n
        self.owed = 0
        self._cond = asyncio.Condition()

    async def startable(self) -> None:
        """Wait until a group may start: a slot is free and none is owed. (Only the dispatcher
        starts groups, so this stays true until it does.)"""
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= 1 and self.owed == 0)

    async def start_group(self, samples: int, least: int = 1) -> int:
        """Wait until `least` slots are free and none is owed; take up to `samples` of them and
        owe the group's other samples one each. Returns how many were taken."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= least and self.owed == 0)
            taken = min(self.free, samples)
            self.free -= taken
            self.owed += samples - taken
            return taken

    async def take_owed(self) -> None:
        """An owed sample takes the next free slot."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= 1)
            self.free -= 1
            self.owed -= 1
            self._cond.notify_all()  # none owed any more: a group may start

    async def forgive(self, owed: int = 1) -> None:
        """Owed samples that end (or are handed back) without taking their slot."""
        async with self._cond:
            self.owed -= owed
            self._cond.notify_all()

    async def acquire(self, n: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.free >= n)
            self.free -= n

    async def release(self, n: int = 1) -> None:
        async with self._cond:
            self.free += n
            self._cond.notify_all()

    async def resize(self, total: int) -> None:
        """A new number of slots. Fewer: the free count may go below zero, so the slots held
        now are given back before any is taken again (nothing running is stopped)."""
        async with self._cond:
            self.free += total - self.total
            self.total = total
            self._cond.notify_all()


class _HeldSlots:
    """When each sample of a group took its episode slot and gave it back; called with a
    sample, how long it held it (None: it never held one). The concurrency controller's measure
    (service/concurrency.py), which hears of each slot taken through `on_take`."""

    def __init__(self, holding: list[str], on_take: Callable[[str, float], None]) -> None:
        self._on_take = on_take
        self._took: dict[str, float] = {}
        self._gave: dict[str, float] = {}
        for trajectory_id in holding:
            self.took(trajectory_id)

    def took(self, trajectory_id: str) -> None:
        now = self._took[trajectory_id] = time.monotonic()
        self._on_take(trajectory_id, now)

    def gave(self, trajectory_id: str) -> None:
        self._gave[trajectory_id] = time.monotonic()

    def __call__(self, trajectory_id: str) -> float | None:
        if trajectory_id not in self._took:
            return None
        return self._gave.get(trajectory_id, time.monotonic()) - self._took[trajectory_id]


class _LevelFeed:
    """What the concurrency controller (service/concurrency.py) hears of the samples, and the
    episode and finishing slots resized to the level it answers; without one, nothing."""

    def __init__(
        self,
        control: ConcurrencyController | None,
        slots: _Slots,
        finishing: _Slots,
        metrics: Metrics | None,
        changed: Callable[[], None],
    ) -> None:
        self.control = control
        self._slots, self._finishing = slots, finishing
        self._metrics = metrics
        self._changed = changed

    def took(self, trajectory_id: str, now: float) -> None:
        if self.control is not None:
            self.control.started(trajectory_id, now=now)

    def demand(self, queued: int) -> None:
        """Samples waiting for a slot: the level, not the demand, bounds what runs now."""
        if self.control is not None:
            self.control.demand(now=time.monotonic(), waiting=queued > 0, queued=queued)

    async def forget(self, trajectory_id: str) -> None:
        """A sample that held a slot and says nothing of the load: no window waits for it."""
        if self.control is not None:
            await self._apply(self.control.forget(trajectory_id, now=time.monotonic()))

    async def finished(self, t: Trajectory, slot_s: float | None) -> None:
        """A finished sample, which held its episode slot for `slot_s` (None: never held one).
        Samples that never reached a sandbox (cancelled, or the policy failed first) or never
        held a slot say nothing of the sandboxes' load."""
        if self.control is None:
            return
        if slot_s is None or t.status in (Status.cancelled, Status.policy_error):
            await self.forget(t.trajectory_id)
            return
        window = self.control.finished(
            t.trajectory_id,
            now=time.monotonic(),
            slot_s=slot_s,
            start_s=t.timings.create_s,
            verify_s=t.timings.verify_s,
            failed=t.status == Status.sandbox_error,
        )
        await self._apply(window)

    async def _apply(self, window: WindowResult | None) -> None:
        """A closed window (None: none closed), said, and its level applied to the slots."""
        _said(window, self._metrics)
        assert self.control is not None
        if self.control.level != self._slots.total:
            await self._slots.resize(self.control.level)
            await self._finishing.resize(self.control.level)
        self._changed()


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
        max_staleness: Callable[[], int | None] = lambda: None,
        retry_masked: int = RETRY_MASKED,
        ready: Callable[[], Awaitable[bool]] | None = None,
        ready_timeout_s: float = RERUN_READY_TIMEOUT_S,
        events: EventHub | None = None,
        metrics: Metrics | None = None,
        on_group_ready: Callable[[], None] = lambda: None,
        concurrency_control: ConcurrencyController | None = None,
    ) -> None:
        """`retry_masked`: re-runs of a masked sample for requests that name none; `ready`:
        whether the service can run samples now (components' readiness checks), which a re-run
        waits for, up to `ready_timeout_s`. `concurrency_control`: moves the number of slots under
        `max_concurrent_samples` by what finished samples show (service/concurrency.py)."""
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
        self._rollouts: dict[str, Rollout] = {}
        self._outcomes = SampleOutcomes(
            store,
            self._rollouts,
            self._enqueue,
            self._update_gauges,
            current_version=current_version,
            max_staleness=max_staleness,
            retry_masked=retry_masked,
            ready=ready,
            ready_timeout_s=ready_timeout_s,
            events=self.events,
            metrics=metrics,
            on_group_ready=on_group_ready,
        )
        # (-priority, order, sequence, work): a work put back keeps its place.
        self._queue: asyncio.PriorityQueue[tuple[int, int, int, Work]] = asyncio.PriorityQueue()
        self._seq = itertools.count()
        # Samples in their episode, and samples verifying or committing: each as many as the
        # controller's level when there is one (so a level bounds what a fixed setting of that
        # number bounds: episodes and verifications both).
        level = concurrency_control.level if concurrency_control else max_concurrent_samples
        self._slots = _Slots(level)
        self._finishing = _Slots(level)
        self._level = _LevelFeed(
            concurrency_control, self._slots, self._finishing, metrics, self._update_gauges
        )
        self._dispatcher: asyncio.Task[None] | None = None
        # Group tasks that have taken their first step: only those may be cancelled (one
        # cancelled before it never runs its body, and the slots it was handed are lost).
        self._begun: set[asyncio.Task[None]] = set()

    # -- lifecycle

    async def start(self) -> None:
        """Start dispatching, first re-queueing samples a previous process left unfinished."""
        self._update_gauges()  # /metrics tells the level from the start, not after a request
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
        ctx = Rollout(rollout_id, request, {t.id: t for t in tasks})
        self._rollouts[rollout_id] = ctx
        for plan in plans:
            specs = [self._spec(ctx, plan.group_id, plan.task_id, k, tid)
                     for k, tid in enumerate(plan.trajectory_ids)]  # fmt: skip
            self._enqueue(Work(ctx, plan.group_id, plan.task_id, specs, next(self._seq)))
        return rollout_id

    async def cancel(self, rollout_id: str) -> None:
        """In-flight samples are cancelled (the runner removes their sandboxes); every sample
        without a trajectory becomes `cancelled`. Raises store.UnknownRollout."""
        ctx = self._rollouts.get(rollout_id)
        if ctx is not None:
            ctx.cancelled = True
            for work in ctx.queued:
                # Only what was not started yet: a group may be half running.
                self.queued_samples -= len(work.samples)
                work.samples = []
            ctx.queued.clear()
            running = list(ctx.running)
            for t in running:
                if t in self._begun:  # the others see ctx.cancelled at their first step
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

    def _spec(self, ctx: Rollout, gid: str, task_id: str, index: int, tid: str) -> SampleSpec:
        return SampleSpec(
            trajectory_id=tid,
            rollout_id=ctx.id,
            group_id=gid,
            task_id=task_id,
            sample_index=index,
            sampling=ctx.request.sampling.to_params(),
            agent=ctx.request.agent.to_limits(),
            chat_template_kwargs=ctx.request.chat_template_kwargs,
            seed=sample_seed(ctx.request.sampling.seed, task_id, index),
            uncalibrated=ctx.request.uncalibrated,
            policy=ctx.request.policy.to_target() if ctx.request.policy is not None else None,
        )

    def _enqueue(self, work: Work) -> None:
        work.rollout.queued.add(work)
        self.queued_samples += len(work.samples)
        self._put(work)
        self._update_gauges()

    def _put(self, work: Work) -> None:
        key = (-work.rollout.request.priority, work.order, next(self._seq))
        self._queue.put_nowait((*key, work))

    async def _resume(self, pending: list[PendingGroup]) -> None:
        by_rollout: dict[str, list[PendingGroup]] = {}
        for g in pending:
            by_rollout.setdefault(g.rollout_id, []).append(g)
        for rollout_id, groups in by_rollout.items():
            ctx = self._rollouts.get(rollout_id)
            if ctx is None:
                request = RolloutRequest.model_validate_json(groups[0].request_json)
                ctx = Rollout(rollout_id, request, {})
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
                self._enqueue(Work(ctx, g.group_id, g.task_id, specs, next(self._seq)))

    async def _dispatch_loop(self) -> None:
        while True:
            # A free slot first, then the best work queued by then (a work that arrived while
            # every slot was taken still goes by its priority).
            await self._slots.startable()
            *_, work = await self._queue.get()
            ctx = work.rollout
            if ctx.cancelled or work not in ctx.queued or not work.samples:
                continue
            handed, slotted = await self._take_slots(len(work.samples))
            if ctx.cancelled or work not in ctx.queued:  # cancelled while it waited
                await self._slots.release(slotted)
                await self._slots.forgive(handed - slotted)
                continue
            # work.samples stays what is still queued, for cancel() to count exactly; the
            # samples started without a slot count as queued until they take one.
            started, work.samples = work.samples[:handed], work.samples[handed:]
            self.queued_samples -= slotted
            self.running_samples += slotted
            self._update_gauges()
            if work.samples:
                self._put(work)
            else:
                ctx.queued.discard(work)
            task = asyncio.create_task(
                self._run_samples(ctx, work, started, slotted), name=f"group {work.group_id}"
            )
            ctx.running.add(task)
            task.add_done_callback(ctx.running.discard)
            task.add_done_callback(self._begun.discard)

    async def _take_slots(self, samples: int) -> tuple[int, int]:
        """Slots for a group start of `samples`: (how many samples start now, how many of them
        hold a slot already). All of them start, with what is free; the rest are owed."""
        return samples, await self._slots.start_group(samples)

    async def _run_samples(
        self, ctx: Rollout, work: Work, specs: list[SampleSpec], slotted: int
    ) -> None:
        """Run samples of one group that start together; the first `slotted` hold a slot, the
        others take theirs in `on_start`."""
        this = asyncio.current_task()
        assert this is not None
        self._begun.add(this)
        spec_of = {s.trajectory_id: s for s in specs}
        # owed (no slot yet) -> running (a slot) -> finishing (a finishing slot) -> done
        state = {s.trajectory_id: "running" if i < slotted else "owed" for i, s in enumerate(specs)}
        held_s = _HeldSlots([s.trajectory_id for s in specs[:slotted]], self._level.took)

        async def on_start(trajectory_id: str) -> None:
            if state.get(trajectory_id) != "owed":
                return
            await self._slots.take_owed()
            held_s.took(trajectory_id)
            state[trajectory_id] = "running"
            self.queued_samples -= 1
            self.running_samples += 1
            self._update_gauges()

        async def leave(trajectory_id: str) -> None:
            """Give back what the sample holds, and count it out."""
            held, state[trajectory_id] = state[trajectory_id], "done"
            if held == "owed":
                self.queued_samples -= 1
                await self._slots.forgive()
            else:
                self.running_samples -= 1
                if held == "running":
                    held_s.gave(trajectory_id)
                await (self._finishing if held == "finishing" else self._slots).release(1)

        async def on_episode_end(trajectory_id: str) -> None:
            held = state.get(trajectory_id)
            if held not in ("owed", "running"):
                return
            # The finishing slot first: samples between episode and commit stay bounded.
            await self._finishing.acquire(1)
            state[trajectory_id] = "finishing"
            if held == "owed":  # a runner that never awaited on_start
                self.queued_samples -= 1
                self.running_samples += 1
                await self._slots.forgive()
            else:
                held_s.gave(trajectory_id)
                await self._slots.release(1)

        async def on_trajectory(t: Trajectory) -> None:
            spec = spec_of.get(t.trajectory_id)
            if spec is None or state[t.trajectory_id] == "done":
                log.warning("runner reported unknown or repeated trajectory %s", t.trajectory_id)
                return
            # The slot is held until the commit returns: a runner faster than the store must
            # wait, or encoded payloads (~140 KB each) pile up unbounded (1.2 GiB RSS at 2k
            # pending in the data-path benchmark, docs/performance.md).
            try:
                await self._report(ctx, work, spec, t, held_s(t.trajectory_id))
            finally:
                await leave(t.trajectory_id)

        error: BaseException | None = None
        try:
            if not ctx.cancelled:  # cancelled before this task's first step (cancel())
                await self.runner.run_group(
                    ctx.tasks[work.task_id], specs, on_trajectory, on_episode_end, on_start
                )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a runner bug must not lose the samples
            log.exception("runner failed on task %s", work.task_id)
            error = e
        finally:
            left = [s for s in specs if state[s.trajectory_id] != "done"]
            for spec in left:
                await leave(spec.trajectory_id)
                # The runner never reported it: what becomes of it (cancelled, or a runner
                # error) says nothing of the machine's load, and its window must not wait.
                await self._level.forget(spec.trajectory_id)
            self._update_gauges()
        if left and not ctx.cancelled:
            why = f"runner error: {error!r}" if error else "runner returned without this sample"
            for spec in left:
                failed = _failed(spec, self.current_version(), why)
                await self._report(ctx, work, spec, failed, held_s(spec.trajectory_id))

    async def _report(
        self, ctx: Rollout, work: Work, spec: SampleSpec, t: Trajectory, slot_s: float | None
    ) -> None:
        """A finished sample, which held its episode slot for `slot_s` (None: never held one):
        the concurrency controller hears of it, then it is committed or queued to run again
        (service/outcomes.py)."""
        await self._level.finished(t, slot_s)
        await self._outcomes.report(ctx, work, spec, t)

    @property
    def concurrency(self) -> int:
        """Samples allowed in their episode at once now."""
        return self._slots.total

    def _update_gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queued_samples.set(self.queued_samples)
            self.metrics.running_samples.set(self.running_samples)
            self.metrics.concurrency_level.set(self._slots.total)
        self._level.demand(self.queued_samples)


def _said(window: WindowResult | None, metrics: Metrics | None) -> None:
    """A closed window's decision (None: none closed), in the log and in /metrics: the level
    alone shows where the controller went, not why (a cliff, a raise that bought nothing)."""
    if window is None:
        return
    log.info(
        "concurrency window at level %d: %.2f samples/s, start %.2f s, verify %.2f s, "
        "failures %.0f%%, waited %.0f%% of it: %s -> level %d",
        window.level, window.throughput, window.start_s, window.verify_s,
        100 * window.failures, 100 * window.saturated, window.decision, window.next_level,
    )  # fmt: skip
    if metrics is not None:
        metrics.concurrency_windows.labels(window.decision).inc()


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
