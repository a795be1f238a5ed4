"""Pipeline overlap: does `collect` hide sandbox work behind generation (and vice versa)?

One batch (tasks x n samples) is timed three ways, interleaved per repeat:
- end to end: the stand-in at a fixed decode speed, real Docker sandboxes;
- generation alone: the same stand-in, sandboxes replaced by `NoopBackend`;
- sandboxes alone: an infinitely fast stand-in (an instant oracle, p_correct 1), real sandboxes.
Perfect overlap gives end_to_end == max(generation alone, sandboxes alone): a ratio of 1.0.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.noop_backend import NoopBackend
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


@dataclass
class OverlapRound:
    end_to_end_s: float
    gen_only_s: float
    sandbox_only_s: float

    @property
    def ratio(self) -> float:
        return self.end_to_end_s / max(self.gen_only_s, self.sandbox_only_s)


# Every sample types the oracle and never a malformed reply: the batch's work is fixed.
STAND_IN = {"p_correct": 1.0, "extra_args": ["--p-malformed", "0"]}


async def _timed_collect(
    url: str,
    backend: SandboxBackend,
    tasks_path: str,
    tasks: list[Task],
    n: int,
    concurrency: int,
    out: Path,
) -> float:
    policy = PolicyClient([url], None)
    await policy.start()
    run = out / uuid.uuid4().hex[:8]
    request = RolloutRequest(
        tasks=TasksSpec(path=tasks_path, ids=[t.id for t in tasks]),
        n_samples=n,
        sampling=SamplingSpec(temperature=1.0, max_tokens=4096, seed=0),
        agent=AgentSpec(max_turns=8),
        advantage=AdvantageSpec(min_group_size=min(n, AdvantageSpec().min_group_size)),
    )
    try:
        t0 = time.monotonic()
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


async def run_overlap_section(
    tasks_path: str,
    tasks: list[Task],
    *,
    n_samples: int,
    concurrency: int,
    tokens_per_s: float,
    ttft_ms: float,
    repeats: int,
    log: Any,
) -> list[OverlapRound]:
    rounds: list[OverlapRound] = []
    settings = BackendSettings(pool=PoolSettings(warm_per_key=concurrency))
    backend = DockerBackend(settings)
    noop = NoopBackend()
    with (
        tempfile.TemporaryDirectory(prefix="rollouts-bench-") as tmp,
        stand_in_policy(tasks_path, **STAND_IN, tokens_per_s=tokens_per_s, ttft_ms=ttft_ms) as slow,
        stand_in_policy(tasks_path, **STAND_IN) as instant,
    ):
        out = Path(tmp)
        try:
            # Warm-up (not measured): pool fill, image resolution, stand-in tokenizer caches.
            await _timed_collect(instant.url, backend, tasks_path, tasks[:1], 2, 2, out)

            for rep in range(repeats):
                await _settle(backend)
                e2e = await _timed_collect(
                    slow.url, backend, tasks_path, tasks, n_samples, concurrency, out
                )
                await _settle(backend)
                gen = await _timed_collect(
                    slow.url, noop, tasks_path, tasks, n_samples, concurrency, out
                )
                sbx = await _timed_collect(
                    instant.url, backend, tasks_path, tasks, n_samples, concurrency, out
                )
                r = OverlapRound(e2e, gen, sbx)
                rounds.append(r)
                log(
                    f"  overlap rep {rep + 1}: end-to-end {e2e:.1f} s, generation alone "
                    f"{gen:.1f} s, sandboxes alone {sbx:.1f} s -> {r.ratio:.2f}"
                )
        finally:
            await backend.aclose()
    return rounds
