"""The policy client against servers that misbehave on purpose: scripted through an
`httpx.MockTransport`, except where the network itself is the point (a refused connection, a
server that never answers past the client's timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from service.policy.client import ContextLengthError, PolicyClient, PolicyError, PolicyFault
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

GOOD_URL, DEAD_URL = "http://good:8000", "http://dead:8000"


class Faulty:
    """/v1/completions answers from a script of behaviours, one per request, last one repeats;
    the generate route and the control routes are missing (a vLLM without --enable-scale-out and
    dev mode). Host `dead` refuses every connection. `hosts`: where each generation went."""

    def __init__(self) -> None:
        self.script: list[str] = ["ok"]
        self.hits = 0
        self.hosts: list[str] = []  # the host of every request, in order
        self.bodies: list[Any] = []  # the JSON body of every request that reached a server
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        generation = request.url.path in ("/v1/completions", "/inference/v1/generate")
        if request.url.host == "dead":
            if generation:
                self.hosts.append(request.url.host)
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.url.path == "/v1/completions":
            self.hosts.append(request.url.host)
        if request.url.path == "/health":
            return httpx.Response(200)
        if request.url.path != "/v1/completions":  # a vLLM without dev mode and scale-out
            status = 403 if request.url.path == "/inference/v1/generate" else 404
            return httpx.Response(status, json={"detail": "Not available"})
        self.bodies.append(json.loads(request.content))
        kind = self.script[min(self.hits, len(self.script) - 1)]
        self.hits += 1
        if kind == "500":
            return httpx.Response(
                500, json={"error": {"message": "boom", "type": "x", "code": 500}}
            )
        if kind == "timeout":
            raise httpx.ReadTimeout("timed out", request=request)
        if kind == "truncated":
            return httpx.Response(200, content=json.dumps(GOOD)[:-20].encode())
        if kind == "garbage":
            return httpx.Response(200, content=b"<html>oops</html>")
        if kind == "misaligned":
            bad = json.loads(json.dumps(GOOD))
            bad["choices"][0]["logprobs"]["token_logprobs"] = [-0.5]
            return httpx.Response(200, json=bad)
        if kind == "too_long":
            error = {"message": "too long", "type": "BadRequestError", "param": "input_tokens"}
            return httpx.Response(400, json={"error": {**error, "code": 400}})
        return httpx.Response(200, json=GOOD)


@pytest.fixture
def faulty() -> Faulty:
    return Faulty()


def client_for(faulty: Faulty | None, *urls: str, **kw: Any) -> PolicyClient:
    kw = {"model": "m", "max_model_len": 4096, "timeout_s": 2.0, "backoff_s": 0.001, **kw}
    transport = faulty.transport if faulty is not None else None
    return PolicyClient(list(urls), transport=transport, **kw)


async def complete(client: PolicyClient, **kw: Any) -> Any:
    await client.start()
    try:
        return await client.complete([1], SamplingParams(max_tokens=4), **kw)
    finally:
        await client.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Accepts connections and reads requests, never answers a generation (what it serves it
    does say: no control routes, like vLLM without dev mode)."""

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b""
        try:
            with contextlib.suppress(asyncio.IncompleteReadError):  # closed before a request
                head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET /weight_info "):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
            await reader.read()  # until the client gives up and closes
        finally:
            writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def test_500_then_success_is_retried(faulty: Faulty) -> None:
    faulty.script = ["500", "500", "ok"]
    gens = await complete(client_for(faulty, GOOD_URL), server=GOOD_URL)
    assert gens[0].token_ids == [7, 2] and gens[0].logprobs == [-0.5, -0.25]
    assert faulty.hits == 3


async def test_always_500_gives_policy_error(faulty: Faulty) -> None:
    faulty.script = ["500"]
    with pytest.raises(PolicyError, match="boom"):
        await complete(client_for(faulty, GOOD_URL, max_retries=2), server=GOOD_URL)
    assert faulty.hits == 3


async def test_timeout_is_retried_then_policy_error(faulty: Faulty) -> None:
    faulty.script = ["timeout", "ok"]
    gens = await complete(client_for(faulty, GOOD_URL), server=GOOD_URL)
    assert gens[0].token_ids == [7, 2] and faulty.hits == 2
    faulty.script, faulty.hits = ["timeout"], 0
    with pytest.raises(PolicyError, match="timed out"):
        await complete(client_for(faulty, GOOD_URL, max_retries=1), server=GOOD_URL)
    assert faulty.hits == 2


