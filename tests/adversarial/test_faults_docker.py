"""Docker faults under running episodes (real engine, stand-in policy typing the oracle):

- a sandbox container is removed from outside (`docker rm -f` by its trajectory label) while
  its sample runs (the stand-in holds the first turn, so the removal cannot miss): that sample
  is masked (sandbox_error), its neighbour still scores 1; through `collect` (the scheduler),
  the masked sample runs again in a fresh sandbox and the group arrives whole (`attempts` 2);
- the Docker Engine is briefly unreachable: DOCKER_HOST points at a unix-socket proxy that is
  stopped for a few seconds. Every sample comes back; the hit ones (at least one) are masked,
  none scores a fake 0, nothing hangs; what the outage left behind the reaper removes.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from harness import CaseLog, containers_labelled

from sandboxes.docker_adapter import DockerAdapter
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import BASE_TAG, ensure_base_image
from sandboxes.isolation import LABEL_BACKEND
from sandboxes.pool import PoolSettings
from sandboxes.reaper import reap_orphans
from sandboxes.task import Task
from service.collect import collect
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.store.reader import iter_trajectory_rows
from service.trajectory import Status, Trajectory, is_masked
from service.wire import AdvantageSpec, AgentSpec, RolloutRequest, SamplingSpec, TasksSpec

pytestmark = [pytest.mark.docker]
ENGINE_SOCKET = "/var/run/docker.sock"


async def _run_group(
    runner: EpisodeRunner, task: Task, rollout_id: str, n: int
) -> list[Trajectory]:
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(task, rollout_id, n, SamplingParams(seed=5), AgentLimits(max_turns=6))
    await runner.run_group(task, specs, on_trajectory)
    return sorted(got, key=lambda t: t.sample_index)


async def _wait_for_container(label: str, value: str, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ids = await asyncio.to_thread(containers_labelled, label, value)
        if ids:
            return ids[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no container labelled {label}={value} appeared")


async def _stand_in_waiting(url: str) -> bool:
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(url + "/metrics", timeout=10)).text
    line = next(x for x in metrics.splitlines() if x.startswith("vllm:num_requests_waiting{"))
    return float(line.rsplit(" ", 1)[1]) >= 1


async def test_container_removed_mid_episode(
    backend: DockerBackend,
    small_task: Callable[..., Task],
    stand_in: Callable,
    case: CaseLog,
) -> None:
    task = small_task("camel-to-snake", agent=60, verifier=60)
    run_id = f"dfault-rm-{uuid.uuid4().hex[:8]}"
    rec = case.add("container_removed", "docker rm -f by label, mid-episode",
                   "remove sample 0's agent container while its episode runs")  # fmt: skip
    victim_label = f"{run_id}:{task.id}:0"
    with stand_in(p_correct=1.0) as url:
        policy = PolicyClient([url + "/v1"], backoff_s=0.05)
        await policy.start()
        try:
            runner = EpisodeRunner(policy, backend)

            async def strike() -> str:
                # The stand-in holds the group's first turn, so the episode is certainly still
                # running (its sandbox up, no command run yet) when the container goes.
                async with httpx.AsyncClient() as http:
                    await http.post(url + "/pause", params={"mode": "keep"}, timeout=10)
                cid = await _wait_for_container("rollouts.trajectory_id", victim_label)
                deadline = time.monotonic() + 120
                while not await _stand_in_waiting(url):
                    assert time.monotonic() < deadline, "the first turn never reached the policy"
                    await asyncio.sleep(0.1)
                removed = await asyncio.to_thread(
                    subprocess.run, ["docker", "rm", "-f", cid], capture_output=True, text=True
                )
                assert removed.returncode == 0, removed.stderr
                async with httpx.AsyncClient() as http:
                    await http.post(url + "/resume", timeout=10)
                return cid

            t0 = time.monotonic()
            got, cid = await asyncio.gather(_run_group(runner, task, run_id, 2), strike())
            rec.seconds = round(time.monotonic() - t0, 1)
        finally:
            await policy.aclose()
    await backend.aclose()
    rec.observed = {"samples": [(t.status.value, t.reward) for t in got]}
    assert [t.sample_index for t in got] == [0, 1], rec.observed
    victim, neighbour = got
    # The removal landed mid-episode: the victim is masked, never a fake 0, and kept its turn.
    assert victim.status is Status.sandbox_error, rec.observed
    assert victim.reward is None and victim.exclude_from_baseline
    assert victim.num_turns >= 1 and any("sandbox error" in m.content for m in victim.messages)
    assert (neighbour.status, neighbour.reward) == (Status.ok, 1.0), rec.observed
    assert containers_labelled("rollouts.trajectory_id", victim_label) == []
    assert containers_labelled("rollouts.rollout_id", run_id) == []


async def test_container_removed_during_collect_is_run_again(
    tmp_path: Path,
    backend: DockerBackend,
    small_task: Callable[..., Task],
    stand_in: Callable,
    case: CaseLog,
) -> None:
    task = small_task("camel-to-snake", agent=60, verifier=60)
    rec = case.add("container_removed_rerun", "docker rm -f by label, mid-episode, collect",
                   "remove sample 0's agent container while its episode runs")  # fmt: skip
    request = RolloutRequest(
        tasks=TasksSpec(path=str(task.path)),
        n_samples=2,
        sampling=SamplingSpec(seed=5),
        agent=AgentSpec(max_turns=6),
        advantage=AdvantageSpec(estimator="rloo", min_group_size=1),
    )
    with stand_in(p_correct=1.0) as url:
        policy = PolicyClient([url + "/v1"], backoff_s=0.05)
        await policy.start()
        runner = EpisodeRunner(policy, backend)

        async def strike() -> None:
            # Sample 0's first container (this backend's), while the stand-in holds the
            # group's first turn: its episode is certainly running, no command run yet.
            deadline = time.monotonic() + 120
            while not (cid := await asyncio.to_thread(_first_sample_container, backend)):
                assert time.monotonic() < deadline, "sample 0's container never appeared"
                await asyncio.sleep(0.1)
            while not await _stand_in_waiting(url):
                assert time.monotonic() < deadline, "the first turn never reached the policy"
                await asyncio.sleep(0.1)
            removed = await asyncio.to_thread(
                subprocess.run, ["docker", "rm", "-f", cid], capture_output=True, text=True
            )
            assert removed.returncode == 0, removed.stderr
            async with httpx.AsyncClient() as http:
                await http.post(url + "/resume", timeout=10)

        try:
            async with httpx.AsyncClient() as http:
                await http.post(url + "/pause", params={"mode": "keep"}, timeout=10)
            t0 = time.monotonic()
            summary, _ = await asyncio.gather(
                collect(
                    str(task.path), [task], runner, tmp_path / "store", tmp_path / "out.parquet",
                    request, concurrency=2,
                ),
                strike(),
            )  # fmt: skip
            rec.seconds = round(time.monotonic() - t0, 1)
        finally:
            await policy.aclose()
    await backend.aclose()
    got = [
        Trajectory.model_validate(r)
        for chunk in iter_trajectory_rows(tmp_path / "store", summary.rollout_id)
        for r in chunk
    ]
    got.sort(key=lambda t: t.sample_index)
    rec.observed = {"samples": [(t.status.value, t.reward, t.attempts) for t in got]}
    # The group arrives whole: the victim ran again in a fresh sandbox and was graded.
    assert [(t.status, t.reward, t.attempts) for t in got] == [
        (Status.ok, 1.0, 2),
        (Status.ok, 1.0, 1),
    ], rec.observed
    assert containers_labelled("rollouts.rollout_id", summary.rollout_id) == []


def _first_sample_container(backend: DockerBackend) -> str | None:
    """This backend's container of sample 0 (trajectory ids end in .s0), if there is one."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label={LABEL_BACKEND}={backend.backend_id}",
         "--format", '{{.ID}} {{.Label "rollouts.trajectory_id"}}'],
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    ids = [line.split()[0] for line in out.splitlines() if line.endswith(".s0")]
    return ids[0] if ids else None


