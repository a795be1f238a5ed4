"""The service data path (commit -> lease -> ack over loopback HTTP) and the service's memory.

The service runs as its own process (`benchmarks.datapath_service`) with a synthetic runner; this
side is the trainer: it submits rollouts through POST /v1/rollouts and leases/acks with plain
HTTP. Per repeat, with a fresh data dir:
1. pipeline: submit N trajectories and drain them concurrently (Arrow) -> trajectories/s;
2. fill: submit the memory-size rollout, wait until every sample is committed -> commits/s and
   the service's RSS with them all stored;
3. drain: lease them in batches alternating JSON and Arrow -> lease-to-first-byte, transfer
   time and size per format, and the RSS peak while the trainer drains.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow as pa

from benchmarks.synthetic import make_trajectory
from clients.commands.policy_stub import free_port, stop_process, wait_healthy
from service.api.batches import ARROW_IPC_OPTIONS
from service.trajectory import ARROW_SCHEMA

ARROW = "application/vnd.apache.arrow.stream"
N_SAMPLES = 8
TOKEN_FIELDS = ("prompt_token_ids", "response_token_ids", "loss_mask", "rollout_logprobs")


class DataPathFailed(RuntimeError):
    pass


def rss_mib(pid: int) -> float:
    """Resident set size of a process (Linux /proc), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise DataPathFailed(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far: unlike wall time, not inflated by other
    load on the machine, so it shows the service's own cost per trajectory."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def service_process(data_dir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "benchmarks.datapath_service",
        "--data-dir", str(data_dir), "--port", str(port),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, 60, proc, path="/healthz")
        except RuntimeError as e:
            raise DataPathFailed(f"the benchmark service did not start: {e}") from e
        yield url, proc.pid
    finally:
        stop_process(proc, timeout_s=20)


