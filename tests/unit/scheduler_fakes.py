"""A group runner whose samples move when the test says, and ways to wait for the scheduler, for
the scheduler's unit tests (no Docker, no policy; the real scheduler and SQLite store).

`StepRunner` follows the runner contract (service.scheduler.GroupRunner): each sample awaits its
slot (`on_start`), stays in its episode until the test ends it, then either ends its episode
(`on_episode_end`) and verifies until the test lets it, or, masked, reports at once. It records
what the scheduler did with it: which samples were handed over together, which started when,
how many were in their episode or verifying at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

from sandboxes.task import Task
from service.sample import SampleSpec
from service.scheduler import Scheduler
from service.store import Store
from service.trajectory import Status, empty_trajectory

# (status, reward, policy version) of a sample's run, by its spec.
Outcome = Callable[[SampleSpec], tuple[Status, float | None, int]]
# As EpisodeRunner: these end their episode and verify; a masked episode ends at its report.
VERIFIED = {Status.ok, Status.agent_timeout, Status.context_length, Status.verifier_error}


def graded(spec: SampleSpec) -> tuple[Status, float | None, int]:
    return Status.ok, 1.0, 0


class StepRunner:
    """Samples, each known by its key "<trajectory id>#<attempt>" (`key`):

    1. await their slot (`on_start`), then count as `started` and `in_episode`;
    2. stay in their episode until `end(key)`, or not at all with `auto`;
    3. report `outcome(spec)`. A VERIFIED one first ends its episode (`on_episode_end`; while
       that waits for a verifying slot, the key is in `ending`) and then verifies (`verifying`)
       until `verified` is set: at once unless `hold_verification`.

    Records every run_group call (the samples handed over together: one shared first turn)."""

    def __init__(
        self, outcome: Outcome = graded, auto: bool = False, hold_verification: bool = False
    ) -> None:
        self.outcome = outcome
        self.auto = auto
        self.verified = asyncio.Event()
        if not hold_verification:
            self.verified.set()
        self.calls: list[list[SampleSpec]] = []
        self.started: list[str] = []  # keys, in the order their samples took a slot
        self.in_episode: set[str] = set()
        self.most_in_episode = 0
        self.ending: set[str] = set()  # in on_episode_end: waiting for a verifying slot
        self.verifying: set[str] = set()
        self.most_verifying = 0
        self._gates: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def end(self, *keys: str) -> None:
        """End these samples' episodes (now, or as soon as they start)."""
        for key in keys:
            self._gates[key].set()

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: Any,
        on_episode_end: Any,
        on_start: Any,
    ) -> None:
        self.calls.append(list(samples))

        async def one(spec: SampleSpec) -> None:
            await on_start(spec.trajectory_id)
            key = f"{spec.trajectory_id}#{spec.attempt}"
            self.started.append(key)
            self.in_episode.add(key)
            self.most_in_episode = max(self.most_in_episode, len(self.in_episode))
            if not self.auto:
                await self._gates[key].wait()
            self.in_episode.discard(key)
            status, reward, version = self.outcome(spec)
            if status in VERIFIED:
                self.ending.add(key)
                await on_episode_end(spec.trajectory_id)
                self.ending.discard(key)
                self.verifying.add(key)
                self.most_verifying = max(self.most_verifying, len(self.verifying))
                await self.verified.wait()
                self.verifying.discard(key)
            t = empty_trajectory(
                spec.trajectory_id, spec.rollout_id, spec.group_id, spec.task_id,
                spec.sample_index, version, status,
            )  # fmt: skip
            # One token generated under `version`: what the group's staleness counts from.
            token = {"response_token_ids": [1], "loss_mask": [1], "rollout_logprobs": [-0.1],
                     "response_policy_versions": [version]}  # fmt: skip
            await on_trajectory(t.model_copy(update={"reward": reward, **token}))

        await asyncio.gather(*(one(s) for s in samples))


def tid(rollout_id: str, group: int, index: int) -> str:
    """A sample's trajectory id (service.store.sample_trajectory_id)."""
    return f"{rollout_id}.g{group}.s{index}"


def key(rollout_id: str, group: int, index: int, attempt: int = 1) -> str:
    """A sample's run as StepRunner records it."""
    return f"{tid(rollout_id, group, index)}#{attempt}"


async def until(check: Callable[[], Any], seconds: float = 10.0, what: str = "") -> None:
    """Wait until `check()` is true; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.01)


async def settle() -> None:
    """Let every ready task run (the dispatcher, slot hand-offs) before checking that nothing
    more started. Only for a state that no timer or thread can change: every sample waits for
    the test."""
    for _ in range(20):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def running_scheduler(
    store: Store, runner: Any, tasks: list[Task], **settings: Any
) -> AsyncIterator[Scheduler]:
    """The real scheduler over `store`, started, handing `tasks` to `runner` (16 samples may
    queue, the policy stays at version 0; `settings` are the rest of its arguments), closed
    when the block ends."""
    scheduler = Scheduler(
        store, runner, lambda *a: tasks, max_queued_samples=16, current_version=lambda: 0,
        **settings,
    )  # fmt: skip
    await scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.aclose()
