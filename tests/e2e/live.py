"""Helpers of the end-to-end tests that drive a real `rollouts serve` process over loopback HTTP
(raw httpx: no TrainerClient, so nothing is deduplicated or retried behind the test's back), a
real stand-in policy server (`python -m standin`, whose `--record` file says what it served and
whose dev-mode `/pause` and `/resume` hold generation where a test needs it), real SQLite and
real Docker sandboxes.

Not a test module: the test files import it as `tests.e2e.live`.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from clients.commands.policy_stub import free_port, stop_process, wait_healthy
from sandboxes.docker_adapter import default_adapter

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")
API_KEY = "live-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
ARROW = "application/vnd.apache.arrow.stream"
# rloo over a group of any size: lets a test use groups of 1 or 2 samples (rloo_n with the
# default min_group_size 4 refuses them with 422).
SMALL_GROUPS = {"estimator": "rloo", "min_group_size": 1}


def wait_until(what: str, predicate: Callable[[], Any], timeout_s: float, poll_s: float = 0.1):
    """Poll `predicate` until it returns something truthy (returned); fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def read_metric(text: str, name: str, whose: str) -> float:
    """The first sample of `name` in a Prometheus text page (with or without labels)."""
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in the {whose}'s /metrics")


# ---------------------------------------------------------------- the stand-in