class RssSampler:
    """Samples a process's RSS every `interval_s` on a thread; `peak` is the highest seen."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid, self.interval_s, self.peak = pid, interval_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, DataPathFailed):
                self.peak = max(self.peak, rss_mib(self.pid))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class LeaseSample:
    fmt: str
    ttfb_s: float
    seconds: float
    bytes: int
    rows: int


@dataclass
class DataPathRound:
    pipeline_traj_per_s: float
    pipeline_cpu_ms_per_traj: float  # the service process's CPU time per trajectory
    commit_traj_per_s: float
    drain_traj_per_s: float
    rss_fill_peak_mib: float  # while the 10k are being committed (transients count)
    rss_stored_mib: float
    rss_drain_peak_mib: float
    stored: int
    leases: list[LeaseSample] = field(default_factory=list)


def _submit(client: httpx.Client, groups: int) -> str:
    body = {"tasks": {"path": "synthetic", "limit": groups}, "n_samples": N_SAMPLES}
    r = client.post("/v1/rollouts", json=body)
    if r.status_code != 202:
        raise DataPathFailed(f"submit: {r.status_code} {r.text[:300]}")
    return r.json()["id"]


def _lease(client: httpx.Client, rollout_id: str, fmt: str, max_groups: int) -> LeaseSample | None:
    headers = {"Accept": ARROW if fmt == "arrow" else "application/json"}
    body = {"max_groups": max_groups, "wait_s": 10, "rollout_id": rollout_id}
    t0 = time.monotonic()
    with client.stream("POST", "/v1/batches/lease", json=body, headers=headers) as r:
        ttfb = time.monotonic() - t0
        data = r.read()
        seconds = time.monotonic() - t0
    if r.status_code == 204:
        return None
    if r.status_code != 200:
        raise DataPathFailed(f"lease: {r.status_code} {data[:300]!r}")
    if fmt == "arrow":
        rows = pa.ipc.open_stream(data).read_all().num_rows
    else:
        rows = sum(len(g["trajectories"]) for g in orjson.loads(data)["groups"])
    ack = client.post(f"/v1/batches/{r.headers['X-Batch-Id']}/ack")
    if ack.status_code != 200:
        raise DataPathFailed(f"ack: {ack.status_code} {ack.text[:300]}")
    return LeaseSample(fmt, ttfb, seconds, len(data), rows)


def _drain(
    client: httpx.Client, rollout_id: str, total: int, formats: tuple[str, ...], max_groups: int
) -> list[LeaseSample]:
    samples: list[LeaseSample] = []
    got = 0
    while got < total:
        s = _lease(client, rollout_id, formats[len(samples) % len(formats)], max_groups)
        if s is None:
            raise DataPathFailed(f"lease timed out with {got}/{total} trajectories delivered")
        samples.append(s)
        got += s.rows
    return samples


def _wait_committed(client: httpx.Client, rollout_id: str, total: int) -> None:
    while True:
        r = client.get(f"/v1/rollouts/{rollout_id}")
        if r.status_code != 200:
            raise DataPathFailed(f"status: {r.status_code} {r.text[:300]}")
        if r.json()["samples_completed"] >= total:
            return
        time.sleep(0.05)


def run_datapath_round(pipeline_trajectories: int, stored_trajectories: int) -> DataPathRound:
    pipe_groups = max(1, pipeline_trajectories // N_SAMPLES)
    store_groups = max(1, stored_trajectories // N_SAMPLES)
    with (
        tempfile.TemporaryDirectory(prefix="rollouts-bench-") as tmp,
        service_process(Path(tmp)) as (url, pid),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        # 1. commit -> lease -> ack, concurrently (the trainer long-polls while samples commit).
        t0, cpu0 = time.monotonic(), cpu_seconds(pid)
        rid = _submit(client, pipe_groups)
        _drain(client, rid, pipe_groups * N_SAMPLES, ("arrow",), 64)
        pipeline = pipe_groups * N_SAMPLES / (time.monotonic() - t0)
        cpu_ms = 1000 * (cpu_seconds(pid) - cpu0) / (pipe_groups * N_SAMPLES)

        # 2. fill, then the RSS with everything stored.
        with RssSampler(pid) as fill_sampler:
            t0 = time.monotonic()
            rid = _submit(client, store_groups)
            _wait_committed(client, rid, store_groups * N_SAMPLES)
            commit = store_groups * N_SAMPLES / (time.monotonic() - t0)
        time.sleep(0.5)  # let the allocator settle after the burst
        stored_rss = rss_mib(pid)

        # 3. the trainer drains, alternating formats batch by batch (16 groups = 128 rows).
        with RssSampler(pid) as sampler:
            t0 = time.monotonic()
            leases = _drain(client, rid, store_groups * N_SAMPLES, ("json", "arrow"), 16)
            drain = store_groups * N_SAMPLES / (time.monotonic() - t0)
        return DataPathRound(
            pipeline_traj_per_s=pipeline,
            pipeline_cpu_ms_per_traj=cpu_ms,
            commit_traj_per_s=commit,
            drain_traj_per_s=drain,
            rss_fill_peak_mib=fill_sampler.peak,
            rss_stored_mib=stored_rss,
            rss_drain_peak_mib=max(sampler.peak, stored_rss),
            stored=(pipe_groups + store_groups) * N_SAMPLES,
            leases=leases,
        )


def token_array_sizes(count: int = 64) -> tuple[int, int]:
    """Bytes of the token arrays (ids, mask, logprobs) of `count` 8k-token trajectories as the
    API's JSON and as the API's Arrow IPC (record schema, same write options):
    (json_bytes, arrow_bytes). Token ids are uniform over the vocabulary: the worst case for
    compression (real text repeats tokens)."""
    trajectories = [make_trajectory(i) for i in range(count)]
    as_json = b",".join(t.model_dump_json(include=set(TOKEN_FIELDS)).encode() for t in trajectories)
    schema = pa.schema([ARROW_SCHEMA.field(name) for name in TOKEN_FIELDS])
    table = pa.Table.from_pylist(
        [{k: getattr(t, k) for k in TOKEN_FIELDS} for t in trajectories], schema=schema
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=ARROW_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return len(as_json) + 2, sink.getvalue().size


def summarise_leases(leases: list[LeaseSample]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in ("json", "arrow"):
        mine = [s for s in leases if s.fmt == fmt and s.rows]
        if mine:
            out[fmt] = {
                "ttfb_s": sorted(s.ttfb_s for s in mine)[len(mine) // 2],
                "seconds": sorted(s.seconds for s in mine)[len(mine) // 2],
                "bytes_per_traj": sum(s.bytes for s in mine) / sum(s.rows for s in mine),
            }
    return out
