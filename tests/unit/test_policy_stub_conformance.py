"""The stand-in server answers in vLLM's shapes (the recordings), with vLLM's errors, real
float32 logprobs, deterministic sampling per seed, and the scripted agent's steps."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandboxes.task import Task, TaskConfig
from service.policy import vllm_wire as w
from standin.attacks import ATTACKS
from standin.engine import StubSettings
from standin.harness_formats import is_protocol_reply
from standin.server import build_app

WIRE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-wire"

SOLVE = (
    b"#!/bin/bash\ncat > /app/solution.py <<'EOF'\ndef camelize(s):\n"
    b"    head, *rest = s.split('_')\n    return head + ''.join(p.title() for p in rest)\nEOF\n"
)
TASK = Task(
    id="camelize",
    path="mem://camelize",
    instruction="Create /app/solution.py defining camelize(s).",
    config=TaskConfig(),
    environment_files={"Dockerfile": b"FROM rollouts-base:bookworm\n"},
    test_files={"test.sh": b"#!/bin/bash\n"},
    solution_files={"solve.sh": SOLVE},
)
SYSTEM = "You are a terminal agent. Reply with one JSON object."


def recorded(name: str) -> Any:
    return json.loads((WIRE / name).read_text())["response"]


@pytest.fixture
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    overrides = {"p_malformed": 0.0, **getattr(request, "param", {})}
    app = build_app(StubSettings(**overrides), tasks=[TASK])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://stub") as client:
        yield client


def key_shape(x: Any, *, token_keyed: bool = False) -> Any:
    """Key sets, recursively; dicts keyed by token strings (top_logprobs) compare as 'a dict'."""
    if isinstance(x, dict):
        if token_keyed:
            return "token-dict"
        return {k: key_shape(v, token_keyed=k == "top_logprobs") for k, v in x.items()}
    if isinstance(x, list):
        return key_shape(x[0], token_keyed=token_keyed) if x else []
    return None


async def prompt_ids(stub: httpx.AsyncClient, *extra: dict[str, str]) -> list[int]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK.instruction}]
    r = await stub.post("/tokenize", json={"messages": [*msgs, *extra]})
    assert r.status_code == 200
    return r.json()["tokens"]


async def complete(stub: httpx.AsyncClient, prompt: list[int], **kw: Any) -> dict[str, Any]:
    body = {"model": "stub", "prompt": prompt, "logprobs": 1, "return_token_ids": True, **kw}
    r = await stub.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def test_completion_shape_matches_recording(stub: httpx.AsyncClient) -> None:
    got = await complete(stub, await prompt_ids(stub), n=2, seed=1, max_tokens=4096)
    w.CompletionResponse.model_validate(got)
    assert key_shape(got) == key_shape(recorded("completions_token_ids_n8.json"))
    assert got["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in got["choices"])


async def test_other_endpoint_shapes_match_recordings(stub: httpx.AsyncClient) -> None:
    models = (await stub.get("/v1/models")).json()
    assert key_shape(models) == key_shape(recorded("models.json"))
    assert models["data"][0]["max_model_len"] == 32768
    tok = (await stub.post("/tokenize", json={"prompt": "x", "add_special_tokens": False})).json()
    assert key_shape(tok) == key_shape(recorded("tokenize_prompt.json"))
    detok = (await stub.post("/detokenize", json={"tokens": [1, 3 + ord("a")]})).json()
    assert detok == {"prompt": "<|im_start|>a"}
    health = await stub.get("/health")
    assert health.status_code == 200 and health.content == b""
    metrics = (await stub.get("/metrics")).text
    for series in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_hits_total",
    ]:
        assert f"\n{series}{{" in metrics


async def test_tokenize_prompt_parses_special_tokens(stub: httpx.AsyncClient) -> None:
    delta = "<|im_end|>\n<|im_start|>user\nls output<|im_end|>\n<|im_start|>assistant\n"
    r = await stub.post("/tokenize", json={"prompt": delta, "add_special_tokens": False})
    ids = r.json()["tokens"]
    assert ids[0] == 2 and ids[2] == 1 and ids.count(2) == 2 and ids.count(1) == 2
    assert r.json()["count"] == len(ids)


async def test_eos_included_in_token_ids_not_in_text(stub: httpx.AsyncClient) -> None:
    got = await complete(stub, await prompt_ids(stub), seed=3, max_tokens=4096)
    c = got["choices"][0]
    assert c["finish_reason"] == "stop" and c["stop_reason"] is None
    assert c["token_ids"][-1] == 2 and c["logprobs"]["tokens"][-1] == "<|im_end|>"
    assert "<|im_end|>" not in c["text"] and is_protocol_reply(c["text"])
    lp = c["logprobs"]
    assert len(lp["token_logprobs"]) == len(c["token_ids"]) == len(lp["tokens"])
    assert lp["text_offset"][1] == len(lp["tokens"][0])


async def test_length_and_stop_strings(stub: httpx.AsyncClient) -> None:
    prompt = await prompt_ids(stub)
    c = (await complete(stub, prompt, seed=3, max_tokens=5))["choices"][0]
    assert c["finish_reason"] == "length" and len(c["token_ids"]) == 5 and 2 not in c["token_ids"]
    c = (await complete(stub, prompt, seed=3, max_tokens=4096, stop=["camelize"]))["choices"][0]
    assert c["finish_reason"] == "stop" and c["stop_reason"] == "camelize"
    assert "camelize" not in c["text"] and c["text"].endswith("asks for ")
    full = (await stub.post("/detokenize", json={"tokens": c["token_ids"]})).json()["prompt"]
    assert full.startswith(c["text"]) and "camelize" in full  # ids include the stop token


async def test_tokens_as_token_ids(stub: httpx.AsyncClient) -> None:
    got = await complete(
        stub,
        await prompt_ids(stub),
        seed=2,
        max_tokens=12,
        logprobs=0,
        return_tokens_as_token_ids=True,
    )
    lp = got["choices"][0]["logprobs"]
    assert lp["tokens"] == [f"token_id:{t}" for t in got["choices"][0]["token_ids"]]
    assert all(len(top) == 1 for top in lp["top_logprobs"])
    assert key_shape(got) == key_shape(recorded("completions_tokens_as_ids.json"))


async def test_deterministic_per_seed_and_float32_logprobs(stub: httpx.AsyncClient) -> None:
    prompt = await prompt_ids(stub)
    kw = {"n": 4, "max_tokens": 4096, "temperature": 3.0}  # hot: deviations do happen
    a = await complete(stub, prompt, seed=7, **kw)
    b = await complete(stub, prompt, seed=7, **kw)
    c = await complete(stub, prompt, seed=8, **kw)
    ids = lambda r: [ch["token_ids"] for ch in r["choices"]]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert len({tuple(x) for x in ids(a)}) > 1  # choices differ from one another
    for ch in a["choices"]:
        for lp in ch["logprobs"]["token_logprobs"]:
            assert lp <= 0.0 and struct.unpack("f", struct.pack("f", lp))[0] == lp
        # The scripted token and the rest share the probability mass: it sums to 1.
        top = ch["logprobs"]["top_logprobs"][0]
        assert all(v <= 0 for v in top.values())
    greedy = await complete(stub, prompt, seed=1, temperature=0.0, max_tokens=4096)
    assert all(lp == 0.0 for lp in greedy["choices"][0]["logprobs"]["token_logprobs"])


async def _vocab_size(stub: httpx.AsyncClient) -> int:
    """The vocabulary size as the server enforces it: the first prompt id it refuses."""
    lo, hi = 0, 10**6  # lo is in the vocabulary, hi is not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = await stub.post("/v1/completions", json={"prompt": [mid], "max_tokens": 1})
        lo, hi = (mid, hi) if r.status_code == 200 else (lo, mid)
    return hi


@pytest.mark.parametrize(
    "sampling",
    [
        {"top_k": 5, "temperature": 6.0},
        {"top_k": 20, "temperature": 4.0},
        {"top_k": 2, "temperature": 12.0},
        {"temperature": 0.0},  # greedy: one token with all the mass
    ],
)
async def test_returned_top_logprobs_hold_the_whole_distribution(
    stub: httpx.AsyncClient, sampling: dict[str, float]
) -> None:
    """Where the sampling support fits in `logprobs` (top_k <= 20), the server's top_logprobs
    list every token that can be drawn: their probabilities, as returned, sum to 1, and the
    sampled token's logprob is its entry there."""
    support = int(sampling.get("top_k", 1))
    got = await complete(
        stub, await prompt_ids(stub), seed=6, max_tokens=60, logprobs=support,
        return_tokens_as_token_ids=True, **sampling,
    )  # fmt: skip
    lp = got["choices"][0]["logprobs"]
    assert len(lp["top_logprobs"]) == len(got["choices"][0]["token_ids"]) > 0
    for token, chosen, top in zip(
        lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True
    ):
        assert len(top) == support and top[token] == chosen
        assert math.fsum(math.exp(v) for v in top.values()) == pytest.approx(1.0, abs=1e-6)
        if support > 1:  # hot sampling: the mass is really spread, not all on one token
            assert max(top.values()) < math.log(0.999)


