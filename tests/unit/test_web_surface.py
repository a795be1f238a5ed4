"""The service's web surface. What a web page can do with it through the user's browser
(service/web_guard.py): a DNS-rebound name is refused, another site cannot post, and the UI
may not be framed. And what event streams cost: capped, one readiness run for all of them.
Real uvicorn servers on loopback, real HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from service.settings import ServiceSettings
from service.ui.sources import StoreSource
from service.ui.viewer import create_view_app
from tests.unit.live_service import AUTH, Server, free_port, serve_in_thread
from tests.unit.test_api import GatedRunner, client, make_settings

BODY = {"tasks": {"path": "bundled", "limit": 1}, "n_samples": 4}


def test_a_rebound_name_is_refused_and_loopback_names_are_served(tmp_path: Path) -> None:
    with Server(make_settings(tmp_path), GatedRunner()) as server, client(server) as c:
        port = server.url.rsplit(":", 1)[1]
        for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.2", ""):
            r = c.get("/v1/policy", headers={"Host": host})
            assert r.status_code == 421, (host, r.text)
            assert "--allowed-host" in r.json()["detail"]
            r = c.post("/v1/rollouts", json=BODY, headers={"Host": host})
            assert r.status_code == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
            assert c.get("/v1/policy", headers={"Host": host}).status_code == 200, host
        assert server.runner.started == 0  # nothing a refused request asked for ran


def test_allowed_hosts_add_names_and_a_star_allows_any(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, allowed_hosts=["trainer.internal"])
    with Server(settings, GatedRunner()) as server, client(server) as c:
        assert c.get("/healthz", headers={"Host": "trainer.internal:80"}).status_code == 200
        assert c.get("/healthz", headers={"Host": "other.internal"}).status_code == 421
    assert ServiceSettings(allowed_hosts=["*"]).host_allowlist() is None
    # Beyond loopback a key is required, which no page can send: any name unless some are given.
    exposed = ServiceSettings(host="0.0.0.0", api_key="k")
    assert exposed.host_allowlist() is None
    named = ServiceSettings(host="10.0.0.5", api_key="k", allowed_hosts=["rollouts"])
    assert set(named.host_allowlist() or []) == {"localhost", "127.0.0.1", "::1", "10.0.0.5",
                                                  "rollouts"}  # fmt: skip


def test_another_sites_page_cannot_post_but_the_service_own_origin_can(tmp_path: Path) -> None:
    runner = GatedRunner()
    with Server(make_settings(tmp_path), runner) as server, client(server) as c:
        r = c.post("/v1/rollouts", json=BODY, headers={"Origin": "https://attacker.example"})
        assert r.status_code == 403 and "Origin" in r.json()["detail"]
        r = c.post("/v1/rollouts", json=BODY, headers={"Origin": "null"})  # a sandboxed frame
        assert r.status_code == 403
        # A GET is not a state change: the key still guards it.
        r = c.get("/v1/policy", headers={"Origin": "https://attacker.example"})
        assert r.status_code == 200
        assert runner.started == 0
        r = c.post("/v1/rollouts", json=BODY, headers={"Origin": server.url})
        assert r.status_code == 202, r.text
        r = c.post("/v1/rollouts", json=BODY)  # programs send no Origin
        assert r.status_code == 202, r.text


def test_every_response_forbids_framing_and_sniffing(tmp_path: Path) -> None:
    with Server(make_settings(tmp_path), GatedRunner()) as server, client(server) as c:
        for path in ("/ui", "/healthz", "/v1/policy"):
            h = c.get(path).headers
            assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff"
            assert "frame-ancestors 'none'" in h["content-security-policy"]
            assert "script-src" not in h["content-security-policy"]  # default-src 'self'
        assert c.get("/healthz", headers={"Host": "evil"}).headers.get("x-frame-options") is None


@pytest.mark.parametrize("host, status", [("attacker.example", 421), ("127.0.0.1", 200)])
def test_the_view_serves_loopback_names_only(tmp_path: Path, host: str, status: int) -> None:
    from tests.unit.test_ui_api import generate_store

    generate_store(tmp_path, "r1", n_groups=1, n_samples=2)
    port = free_port()
    with serve_in_thread(create_view_app(StoreSource(tmp_path, "test")), port):
        r = httpx.get(f"http://127.0.0.1:{port}/ui", headers={"Host": host}, timeout=10)
        assert r.status_code == status
        if status == 200:
            assert r.headers["x-frame-options"] == "DENY"


def test_event_streams_are_capped_and_share_one_readiness_run(tmp_path: Path) -> None:
    calls = 0

    async def ready() -> bool:
        nonlocal calls
        calls += 1
        return True

    settings = make_settings(tmp_path, max_event_streams=3)
    with Server(settings, GatedRunner(), readiness={"policy": ready}) as server:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
            streams = [c.stream("GET", "/v1/events") for _ in range(3)]
            opened = [s.__enter__() for s in streams]
            lines = [r.iter_lines() for r in opened]  # kept: a dropped iterator closes its stream
            try:
                for r, it in zip(opened, lines, strict=True):
                    assert r.status_code == 200
                    assert next(it) == "event: stats"
                r = c.get("/v1/events")
                assert r.status_code == 429 and "event streams" in r.json()["detail"]
                assert "retry-after" in r.headers
                # Three streams, each with a stats event: one readiness run between them.
                assert calls == 1
            finally:
                for s in streams:
                    s.__exit__(None, None, None)
            deadline = time.monotonic() + 20  # a closed stream gives its place back
            while True:
                with c.stream("GET", "/v1/events") as r:
                    if r.status_code == 200:
                        break
                assert time.monotonic() < deadline
                time.sleep(0.2)
