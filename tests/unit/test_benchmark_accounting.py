"""The sandbox benchmark's accounting: CPU time by owner, and py-spy's samples by group."""

from __future__ import annotations

import pytest

from benchmarks.cpu_cost import CpuMeter, CpuSample
from benchmarks.self_profile import OTHER, group_samples


def test_samples_go_to_the_innermost_known_frame() -> None:
    sdk, http = "docker/api", "/v/site-packages/requests"  # py-spy's short form, and a full one
    raw = "\n".join([
        # our code calling the SDK: charged to the SDK, the innermost known frame
        f"process 1;run (sandboxes/verifier.py:10);_post ({sdk}/client.py:5) 7",
        # the SDK waiting on the HTTP client: charged to the HTTP client
        f"process 1;exec_start ({sdk}/exec_api.py:1);send ({http}/adapters.py:9) 3",
        "process 1;<module> (/work/sandboxes/oracle.py:1) 2",
        "process 1;mystery (/elsewhere/x.py:1) 1",
        "not a sample line",
    ])  # fmt: skip
    counts = group_samples(raw)
    assert counts["docker SDK (requests to the engine)"] == 7
    assert counts["HTTP client (requests, urllib3)"] == 3
    assert counts["rollouts sandbox code"] == 2
    assert counts[OTHER] == 1
    assert sum(counts.values()) == 13


def test_cpu_cost_is_the_difference_of_two_samples() -> None:
    parts = {"dockerd": 4.0, "containerd": 6.0}
    before = CpuSample(engine_parts=parts, containers_s=5.0, harness_s=1.0, at=100.0)
    parts = {"dockerd": 5.0, "containerd": 7.5}
    after = CpuSample(engine_parts=parts, containers_s=6.0, harness_s=1.25, at=104.0)
    cost = after.minus(before)
    assert (cost.engine_s, cost.containers_s, cost.harness_s, cost.wall_s) == (2.5, 1.0, 0.25, 4.0)
    assert cost.engine_parts == {"dockerd": 1.0, "containerd": 1.5}
    assert cost.total_s == pytest.approx(3.75)
    unmeasured = CpuSample(None, None, 2.0, 104.0).minus(CpuSample(None, None, 1.0, 100.0))
    assert unmeasured.total_s is None and unmeasured.harness_s == 1.0


def test_meter_says_why_it_cannot_split(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("benchmarks.cpu_cost.CPUACCT", tmp_path / "nothing-here")
    meter = CpuMeter()
    meter.setup()
    assert meter.unavailable and "cpuacct" in meter.unavailable
    sample = meter.sample()
    assert sample.engine_parts is None and sample.containers_s is None and sample.harness_s > 0
