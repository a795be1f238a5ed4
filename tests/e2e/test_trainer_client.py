"""`TrainerClient` and `AsyncTrainerClient` against a real `rollouts serve` (the stand-in, real
Docker sandboxes), through an HTTP proxy that answers chosen requests with 5xx or 429 itself
before passing the rest on. The proxy logs every request, so the tests see each retry:

- 5xx and 429 are retried (429's Retry-After is honoured) and the call then succeeds, once:
  a retried submit creates one rollout;
- a 4xx is not retried; a fault that outlasts the retries is raised as ServiceError;
- the async client submits, leases, acks, reads status, sets the policy and cancels.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from clients.trainer import AsyncTrainerClient, ServiceError, TrainerClient
from tests.e2e.live import API_KEY, SMALL_GROUPS, TASKS, Service, serve, stand_in

pytestmark = pytest.mark.docker


@dataclass
class FaultingProxy:
    """Forwards to `upstream`, except requests matching a queued fault, which it answers with
    that fault itself. `log`: (time, method, path, status answered) of every request."""

    upstream: str
    faults: list[tuple[str, str, int, dict[str, str]]] = field(default_factory=list)
    log: list[tuple[float, str, str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(
        self, method: str, path: str, status: int, times: int = 1, **headers: str
    ) -> None:
        """Answer the next `times` requests `method path` with `status` (and `headers`)."""
        with self.lock:
            self.faults += [(method, path, status, headers)] * times

    def calls(self, method: str, path: str) -> list[int]:
        """The statuses answered to `method path`, in order."""
        return [s for _, m, p, s in self.log if (m, p) == (method, path)]

    def acks(self) -> list[int]:
        return [s for _, m, p, s in self.log if m == "POST" and p.endswith("/ack")]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.lock:
                    fault = next(
                        (f for f in proxy.faults if (self.command, self.path) == f[:2]), None
                    )
                    if fault is not None:
                        proxy.faults.remove(fault)
                if fault is not None:
                    status, headers = fault[2], fault[3]
                    content, ctype = b'{"detail": "injected fault"}', "application/json"
                else:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    r = httpx.request(self.command, proxy.upstream + self.path,
                                      content=body, headers=headers, timeout=300)  # fmt: skip
                    status, content = r.status_code, r.content
                    headers = {
                        k: v
                        for k, v in r.headers.items()
                        if k.lower().startswith("x-") or k.lower() == "retry-after"
                    }
                    ctype = r.headers.get("content-type", "application/octet-stream")
                with proxy.lock:
                    proxy.log.append((time.monotonic(), self.command, self.path, status))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_DELETE = _serve

        return Handler


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("trainer-client")
    with stand_in(tmp, p_correct=1.0) as policy, serve(tmp, [policy.url]) as svc:
        yield svc


@pytest.fixture
def proxy(service: Service) -> Iterator[tuple[str, FaultingProxy]]:
    state = FaultingProxy(service.url)
    server = ThreadingHTTPServer(("127.0.0.1", 0), state.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def _submit_args(**kw: object) -> dict:
    return {"n_samples": 2, "ids": ["camel-to-snake"], "sampling": {"seed": 1},
            "agent": {"max_turns": 1}, "advantage": SMALL_GROUPS, **kw}  # fmt: skip


def test_sync_client_retries_5xx_and_429_and_not_4xx(
    service: Service, proxy: tuple[str, FaultingProxy]
) -> None:
    url, p = proxy
    with TrainerClient(url, API_KEY, retries=4, backoff_s=0.05) as client:
        p.fail_next("POST", "/v1/rollouts", 503)
        p.fail_next("POST", "/v1/rollouts", 429, **{"Retry-After": "1"})
        p.fail_next("POST", "/v1/rollouts", 500)
        rid = client.submit(TASKS, **_submit_args())
        assert p.calls("POST", "/v1/rollouts") == [503, 429, 500, 202]
        # Retry-After: 1 was waited for before the third attempt.
        posts = [t for t, m, path, _ in p.log if m == "POST" and path == "/v1/rollouts"]
        assert posts[2] - posts[1] >= 1.0
        # A retried submit created one rollout, not four.
        assert client.status(rid).samples_total == 2

        with pytest.raises(ServiceError) as err:  # 4xx: answered at once, never retried
            client.status("no-such-rollout")
        assert err.value.status_code == 404
        assert p.calls("GET", "/v1/rollouts/no-such-rollout") == [404]

        p.fail_next("POST", "/v1/policy", 502, times=5)  # outlasts 1 + 4 retries
        with pytest.raises(ServiceError) as err:
            client.set_policy(0)
        assert err.value.status_code == 502 and p.calls("POST", "/v1/policy") == [502] * 5

        service.wait_finished(rid)  # short leases below: no long poll through the proxy
        p.fail_next("POST", "/v1/batches/lease", 503, times=2)
        got = []
        for batch in client.batches(rollout_id=rid, wait_s=1):
            got += [t.trajectory_id for t in batch.trajectories]
            batch.ack()
        assert sorted(got) == [f"{rid}.g0.s0", f"{rid}.g0.s1"]
        assert p.calls("POST", "/v1/batches/lease")[:3] == [503, 503, 200]
        assert p.acks() == [200]
        assert service.lease(rid).headers["X-Rollouts-Remaining"] == "0"


def test_async_client_end_to_end(service: Service, proxy: tuple[str, FaultingProxy]) -> None:
    url, p = proxy

    async def run() -> None:
        async with AsyncTrainerClient(url, API_KEY, retries=3, backoff_s=0.05) as client:
            p.fail_next("POST", "/v1/rollouts", 500)
            rid = await client.submit(TASKS, **_submit_args())
            assert p.calls("POST", "/v1/rollouts") == [500, 202]
            await asyncio.to_thread(service.wait_finished, rid)
            p.fail_next("POST", "/v1/batches/lease", 429, **{"Retry-After": "0.2"})
            delivered = []
            async for batch in client.batches(max_groups=8, rollout_id=rid, wait_s=1):
                delivered += batch.trajectories
                await batch.ack()
            assert sorted(t.trajectory_id for t in delivered) == [f"{rid}.g0.s0", f"{rid}.g0.s1"]
            assert all(t.status == "ok" and t.reward == 1.0 for t in delivered)
            assert p.calls("POST", "/v1/batches/lease")[:2] == [429, 200]
            status = await client.status(rid)
            assert status.status == "completed" and status.samples_completed == 2
            policy = await client.set_policy(4, max_staleness=2)
            assert (policy.version, policy.max_staleness) == (4, 2)
            await client.set_policy(4, None)
            # cancel a rollout still queued or running: every sample ends `cancelled`
            other = await client.submit(TASKS, **_submit_args(n_samples=2))
            cancelled = await client.cancel(other)
            assert cancelled.status == "cancelled" and cancelled.samples_completed == 2
            with pytest.raises(ServiceError) as err:
                await client.status("no-such-rollout")
            assert err.value.status_code == 404

    asyncio.run(run())
