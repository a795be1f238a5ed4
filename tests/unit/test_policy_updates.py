"""Weight updates through the policy client's control plane (service/policy/fleet.py), against
the stand-in (real HTTP, in this process): it pauses, reloads other deterministic weights, tags
versions and reports per-token weight versions like vLLM 0.32 in dev mode with --enable-scale-out.

The stand-in's weights are the logit of its scripted token (standin/decoding.py): every token's
logprob says which weights produced it, so each test checks that the version recorded for a token
names the weights its logprob came from, token by token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clients.commands.policy_stub import free_port
from service.policy.client import PolicyClient
from service.policy.fleet import WeightsRefused
from service.policy.generations import Generation
from service.sample import SamplingParams
from standin.background import BackgroundServer
from standin.decoding import WEIGHTS_FILE, SamplingKnobs, logprob_of
from standin.engine import StubSettings
from standin.server import build_app
from standin.tokenizer import StubTokenizer

BASE_LOGIT = 24.0  # the stand-in's own weights (StubSettings.script_logit)
KNOBS = SamplingKnobs(StubTokenizer().vocab_size, 1.0, 1.0, -1, "processed")
LONG = SamplingParams(max_tokens=200, seed=1)


def checkpoint(tmp: Path, name: str, logit: float) -> str:
    folder = tmp / name
    folder.mkdir()
    (folder / WEIGHTS_FILE).write_text(json.dumps({"script_logit": logit}))
    return str(folder)


def check_versions(gen: Generation, logit_of: dict[int, float]) -> None:
    """Each token's logprob is one its recorded version's weights give, and not one any other
    version's weights give."""
    assert len(gen.versions) == len(gen.token_ids) == len(gen.logprobs)
    for lp, v in zip(gen.logprobs, gen.versions, strict=True):
        own = {logprob_of(KNOBS, logit_of[v], s) for s in (True, False)}
        others = {logprob_of(KNOBS, lg, s) for w, lg in logit_of.items() if w != v for s in (1, 0)}
        assert lp in own and lp not in others, (lp, v)


def version_of_salt(salt: str) -> str:
    """`policy-v<N>` of a cache salt `policy-v<N>-<run>`."""
    return salt.rsplit("-", 1)[0]


class StandIn:
    def __init__(self, record: Path, port: int = 0, **settings: object) -> None:
        self.record = record
        self.app = build_app(
            StubSettings(p_malformed=0.0, record=str(record), **settings), tasks=[]
        )
        self.server = BackgroundServer(self.app, port=port)
        self.url = ""

    def __enter__(self) -> StandIn:
        self.server.start()
        self.url = self.server.url
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """Unreachable (connections refused) inside the block, then back on the same port with
        the same engine: its weights and tag kept (an outage, not a restart). Nothing may be
        held in it meanwhile: it comes back on another event loop."""
        self.server.stop()
        try:
            yield
        finally:
            self.server = BackgroundServer(self.app, port=self.server.port).start()

    def served(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def metric(self, name: str) -> float:
        for line in httpx.get(self.url + "/metrics").text.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(name)

    async def post(self, path: str, **kw: object) -> httpx.Response:
        async with httpx.AsyncClient() as h:
            r = await h.post(self.url + path, **kw)  # type: ignore[arg-type]
        assert r.status_code == 200, r.text
        return r


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    with StandIn(tmp_path / "served.jsonl", tokens_per_s=25.0) as s:
        yield s


async def client_for(*urls: str, **kw: object) -> PolicyClient:
    client = PolicyClient(list(urls), backoff_s=0.05, **kw)  # type: ignore[arg-type]
    await client.start()
    return client


async def prompt_of(client: PolicyClient) -> list[int]:
    return await client.tokenize_messages([{"role": "user", "content": "Say something long."}])


async def until_generating(stand_in: StandIn) -> None:
    """Until a request runs and has produced a few tokens (25 tokens/s; the stand-in's replies
    here are about 30 tokens long: over a second)."""
    while stand_in.metric("vllm:num_requests_running") < 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)