async def test_connection_refused_gives_policy_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # the real network: nothing listens there
    with pytest.raises(PolicyError, match="ConnectError"):
        await complete(client_for(None, url, max_retries=1), server=url)


async def test_hang_past_timeout_gives_policy_error(silent_server: str) -> None:
    url = silent_server  # the real network: the client's own timeout must fire
    with pytest.raises(PolicyError, match="timed out"):
        await complete(client_for(None, url, max_retries=1, timeout_s=0.3), server=url)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "misaligned"])
async def test_malformed_body_retried_then_error(faulty: Faulty, kind: str) -> None:
    faulty.script = [kind, "ok"]
    gens = await complete(client_for(faulty, GOOD_URL), server=GOOD_URL)
    assert gens[0].token_ids == [7, 2] and faulty.hits == 2
    faulty.script, faulty.hits = [kind], 0
    with pytest.raises(PolicyError):
        await complete(client_for(faulty, GOOD_URL, max_retries=2), server=GOOD_URL)
    assert faulty.hits == 3


async def test_context_length_is_not_retried(faulty: Faulty) -> None:
    faulty.script = ["too_long"]
    with pytest.raises(ContextLengthError, match="too long"):
        await complete(client_for(faulty, GOOD_URL), server=GOOD_URL)
    assert faulty.hits == 1


def test_both_policy_errors_share_one_base() -> None:
    assert issubclass(PolicyError, PolicyFault) and issubclass(ContextLengthError, PolicyFault)


async def test_sample_requests_stick_and_a_retry_moves_the_sample(faulty: Faulty) -> None:
    client = client_for(faulty, DEAD_URL, GOOD_URL)
    assert client.pin("sample-1") == DEAD_URL  # least loaded: ties go to the first listed
    gens = await complete(client, sample="sample-1")
    assert gens[0].token_ids == [7, 2]
    # The dead one was asked what it serves first (no answer): the generation went elsewhere.
    assert faulty.hosts == ["good"]
    assert client.pin("sample-1") == GOOD_URL  # the sample moved with the retry
    client.release("sample-1")


async def test_a_new_sample_goes_to_the_least_loaded_server(faulty: Faulty) -> None:
    client = client_for(faulty, GOOD_URL, "http://other:8000")
    assert client.pin("a") == GOOD_URL
    assert client.pin("b") == "http://other:8000"
    client.release("a")
    await complete(client, sample="c")  # placed on first use, where nothing is in flight
    assert faulty.hosts == ["good"]
    assert client.pin("c") == GOOD_URL
    assert client.pin("d", "http://other:8000/v1") == "http://other:8000"  # pinned explicitly
    with pytest.raises(ValueError, match="not both"):
        await complete(client_for(faulty, GOOD_URL), sample="e", server=GOOD_URL)


async def test_healthy(faulty: Faulty) -> None:
    client = client_for(faulty, DEAD_URL, GOOD_URL)
    await client.start()
    try:
        assert await client.healthy()
    finally:
        await client.aclose()
    only_dead = client_for(faulty, DEAD_URL)
    await only_dead.start()
    try:
        assert not await only_dead.healthy()
    finally:
        await only_dead.aclose()


async def test_prompt_filling_the_context_is_clamped_or_refused(faulty: Faulty) -> None:
    client = client_for(faulty, GOOD_URL, max_model_len=8)
    await client.start()
    try:
        with pytest.raises(ContextLengthError):
            await client.complete(list(range(8)), SamplingParams(), server=GOOD_URL)
        await client.complete(list(range(7)), SamplingParams(max_tokens=100), server=GOOD_URL)
    finally:
        await client.aclose()
    assert faulty.hits == 1  # the refused prompt never went out
    assert faulty.bodies[0]["max_tokens"] == 1  # the one that fits asks only for what is left


def test_base_urls_are_normalised() -> None:
    c = PolicyClient(["http://h:8000/v1", "http://g:8000/"], model="m")
    assert c.urls == ["http://h:8000", "http://g:8000"]
    with pytest.raises(ValueError, match="http://"):
        PolicyClient(["h:8000"])