class UnixSocketProxy:
    """Forwards a unix socket to the engine's; `stop()` makes the engine unreachable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._handle, str(self.path))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):  # established connections drop too
            w.close()
        self._writers.clear()
        self.path.unlink(missing_ok=True)  # the socket path disappears

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(ENGINE_SOCKET)
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}


async def test_engine_briefly_unreachable(
    tmp_path: Path,
    small_task: Callable[..., Task],
    stand_in: Callable,
    case: CaseLog,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await ensure_base_image(BASE_TAG)
    task = small_task("camel-to-snake", agent=60, verifier=60)
    run_id = f"dfault-host-{uuid.uuid4().hex[:8]}"
    rec = case.add("engine_unreachable", "DOCKER_HOST proxy socket stopped for 5 s",
                   "the engine's socket disappears while a group of 3 runs")  # fmt: skip
    proxy = UnixSocketProxy(tmp_path / "docker.sock")
    await proxy.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{proxy.path}")
    backend = DockerBackend(
        BackendSettings(pool=PoolSettings(warm_per_key=0), reap_at_start=False),
        adapter=DockerAdapter(),
    )
    try:
        with stand_in(p_correct=1.0) as url:
            policy = PolicyClient([url + "/v1"], backoff_s=0.05)
            await policy.start()
            try:
                runner = EpisodeRunner(policy, backend)

                async def outage() -> None:
                    await _wait_for_container("rollouts.rollout_id", run_id)
                    await proxy.stop()
                    await asyncio.sleep(5)
                    await proxy.start()

                t0 = time.monotonic()
                got, _ = await asyncio.wait_for(
                    asyncio.gather(_run_group(runner, task, run_id, 3), outage()), timeout=300
                )
                rec.seconds = round(time.monotonic() - t0, 1)
            finally:
                await policy.aclose()
        await backend.aclose()
    finally:
        await proxy.stop()
    rec.observed = {"samples": [(t.status.value, t.reward) for t in got]}
    # Every sample came back, as itself.
    assert [t.trajectory_id for t in got] == [f"{run_id}:{task.id}:{k}" for k in range(3)]
    for t in got:
        # The oracle was typed: a scored sample is a 1; a hit one is masked, never a fake 0.
        assert t.reward == 1.0 or (t.reward is None and is_masked(t.status)), rec.observed
        assert t.reward != 0.0, rec.observed
    masked = [t for t in got if t.reward is None]
    assert masked, f"the outage hit no sample: {rec.observed}"
    assert all(t.status is Status.sandbox_error and t.exclude_from_baseline for t in masked)
    # Removals that failed during the outage are left for the reaper (docs/reliability.md):
    # the reaper's own code, limited to this run's label, removes every one of them.
    left = containers_labelled("rollouts.rollout_id", run_id)
    rec.observed["left_after_outage"] = len(left)
    monkeypatch.undo()  # DOCKER_HOST: the real engine again
    reaped = await reap_orphans(
        True, adapter=DockerAdapter(), extra_labels={"rollouts.rollout_id": run_id}
    )
    assert reaped == len(left)
    assert containers_labelled("rollouts.rollout_id", run_id) == []