async def test_update_from_a_checkpoint_switches_mid_generation(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """keep: the request frozen across the update finishes under the new weights; its tokens
    change version at the exact token, and a new request is salted with the new version."""
    new = checkpoint(tmp_path, "v1", 8.0)
    client = await client_for(stand_in.url)
    try:
        prompt = await prompt_of(client)
        running = asyncio.create_task(client.complete(prompt, LONG, n=2, sample="a"))
        await until_generating(stand_in)
        [report] = await client.fleet.update(1, weights_path=new)
        assert (report.version, report.status) == (1, "serving")
        gens = await running
        for gen in gens:
            assert gen.finish_reason in ("stop", "length")
            switch = gen.versions.index(1)
            assert 0 < switch < len(gen.versions)
            assert gen.versions == [0] * switch + [1] * (len(gen.versions) - switch)
            check_versions(gen, {0: BASE_LOGIT, 1: 8.0})
        [after] = await client.complete(prompt, SamplingParams(max_tokens=5, seed=2), sample="b")
        assert set(after.versions) == {1}
        check_versions(after, {1: 8.0})
        served = stand_in.served()
        salts = [version_of_salt(s["cache_salt"]) for s in served]
        assert salts == ["policy-v0", "policy-v0", "policy-v1"]
        assert all(s["route"] == "generate" for s in served)
        stats = client.stats
        assert stats.in_flight_at_pause == 1 and stats.updates == 1 and stats.pause_seconds > 0
        assert stats.discarded_tokens == 0
    finally:
        await client.aclose()


async def test_trainer_driven_abort_keeps_the_partial_and_holds_new_requests(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """pause(abort): the running request comes back at once with its partial output (version 0);
    its continuation waits in the service until the trainer's weights are tagged, then runs
    under them. The partial and its continuation are the turn, token for token."""
    client = await client_for(stand_in.url)
    try:
        prompt = await prompt_of(client)
        running = asyncio.create_task(client.complete(prompt, LONG, sample="a"))
        await until_generating(stand_in)
        [paused] = await client.fleet.pause("abort")
        assert paused.status == "paused"
        [partial] = await running
        assert partial.finish_reason == "abort" and 0 < len(partial.token_ids) < 200
        assert set(partial.versions) == {0}
        check_versions(partial, {0: BASE_LOGIT})
        rest = asyncio.create_task(
            client.complete(prompt + partial.token_ids, SamplingParams(max_tokens=50), sample="a")
        )
        await asyncio.sleep(0.3)
        assert not rest.done() and len(stand_in.served()) == 1  # held in the service
        # The trainer moves the weights itself (here: a reload straight on the server).
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(tmp_path)}}
        (tmp_path / WEIGHTS_FILE).write_text(json.dumps({"script_logit": 12.0}))
        await stand_in.post("/collective_rpc", json=body)
        [report] = await client.fleet.tag(1)
        assert (report.version, report.status) == (1, "serving")
        [continued] = await rest
        assert set(continued.versions) == {1} and continued.finish_reason != "abort"
        check_versions(continued, {1: 12.0})
        assert continued.paused_s > 0.2  # the wait was the pause's, not the model's
        served = stand_in.served()
        assert served[1]["prompt_token_ids"] == prompt + partial.token_ids
        assert version_of_salt(served[1]["cache_salt"]) == "policy-v1"
        assert client.stats.aborted_generations == 1 and client.stats.discarded_tokens == 0
        # The stand-in continued its script where the partial output stopped: the whole turn
        # is what an uninterrupted reply would have been (same script, same length).
        [whole] = await client.complete(prompt, LONG, sample="c")
        assert len(partial.token_ids) + len(continued.token_ids) == len(whole.token_ids)
    finally:
        await client.aclose()


async def test_a_pause_from_outside_outlasts_the_timeout_without_a_retry(
    stand_in: StandIn,
) -> None:
    """A trainer pauses the server behind the service's back for 4 x the client's timeout: the
    held request is not timed out or retried (one request served), and the time is counted."""
    client = await client_for(stand_in.url, timeout_s=0.5, pause_poll_s=0.1)
    try:
        prompt = await prompt_of(client)
        await stand_in.post("/pause", params={"mode": "keep"})
        held = asyncio.create_task(
            client.complete(prompt, SamplingParams(max_tokens=8), sample="a")
        )
        await asyncio.sleep(2.0)
        assert not held.done()
        await stand_in.post("/resume")
        [gen] = await held
        assert gen.finish_reason in ("stop", "length") and len(gen.token_ids) > 0
        assert len(stand_in.served()) == 1
        assert gen.paused_s > 1.0 and client.stats.external_pause_seconds > 1.0
    finally:
        await client.aclose()


