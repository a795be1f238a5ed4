"""`/readyz` follows the policy server (`rollouts serve` as a real process): not ready (503,
`checks.policy` false) while nothing answers at the policy URL, ready once the policy server
is up, and not ready again when it goes away; `/healthz` (liveness) stays 200 throughout."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from clients.commands.policy_stub import free_port
from tests.e2e.live import serve, stand_in, wait_until

pytestmark = pytest.mark.docker  # the service's Docker check must pass for "ready"


def test_readyz_follows_the_policy_server(tmp_path: Path) -> None:
    port = free_port()
    with serve(tmp_path, [f"http://127.0.0.1:{port}"]) as svc:

        def ready() -> tuple[int, dict]:
            r = svc.call("GET", "/readyz", timeout=30)
            return r.status_code, r.json()

        assert ready() == (
            503,
            {"status": "not ready", "checks": {"policy": False, "docker": True}},
        )
        with stand_in(tmp_path, port=port, record=False) as policy:
            wait_until("ready", lambda: ready()[0] == 200, 30)
            assert ready() == (200, {"status": "ready", "checks": {"policy": True, "docker": True}})
            policy.kill()
            code, body = ready()
            assert code == 503 and body["checks"] == {"policy": False, "docker": True}
        assert httpx.get(svc.url + "/healthz", timeout=10).status_code == 200
        assert (
            svc.call("GET", "/readyz", headers={"Authorization": "Bearer nope"}).status_code == 401
        )
