"""The recorded vLLM 0.32 responses are the contract: our models must parse every one of them,
and the policy client must read them correctly when a real HTTP server replays them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from service.agent.tokens import TemplateFrame, TokenLedger
from service.policy import vllm_wire as w
from service.policy.client import ContextLengthError, PolicyClient, PolicyError
from service.policy.generations import from_generate
from service.policy.servers import Window
from service.sample import SamplingParams
from standin.background import BackgroundServer

# Copies of the real vLLM 0.32 recordings (shared/vllm-wire/), kept in the repo so CI checks them.
WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-wire"


def recording(name: str) -> dict[str, Any]:
    return json.loads((WIRE / name).read_text())


def response_model(path: str, status: int) -> type[w.BaseModel] | None:
    if status >= 400:
        return w.ErrorResponse
    return {
        "/v1/completions": w.CompletionResponse,
        "/v1/chat/completions": w.ChatCompletionResponse,
        "/v1/models": w.ModelList,
        "/tokenize": w.TokenizeResponse,
        "/detokenize": w.DetokenizeResponse,
        "/is_paused": w.IsPausedResponse,
        "/reset_prefix_cache": w.ResetPrefixCacheResponse,
        "/pause": w.StatusResponse,
        "/resume": w.StatusResponse,
        "/health": None,
    }[path.split("?")[0]]


# Every recording of one request/response (the multi-turn episode file has another layout).
RECORDINGS = sorted(p.name for p in WIRE.glob("*.json") if "request" in json.loads(p.read_text()))


@pytest.mark.parametrize("name", RECORDINGS)
def test_every_recorded_response_parses(name: str) -> None:
    rec = recording(name)
    model = response_model(rec["request"]["path"], rec["status"])
    if model is None:
        assert rec["response"] == ""
        return
    model.model_validate(rec["response"])
    # Every recorded key, at every depth, is a declared field of our models, or one we knowingly
    # leave to the models' extras (UNMODELLED): a key vLLM adds or renames shows up here.
    unknown = sorted(undeclared_keys(model, rec["response"]))
    assert set(unknown) <= UNMODELLED, f"{name}: keys our wire models do not declare: {unknown}"


# Keys of vLLM's chat response (and its choices and messages) that nothing here reads:
# disaggregated serving, metrics, and the chat message's optional parts.
UNMODELLED = {
    "annotations",
    "audio",
    "function_call",
    "reasoning",
    "refusal",
    "routed_experts",
    "ec_transfer_params",
    "kv_transfer_params",
    "metrics",
    "prompt_logprobs",
    "prompt_text",
    "service_tier",
    "system_fingerprint",
}


def undeclared_keys(model: type, data: object, prefix: str = "") -> set[str]:
    """Dotted paths of keys in `data` that `model` (a pydantic model) does not declare."""
    import typing

    from pydantic import BaseModel

    if not isinstance(data, dict):
        return set()
    out: set[str] = set()
    fields = {f.alias or n: f for n, f in model.model_fields.items()}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            out.add(prefix + key)
            continue
        inner = [a for a in typing.get_args(field.annotation) or (field.annotation,)]
        for arg in list(inner):
            inner += typing.get_args(arg)
        subs = [a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)]
        for sub in subs[:1]:
            items = value if isinstance(value, list) else [value]
            for item in items:
                out |= {k.removeprefix(f"{key}.") for k in undeclared_keys(sub, item, "")}
    return out


def test_undeclared_keys_finds_new_keys_at_any_depth() -> None:
    body = recording("completions_eos.json")["response"]
    assert undeclared_keys(w.CompletionResponse, body) == set()
    changed = json.loads(json.dumps(body))
    changed["choices"][0]["new_field"] = 1
    changed["brand_new"] = 2
    assert undeclared_keys(w.CompletionResponse, changed) == {"new_field", "brand_new"}


def test_recorded_completion_facts_hold_in_our_models() -> None:
    eos = w.CompletionResponse.model_validate(recording("completions_eos.json")["response"])
    c0 = eos.choices[0]
    assert c0.finish_reason == "stop" and c0.stop_reason is None
    assert c0.token_ids[-1] == 2 and "<|im_end|>" not in c0.text
    assert len(c0.token_ids) == len(c0.logprobs.token_logprobs)
    stop = w.CompletionResponse.model_validate(recording("completions_stop_eos.json")["response"])
    stopped = [c for c in stop.choices if c.finish_reason == "stop"]
    assert stopped and all(c.stop_reason == "}" and "}" not in c.text for c in stopped)


# ---------------------------------------------------------------- replaying server


class Replay:
    """Serves recorded responses; each request pops the next queued (status, body) per path.
    With nothing queued, a path answers as the recorded server did for what it did not offer:
    the generate route 403 (no --enable-scale-out, inference_generate.json), the dev-mode
    routes 404 (no VLLM_SERVER_DEV_MODE)."""

    def __init__(self) -> None:
        self.queue: dict[str, list[tuple[int, Any]]] = {}
        self.requests: list[tuple[str, Any]] = []
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def serve(path: str, request: Request) -> Response:
            body = await request.body()
            self.requests.append(("/" + path, json.loads(body) if body else None))
            queued = self.queue.get("/" + path)
            if not queued:
                if path == "inference/v1/generate":
                    rec = recording("inference_generate.json")
                    return JSONResponse(rec["response"], status_code=rec["status"])
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            status, payload = queued.pop(0)
            if payload == "":
                return Response(status_code=status)
            return JSONResponse(payload, status_code=status)

        self.app = app

    def push(self, name: str) -> dict[str, Any]:
        rec = recording(name)
        self.queue.setdefault(rec["request"]["path"], []).append((rec["status"], rec["response"]))
        return rec


@pytest.fixture
def replay() -> Iterator[tuple[Replay, str]]:
    r = Replay()
    with BackgroundServer(r.app) as server:
        yield r, server.url


async def started_client(url: str, **kw: Any) -> PolicyClient:
    client = PolicyClient([url + "/v1"], backoff_s=0.01, **kw)
    await client.start()
    return client


async def test_start_resolves_model_and_context(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.push("models.json")
    client = await started_client(url)
    try:
        assert client.model == "tiny" and client.max_model_len == 4096
    finally:
        await client.aclose()


async def test_complete_eos_and_length(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.push("models.json")
    rec = r.push("completions_eos.json")
    client = await started_client(url)
    try:
        gens = await client.complete(
            rec["request"]["json"]["prompt"],
            SamplingParams(temperature=1.0, max_tokens=8, seed=9),
            n=2,
            server=url,
        )
    finally:
        await client.aclose()
    recorded = rec["response"]["choices"]
    assert [g.token_ids for g in gens] == [c["token_ids"] for c in recorded]
    assert [g.logprobs for g in gens] == [c["logprobs"]["token_logprobs"] for c in recorded]
    assert gens[0].finish_reason == "stop" and gens[0].token_ids[-1] == 2
    assert gens[1].finish_reason == "length" and 2 not in gens[1].token_ids
    sent = r.requests[-1][1]
    assert sent["logprobs"] == 1 and sent["return_token_ids"] is True and sent["n"] == 2
    assert sent["seed"] == 9 and sent["max_tokens"] == 8
    # Every sampling field goes out, defaults included: no server default can fill a gap.
    assert set(w.SAMPLING_FIELDS) <= set(sent)
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["min_p"]) == (1.0, 1.0, -1, 0)
    assert (sent["repetition_penalty"], sent["presence_penalty"], sent["frequency_penalty"]) == (
        1.0,
        0.0,
        0.0,
    )
    assert sent["stop"] == [] and sent["ignore_eos"] is False and sent["min_tokens"] == 0


def test_sampling_fields_are_fields_of_the_wire_model() -> None:
    assert set(w.SAMPLING_FIELDS) <= set(w.CompletionRequest.model_fields)
    # and the stand-in (which parses requests with the same model) takes a full request
    body = {f: 1 for f in w.SAMPLING_FIELDS} | {"stop": [], "ignore_eos": False, "top_k": -1}
    req = w.CompletionRequest.model_validate({"prompt": [1, 2], **body})
    assert {f: getattr(req, f) for f in w.SAMPLING_FIELDS}.keys() == set(w.SAMPLING_FIELDS)


async def test_complete_stop_string_keeps_token_ids(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.push("models.json")
    rec = r.push("completions_stop_eos.json")
    client = await started_client(url)
    try:
        gens = await client.complete(
            rec["request"]["json"]["prompt"],
            SamplingParams(max_tokens=200, stop=["}"], top_k=5),
            n=4,
            server=url,
        )
    finally:
        await client.aclose()
    g = gens[3]
    assert g.finish_reason == "stop" and g.stop_reason == "}"
    assert g.token_ids == rec["response"]["choices"][3]["token_ids"]
    assert not g.text.endswith("}")
    assert r.requests[-1][1]["stop"] == ["}"] and r.requests[-1][1]["top_k"] == 5


async def test_tokens_as_token_ids_and_tokenize(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.push("models.json")
    rec = r.push("completions_tokens_as_ids.json")
    tok = r.push("tokenize_messages.json")
    tok_prompt = r.push("tokenize_prompt.json")
    detok = r.push("detokenize.json")
    client = await started_client(url)
    try:
        gens = await client.complete(
            rec["request"]["json"]["prompt"], SamplingParams(max_tokens=12), n=2, server=url
        )
        ids = await client.tokenize_messages(tok["request"]["json"]["messages"])
        delta = await client.tokenize_text(tok_prompt["request"]["json"]["prompt"])
        text = await client.detokenize(detok["request"]["json"]["tokens"])
    finally:
        await client.aclose()
    assert gens[0].token_ids == rec["response"]["choices"][0]["token_ids"]
    assert ids == tok["response"]["tokens"]
    assert delta == tok_prompt["response"]["tokens"]
    assert text == detok["response"]["prompt"]
    sent_tok = [b for p, b in r.requests if p == "/tokenize"]
    assert sent_tok[0]["add_generation_prompt"] is True
    assert sent_tok[1]["add_special_tokens"] is False


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("completions_unknown_model.json", PolicyError),
        ("completions_too_long.json", ContextLengthError),
        ("completions_bad_field.json", PolicyError),
    ],
)
async def test_recorded_errors(replay: tuple[Replay, str], name: str, error: type) -> None:
    r, url = replay
    rec = r.push(name)
    client = PolicyClient([url], model="tiny", max_model_len=100_000, backoff_s=0.01)
    await client.start()
    try:
        with pytest.raises(error) as info:
            await client.complete([1, 2, 3], SamplingParams(max_tokens=4), server=url)
    finally:
        await client.aclose()
    assert rec["response"]["error"]["message"][:40] in str(info.value)
    completions = [p for p, _ in r.requests if p == "/v1/completions"]
    assert len(completions) == 1  # 4xx errors are not retried


def test_cache_salt_rules_are_vllms() -> None:
    """The salts vLLM 0.32 refuses (shared/vllm-wire: `model@v3` got a 400); ours pass."""
    for salt in ["model@v3", "a/b", "a\\b", "nul\x00", "x" * 129, ""]:
        assert w.cache_salt_problem(salt) is not None, salt
    assert w.cache_salt_problem(f"policy-v{2**62}") is None


def test_recorded_multi_turn_episode_replays_token_exact() -> None:
    """The one real multi-turn recording (vLLM 0.32, turns cut by max_tokens): replayed through
    our ledger, every turn's prompt is the ledger's sequence (the recorded prompt length), and
    the result is the recorded final sequence, loss mask and logprobs, to the token."""
    rec = json.loads((WIRE / "multi_turn_token_in_token_out.json").read_text())
    ledger = TokenLedger(prompt_ids=list(rec["initial_prompt_token_ids"]))
    close: list[int] | None = None
    for step in rec["steps"]:
        shown = int(step["request"]["prompt"].split()[0].lstrip("<"))
        assert len(ledger) == shown, f"turn {step['turn']}: prompt of {shown} ids recorded"
        ids, lps = step["generated_token_ids"], step["generated_logprobs"]
        ledger.add_generation(ledger.sequence(), ids, lps, [0] * len(ids))
        assert step["finish_reason"] == "length" and len(ids) == step["request"]["max_tokens"]
        obs = step.get("observation_token_ids") or []
        if obs:
            # A turn cut by max_tokens is closed by the template's whole close (untrained).
            close = close or obs[:2]
            assert obs[:2] == close, "every cut turn is closed the same way"
            ledger.add_observation(obs)
    # The recording keeps the last observation (its engine turn was never taken).
    assert ledger.sequence() == rec["final_sequence"]
    assert ledger.loss_mask == rec["response_loss_mask"]
    assert ledger.logprobs == pytest.approx(rec["response_logprobs"], abs=0)
    frame = TemplateFrame(base=(7,), close=tuple(close or ()))
    rest = rec["steps"][0]["observation_token_ids"][2:]
    assert frame.delta([7, *rest], turn_closed=False) == rec["steps"][0]["observation_token_ids"]


# ---------------------------------------------------------------- the weight-update routes

UPDATES = WIRE / "updates"  # recorded by scripts/record_update_wire.py (see its README)
UPDATE_MODELS: dict[str, type[w.BaseModel]] = {
    "/inference/v1/generate": w.GenerateResponse,
    "/v1/completions": w.CompletionResponse,
    "/collective_rpc": w.CollectiveRpcResponse,
    "/update_weight_version": w.UpdateWeightVersionResponse,
    "/weight_info": w.WeightInfoResponse,
    "/pause": w.StatusResponse,
}


def update_recording(name: str) -> dict[str, Any]:
    return json.loads((UPDATES / name).read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in UPDATES.glob("*.json")))
def test_every_recorded_update_answer_parses(name: str) -> None:
    rec = update_recording(name)
    path = rec["request"]["path"].split("?")[0]
    model = w.ErrorResponse if rec["status"] >= 400 else UPDATE_MODELS[path]
    model.model_validate(rec["response"])
    unknown = set(undeclared_keys(model, rec["response"])) - UNMODELLED
    assert not unknown, f"{name}: keys our wire models do not declare: {sorted(unknown)}"


def replay_update(r: Replay, name: str) -> dict[str, Any]:
    rec = update_recording(name)
    r.queue.setdefault(rec["request"]["path"], []).append((rec["status"], rec["response"]))
    return rec


async def test_versions_per_token_come_from_the_recorded_spans(
    replay: tuple[Replay, str],
) -> None:
    """A request frozen across an update: the client hands on the engine's tokens and
    logprobs, and one version per token from its spans ("1" then "2"), exact to the token, when
    the service saw the engine serve both while the request ran. When it did not (here it knew
    the engine at version 1 only: a tag set behind its back), the answer is not kept."""
    r, url = replay
    rec = replay_update(r, "generate_spans_across_update.json")
    r.queue["/weight_info"] = [(200, {"weight_version": "1"})]
    client = PolicyClient(
        [url], model="tiny", max_model_len=4096, backoff_s=0.01, max_retries=0, version=1
    )
    await client.start()
    try:
        sent = rec["request"]["json"]
        sampling = SamplingParams(max_tokens=120, seed=3)
        with pytest.raises(PolicyError, match="tagged '2'"):
            await client.complete(sent["token_ids"], sampling, n=2, server=url)
        choices = rec["response"]["choices"]
        assert client.stats.discarded_tokens == sum(len(c["token_ids"]) for c in choices)
    finally:
        await client.aclose()
    body = next(b for p, b in r.requests if p == "/inference/v1/generate")
    assert body["output_mode"] == "text" and body["return_token_ids"] is True
    assert set(w.SAMPLING_FIELDS) <= set(body["sampling_params"])
    assert body["cache_salt"].startswith("policy-v1-")  # the version the client knew
    # As read when the service tagged the engine 2 while the request ran (fleet.watch).
    answer = w.GenerateResponse.model_validate(rec["response"])
    gens = from_generate(answer, 2, 1, Window({1, 2}, {1, 2}))
    for gen, choice in zip(gens, choices, strict=True):
        assert gen.token_ids == choice["token_ids"]
        assert gen.logprobs == [e["logprob"] for e in choice["logprobs"]["content"]]
        first, second = choice["weight_versions"]
        assert gen.versions == [1] * first["end"] + [2] * (second["end"] - second["start"])


@pytest.mark.parametrize("name", ["generate_aborted.json", "completions_aborted.json"])
async def test_an_aborted_answer_is_handed_on_with_its_partial_output(
    replay: tuple[Replay, str], name: str
) -> None:
    """finish_reason "abort" is an answer to continue from, not a fault to retry: on both
    routes the partial tokens and logprobs come back as the engine sent them."""
    r, url = replay
    rec = replay_update(r, name)
    client = PolicyClient([url], model="tiny", max_model_len=4096, backoff_s=0.01)
    await client.start()
    try:
        gens = await client.complete([1, 2, 3], SamplingParams(max_tokens=120), n=2, server=url)
    finally:
        await client.aclose()
    generations = [p for p, _ in r.requests if p in ("/inference/v1/generate", "/v1/completions")]
    assert generations[-1] == rec["request"]["path"] and len(generations) <= 2  # no retry
    for gen, choice in zip(gens, rec["response"]["choices"], strict=True):
        assert gen.finish_reason == "abort" and gen.token_ids == choice["token_ids"]
        assert len(gen.versions) == len(gen.token_ids) == len(gen.logprobs) > 0
    assert client.stats.aborted_generations == 2 and client.stats.discarded_tokens == 0


async def test_a_prompt_too_long_on_the_generate_route_is_context_length(
    replay: tuple[Replay, str],
) -> None:
    r, url = replay
    replay_update(r, "generate_too_long.json")
    client = PolicyClient([url], model="tiny", max_model_len=100_000, backoff_s=0.01)
    await client.start()
    try:
        with pytest.raises(ContextLengthError, match="maximum model length"):
            await client.complete([1] * 10_000, SamplingParams(max_tokens=4), server=url)
    finally:
        await client.aclose()
