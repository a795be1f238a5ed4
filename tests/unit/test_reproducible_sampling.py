"""Seeded sampling reproduces, and the stand-in's long tail is what the overlap benchmark says.

Real parts: `collect` (the service's scheduler and SQLite store), the episode runner, and the
stand-in app in process (over an ASGI transport); sandboxes are the overlap benchmark's
NoopBackend, whose verifier checks that the oracle solution was typed.

- The same seeded request gives the same token ids whatever way its samples were started: all
  at once (one n-sample first request), one by one (the chunk dispatch at one slot: n=1
  requests with each sample's own seed), or with a sample re-run after a masked first run.
- `--long-tail`: reply lengths p99/p50 >= 8, a spread of turns, every sample still solving.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from benchmarks.chunk_dispatch import chunk_dispatch
from benchmarks.noop_backend import NoopBackend, NoopSandbox
from sandboxes.task import Task
from sandboxes.tasks import load_tasks
from service.agent.harnesses import build_harnesses
from service.collect import collect
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Trajectory, from_arrow
from service.wire import AdvantageSpec, AgentSpec, RolloutRequest, SamplingSpec, TasksSpec
from standin.behaviour import BehaviourSettings, ScriptedAgent
from standin.chat_template import render
from standin.engine import StubSettings
from standin.server import build_app

EXAMPLES = str(Path(__file__).resolve().parents[2] / "examples" / "tasks")
TASKS = load_tasks(EXAMPLES, ids=["camel-to-snake", "gcd-of-list"])


class FirstCreateFails(NoopBackend):
    """The first sandbox of one sample cannot be created (a fault from outside: masked)."""

    def __init__(self, victim_suffix: str) -> None:
        super().__init__()
        self.victim_suffix = victim_suffix
        self.failed = 0

    async def create(self, task: Task, labels: dict[str, str]) -> NoopSandbox:
        if labels["rollouts.trajectory_id"].endswith(self.victim_suffix) and not self.failed:
            self.failed += 1
            raise ConnectionError("engine unreachable (injected)")
        return await super().create(task, labels)


async def _collect(
    tmp_path: Path, name: str, backend: NoopBackend, concurrency: int, **stand_in: Any
) -> list[Trajectory]:
    app = build_app(StubSettings(p_malformed=0.0, **stand_in), tasks=TASKS)
    policy = PolicyClient(["http://stub"], transport=httpx.ASGITransport(app=app))
    request = RolloutRequest(
        tasks=TasksSpec(path=EXAMPLES, ids=[t.id for t in TASKS]),
        n_samples=3,
        sampling=SamplingSpec(seed=21, max_tokens=2048),
        agent=AgentSpec(max_turns=8),
        advantage=AdvantageSpec(estimator="rloo", min_group_size=1),
    )
    out = tmp_path / name
    async with policy:
        await collect(
            EXAMPLES, TASKS, EpisodeRunner(policy, backend), out.with_suffix(".store"),
            out.with_suffix(".parquet"), request, concurrency=concurrency,
        )  # fmt: skip
    return sorted(
        from_arrow(pq.read_table(out.with_suffix(".parquet"))),
        key=lambda t: (t.task_id, t.sample_index),
    )


async def test_the_same_seeded_request_samples_the_same_tokens_however_started(
    tmp_path: Path,
) -> None:
    differ = {"length_jitter": 40, "p_correct": 0.5}  # samples that differ, right and wrong
    together = await _collect(tmp_path, "together", NoopBackend(), 8, **differ)
    with chunk_dispatch():  # one slot: every sample starts alone (n=1, its own seed)
        alone = await _collect(tmp_path, "alone", NoopBackend(), 1, **differ)
    faulty = FirstCreateFails(".g1.s2")
    rerun = await _collect(tmp_path, "rerun", faulty, 8, **differ)
    assert faulty.failed == 1

    def tokens(ts: list[Trajectory]) -> list[tuple[Any, ...]]:
        return [(t.task_id, t.sample_index, t.sample_seed, t.response_token_ids) for t in ts]

    assert tokens(alone) == tokens(together) == tokens(rerun)
    assert [t.attempts for t in rerun] == [1, 1, 1, 1, 1, 2]  # gcd-of-list's sample 2
    assert len({tuple(t.response_token_ids) for t in together}) == 6  # the samples differ
    assert {t.reward for t in together} == {0.0, 1.0}
    # The seeds: consecutive within a group (one n-sample request), recorded on each sample.
    seeds = [t.sample_seed for t in together]
    assert seeds[1] == seeds[0] + 1 and seeds[2] == seeds[0] + 2 and seeds[3] != seeds[0] + 3


def test_long_tail_reply_lengths_are_heavy_tailed_and_seeded() -> None:
    """First replies of 200 samples of one task at 8k tokens a turn (the overlap benchmark's):
    p99 / p50 of their lengths at least 8; the same seeds give the same replies."""
    task = TASKS[0]
    harness = build_harnesses()["default"]
    prompt = render(harness.first_messages(task.instruction), add_generation_prompt=True)
    agent = ScriptedAgent([task], BehaviourSettings(p_malformed=0.0, long_tail=1.3))

    def lengths(seeds: range) -> list[int]:
        rng = random.Random(0)
        return [
            len(agent.tokenizer.encode(agent.reply(prompt, seed=s, index=0, rng=rng,
                                                   max_tokens=8192)))
            for s in seeds
        ]  # fmt: skip

    got = sorted(lengths(range(0, 20_000, 100)))
    p50, p99 = statistics.median(got), got[int(0.99 * len(got)) - 1]
    assert p99 / p50 >= 8, (p50, p99)
    assert lengths(range(0, 1000, 100)) == lengths(range(0, 1000, 100))


async def test_long_tail_episodes_spread_their_turns_and_still_solve() -> None:
    task = TASKS[0]
    app = build_app(StubSettings(p_malformed=0.0, long_tail=1.3), tasks=[task])
    policy = PolicyClient(["http://stub"], transport=httpx.ASGITransport(app=app))
    got: list[Trajectory] = []

    async def keep(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(task, "r", 8, SamplingParams(seed=5, max_tokens=8192),
                         AgentLimits(max_turns=8))  # fmt: skip
    async with policy:
        await EpisodeRunner(policy, NoopBackend()).run_group(task, specs, keep)
    assert all((t.status.value, t.reward) == ("ok", 1.0) for t in got)
    turns = sorted(t.num_turns for t in got)
    generated = sorted(sum(t.loss_mask) for t in got)
    assert turns[0] <= 3 and turns[-1] >= 6, turns  # a few samples look around much longer
    assert generated[-1] >= 4 * statistics.median(generated), generated
