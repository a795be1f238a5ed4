"""Rollout requests that name their own policy servers (service/policy/named.py, allowlist.py,
follower.py): only URLs under the operator's `--allow-policy-url` prefixes are taken, anything
else is a 403 naming the field that touches nothing (no rollout, no runner, no connection to
the named host); a named set gets a client of its own, is shared while in use and closed when
idle; and its servers are asked, never told (a trainer's tags are its tokens' versions).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.policy.allowlist import NotAllowed, PolicyAllowList
from service.policy.client import PolicyClient
from service.policy.follower import FollowerFleet
from service.policy.named import NamedPolicies, NamedPolicyRunner
from service.sample import PolicyTarget, SampleSpec, SamplingParams
from tests.unit.live_service import Runner, Server, make_settings, wait_for
from tests.unit.test_policy_updates import StandIn

ALLOWED = "http://trainer.example:8000/replicas"


@pytest.mark.parametrize(
    "url",
    [
        "http://trainer.example:8000/replicas",
        "http://trainer.example:8000/replicas/",
        "http://TRAINER.example:8000/replicas/0",
        "http://trainer.example:8000/replicas/0/v1",
    ],
)
def test_urls_under_the_prefix_are_allowed(url: str) -> None:
    PolicyAllowList([ALLOWED]).check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://trainer.example:8000@evil.example/replicas",  # user info: the host is evil
        "http://trainer.example:8000\\@evil.example/replicas",  # a backslash before '@'
        "http://trainer.example.evil:8000/replicas",  # a longer host name
        "http://evil.example/trainer.example:8000/replicas",  # the prefix in the path
        "http://evil.example:8000/replicas?u=http://trainer.example:8000/replicas",
        "http://evil.example:8000/#http://trainer.example:8000/replicas",
        "http://trainer.example:80/replicas",  # another port
        "http://trainer.example/replicas",  # the default port is 80, not 8000
        "http://trainer.example:8000x/replicas",  # not a port
        "https://trainer.example:8000/replicas",  # another scheme
        "http://trainer.example:8000/replicas-evil",  # the path, not at a segment boundary
        "http://trainer.example:8000/replicasx/0",
        "http://trainer.example:8000/replicas/../admin",  # a dot segment
        "http://trainer.example:8000/replicas/%2e%2e/admin",  # an escaped one
        "http://trainer.example:8000//replicas",
        "http://trainer.example.:8000/replicas",  # a trailing dot: another name to a parser
        "http://trаiner.example:8000/replicas",  # a Cyrillic 'а'
        "http://trainer.example:8000/replicas\t",
        " http://trainer.example:8000/replicas",
        "http:/trainer.example:8000/replicas",
        "//trainer.example:8000/replicas",
        "file:///etc/passwd",
        "http://[::1]:8000/replicas",
        "",
    ],
)
def test_tricky_urls_are_not_allowed(url: str) -> None:
    with pytest.raises(NotAllowed):
        PolicyAllowList([ALLOWED]).check(url)


def test_a_prefix_without_a_port_means_the_scheme_default_and_ipv6_compares_parsed() -> None:
    allow = PolicyAllowList(["http://trainer.example", "http://[::1]:9000"])
    allow.check("http://trainer.example:80/anything")
    allow.check("http://[::1]:9000")
    for url in ("http://trainer.example:8080", "http://[::2]:9000", "http://[::1]:90000"):
        with pytest.raises(NotAllowed):
            allow.check(url)
    with pytest.raises(ValueError, match="--allow-policy-url"):
        PolicyAllowList(["http://user@trainer.example"])


class Canary:
    """An HTTP server that counts every request it gets: the host a refused URL names."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Canary:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class PolicyRecordingRunner(Runner):
    """Records, per sample, the policy client it ran on (None: the service's)."""

    def __init__(self, client: Any = None, seen: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.client = client
        self.seen: dict[str, Any] = {} if seen is None else seen

    def with_policy(self, client: PolicyClient, _version: Callable[[], int]) -> Runner:
        return PolicyRecordingRunner(client, self.seen)

    def report(self, spec: SampleSpec) -> Any:
        self.seen[spec.trajectory_id] = (self.client, spec.policy)
        return super().report(spec)


@pytest.fixture
def canary() -> Iterator[Canary]:
    with Canary() as c:
        yield c


def named_server(
    tmp_path: Path, prefixes: list[str], made: list[PolicyTarget]
) -> tuple[Server, PolicyRecordingRunner]:
    def make(target: PolicyTarget) -> PolicyClient:
        made.append(target)
        return PolicyClient(list(target.urls), target.model, fleet=FollowerFleet)

    named = NamedPolicies(PolicyAllowList(prefixes), make)
    base = PolicyRecordingRunner()
    runner = NamedPolicyRunner(base, named)  # type: ignore[arg-type]
    return Server(make_settings(tmp_path), runner, named_policies=named), base


def test_a_url_outside_the_allow_list_is_403_naming_it_and_touches_nothing(
    tmp_path: Path, canary: Canary
) -> None:
    base = f"http://127.0.0.1:{canary.port}"
    made: list[PolicyTarget] = []
    server, runner = named_server(tmp_path, [base + "/trainer"], made)
    refused = [
        f"{base}/trainer-evil",
        f"{base}/trainer/../admin",
        f"{base}/trainer/%2e%2e/admin",
        f"http://127.0.0.1:1@127.0.0.1:{canary.port}/trainer",
        f"http://127.0.0.1:1\\@127.0.0.1:{canary.port}/trainer",
        f"{base}/?next={base}/trainer",
        f"{base}#{base}/trainer",
        f"https://127.0.0.1:{canary.port}/trainer",
        f"http://localhost:{canary.port}/trainer",  # another name for the host: not the prefix
    ]
    tasks = {"path": str(Path(__file__).resolve().parents[2] / "examples" / "tasks"), "limit": 1}
    with server, server.client() as c:
        for url in refused:
            body = {"tasks": tasks, "n_samples": 4, "policy": {"urls": [f"{base}/trainer", url]}}
            r = c.post("/v1/rollouts", json=body)
            assert r.status_code == 403, (url, r.text)
            (item,) = r.json()["detail"]
            assert item["loc"] == ["body", "policy", "urls", 1], item
            assert item["type"] == "not_allowed"
        # An allowed set is taken, runs on a client of its own, and is dropped when idle.
        body = {"tasks": tasks, "n_samples": 4, "policy": {"urls": [base + "/trainer/v1"]}}
        r = c.post("/v1/rollouts", json=body)
        assert r.status_code == 202, r.text
        wait_for(lambda: len(runner.seen) == 4, what="every sample")
        rollouts = server.db("SELECT id FROM rollouts")
    assert len(rollouts) == 1, rollouts  # the refused requests queued nothing
    assert canary.hits == []  # and nothing reached the host they named
    assert made == [PolicyTarget((base + "/trainer",), None)]
    clients = {id(client) for client, _ in runner.seen.values()}
    assert len(clients) == 1 and None not in {client for client, _ in runner.seen.values()}
    assert {target for _, target in runner.seen.values()} == set(made)


def test_a_service_without_allowed_prefixes_refuses_every_named_server(tmp_path: Path) -> None:
    tasks = {"path": str(Path(__file__).resolve().parents[2] / "examples" / "tasks"), "limit": 1}
    with Server(make_settings(tmp_path), Runner()) as server, server.client() as c:
        body = {"tasks": tasks, "n_samples": 4, "policy": {"urls": ["http://127.0.0.1:1"]}}
        r = c.post("/v1/rollouts", json=body)
        assert r.status_code == 403, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "policy", "urls"]
        assert server.db("SELECT id FROM rollouts") == []


