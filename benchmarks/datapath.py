"""The service data path (commit -> lease -> ack over loopback HTTP) and the service's memory.

The service runs as its own process (`benchmarks.datapath_service`) with a synthetic runner; this
side is the trainer: it submits rollouts through POST /v1/rollouts and leases/acks with plain
HTTP. Per repeat, with a fresh data dir, after an unmeasured warm-up rollout:
1. pipeline: submit N trajectories and drain them concurrently (Arrow) -> trajectories/s;
2. fill: submit the memory-size rollout, wait until every sample is committed -> commits/s and
   the service's RSS with them all stored;
3. token arrays: 64 of them leased as Arrow, left to expire, and leased again as JSON: the
   bytes of their token arrays in each of the API's two answers;
4. drain: lease the rest in batches alternating JSON and Arrow -> lease-to-first-byte, transfer
   time and size per format, and the RSS peak while the trainer drains.
"""

from __future__ import annotations

import contextlib
import os
import re
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

from clients.commands.policy_stub import free_port, stop_process, wait_healthy
from service.api.batches import ARROW_IPC_OPTIONS

ARROW = "application/vnd.apache.arrow.stream"
N_SAMPLES = 8
PIPELINE_LEASE_GROUPS = 64  # the trainer's lease size while the pipeline runs (Arrow)
DRAIN_LEASE_GROUPS = 16  # and while it drains the stored ones (JSON and Arrow alternating)
RSS_SAMPLE_S = 0.1
WARMUP_GROUPS = 8  # 64 trajectories through commit, Arrow and JSON leases
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

    def __init__(self, pid: int, interval_s: float = RSS_SAMPLE_S) -> None:
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
    token_arrays_json_bytes: int  # the same 64 trajectories' token arrays in the API's JSON...
    token_arrays_arrow_bytes: dict[str, int]  # ...and in Arrow IPC: zstd (the API's), lz4, none
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
        # 0. warm-up, not measured: the process's first lease pays one-off costs (pyarrow
        # imports pandas on its first conversion, ~8 % of a round's CPU here), not per
        # trajectory; the other sections warm up the same way.
        rid = _submit(client, WARMUP_GROUPS)
        _drain(client, rid, WARMUP_GROUPS * N_SAMPLES, ("arrow", "json"), WARMUP_GROUPS // 2)

        # 1. commit -> lease -> ack, concurrently (the trainer long-polls while samples commit).
        t0, cpu0 = time.monotonic(), cpu_seconds(pid)
        rid = _submit(client, pipe_groups)
        _drain(client, rid, pipe_groups * N_SAMPLES, ("arrow",), PIPELINE_LEASE_GROUPS)
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

        # 3. the token arrays of the same 64 trajectories in the API's two formats.
        token_json, token_arrow = token_array_sizes(client, rid, TOKEN_SAMPLE_GROUPS)
        left = (store_groups - TOKEN_SAMPLE_GROUPS) * N_SAMPLES

        # 4. the trainer drains, alternating formats batch by batch.
        with RssSampler(pid) as sampler:
            t0 = time.monotonic()
            leases = _drain(client, rid, left, ("json", "arrow"), DRAIN_LEASE_GROUPS)
            drain = left / (time.monotonic() - t0)
        return DataPathRound(
            pipeline_traj_per_s=pipeline,
            pipeline_cpu_ms_per_traj=cpu_ms,
            commit_traj_per_s=commit,
            drain_traj_per_s=drain,
            rss_fill_peak_mib=fill_sampler.peak,
            rss_stored_mib=stored_rss,
            rss_drain_peak_mib=max(sampler.peak, stored_rss),
            stored=(WARMUP_GROUPS + pipe_groups + store_groups) * N_SAMPLES,
            token_arrays_json_bytes=token_json,
            token_arrays_arrow_bytes=token_arrow,
            leases=leases,
        )


TOKEN_SAMPLE_GROUPS = 8  # 64 trajectories
_TOKEN_VALUE = re.compile(
    rb'"(?:%s)"\s*:\s*(\[[^\]]*\])' % b"|".join(f.encode() for f in TOKEN_FIELDS)
)


def token_array_sizes(
    client: httpx.Client, rollout_id: str, groups: int
) -> tuple[int, dict[str, int]]:
    """Bytes of the token arrays (prompt and response ids, loss mask, logprobs) of the same
    `groups` groups in the API's own answers: leased as Arrow, left to expire, leased again as
    JSON and acked. JSON: the four arrays' text in the JSON body. Arrow: those four columns of
    the Arrow body, encoded as the API encodes them (its IPC write options: zstd buffers), and
    for comparison with lz4 and without compression. Returns (json_bytes, arrow bytes by
    compression)."""
    body = {"max_groups": groups, "wait_s": 10, "rollout_id": rollout_id, "lease_s": 1.0}
    r = client.post("/v1/batches/lease", json=body, headers={"Accept": ARROW})
    if r.status_code != 200:
        raise DataPathFailed(f"arrow lease: {r.status_code} {r.text[:300]}")
    table = pa.ipc.open_stream(r.content).read_all()
    time.sleep(max(0.0, float(r.headers["X-Lease-Expires-At"]) - time.time()) + 0.1)
    body = {"max_groups": groups, "wait_s": 10, "rollout_id": rollout_id}
    j = client.post("/v1/batches/lease", json=body, headers={"Accept": "application/json"})
    if j.status_code != 200:
        raise DataPathFailed(f"json lease: {j.status_code} {j.text[:300]}")
    ids = sorted(t["trajectory_id"] for g in orjson.loads(j.content)["groups"]
                 for t in g["trajectories"])  # fmt: skip
    if ids != sorted(table.column("trajectory_id").to_pylist()):
        raise DataPathFailed("the JSON lease did not offer again the groups of the Arrow lease")
    ack = client.post(f"/v1/batches/{j.headers['X-Batch-Id']}/ack")
    if ack.status_code != 200:
        raise DataPathFailed(f"ack: {ack.status_code} {ack.text[:300]}")
    json_bytes = sum(len(m.group(1)) for m in _TOKEN_VALUE.finditer(j.content))
    tokens = table.select(list(TOKEN_FIELDS))
    sizes = {}
    for name, options in (
        ("zstd", ARROW_IPC_OPTIONS),  # what the API writes
        ("lz4", pa.ipc.IpcWriteOptions(compression="lz4")),  # the alternatives it could
        ("none", pa.ipc.IpcWriteOptions()),
    ):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tokens.schema, options=options) as writer:
            writer.write_table(tokens)
        sizes[name] = sink.getvalue().size
    return json_bytes, sizes


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
