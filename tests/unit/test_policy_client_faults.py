"""The policy client against a real local HTTP server that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from service.policy.client import PolicyClient, PolicyError
from service.policy.stub.background import BackgroundServer
from service.sample import SamplingParams

GOOD = {
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "text": "hi",
            "logprobs": {
                "text_offset": [0, 2],
                "token_logprobs": [-0.5, -0.25],
                "tokens": ["hi", "<|im_end|>"],
                "top_logprobs": [{"hi": -0.5}, {"<|im_end|>": -0.25}],
            },
            "finish_reason": "stop",
            "stop_reason": None,
            "token_ids": [7, 2],
            "prompt_logprobs": None,
            "prompt_token_ids": [1],
        }
    ],
    "usage": {"prompt_tokens": 1, "total_tokens": 3, "completion_tokens": 2},
}


class Faulty:
    """/v1/completions answers from a script of behaviours, one per request, last one repeats."""

    def __init__(self) -> None:
        self.script: list[str] = ["ok"]
        self.hits = 0
        app = FastAPI()

        @app.post("/v1/completions")
        async def complete() -> Response:
            kind = self.script[min(self.hits, len(self.script) - 1)]
            self.hits += 1
            if kind == "500":
                return JSONResponse({"error": {"message": "boom", "type": "x", "code": 500}}, 500)
            if kind == "hang":
                await asyncio.sleep(5)
            if kind == "truncated":
                return Response(json.dumps(GOOD)[:-20], media_type="application/json")
            if kind == "garbage":
                return Response("<html>oops</html>", media_type="application/json")
            if kind == "misaligned":
                bad = json.loads(json.dumps(GOOD))
                bad["choices"][0]["logprobs"]["token_logprobs"] = [-0.5]
                return JSONResponse(bad)
            return JSONResponse(GOOD)

        @app.get("/health")
        async def health() -> Response:
            return Response(status_code=200)

        self.app = app


@pytest.fixture
def faulty() -> Iterator[tuple[Faulty, str]]:
    f = Faulty()
    with BackgroundServer(f.app) as server:
        yield f, server.url


def client_for(*urls: str, **kw: Any) -> PolicyClient:
    kw.setdefault("timeout_s", 2.0)
    return PolicyClient(list(urls), model="m", max_model_len=4096, backoff_s=0.01, **kw)


async def complete(client: PolicyClient, server: str, **kw: Any) -> Any:
    await client.start()
    try:
        return await client.complete([1], SamplingParams(max_tokens=4), server=server, **kw)
    finally:
        await client.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_500_then_success_is_retried(faulty: tuple[Faulty, str]) -> None:
    f, url = faulty
    f.script = ["500", "500", "ok"]
    gens = await complete(client_for(url), url)
    assert gens[0].token_ids == [7, 2] and gens[0].logprobs == [-0.5, -0.25]
    assert f.hits == 3


async def test_always_500_gives_policy_error(faulty: tuple[Faulty, str]) -> None:
    f, url = faulty
    f.script = ["500"]
    with pytest.raises(PolicyError, match="boom"):
        await complete(client_for(url, max_retries=2), url)
    assert f.hits == 3


async def test_connection_refused_gives_policy_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PolicyError, match="ConnectError"):
        await complete(client_for(url, max_retries=1), url)


async def test_hang_past_timeout_gives_policy_error(faulty: tuple[Faulty, str]) -> None:
    f, url = faulty
    f.script = ["hang"]
    with pytest.raises(PolicyError, match="timed out"):
        await complete(client_for(url, max_retries=1, timeout_s=0.3), url)
    assert f.hits == 2


@pytest.mark.parametrize("kind", ["truncated", "garbage", "misaligned"])
async def test_malformed_body_retried_then_error(faulty: tuple[Faulty, str], kind: str) -> None:
    f, url = faulty
    f.script = [kind, "ok"]
    gens = await complete(client_for(url), url)
    assert gens[0].token_ids == [7, 2] and f.hits == 2
    f.script, f.hits = [kind], 0
    with pytest.raises(PolicyError):
        await complete(client_for(url, max_retries=2), url)
    assert f.hits == 3


async def test_retry_moves_to_another_server(faulty: tuple[Faulty, str]) -> None:
    f, good = faulty
    dead = f"http://127.0.0.1:{free_port()}"
    client = client_for(dead, good)
    server = client.router.acquire("sample-1")
    assert server == dead
    gens = await complete(client, server, sample_key="sample-1")
    assert gens[0].token_ids == [7, 2]
    assert client.router.acquire("sample-1") == good  # the sample moved with the retry


async def test_healthy(faulty: tuple[Faulty, str]) -> None:
    _, url = faulty
    dead = f"http://127.0.0.1:{free_port()}"
    client = client_for(dead, url)
    await client.start()
    try:
        assert await client.healthy()
    finally:
        await client.aclose()
    only_dead = client_for(dead)
    await only_dead.start()
    try:
        assert not await only_dead.healthy()
    finally:
        await only_dead.aclose()


async def test_prompt_filling_the_context_is_clamped_or_refused(
    faulty: tuple[Faulty, str],
) -> None:
    from service.policy.client import ContextLengthError

    _, url = faulty
    client = PolicyClient([url], model="m", max_model_len=8)
    await client.start()
    try:
        with pytest.raises(ContextLengthError):
            await client.complete(list(range(8)), SamplingParams(), server=url)
    finally:
        await client.aclose()


def test_base_urls_are_normalised() -> None:
    c = PolicyClient(["http://h:8000/v1", "http://g:8000/"], model="m")
    assert c.router.urls == ["http://h:8000", "http://g:8000"]
    with pytest.raises(ValueError, match="http://"):
        PolicyClient(["h:8000"])