async def test_sets_are_shared_while_used_and_closed_when_idle() -> None:
    now = [0.0]
    made: list[PolicyClient] = []

    def make(target: PolicyTarget) -> PolicyClient:
        made.append(PolicyClient(list(target.urls), target.model, fleet=FollowerFleet))
        return made[-1]

    named = NamedPolicies(
        PolicyAllowList(["http://127.0.0.1:1"]), make, idle_s=60, clock=lambda: now[0]
    )
    a = PolicyTarget(("http://127.0.0.1:1",), None)
    b = PolicyTarget(("http://127.0.0.1:1",), "other-model")
    try:
        async with named.lease(a) as one, named.lease(a) as two:
            assert one is two and named.active == {a: 2}
            now[0] = 1000.0
            await named.sweep()  # in use: kept, however long ago it was opened
            assert named.active == {a: 2}
        async with named.lease(b):
            assert named.active == {a: 0, b: 1}
        now[0] = 1059.0
        await named.sweep()
        assert set(named.active) == {a, b}
        now[0] = 1060.0
        await named.sweep()
        assert named.active == {}
        async with named.lease(a) as again:
            assert again is not made[0]  # reopened: a fresh client
    finally:
        await named.aclose()


async def test_a_trainers_server_is_asked_never_told_and_its_tags_are_the_versions(
    tmp_path: Path,
) -> None:
    """The service's own client tags a fresh engine ("default") with its version; a follower
    leaves it as it is. Tokens carry the trainer's tag, span by span, after the trainer
    retags the server between two generations."""
    with StandIn(tmp_path / "served.jsonl") as stand_in:
        client = PolicyClient([stand_in.url], fleet=FollowerFleet, backoff_s=0.05)
        try:
            await client.start()
            prompt = await client.tokenize_messages([{"role": "user", "content": "Hello."}])
            params = SamplingParams(max_tokens=8, seed=3)
            (first,) = await client.complete(prompt, params)
            assert httpx.get(stand_in.url + "/weight_info").json()["weight_version"] == "default"
            assert set(first.versions) == {0}  # an untagged engine: no version of its own
            await stand_in.post("/update_weight_version", json={"new_version": "17"})  # trainer
            (second,) = await client.complete(prompt, params)
            assert set(second.versions) == {17} and len(second.versions) == len(second.token_ids)
            assert httpx.get(stand_in.url + "/weight_info").json()["weight_version"] == "17"
            assert client.fleet.stats.discarded_tokens == 0
        finally:
            await client.aclose()
