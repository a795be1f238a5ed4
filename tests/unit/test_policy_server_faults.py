"""Faults of the policy servers while the policy moves (issue 35, cases 1, 4 and 5), against the
stand-in over real HTTP: a server restarted behind the same URL (its startup weights, tagged
"default"), a server that leaves rotation while the service holds it paused, a `keep` pause of a
server that reports no per-token versions, a `wait` pause that outlasts the control timeout.

The stand-in's weights are the logit of its scripted token, so every token's logprob says which
weights produced it (check_versions). Time is the test's: requests are held in the stand-in
(`/standin/hold`) until the test has acted, and released by it; nothing waits for a window.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from service.policy.client import PolicyClient, PolicyError
from service.sample import SamplingParams
from standin.decoding import WEIGHTS_FILE
from tests.unit.test_policy_updates import (
    BASE_LOGIT,
    LONG,
    StandIn,
    check_versions,
    checkpoint,
    client_for,
    prompt_of,
)

SHORT = SamplingParams(max_tokens=20, seed=3)
HANG_GUARD_S = 120.0  # only a broken control plane gets near it: the request would never return


async def held(stand_in: StandIn, count: int = 1) -> None:
    """Until `count` requests are stopped by the stand-in's hold (it answers once they are)."""
    async with httpx.AsyncClient(timeout=None) as h:
        r = await h.get(stand_in.url + "/standin/held", params={"count": count})
    assert r.status_code == 200, r.text


def weight_info(stand_in: StandIn) -> str:
    return httpx.get(stand_in.url + "/weight_info").json()["weight_version"]


def is_paused(stand_in: StandIn) -> bool:
    return httpx.get(stand_in.url + "/is_paused").json()["is_paused"]


def spans_served(stand_in: StandIn) -> list[set[str]]:
    """The weight tags of each choice the stand-in served, in order."""
    return [{v for v, _, _ in s["weight_versions"]} for s in stand_in.served()]


async def trainer_reload(stand_in: StandIn, folder: Path, logit: float) -> None:
    """What a trainer does on its own: new weights straight into the engine."""
    (folder / WEIGHTS_FILE).write_text(json.dumps({"script_logit": logit}))
    body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
    await stand_in.post("/collective_rpc", json=body)


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    with StandIn(tmp_path / "served.jsonl", tokens_per_s=25.0) as s:
        yield s


@pytest.fixture
async def one(stand_in: StandIn) -> AsyncIterator[PolicyClient]:
    """A client of the one stand-in."""
    client = await client_for(stand_in.url, max_retries=2)
    yield client
    await client.aclose()


# ---------------------------------------------------------------- case 1: a restarted server


async def test_a_restart_seen_only_in_the_spans_is_not_recorded_as_the_current_version(
    stand_in: StandIn, one: PolicyClient, tmp_path: Path
) -> None:
    """Flow 1: after an update from a checkpoint the server restarts behind the same URL
    (startup weights, tag "default") with nothing in flight, so the service learns of it from
    the first answer. Its tokens are not recorded under a guess: discarded (and counted), the
    server asked what it serves, brought to the checkpoint again, and the turn generated again;
    every recorded token is the weights its version names."""
    await one.fleet.update(1, weights_path=checkpoint(tmp_path, "v1", 8.0))
    prompt = await prompt_of(one)
    await stand_in.post("/standin/restart")
    [gen] = await one.complete(prompt, SHORT, sample="a")
    assert set(gen.versions) == {1}
    check_versions(gen, {0: BASE_LOGIT, 1: 8.0})
    served = stand_in.served()
    assert spans_served(stand_in)[-2:] == [{"default"}, {"1"}]
    assert one.stats.discarded_tokens == len(served[-2]["token_ids"]) > 0
    assert weight_info(stand_in) == "1"
    [report] = one.fleet.report()
    assert (report.version, report.status) == (1, "serving")


async def test_a_restart_that_fails_a_request_is_asked_again_before_it_serves(
    stand_in: StandIn, one: PolicyClient, tmp_path: Path
) -> None:
    """The restart kills a request in flight (HTTP 500, as vLLM's engine-dead answers): the
    server is asked what it serves before the retry is sent to it, so the restarted engine
    never serves a token of its startup weights and nothing is discarded."""
    await one.fleet.update(1, weights_path=checkpoint(tmp_path, "v1", 8.0))
    prompt = await prompt_of(one)
    await stand_in.post("/standin/hold", params={"after_tokens": 3})
    running = asyncio.create_task(one.complete(prompt, SHORT, sample="a"))
    await held(stand_in)
    await stand_in.post("/standin/restart")  # the held request fails; the hold is gone
    [gen] = await running
    assert set(gen.versions) == {1}
    check_versions(gen, {0: BASE_LOGIT, 1: 8.0})
    assert spans_served(stand_in) == [{"1"}]  # the restarted engine served v1 only
    assert one.stats.discarded_tokens == 0


