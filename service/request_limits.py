"""ASGI middleware that bounds what one request may cost the server before a route runs:
body size (413) and body read time (408).

Both answer the client themselves and then stop the app's body read by raising inside
`receive`. The app's own reaction to that (FastAPI turns any body-read failure into a 400) is
swallowed: the client already has its answer, and a second response start would be a
protocol error. uvicorn closes the connection afterwards, since the request body was never
read to its end.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _Rejected(Exception):
    """Raised inside `receive` after the middleware has sent its own error response."""


async def send_error(send: Send, status: int, detail: bytes) -> None:
    """A JSON error response {"detail": ...} straight from an ASGI middleware."""
    body = json.dumps({"detail": detail.decode("latin-1")}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _guarded(
    app: ASGIApp,
    scope: Scope,
    send: Send,
    make_receive: Callable[[Callable[[int, bytes], Awaitable[None]]], Receive],
) -> None:
    """Run `app` with the receive that `make_receive(reject)` builds. `reject(status, detail)`
    answers the client (unless the app already started a response) and makes every later
    message of the app a no-op."""
    started = False
    rejected = False

    async def reject(status: int, detail: bytes) -> None:
        nonlocal rejected
        if not rejected and not started:
            rejected = True
            await send_error(send, status, detail)
        raise _Rejected

    async def guarded_send(message: Message) -> None:
        nonlocal started
        if rejected:
            return  # the app's reaction to the aborted read; the client has its answer
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, make_receive(reject), guarded_send)
    except _Rejected:
        pass
    except Exception:
        if not rejected:
            raise


class BodySizeLimit:
    """413 for bodies over the limit, by Content-Length or by counting a streamed (chunked)
    body as it arrives."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = b"request body too large (limit %d bytes)" % self.max_bytes
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await send_error(send, 413, detail)
                    return

        def make_receive(reject: Callable[[int, bytes], Awaitable[None]]) -> Receive:
            seen = 0

            async def limited_receive() -> Message:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > self.max_bytes:
                        await reject(413, detail)
                return message

            return limited_receive

        await _guarded(self.app, scope, send, make_receive)


class BodyReadTimeout:
    """408 when a request body is not read in full within `total_s`, or when no part of it
    arrives for `idle_s` (slow-loris: uvicorn itself waits for a body forever).

    Only the body is timed: once its last part arrived, `receive` is passed through untouched
    (streaming responses and long polls wait on it for the client's disconnect)."""

    def __init__(self, app: ASGIApp, total_s: float, idle_s: float) -> None:
        self.app = app
        self.total_s = total_s
        self.idle_s = idle_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.total_s

        def make_receive(reject: Callable[[int, bytes], Awaitable[None]]) -> Receive:
            body_done = False

            async def timed_receive() -> Message:
                nonlocal body_done
                if body_done:
                    return await receive()
                left = deadline - time.monotonic()
                try:
                    message = await asyncio.wait_for(receive(), max(0.0, min(left, self.idle_s)))
                except TimeoutError:
                    await reject(408, b"request body not received in time")
                    raise AssertionError("unreachable") from None
                if message["type"] != "http.request" or not message.get("more_body", False):
                    body_done = True
                return message

            return timed_receive

        await _guarded(self.app, scope, send, make_receive)