@pytest.mark.parametrize("temperature", [3.0, 8.0])
async def test_full_vocabulary_distribution_sums_to_one(
    stub: httpx.AsyncClient, temperature: float
) -> None:
    """Without top_k every other token shares one probability: the scripted token's returned
    probability plus (vocabulary - 1) times another token's is 1."""
    vocab = await _vocab_size(stub)
    got = await complete(
        stub, await prompt_ids(stub), seed=6, max_tokens=40, logprobs=2,
        return_tokens_as_token_ids=True, temperature=temperature,
    )  # fmt: skip
    for top in got["choices"][0]["logprobs"]["top_logprobs"]:
        best, other = sorted(top.values(), reverse=True)[:2]
        total = math.exp(best) + (vocab - 1) * math.exp(other)
        assert total == pytest.approx(1.0, abs=1e-4)
        assert math.exp(best) < 0.99  # the others carry real mass at this temperature


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"prompt": [1], "n": "eight"}, 400, "body.n"),
        ({"prompt": [1], "model": "nope"}, 404, "model"),
        ({"prompt": [1] * 40000}, 400, "input_tokens"),
        ({"prompt": [1] * 32000, "max_tokens": 1000}, 400, "max_tokens"),
        ({"prompt": [1], "cache_salt": "model@v3"}, 400, "cache_salt"),
        ({"prompt": [1], "cache_salt": "x" * 129}, 400, "cache_salt"),
        ({"prompt": [10**6]}, 400, "prompt"),
        ({"prompt": []}, 400, "prompt"),
        ({"prompt": "text"}, 400, "body.prompt"),
    ],
)
async def test_errors_in_vllm_shape(
    stub: httpx.AsyncClient, body: dict[str, Any], status: int, param: str
) -> None:
    r = await stub.post("/v1/completions", json=body)
    assert r.status_code == status
    err = w.ErrorResponse.model_validate(r.json()).error
    assert err.code == status and err.param == param and err.message
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_too_long_error_matches_recording_wording(stub: httpx.AsyncClient) -> None:
    r = await stub.post("/v1/completions", json={"prompt": [1] * 40000})
    rec = recorded("completions_too_long.json")["error"]
    assert r.json()["error"]["type"] == rec["type"] == "BadRequestError"
    assert "exceeds this limit even without any output tokens" in rec["message"]
    assert "exceeds this limit even without any output tokens" in r.json()["error"]["message"]


