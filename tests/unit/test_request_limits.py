"""The request-limit middlewares driven as plain ASGI (a FastAPI route with a JSON body behind
them): 413 for streamed bodies over the limit, 408 for a body that stops arriving, and the
app's own reaction to the aborted read never reaches the client."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.types import ASGIApp, Message

from service.request_limits import BodyReadTimeout, BodySizeLimit

SCOPE = {
    "type": "http", "method": "POST", "path": "/echo", "query_string": b"",
    "headers": [(b"content-type", b"application/json")], "http_version": "1.1",
    "scheme": "http", "server": ("t", 80), "client": ("c", 1), "root_path": "",
}  # fmt: skip


class Body(BaseModel):
    text: str


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(body: Body) -> dict[str, int]:
        return {"n": len(body.text)}

    return app


async def _call(app: ASGIApp, parts: list[bytes], gap_s: float = 0.0) -> list[Message]:
    """POST /echo with `parts` as a streamed body (no Content-Length); after the last part,
    the client waits without sending more when gap_s > 0 (the slow-loris case)."""
    queue = list(parts)
    sent: list[Message] = []

    async def receive() -> Message:
        if queue:
            part = queue.pop(0)
            return {"type": "http.request", "body": part, "more_body": bool(queue) or gap_s > 0}
        await asyncio.sleep(gap_s or 3600)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(dict(SCOPE), receive, send)
    return sent


def _status(sent: list[Message]) -> list[int]:
    return [m["status"] for m in sent if m["type"] == "http.response.start"]


async def test_streamed_body_over_limit_is_413_once() -> None:
    app = BodySizeLimit(_app(), max_bytes=2048)
    sent = await _call(app, [b'{"text": "' + b"a" * 1024] * 3 + [b'"}'])
    assert _status(sent) == [413]  # one response: FastAPI's 400 for the aborted read is dropped
    assert b"too large" in sent[-1]["body"]


async def test_streamed_body_under_limit_passes() -> None:
    app = BodySizeLimit(_app(), max_bytes=4096)
    sent = await _call(app, [b'{"text": "', b"abc", b'"}'])
    assert _status(sent) == [200] and sent[-1]["body"] == b'{"n":3}'


async def test_body_that_stops_arriving_is_408() -> None:
    app = BodyReadTimeout(_app(), total_s=5.0, idle_s=0.2)
    sent = await _call(app, [b'{"text": '], gap_s=60)
    assert _status(sent) == [408]


async def test_body_over_total_deadline_is_408() -> None:
    # Parts keep coming (never idle), but the whole body takes longer than total_s.
    app = BodyReadTimeout(_app(), total_s=0.3, idle_s=10.0)
    sent = await _call(app, [b'{"text": "', b"a" * 50, b'"}'])
    assert _status(sent) == [200]  # parts arriving at once: within the deadline

    async def slow_parts() -> list[Message]:
        class Slow:
            n = 0

        async def receive() -> Message:
            Slow.n += 1
            await asyncio.sleep(0.05)
            return {"type": "http.request", "body": b" ", "more_body": True}

        out: list[Message] = []

        async def send(m: Message) -> None:
            out.append(m)

        await app(dict(SCOPE), receive, send)
        return out

    assert _status(await slow_parts()) == [408]


async def test_receive_after_the_body_is_not_timed() -> None:
    # Streaming responses wait on receive() for the disconnect: no 408 may come from that.
    seen: list[Message] = []

    async def inner(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await receive()  # the whole body
        seen.append(await receive())  # waits past idle_s for the disconnect

    app = BodyReadTimeout(inner, total_s=0.2, idle_s=0.1)
    messages = [{"type": "http.request", "body": b"x", "more_body": False}]

    async def receive() -> Message:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(0.4)
        return {"type": "http.disconnect"}

    async def send(m: Message) -> None:
        raise AssertionError(f"nothing may be sent: {m}")

    await app({"type": "http", "headers": []}, receive, send)
    assert seen == [{"type": "http.disconnect"}]