async def test_a_restart_after_a_trainer_driven_update_keeps_the_server_out(
    stand_in: StandIn, one: PolicyClient, tmp_path: Path
) -> None:
    """Flow 2: the trainer moved the weights (the service cannot load them): a restarted server
    leaves rotation with the reason, its tokens unrecorded (with one server the sample fails:
    masked, never mislabelled), until the operator gives it the weights and the tag."""
    await trainer_reload(stand_in, tmp_path, 12.0)
    await one.fleet.tag(1)
    prompt = await prompt_of(one)
    await stand_in.post("/standin/restart")
    with pytest.raises(PolicyError, match="out of rotation"):
        await one.complete(prompt, SHORT, sample="a")
    [report] = one.fleet.report()
    assert report.status == "out" and "restarted?" in (report.reason or "")
    assert spans_served(stand_in) == [{"default"}]  # answered once, and not kept
    assert not await one.healthy()  # re-runs wait: it answers /health, but is out
    await one.fleet.reconcile()
    assert one.fleet.report()[0].status == "out"  # still "default": stays out
    await trainer_reload(stand_in, tmp_path, 12.0)  # the operator, as /v1/policy said
    await stand_in.post("/update_weight_version", json={"new_version": "1"})
    await one.fleet.reconcile()
    assert await one.healthy()
    [gen] = await one.complete(prompt, SHORT, sample="a")
    assert set(gen.versions) == {1}
    check_versions(gen, {0: BASE_LOGIT, 1: 12.0})