# ---------------------------------------------------------------- scripted behaviour


def assistant_turn(choice: dict[str, Any]) -> dict[str, str]:
    return {"role": "assistant", "content": choice["text"]}


def keystrokes(text: str) -> str:
    return "".join(c["keystrokes"] for c in json.loads(text)["commands"])


async def test_script_steps_and_redo_after_malformed(stub: httpx.AsyncClient) -> None:
    kw = {"seed": 11, "max_tokens": 4096}
    step1 = (await complete(stub, await prompt_ids(stub), **kw))["choices"][0]
    keys = keystrokes(step1["text"])
    assert "def camelize(s):" in keys and "head, *rest" in keys and keys.endswith("\n")
    obs = {"role": "user", "content": "$ bash <<...\n$ "}
    step2 = await complete(stub, await prompt_ids(stub, assistant_turn(step1), obs), **kw)
    s2 = json.loads(step2["choices"][0]["text"])
    assert s2["task_complete"] is True and "import solution" in keystrokes(json.dumps(s2))
    # A malformed earlier reply does not count: the stub redoes that step.
    bad = {"role": "assistant", "content": '{"analysis": "cut sh'}
    err = {"role": "user", "content": "Your last reply was not valid JSON."}
    redo = await complete(stub, await prompt_ids(stub, bad, err), **kw)
    assert keystrokes(redo["choices"][0]["text"]) == keys
    confirm_prompt = await prompt_ids(
        stub,
        assistant_turn(step1),
        obs,
        assistant_turn(step2["choices"][0]),
        {"role": "user", "content": "Are you sure? Reply with task_complete true again."},
    )
    s3 = json.loads((await complete(stub, confirm_prompt, **kw))["choices"][0]["text"])
    assert s3["task_complete"] is True and s3["commands"] == []