@dataclass
class StandIn:
    url: str
    process: subprocess.Popen[bytes]
    record: Path | None

    def served(self) -> list[dict[str, Any]]:
        """Every choice served so far, in order (one JSON line per choice)."""
        if self.record is None or not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def requests(self) -> list[list[dict[str, Any]]]:
        """Served choices grouped by request: a request's choices are written together, with
        `index` 0..n-1."""
        out: list[list[dict[str, Any]]] = []
        for line in self.served():
            if line["index"] == 0:
                out.append([])
            out[-1].append(line)
        return out

    def pause(self) -> None:
        assert httpx.post(self.url + "/pause", params={"mode": "keep"}, timeout=10).is_success

    def resume(self) -> None:
        assert httpx.post(self.url + "/resume", timeout=10).is_success

    def metric(self, name: str) -> float:
        return read_metric(httpx.get(self.url + "/metrics", timeout=10).text, name, "stand-in")

    def detokenize(self, ids: list[int]) -> str:
        r = httpx.post(self.url + "/detokenize", json={"tokens": ids}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["prompt"]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@contextlib.contextmanager
def stand_in(
    tmp: Path,
    *,
    p_correct: float = 1.0,
    seed: int = 0,
    port: int | None = None,
    record: bool = True,
    extra: list[str] | None = None,
) -> Iterator[StandIn]:
    """The stand-in as its own process on loopback; never a malformed reply unless asked."""
    port = port or free_port()
    rec = tmp / f"served-{port}.jsonl" if record else None
    cmd = [sys.executable, "-m", "standin", "--tasks", TASKS, "--port", str(port)]
    cmd += ["--p-correct", str(p_correct), "--seed", str(seed), "--p-malformed", "0"]
    if rec is not None:
        cmd += ["--record", str(rec)]
    cmd += extra or []
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    s = StandIn(f"http://127.0.0.1:{port}", proc, rec)
    try:
        wait_healthy(s.url, 60, proc)
        yield s
    finally:
        stop_process(proc)


# ---------------------------------------------------------------- the service


@dataclass
class Service:
    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        kw.setdefault("timeout", 120)
        headers = {**AUTH, **kw.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, **kw)

    def submit(self, body: dict[str, Any]) -> str:
        r = self.call("POST", "/v1/rollouts", json=body)
        assert r.status_code == 202, r.text
        return r.json()["id"]

    def status(self, rollout_id: str) -> dict[str, Any]:
        r = self.call("GET", f"/v1/rollouts/{rollout_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_finished(self, rollout_id: str, timeout_s: float = 300) -> dict[str, Any]:
        try:
            return wait_until(
                f"rollout {rollout_id} to finish",
                lambda: (s := self.status(rollout_id))["status"] != "running" and s,
                timeout_s,
                poll_s=0.3,
            )
        except AssertionError as e:
            try:
                status: Any = self.status(rollout_id)
            except Exception as gone:  # noqa: BLE001 - the service itself may be what failed
                status = repr(gone)
            raise AssertionError(f"{e}\n{status}\n{self.stacks()}") from None

    def stacks(self) -> str:
        """What the service is doing (its SIGUSR1 dump: service/stack_dump.py), from its log."""
        start = self.log_path.stat().st_size
        self.process.send_signal(signal.SIGUSR1)
        with contextlib.suppress(AssertionError):  # a wedged loop never writes it: say so
            wait_until("the stack dump", lambda: b"Thread 0x" in self._log_since(start), 30)
        return self._log_since(start).decode(errors="replace")[-20000:] or "(no stack dump)"

    def _log_since(self, offset: int) -> bytes:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read()

    def metric(self, name: str) -> float:
        return read_metric(self.call("GET", "/metrics").text, name, "service")

    def lease(self, rollout_id: str | None = None, *, wait_s: float = 0, **body: Any):
        body = {"rollout_id": rollout_id, "wait_s": wait_s, **body}
        return self.call("POST", "/v1/batches/lease", json=body, timeout=wait_s + 60)

    def ack(self, batch_id: str) -> httpx.Response:
        return self.call("POST", f"/v1/batches/{batch_id}/ack")

    def drain(self, rollout_id: str | None = None, wait_s: float = 30) -> list[dict[str, Any]]:
        """Lease and ack until nothing is left; the groups in delivery order."""
        groups: list[dict[str, Any]] = []
        while True:
            r = self.lease(rollout_id, wait_s=wait_s)
            if r.status_code == 204:
                if r.headers["X-Rollouts-Remaining"] == "0":
                    return groups
                continue
            assert r.status_code == 200, r.text
            groups += r.json()["groups"]
            assert self.ack(r.json()["batch_id"]).status_code == 200

    def set_policy(self, version: int, max_staleness: int | None = None) -> dict[str, Any]:
        r = self.call(
            "POST", "/v1/policy", json={"version": version, "max_staleness": max_staleness}
        )
        assert r.status_code == 200, r.text
        return r.json()


@contextlib.contextmanager
def serve(tmp: Path, policy_urls: list[str], *extra: str) -> Iterator[Service]:
    """`rollouts serve` as its own process on a free loopback port, API key on."""
    port = free_port()
    data = tmp / f"data-{port}"
    cmd = [sys.executable, "-m", "clients.cli", "serve", "--port", str(port)]
    cmd += ["--data-dir", str(data), "--api-key", API_KEY, "--log-level", "warning"]
    cmd += ["--tasks-root", TASKS]
    for url in policy_urls:
        cmd += ["--policy-url", url]
    cmd += list(extra)
    log_path = tmp / f"serve-{port}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, 90, proc, path="/healthz")
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{log_path.read_text()[-2000:]}") from e
        yield Service(url, proc, data, log_path)
    finally:
        stop_process(proc, timeout_s=60)
        log.close()


def trajectories(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for g in groups for t in g["trajectories"]]


def generated_spans(t: dict[str, Any]) -> list[tuple[int, int]]:
    """[start, end) of each generated run (loss_mask 1) in the response."""
    spans, start = [], None
    for i, m in enumerate([*t["loss_mask"], 0]):
        if m == 1 and start is None:
            start = i
        elif m == 0 and start is not None:
            spans.append((start, i))
            start = None
    return spans


def turns_served(t: dict[str, Any], served: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The served choices that are this trajectory's turns, in turn order: each generated span,
    with the whole sequence before it as the prompt. Fails if a span was never served."""
    seq = t["prompt_token_ids"] + t["response_token_ids"]
    offset = len(t["prompt_token_ids"])
    out = []
    for start, end in generated_spans(t):
        prompt, ids = seq[: offset + start], seq[offset + start : offset + end]
        match = [c for c in served if c["prompt_token_ids"] == prompt and c["token_ids"] == ids]
        assert match, f"{t['trajectory_id']}: turn at {start}:{end} was never served"
        out.append(match[0])
    return out


def _managed(filters: dict[str, str]) -> list[dict[str, Any]]:
    # The low-level list: one call, no per-container inspect that could race a removal.
    return default_adapter().client.api.containers(
        all=True, filters={"label": [f"{k}={v}" for k, v in filters.items()]}
    )


def containers_with(label: str, value: str) -> list[str]:
    return [c["Id"] for c in _managed({label: value})]


def containers_of(pids: list[int]) -> list[str]:
    """Containers created by these processes of this host (owner label host:pid:start)."""
    owners = {f"{socket.gethostname()}:{pid}" for pid in pids}
    return [
        c["Id"]
        for c in _managed({"rollouts.managed": "true"})
        if (c.get("Labels") or {}).get("rollouts.owner", "").rpartition(":")[0] in owners
    ]
