"""Simulated scale-out: does throughput grow with the number of sandbox nodes?

The executors run a backend whose every step only sleeps (`ray_fakes.SleepBackend`: a fixed
latency per trial, no engine), on 1, 2 and 4 Ray nodes of 4 slots each (nodes join between the
runs, with no restart of anything but the service's backend). The service side is real: the
scheduler, the durable store, the Ray backend's placement and its remote calls; only the
policy is left out (`ray_fakes.LifecycleRunner` walks each sample through create, keystrokes,
workspace, destroy and verify). If the service or placement were the bottleneck, samples per
second would stop growing in proportion to the nodes. It also reports the service process's CPU
per placed sample (all its threads, Ray's client included).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from benchmarks.synthetic import synthetic_tasks
from sandboxes.ray_backend import RayBackend
from sandboxes.ray_cluster import RaySettings
from service.collect import collect
from service.wire import RolloutRequest, TasksSpec
from tests.e2e.ray_fakes import (
    Latency,
    LifecycleRunner,
    SleepFactory,
    add_sandbox_node,
    start_cluster,
    stop_cluster,
)

pytestmark = pytest.mark.slow

SLOTS = 4  # per node
GROUP = 4  # samples per task: one group fills a node
ROUNDS = 6  # each run keeps every slot busy for about this many trials
LATENCY = Latency(create_s=0.3, send_keys_s=0.25, archive_s=0.1, verify_s=0.6)  # 1.5 s a trial
TURNS = 2
TOLERANCE = 0.15


async def measure(nodes: int, data_dir: Path) -> dict[str, float]:
    """One collect over `nodes` sandbox nodes: samples/s and the service's CPU per sample."""
    backend = RayBackend(RaySettings(poll_s=0.5), backend_factory=SleepFactory(LATENCY))
    async with backend:
        deadline = time.monotonic() + 120
        while sum(n.ready for n in backend.cluster.nodes.values()) < nodes:
            assert time.monotonic() < deadline, backend.stats()
            await asyncio.sleep(0.1)
        assert backend.cluster.capacity() == nodes * SLOTS
        samples = nodes * SLOTS * ROUNDS
        tasks = synthetic_tasks(samples // GROUP)
        runner = LifecycleRunner(backend, turns=TURNS)
        request = RolloutRequest(tasks=TasksSpec(path="synthetic"), n_samples=GROUP)
        cpu0 = time.process_time()
        summary = await collect(
            "synthetic",
            tasks,
            runner,
            data_dir,
            data_dir / "out.parquet",
            request,
            concurrency=nodes * SLOTS,
            task_loader=lambda path, ids, limit: tasks,
        )
        cpu = time.process_time() - cpu0
        stats = backend.stats()
    assert summary.trajectories == samples and summary.counts == {"ok": samples}, summary
    assert stats["in_use"] == 0, stats  # every slot came back (sandbox -> workspace -> verify)
    busy = [s for s in stats["nodes"].values() if s["placed"]]
    assert len(busy) == nodes, stats  # every node took work
    assert runner.first_start is not None and runner.last_end is not None
    seconds = runner.last_end - runner.first_start
    return {
        "nodes": nodes,
        "samples": samples,
        "seconds": seconds,
        "per_s": samples / seconds,
        "cpu_ms_per_sample": 1000 * cpu / samples,
        "placed": [s["placed"] for s in busy],
    }


def test_throughput_grows_in_proportion_to_the_nodes(tmp_path: Path) -> None:
    cluster, nodes = start_cluster(1, SLOTS)
    try:
        results = [asyncio.run(measure(1, tmp_path / "n1"))]
        add_sandbox_node(cluster, SLOTS)
        results.append(asyncio.run(measure(2, tmp_path / "n2")))
        add_sandbox_node(cluster, SLOTS)
        add_sandbox_node(cluster, SLOTS)
        results.append(asyncio.run(measure(4, tmp_path / "n4")))
    finally:
        stop_cluster(cluster)
    ideal = SLOTS / (LATENCY.create_s + TURNS * LATENCY.send_keys_s + LATENCY.archive_s
                     + LATENCY.verify_s)  # fmt: skip
    base = results[0]["per_s"]
    lines = [
        f"{r['nodes']} node(s): {r['samples']} samples in {r['seconds']:.2f} s = "
        f"{r['per_s']:.2f}/s ({r['per_s'] / base:.2f}x; {r['per_s'] / (ideal * r['nodes']):.0%} "
        f"of the sleep-bound ideal), service CPU {r['cpu_ms_per_sample']:.1f} ms/sample, "
        f"placed {r['placed']}"
        for r in results
    ]
    print("\nray scaling (simulated):\n  " + "\n  ".join(lines))
    for r in results[1:]:
        ratio = r["per_s"] / base
        assert abs(ratio / r["nodes"] - 1) <= TOLERANCE, lines