async def test_an_abort_from_outside_is_an_answer_not_a_fault(stand_in: StandIn) -> None:
    """A pause with mode abort that the service did not make (SkyRL's own): the partial output
    comes back (not retried, not thrown away), ready to be continued."""
    client = await client_for(stand_in.url)
    try:
        prompt = await prompt_of(client)
        running = asyncio.create_task(client.complete(prompt, LONG, sample="a"))
        await until_generating(stand_in)
        await stand_in.post("/pause", params={"mode": "abort"})
        [partial] = await running
        assert partial.finish_reason == "abort" and partial.token_ids
        await stand_in.post("/resume")
        assert len(stand_in.served()) == 1 and client.stats.discarded_tokens == 0
    finally:
        await client.aclose()


async def test_an_update_while_a_server_is_down_takes_it_out_and_says_so(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """Two servers, one gone: the update reaches the other; the gone one leaves rotation with
    the reason, its samples move, and it comes back (brought to the new weights) once up."""
    new = checkpoint(tmp_path, "v1", 8.0)
    port = free_port()
    with StandIn(tmp_path / "other.jsonl", port, tokens_per_s=25.0) as other:
        client = await client_for(stand_in.url, other.url, update_retries=1)
        try:
            assert client.pin("on-other", other.url) == other.url
            other.server.stop()
            reports = {r.url: r for r in await client.fleet.update(1, weights_path=new)}
            assert reports[stand_in.url].status == "serving" and reports[stand_in.url].version == 1
            gone = reports[other.url]
            assert gone.status == "out" and "update to version 1 failed" in (gone.reason or "")
            prompt = await prompt_of(client)
            [gen] = await client.complete(prompt, SamplingParams(max_tokens=5), sample="on-other")
            assert set(gen.versions) == {1} and client.pin("on-other") == stand_in.url
            # Restarted (fresh: "default" weights): reconciling brings it to version 1 first.
            with StandIn(tmp_path / "restarted.jsonl", port, tokens_per_s=25.0) as restarted:
                await client.fleet.reconcile()
                back = {r.url: r for r in client.fleet.report()}
                assert back[other.url].status == "serving" and back[other.url].version == 1
                assert httpx.get(restarted.url + "/weight_info").json()["weight_version"] == "1"
                client.pin("new", other.url)
                [gen] = await client.complete(prompt, SamplingParams(max_tokens=5), sample="new")
                check_versions(gen, {1: 8.0})
        finally:
            await client.aclose()


async def test_a_tag_that_cannot_reach_a_server_leaves_it_its_own_tag(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """POST /v1/policy {version} without weights, one server unreachable: the version is
    taken (the other server is tagged), the unreachable one keeps its tag and stays in rotation
    (its tokens say which version they are, token by token), and the next change reaches it.
    Come back restarted instead (its startup weights, "default"), it is out of rotation until
    it serves the version: the trainer moved the weights, the service cannot load them."""
    with StandIn(tmp_path / "other.jsonl", tokens_per_s=25.0) as other:
        client = await client_for(stand_in.url, other.url)
        try:
            with other.down():
                reports = {r.url: r for r in await client.fleet.tag(1)}
            assert (reports[stand_in.url].version, reports[stand_in.url].status) == (1, "serving")
            assert (reports[other.url].version, reports[other.url].status) == (0, "serving")
            reports = {r.url: r for r in await client.fleet.tag(2)}
            assert {r.version for r in reports.values()} == {2}
            assert httpx.get(other.url + "/weight_info").json()["weight_version"] == "2"
            await other.post("/standin/restart")  # and down a while: the service cannot tell
            with other.down():
                await client.fleet.tag(3)
            reports = {r.url: r for r in await client.fleet.tag(4)}
            assert reports[other.url].status == "out"
            assert "restarted?" in (reports[other.url].reason or "")
            assert httpx.get(other.url + "/weight_info").json()["weight_version"] == "default"
            await other.post("/update_weight_version", json={"new_version": "4"})  # operator
            await client.fleet.reconcile()
            assert {(r.version, r.status) for r in client.fleet.report()} == {(4, "serving")}
        finally:
            await client.aclose()


async def test_a_server_without_the_generate_route_is_updated_with_abort(
    tmp_path: Path,
) -> None:
    """Without --enable-scale-out (403 on the generate route) the client uses /v1/completions,
    which reports no per-token versions; so the service's own update pauses that server with
    abort, and the request in flight comes back whole under one version, never straddling."""
    new = checkpoint(tmp_path, "v1", 8.0)
    with StandIn(tmp_path / "served.jsonl", tokens_per_s=25.0, scale_out=False) as s:
        client = await client_for(s.url)
        try:
            prompt = await prompt_of(client)
            running = asyncio.create_task(client.complete(prompt, LONG, sample="a"))
            await until_generating(s)
            await client.fleet.update(1, weights_path=new)
            [partial] = await running
            assert partial.finish_reason == "abort" and set(partial.versions) == {0}
            check_versions(partial, {0: BASE_LOGIT})
            [after] = await client.complete(prompt, SamplingParams(max_tokens=5), sample="a")
            assert set(after.versions) == {1}
            check_versions(after, {1: 8.0})
            assert {x["route"] for x in s.served()} == {"completions"}
        finally:
            await client.aclose()


async def test_lora_adapter_is_served_named_and_updated_in_place(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """--lora NAME=DIR: loaded at start where missing, named by every request; lora_path
    updates it in place (then loaded once more, which resets vLLM's cached in-place flag)."""
    first = checkpoint(tmp_path, "a1", 10.0)
    second = checkpoint(tmp_path, "a2", 14.0)
    client = await client_for(stand_in.url, lora=("pol", first))
    try:
        assert client.model == "pol" and client.max_model_len == 32768  # the base's context
        prompt = await prompt_of(client)
        [gen] = await client.complete(prompt, SamplingParams(max_tokens=5), sample="a")
        check_versions(gen, {0: 10.0})
        await client.fleet.update(1, lora_path=second)
        [gen] = await client.complete(prompt, SamplingParams(max_tokens=5), sample="a")
        assert set(gen.versions) == {1}
        check_versions(gen, {1: 14.0})
        assert {x["model"] for x in stand_in.served()} == {"pol"}
    finally:
        await client.aclose()


def test_update_counters_and_tokens_by_version_reach_metrics() -> None:
    from prometheus_client import generate_latest

    from service.metrics import Metrics
    from service.policy.servers import PolicyStats
    from service.trajectory import Status, Trajectory

    stats = PolicyStats(pauses=2, pause_seconds=1.5, in_flight_at_pause=3, discarded_tokens=0)
    metrics = Metrics()
    metrics.bind_policy(lambda: stats)
    t = Trajectory(
        trajectory_id="r.g0.s0", rollout_id="r", group_id="r.g0", task_id="t", sample_index=0,
        prompt_token_ids=[1], response_token_ids=[5, 6, 7, 8], loss_mask=[1, 1, 0, 1],
        rollout_logprobs=[-0.5, -0.5, 0.0, -0.5], response_policy_versions=[3, 4, -1, 4],
        reward=1.0, status=Status.ok,
    )  # fmt: skip
    metrics.observe_trajectory(t, 3)
    text = generate_latest(metrics.registry).decode()
    assert "rollouts_policy_pauses_total 2.0" in text
    assert "rollouts_policy_pause_seconds_total 1.5" in text
    assert "rollouts_policy_requests_in_flight_at_pause 3.0" in text
    assert "rollouts_tokens_discarded_total 0.0" in text
    assert 'rollouts_generated_tokens_by_version_total{policy_version="4"} 2.0' in text
    assert 'rollouts_generated_tokens_by_version_total{policy_version="3"} 1.0' in text


async def test_weights_that_do_not_load_cost_one_server_not_the_fleet(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """A failed load leaves vLLM's engine unusable, so an update reaches one server first: a
    path the engine cannot load (a typo) takes that one out and is refused, naming the field;
    the other keeps serving its weights. An empty local folder is refused before any server is
    touched."""
    first = checkpoint(tmp_path, "v1", 8.0)
    with StandIn(tmp_path / "other.jsonl", tokens_per_s=25.0) as other:
        client = await client_for(stand_in.url, other.url, update_retries=0)
        try:
            await client.fleet.update(1, weights_path=first)
            empty = tmp_path / "empty"
            empty.mkdir()
            with pytest.raises(WeightsRefused, match="holds no files") as local:
                await client.fleet.update(2, weights_path=str(empty))
            assert local.value.field == "weights_path"
            assert {r.status for r in client.fleet.report()} == {"serving"}
            with pytest.raises(WeightsRefused, match="did not load") as remote:
                await client.fleet.update(2, weights_path="/no/such/checkpoint")
            assert remote.value.field == "weights_path"
            reports = client.fleet.report()
            assert sorted(r.status for r in reports) == ["out", "serving"]
            (kept,) = [r for r in reports if r.status == "serving"]
            assert kept.version == 1  # untouched: still the weights it served
            prompt = await prompt_of(client)
            [gen] = await client.complete(prompt, SamplingParams(max_tokens=5), sample="s")
            check_versions(gen, {1: 8.0})
        finally:
            await client.aclose()
