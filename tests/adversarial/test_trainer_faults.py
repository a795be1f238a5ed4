"""Trainer faults against a real `rollouts serve` (stand-in policy, real Docker sandboxes):
the trainer goes away mid-lease, acks twice, acks an expired lease, acks an unknown batch.

Each must either redeliver the groups or answer a clear 4xx, as docs/delivery.md says. Leases
use a short `lease_s`, so "offered again after lease expiry" is observable in seconds.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from harness import EXAMPLES, CaseLog, free_port, run_stand_in
from service_process import (
    AUTH,
    ack,
    lease,
    start_service,
    stop_service,
    trajectory_ids,
    wait_groups_complete,
)

pytestmark = pytest.mark.docker
LEASE_S = 3.0
N = 2  # samples per group: enough for a group, cheap on 2 cores


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("trainer-faults")
    with run_stand_in(p_correct=0.5) as policy_url:
        port = free_port()
        proc = start_service(
            data / "data", policy_url, port, "--max-concurrent-samples", "4",
            "--tasks-root", str(EXAMPLES),
        )  # fmt: skip
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_service(proc)


def submit(url: str) -> str:
    """One group of N samples. rloo: groups this small are refused by rloo_n's default
    min_group_size (422)."""
    body = {"tasks": {"path": str(EXAMPLES), "limit": 1}, "n_samples": N,
            "sampling": {"seed": 1}, "advantage": {"estimator": "rloo"}}  # fmt: skip
    r = httpx.post(url + "/v1/rollouts", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _expected_ids(rollout_id: str) -> list[str]:
    return [f"{rollout_id}.g0.s{k}" for k in range(N)]


def _raw_lease(url: str, body: dict[str, object]) -> socket.socket:
    """A lease request on a raw socket, so the test decides when the client vanishes."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)), timeout=10)
    head = (
        f"POST /v1/batches/lease HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: {AUTH['Authorization']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    s.sendall(head.encode() + data)
    return s


def _redelivered(url: str, rollout_id: str) -> tuple[list[str], float, int]:
    """Lease (waiting past the dead client's lease), ack; (ids, seconds waited, ack status)."""
    started = time.monotonic()
    r = lease(url, rollout_id, wait_s=LEASE_S + 20)
    waited = round(time.monotonic() - started, 2)
    assert r.status_code == 200, f"groups not offered again: {r.status_code} {r.text[:200]}"
    ids = trajectory_ids(r)
    return ids, waited, ack(url, r.json()["batch_id"]).status_code


def test_disconnect_while_long_polling(service: str, case: CaseLog) -> None:
    result = case.add(
        "trainer_gone_mid_long_poll", "raw HTTP client",
        f"lease(wait_s=30, lease_s={LEASE_S}) before any group is ready; close the socket",
    )  # fmt: skip
    rollout_id = submit(service)
    s = _raw_lease(service, {"rollout_id": rollout_id, "wait_s": 30, "lease_s": LEASE_S})
    time.sleep(0.5)
    s.close()  # the server's long poll goes on and may lease the group to nobody
    wait_groups_complete(service, rollout_id, 1)
    ids, waited, acked = _redelivered(service, rollout_id)
    left = lease(service, rollout_id, wait_s=0).headers.get("X-Rollouts-Remaining")
    result.observed = {"redelivered": len(ids), "waited_s": waited, "ack": acked, "remaining": left}
    assert sorted(ids) == _expected_ids(rollout_id)
    assert acked == 200 and left == "0"


def test_disconnect_after_grant_before_reading(service: str, case: CaseLog) -> None:
    result = case.add(
        "trainer_gone_before_reading_lease", "raw HTTP client",
        f"lease(lease_s={LEASE_S}) granted; the client closes without reading the body",
    )  # fmt: skip
    rollout_id = submit(service)
    wait_groups_complete(service, rollout_id, 1)
    s = _raw_lease(service, {"rollout_id": rollout_id, "wait_s": 0, "lease_s": LEASE_S})
    readable, _, _ = select.select([s], [], [], 30)  # the response is in the socket buffer...
    s.close()  # ...and never read
    assert readable, "no lease response within 30 s"
    held = lease(service, rollout_id, wait_s=0).status_code  # the dead client holds the lease
    ids, waited, acked = _redelivered(service, rollout_id)
    result.observed = {"while_held": held, "redelivered": len(ids), "waited_s": waited,
                       "ack": acked}  # fmt: skip
    assert held == 204
    assert sorted(ids) == _expected_ids(rollout_id) and acked == 200


def test_ack_faults(service: str, case: CaseLog) -> None:
    expired = case.add("trainer_acks_expired_lease", "raw HTTP client",
                       "lease(lease_s=1); ack after lease_expires_at")  # fmt: skip
    twice = case.add("trainer_acks_twice", "raw HTTP client", "ack the same batch twice")
    unknown = case.add("trainer_acks_unknown_batch", "raw HTTP client",
                       "ack a batch id never leased")  # fmt: skip
    rollout_id = submit(service)
    wait_groups_complete(service, rollout_id, 1)

    first = lease(service, rollout_id, wait_s=10, lease_s=1.0)
    assert first.status_code == 200, first.text[:200]
    time.sleep(max(0.0, first.json()["lease_expires_at"] - time.time()) + 0.5)
    late = ack(service, first.json()["batch_id"])
    again = lease(service, rollout_id, wait_s=10)  # the groups are offered again
    expired.observed = {"ack": late.status_code, "detail": late.json().get("detail"),
                        "offered_again": again.status_code}  # fmt: skip
    assert late.status_code == 409 and "expired" in late.json()["detail"]
    assert again.status_code == 200 and sorted(trajectory_ids(again)) == _expected_ids(rollout_id)

    batch_id = again.json()["batch_id"]
    a1, a2 = ack(service, batch_id), ack(service, batch_id)
    after = lease(service, rollout_id, wait_s=0)
    twice.observed = {"acks": [a1.status_code, a2.status_code],
                      "already_acked": [a1.json()["already_acked"], a2.json()["already_acked"]],
                      "lease_after": after.status_code}  # fmt: skip
    assert (a1.status_code, a2.status_code) == (200, 200)
    assert (a1.json()["already_acked"], a2.json()["already_acked"]) == (False, True)
    assert after.status_code == 204 and after.headers["X-Rollouts-Remaining"] == "0"

    bogus = ack(service, "b-does-not-exist")
    unknown.observed = {"ack": bogus.status_code, "detail": bogus.json().get("detail")}
    assert bogus.status_code == 404 and "b-does-not-exist" in bogus.json()["detail"]
