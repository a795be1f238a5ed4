"""A tiny fault-injecting HTTP/1.1 proxy on loopback, in front of the stand-in policy.

It runs its own event loop in a thread. `mode` decides what each request gets:
  pass       forwarded to the upstream, answer relayed
  http_500   a 500 with a JSON error body
  malformed  a 200 whose body is not JSON
  truncated  a 200 announcing more body than it sends, then the connection is closed
  hang       no answer at all (until the client gives up)
  down       the listener is closed: connection refused, like a dead server
  drop_sample  one sample's server dies for it alone: the first single-choice generation in this
             mode (a sample's own later turn, not a group's shared first turn) and every retry
             of it (the same prompt) lose their connection unanswered; all else passes. Which
             sample dies depends on no timing, so its group is sure to have graded samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import httpx

MODES = ("pass", "http_500", "malformed", "truncated", "hang", "down", "drop_sample")


class FaultProxy:
    def __init__(self, upstream: str, port: int) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = port
        self.mode = "pass"
        self.requests = 0
        self.dropped = 0  # requests drop_sample closed unanswered
        self._doomed: list[int] | None = None  # drop_sample's prompt
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def set_mode(self, mode: str) -> None:
        assert mode in MODES, mode
        if mode == "down" and self._server is not None:
            self._call(self._close())
        elif mode != "down" and self._server is None:
            self._call(self._listen())
        if mode == "drop_sample":
            self._doomed = None
        self.mode = mode

    def stop(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, coro) -> None:  # type: ignore[no-untyped-def]
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            # Established keep-alive connections die with the "server" too.
            with contextlib.suppress(AttributeError):
                self._server.close_clients()  # py3.13+; older: clients see resets on use
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = dict(
                    (k.strip().lower(), v.strip())
                    for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
                )
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests += 1
                if self.mode == "down":  # a connection accepted before the listener closed
                    return
                if self.mode == "drop_sample" and self._dooms(body):
                    self.dropped += 1
                    return
                if not await self._answer(writer, method, path, headers, body):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _dooms(self, body: bytes) -> bool:
        """drop_sample: is this request the doomed sample's (choosing it if none is yet)?"""
        try:
            req = json.loads(body)
        except ValueError:
            return False
        if not isinstance(req, dict):
            return False
        prompt = req.get("prompt", req.get("token_ids"))
        n = req.get("n", (req.get("sampling_params") or {}).get("n", 1))
        if not isinstance(prompt, list):
            return False
        if self._doomed is None and n == 1:
            self._doomed = prompt
        return prompt == self._doomed

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
    ) -> bool:
        """Write one response; False when the connection must be closed afterwards."""
        mode = self.mode
        if mode == "hang":
            while self.mode == "hang":
                await asyncio.sleep(0.1)
            return False
        if mode == "http_500":
            self._write(writer, 500, b'{"error": {"message": "injected fault", "code": 500}}')
        elif mode == "malformed":
            self._write(writer, 200, b'{"id": "cmpl-x", "choices": [{"text": oops')
        elif mode == "truncated":
            full = b'{"id": "cmpl-x", "object": "text_completion", "choices": []}' * 20
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(full)}\r\n\r\n".encode()
                + full[:50]
            )
            await writer.drain()
            return False
        else:
            fwd = {k: v for k, v in headers.items() if k in ("content-type", "authorization")}
            async with httpx.AsyncClient(timeout=120) as client:
                r = await client.request(method, self.upstream + path, content=body, headers=fwd)
            self._write(writer, r.status_code, r.content, r.headers.get("content-type"))
        await writer.drain()
        return True

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str | None = None
    ) -> None:
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {ctype or 'application/json'}\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
