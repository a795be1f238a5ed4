"""Pipeline overlap: does `collect` hide sandbox work behind generation (and vice versa), and
does it keep the policy busy?

The batch is long-tailed (the stand-in's --long-tail: each sample's reply lengths and turns
drawn from a lognormal, a few samples running far longer than the median), as real episodes
are. It is run under two dispatches side by side: the scheduler's own (by the slot) and the one
before it (by the chunk, benchmarks/chunk_dispatch.py). Under each, per repeat, interleaved, the
batch (tasks x n samples) is timed three ways:
- end to end: the stand-in at a fixed decode throughput shared by every request in flight (as
  a GPU's), real Docker sandboxes;
- generation alone: the same stand-in, sandboxes replaced by `NoopBackend` (whose verifier
  checks that the agent typed the oracle solution);
- sandboxes alone: an infinitely fast stand-in (an instant oracle, p_correct 1), real sandboxes.
Perfect overlap gives end_to_end == max(generation alone, sandboxes alone): a ratio of 1.0.
The end-to-end runs also give the policy occupancy: mean sequences in flight at the policy over
the run, per sample slot (benchmarks/timeline.py).

The two halves are made about equally long first, so the ratio can tell overlap from
serialisation (which gives ~2, not just above 1): the decode speed is calibrated so that
generation alone takes about as long as sandboxes alone on this machine: sandboxes alone and
generation alone with instant generation (the episode loop's own time) are timed once, then
generation alone at a trial speed, twice, each time moving the speed to where 1/speed scaling
says the halves would match (under the scheduler's own dispatch).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.chunk_dispatch import chunk_dispatch
from benchmarks.noop_backend import NoopBackend
from benchmarks.timeline import TimedBackend, TimedPolicy, Timeline
from clients.commands.policy_stub import stand_in_policy
from sandboxes.backend import SandboxBackend
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.pool import PoolSettings
from sandboxes.task import Task
from service.collect import collect
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.wire import AdvantageSpec, AgentSpec, RolloutRequest, SamplingSpec, TasksSpec


class OverlapRunFailed(RuntimeError):
    pass


DISPATCHES = ("slot", "chunk")  # the scheduler's own, and the one before it


@dataclass
class OverlapRound:
    dispatch: str
    end_to_end_s: float
    gen_only_s: float
    sandbox_only_s: float
    busy: dict[str, float]  # end to end: seconds generation, sandbox work, both were in flight
    occupancy: float  # end to end: mean sequences in flight at the policy per sample slot

    @property
    def ratio(self) -> float:
        return self.end_to_end_s / max(self.gen_only_s, self.sandbox_only_s)


# Every sample types the oracle and never a malformed reply: the batch's work is fixed (and, the
# request being seeded, the same in every run). The decode speed is the engine's whole
# throughput, shared by the samples in flight as a GPU's is: generation is then one resource,
# kept busy by some samples while others are in their sandboxes, which is the overlap measured.
# (At a fixed speed per request, nothing is shared, and a sample's own turns, which alternate,
# would be all there is to see.) Long tail: sigma 1.3 puts the replies' p99 at ~10x their
# median, the longest held to half a turn's 8k tokens (tests/unit/test_reproducible_sampling.py);
# a context of 64k tokens leaves the longest episodes room.
LONG_TAIL = 1.3
MAX_TOKENS = 8192
STAND_IN = {
    "p_correct": 1.0,
    "extra_args": ["--p-malformed", "0", "--shared-decode", "--long-tail", str(LONG_TAIL),
                   "--max-model-len", "65536"],
}  # fmt: skip


async def _timed_collect(
    url: str,
    backend: SandboxBackend,
    tasks_path: str,
    tasks: list[Task],
    n: int,
    concurrency: int,
    out: Path,
    timeline: Timeline | None = None,
    dispatch: str = "slot",
) -> float:
    if timeline is None:
        policy = PolicyClient([url], None)
    else:
        policy = TimedPolicy(timeline, [url], None)
        backend = TimedBackend(backend, timeline)  # type: ignore[assignment]
    await policy.start()
    run = out / uuid.uuid4().hex[:8]
    request = RolloutRequest(
        tasks=TasksSpec(path=tasks_path, ids=[t.id for t in tasks]),
        n_samples=n,
        sampling=SamplingSpec(temperature=1.0, max_tokens=MAX_TOKENS, seed=0),
        agent=AgentSpec(max_turns=8),
        advantage=AdvantageSpec(min_group_size=min(n, AdvantageSpec().min_group_size)),
    )
    try:
        t0 = time.monotonic()
        with chunk_dispatch() if dispatch == "chunk" else contextlib.nullcontext():
            summary = await collect(
                tasks_path,
                tasks,
                EpisodeRunner(policy, backend),
                run.with_suffix(".store"),
                run.with_suffix(".parquet"),
                request,
                concurrency=concurrency,
            )
        seconds = time.monotonic() - t0
    finally:
        await policy.aclose()
    # Every sample must have solved its task: a fast run of failures measures nothing.
    if summary.trajectories != len(tasks) * n or summary.mean_reward != 1.0:
        raise OverlapRunFailed(f"collect: {summary.counts}, mean reward {summary.mean_reward}")
    return seconds


async def _settle(backend: DockerBackend) -> None:
    pending = backend.pool._tasks  # noqa: SLF001 - benchmark instrumentation only
    while pending:
        await asyncio.gather(*list(pending), return_exceptions=True)


@dataclass
class Calibration:
    trial_tokens_per_s: float
    trial_gen_s: float  # generation alone at the trial speed
    loop_s: float  # generation alone with instant generation: the episode loop's own time
    sandbox_s: float  # sandboxes alone
    tokens_per_s: float  # the speed that makes generation alone ~ sandboxes alone
    steps: list[tuple[float, float]]  # (tokens/s tried, generation alone at that speed)


CALIBRATION_STEPS = 2


def calibrated_speed(
    trial_tokens_per_s: float, trial_s: float, loop_s: float, target_s: float
) -> float:
    """Decode time scales as 1/speed on top of the loop's fixed time: the speed at which
    generation alone would take `target_s`."""
    decode_s = max(trial_s - loop_s, 1e-3) * trial_tokens_per_s  # seconds at 1 token/s
    return decode_s / max(target_s - loop_s, 0.1 * target_s)


async def run_overlap_section(
    tasks_path: str,
    tasks: list[Task],
    *,
    n_samples: int,
    concurrency: int,
    trial_tokens_per_s: float,
    ttft_ms: float,
    repeats: int,
    log: Any,
) -> tuple[Calibration, list[OverlapRound]]:
    rounds: list[OverlapRound] = []
    settings = BackendSettings(pool=PoolSettings(warm_per_key=concurrency))
    backend = DockerBackend(settings)
    noop = NoopBackend()
    batch = (tasks_path, tasks, n_samples, concurrency)
    with (
        tempfile.TemporaryDirectory(prefix="rollouts-bench-") as tmp,
        stand_in_policy(tasks_path, **STAND_IN) as instant,
        contextlib.ExitStack() as stack,
    ):
        out = Path(tmp)
        try:
            # Warm-up (not measured): pool fill, image resolution, stand-in tokenizer caches.
            await _timed_collect(instant.url, backend, tasks_path, tasks[:1], 2, 2, out)
            # Calibration: the decode speed at which generation alone lasts as long as sandboxes
            # alone (measured before, not part of the figures).
            await _settle(backend)
            sandbox_s = await _timed_collect(instant.url, backend, *batch, out)
            loop_s = await _timed_collect(instant.url, noop, *batch, out)
            steps: list[tuple[float, float]] = []  # (tokens/s, generation alone at that speed)
            speed = trial_tokens_per_s
            for _ in range(CALIBRATION_STEPS):  # a second step corrects what is not 1/speed
                with stand_in_policy(
                    tasks_path, **STAND_IN, tokens_per_s=speed, ttft_ms=ttft_ms
                ) as trial:
                    gen_s = await _timed_collect(trial.url, noop, *batch, out)
                steps.append((speed, gen_s))
                speed = round(calibrated_speed(speed, gen_s, loop_s, sandbox_s), 1)
            cal = Calibration(steps[0][0], steps[0][1], loop_s, sandbox_s, speed, steps)
            log(
                f"  overlap calibration: sandboxes alone {sandbox_s:.1f} s, generation alone "
                + ", ".join(f"{g:.1f} s at {v:.0f} tokens/s" for v, g in steps)
                + f" ({loop_s:.1f} s with instant generation) -> {speed:.0f} tokens/s"
            )
            slow = stack.enter_context(
                stand_in_policy(tasks_path, **STAND_IN, tokens_per_s=cal.tokens_per_s,
                                ttft_ms=ttft_ms)
            )  # fmt: skip

            for rep in range(repeats):
                for dispatch in DISPATCHES:
                    await _settle(backend)
                    timeline = Timeline()
                    e2e = await _timed_collect(slow.url, backend, *batch, out, timeline, dispatch)
                    await _settle(backend)
                    gen = await _timed_collect(slow.url, noop, *batch, out, None, dispatch)
                    sbx = await _timed_collect(instant.url, backend, *batch, out, None, dispatch)
                    occupancy = timeline.occupancy(e2e, concurrency)
                    r = OverlapRound(dispatch, e2e, gen, sbx, timeline.busy(), occupancy)
                    rounds.append(r)
                    log(
                        f"  overlap rep {rep + 1}, by the {dispatch}: end-to-end {e2e:.1f} s, "
                        f"generation alone {gen:.1f} s, sandboxes alone {sbx:.1f} s -> "
                        f"{r.ratio:.2f}; policy occupancy {occupancy:.2f}; in flight end to "
                        f"end: generation {r.busy['generation_s']:.1f} s, sandboxes "
                        f"{r.busy['sandbox_s']:.1f} s, both {r.busy['both_s']:.1f} s"
                    )
        finally:
            await backend.aclose()
    return cal, rounds