async def test_with_lora_a_restarted_server_moves_the_sample_and_gets_the_adapter_again(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """--lora: the restarted engine lacks the adapter (404 for the model): the sample moves to
    the other server instead of being masked, and the restarted one is given the adapter again
    before it serves again."""
    adapter = checkpoint(tmp_path, "a1", 10.0)
    with StandIn(tmp_path / "other.jsonl", tokens_per_s=25.0) as other:
        client = await client_for(stand_in.url, other.url, lora=("pol", adapter))
        try:
            prompt = await prompt_of(client)
            assert client.pin("a", stand_in.url) == stand_in.url
            await stand_in.post("/standin/restart")
            [gen] = await client.complete(prompt, SHORT, sample="a")
            check_versions(gen, {0: 10.0})
            assert client.pin("a") == other.url  # moved
            assert [s["model"] for s in other.served()] == ["pol"]
            await client.fleet.reconcile()  # asked again: tagged, and the adapter loaded
            models = httpx.get(stand_in.url + "/v1/models").json()["data"]
            assert "pol" in {m["id"] for m in models}
            assert {(r.version, r.status) for r in client.fleet.report()} == {(0, "serving")}
            client.pin("b", stand_in.url)
            [gen] = await client.complete(prompt, SHORT, sample="b")
            check_versions(gen, {0: 10.0})
            assert client.pin("b") == stand_in.url
        finally:
            await client.aclose()


# ---------------------------------------------------------------- case 4: out while held


async def test_a_server_out_while_held_gives_back_its_frozen_requests_and_comes_back(
    stand_in: StandIn, tmp_path: Path
) -> None:
    """The trainer pauses (keep), moves the weights, tags: one server answers the tag with an
    error and leaves rotation while the service holds it paused. The request frozen in it comes
    back with its partial tokens (version 0) and its turn continues on the other server under
    version 1; once the operator tags it, it is resumed and back in rotation."""
    with StandIn(tmp_path / "other.jsonl", tokens_per_s=25.0) as other:
        client = await client_for(stand_in.url, other.url)
        try:
            prompt = await prompt_of(client)
            client.pin("a", stand_in.url)
            await stand_in.post("/standin/hold", params={"after_tokens": 3})
            running = asyncio.create_task(client.complete(prompt, LONG, sample="a"))
            await held(stand_in)
            await client.fleet.pause("keep")
            for server, folder in ((stand_in, tmp_path / "a"), (other, tmp_path / "b")):
                folder.mkdir()
                await trainer_reload(server, folder, 12.0)
            await stand_in.post(
                "/standin/fail", params={"path": "/update_weight_version", "status": 500}
            )
            reports = {r.url: r for r in await client.fleet.tag(1)}
            assert reports[stand_in.url].status == "out"
            assert reports[other.url].status == "serving"
            [partial] = await asyncio.wait_for(running, HANG_GUARD_S)
            assert partial.finish_reason == "abort" and len(partial.token_ids) == 3
            check_versions(partial, {0: BASE_LOGIT, 1: 12.0})
            rest = prompt + partial.token_ids
            [continued] = await client.complete(rest, SamplingParams(max_tokens=50), sample="a")
            assert client.pin("a") == other.url and set(continued.versions) == {1}
            check_versions(continued, {0: BASE_LOGIT, 1: 12.0})
            # The operator fixes it, as /v1/policy said: tagged, it is resumed and put back.
            await stand_in.post("/standin/fail", params={"path": "/update_weight_version"})
            await stand_in.post("/standin/release")
            await stand_in.post("/update_weight_version", json={"new_version": "1"})
            await client.fleet.reconcile()
            assert not is_paused(stand_in)
            assert {(r.version, r.status) for r in client.fleet.report()} == {(1, "serving")}
            client.pin("b", stand_in.url)
            [gen] = await client.complete(prompt, SHORT, sample="b")
            check_versions(gen, {0: BASE_LOGIT, 1: 12.0})
        finally:
            await client.aclose()


async def test_re_runs_wait_for_a_server_in_rotation_not_one_that_answers_health(
    stand_in: StandIn, one: PolicyClient
) -> None:
    """The only server leaves rotation while held (its tag failed): it still answers /health,
    but the service is not ready (a masked sample's re-run waits) until it is back, resumed."""
    await one.fleet.pause("keep")
    await stand_in.post("/standin/fail", params={"path": "/update_weight_version", "status": 500})
    [report] = await one.fleet.tag(1)
    assert report.status == "out"
    assert httpx.get(stand_in.url + "/health").status_code == 200
    assert not await one.healthy()
    await stand_in.post("/standin/fail", params={"path": "/update_weight_version"})
    await one.fleet.reconcile()  # tag 0, not the policy's 1: stays out
    assert not await one.healthy()
    await stand_in.post("/update_weight_version", json={"new_version": "1"})
    await one.fleet.reconcile()
    assert await one.healthy() and not is_paused(stand_in)


# ---------------------------------------------------------------- case 5: keep without spans


async def test_a_keep_pause_of_a_server_without_spans_aborts_instead(tmp_path: Path) -> None:
    """No --enable-scale-out (the /v1/completions fallback: no per-token versions): the
    trainer's `keep` pause is an `abort` there, so the request running comes back with its
    partial tokens (version 0, the old weights) and its turn continues under version 1; a
    frozen request would have finished under the new weights recorded as version 0."""
    with StandIn(tmp_path / "served.jsonl", tokens_per_s=25.0, scale_out=False) as s:
        client = await client_for(s.url)
        try:
            prompt = await prompt_of(client)
            await client.complete(prompt, SamplingParams(max_tokens=2), sample="a")  # 403 seen
            await s.post("/standin/hold", params={"after_tokens": 3})
            running = asyncio.create_task(client.complete(prompt, LONG, sample="a"))
            await held(s)
            await client.fleet.pause("keep")
            await trainer_reload(s, tmp_path, 12.0)
            await client.fleet.tag(1)
            await s.post("/standin/release")
            [first] = await asyncio.wait_for(running, HANG_GUARD_S)
            check_versions(first, {0: BASE_LOGIT, 1: 12.0})
            assert first.finish_reason == "abort" and len(first.token_ids) == 3
            rest = prompt + first.token_ids
            [continued] = await client.complete(rest, SamplingParams(max_tokens=50), sample="a")
            assert set(continued.versions) == {1}
            check_versions(continued, {0: BASE_LOGIT, 1: 12.0})
            assert {x["route"] for x in s.served()} == {"completions"}
        finally:
            await client.aclose()


# ---------------------------------------------------------------- a wait pause past its timeout


async def test_a_wait_pause_past_the_control_timeout_is_resumed_before_it_serves_again(
    stand_in: StandIn, one: PolicyClient
) -> None:
    """`wait` lets running requests finish; one held longer than the control timeout makes the
    pause fail and the server leave rotation, but its engine is paused all the same. It must
    not come back paused: the request is aborted (its partial comes back), and readmission
    resumes the engine before putting it back."""
    one.fleet.control_timeout_s = 0.5  # the request is held until the test releases it
    prompt = await prompt_of(one)
    await stand_in.post("/standin/hold", params={"after_tokens": 2})
    running = asyncio.create_task(one.complete(prompt, LONG, sample="a"))
    try:
        await held(stand_in)
        [report] = await one.fleet.pause("wait")
        assert report.status == "out" and "did not pause" in (report.reason or "")
        await one.fleet.reconcile()
        [report] = one.fleet.report()
        assert report.status == "serving"
        assert not is_paused(stand_in)  # not back in rotation paused
        [partial] = await asyncio.wait_for(running, HANG_GUARD_S)
        assert partial.finish_reason == "abort" and len(partial.token_ids) == 2
        await stand_in.post("/standin/release")
        [gen] = await one.complete(prompt, SHORT, sample="b")
        check_versions(gen, {0: BASE_LOGIT})
    finally:
        await stand_in.post("/standin/release")
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