@pytest.mark.parametrize("stub", [{"p_correct": 0.0}], indirect=True)
async def test_wrong_solution_defines_the_function_badly(stub: httpx.AsyncClient) -> None:
    c = (await complete(stub, await prompt_ids(stub), seed=1, max_tokens=4096))["choices"][0]
    keys = keystrokes(c["text"])
    assert "def camelize(s):\n    return None" in keys and "head, *rest" not in keys


@pytest.mark.parametrize("stub", [{"p_correct": 0.5}], indirect=True)
async def test_correctness_is_per_sample_and_stable(stub: httpx.AsyncClient) -> None:
    prompt = await prompt_ids(stub)
    first = await complete(stub, prompt, seed=5, n=8, max_tokens=4096)
    again = await complete(stub, prompt, seed=5, n=8, max_tokens=4096)
    kinds = ["head, *rest" in keystrokes(c["text"]) for c in first["choices"]]
    assert kinds == ["head, *rest" in keystrokes(c["text"]) for c in again["choices"]]
    assert True in kinds and False in kinds  # 8 samples at p=0.5: both kinds (fixed seed)


@pytest.mark.parametrize("stub", [{"p_malformed": 1.0}], indirect=True)
async def test_malformed_replies(stub: httpx.AsyncClient) -> None:
    c = (await complete(stub, await prompt_ids(stub), seed=1, max_tokens=4096))["choices"][0]
    assert c["finish_reason"] == "stop" and not is_protocol_reply(c["text"])


@pytest.mark.parametrize("stub", [{"attack": "fork_bomb"}], indirect=True)
async def test_attack_mode_types_the_attack_first(stub: httpx.AsyncClient) -> None:
    c = (await complete(stub, await prompt_ids(stub), seed=1, max_tokens=4096))["choices"][0]
    assert keystrokes(c["text"]) == ATTACKS["fork_bomb"]


def test_unknown_attack_is_named() -> None:
    with pytest.raises(ValueError, match="attack"):
        build_app(StubSettings(attack="nope"), tasks=[])


async def test_unknown_task_ends_politely(stub: httpx.AsyncClient) -> None:
    r = await stub.post("/tokenize", json={"messages": [{"role": "user", "content": "hello"}]})
    c = (await complete(stub, r.json()["tokens"], seed=1, max_tokens=4096))["choices"][0]
    assert json.loads(c["text"])["task_complete"] is True


async def test_record_file_lists_served_choices(tmp_path: Path) -> None:
    rec = tmp_path / "served.jsonl"
    app = build_app(StubSettings(p_malformed=0.0, record=str(rec)), tasks=[TASK])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as s:
        got = await complete(s, await prompt_ids(s), n=3, seed=4, max_tokens=4096)
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    assert [x["token_ids"] for x in lines] == [c["token_ids"] for c in got["choices"]]
    assert [x["logprobs"] for x in lines] == [
        c["logprobs"]["token_logprobs"] for c in got["choices"]
    ]
    assert all(x["prompt_token_ids"] == got["choices"][0]["prompt_token_ids"] for x in lines)
