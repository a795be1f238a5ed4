"""Talking to a container's processes over the engine's multiplexed streams: exec and attach
sessions, fed stdin and drained on the stream pool into a capped copy of their output, and the
framing (Docker's 8-byte frame headers) they are read through."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sandboxes.docker_engine import EngineCalls

# The engine frames each read of a container's stream (32 KiB here); a bigger frame header is
# a broken stream, refused before its payload is waited for and buffered.
MAX_FRAME = 16 << 20


@dataclass
class CappedBuffer:
    """Keeps the first and last `limit // 2` bytes of a stream and counts what fell between.

    Long outputs are cut in the middle: the head shows what started, the tail how it ended.
    """

    limit: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        half = self.limit // 2
        room = half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.limit - half:
                del self.tail[: len(self.tail) - (self.limit - half)]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """Decoded with errors="replace"; a marker stands where bytes were dropped."""
        if self.dropped == 0:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
        return (
            bytes(self.head).decode("utf-8", errors="replace")
            + f"\n[... {self.dropped} bytes dropped ...]\n"
            + bytes(self.tail).decode("utf-8", errors="replace")
        )


@dataclass
class StreamResult:
    exit_code: int | None
    output: CappedBuffer
    stdout_raw: bytes | None = None  # only when collect_stdout was asked for


class OutputTooLarge(RuntimeError):
    pass


class StreamCorrupt(ConnectionError):
    """The engine's multiplexed stream is not what the engine writes: the connection to the
    engine is broken (a container's bytes only ever arrive inside frames)."""


class ContainerNotRunning(RuntimeError):
    """The container had stopped (or not started) when a stream to it was opened."""


class _ExecStream:
    """One exec or attach session whose multiplexed stdout/stderr is read on a stream thread."""

    def __init__(self, raw: Any) -> None:
        # docker-py hands back a SocketIO wrapper or the socket itself.
        self._sock = getattr(raw, "_sock", raw)
        self._sock.settimeout(None)
        self._closed = threading.Event()

    def close(self) -> None:
        # shutdown() wakes a recv() blocked in another thread; close() alone may not.
        if self._closed.is_set():
            return
        self._closed.set()
        for op in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close):
            try:
                op()
            except OSError:
                pass

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """Demultiplex Docker's 8-byte framed stream: (stream id, payload)."""
        buf = bytearray()
        while True:
            try:
                chunk = self._sock.recv(65536)
            except OSError:
                if self._closed.is_set():
                    return
                raise
            if not chunk:
                return
            buf += chunk
            yield from take_frames(buf)


def take_frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """Remove the whole frames of Docker's multiplexed stream (an 8-byte header: stream id,
    size) from the front of `buf`: (stream id, payload) each; a partial frame stays."""
    frames = []
    while len(buf) >= 8:
        stream_id, size = struct.unpack(">BxxxL", bytes(buf[:8]))
        if stream_id > 2 or size > MAX_FRAME:
            raise StreamCorrupt(f"bad frame header from the engine: stream {stream_id}, {size} B")
        if len(buf) < 8 + size:
            break
        frames.append((stream_id, bytes(buf[8 : 8 + size])))
        del buf[: 8 + size]
    return frames


class ContainerStreams(EngineCalls):
    """DockerAdapter's exec and attach sessions."""

    async def exec_stream(
        self,
        container_id: str,
        cmd: list[str],
        *,
        timeout_s: float,  # required: no exec may hold a thread for ever
        stdin: bytes | None = None,
        max_output: int = 1 << 20,
        collect_stdout: int | None = None,
    ) -> tuple[StreamResult, bool]:
        """Run `cmd`, feed it `stdin` (then EOF), read all output keeping a capped copy.

        The output is always drained to the end so the process never blocks on a full pipe.
        With `collect_stdout=N`, stdout is returned raw instead (for tar streams); more than N
        bytes raises OutputTooLarge. On timeout the stream is cut (the process is left to the
        container's removal). Returns (result, timed_out). The service itself runs its commands
        through `control.py`; execs remain for the benchmarks' baselines.
        """

        def _open() -> tuple[str, _ExecStream]:
            api = self.client.api
            ex = api.exec_create(
                container_id,
                cmd,
                stdin=stdin is not None,
                stdout=True,
                stderr=True,
            )
            raw = api.exec_start(ex["Id"], socket=True)
            return ex["Id"], _ExecStream(raw)

        exec_id, stream = await self.call(_open)
        result, timed_out = await self._pump(stream, stdin, max_output, collect_stdout, timeout_s)
        if not timed_out:
            info = await self.call(self.client.api.exec_inspect, exec_id)
            result.exit_code = info.get("ExitCode")
        return result, timed_out

    async def attach_stream(
        self,
        container_id: str,
        *,
        stdin: bytes | Callable[[Callable[[bytes], object]], None],
        timeout_s: float,
        max_output: int = 1 << 20,
        collect_stdout: int | None = None,
    ) -> tuple[StreamResult, bool]:
        """Talk to the main process of a started container created with `stdin_open`: send
        `stdin` (bytes, or a function that writes it piece by piece with the send it is given,
        on the stream's thread), then EOF, and read its output until it exits. Nothing is
        started in the container, so this costs the engine far less than an exec (no runc
        process, no exec create/inspect calls). The exit code is left None: the process
        reports its own result on stdout. On timeout the stream is cut; the caller removes
        the container. A container that is not running raises ContainerNotRunning."""

        def _open() -> _ExecStream:
            return _ExecStream(self._attach(container_id))

        stream = await self.call(_open)
        return await self._pump(stream, stdin, max_output, collect_stdout, timeout_s)

    def attach_socket(self, container_id: str) -> socket.socket:
        """Blocking (call it on the stream pool): a socket attached to the main process's stdin,
        stdout and stderr (multiplexed), kept open by the caller for many exchanges."""
        raw = self._attach(container_id)
        return getattr(raw, "_sock", raw)

    def _attach(self, container_id: str) -> Any:
        # Attaching to a container that is not running waits for it to start (a warm one that
        # died idle: until the caller's timeout), so ask first (a fraction of a CPU-ms).
        state = self.client.api.inspect_container(container_id).get("State") or {}
        if not state.get("Running"):
            raise ContainerNotRunning(f"container {container_id[:12]} is not running")
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        return self.client.api.attach_socket(container_id, params=params)

    async def _pump(
        self,
        stream: _ExecStream,
        stdin: bytes | Callable[[Callable[[bytes], object]], None] | None,
        max_output: int,
        collect_stdout: int | None,
        timeout_s: float,
    ) -> tuple[StreamResult, bool]:
        """Feed `stdin` (then EOF) and drain the framed output on a stream thread, keeping a
        capped copy (or stdout raw, up to `collect_stdout` bytes)."""
        buf = CappedBuffer(max_output)
        out = io.BytesIO() if collect_stdout is not None else None

        def _pump() -> None:
            try:
                if callable(stdin):
                    stdin(stream._sock.sendall)  # never whole in memory (a large workspace)
                elif stdin is not None:
                    stream._sock.sendall(stdin)
                if stdin is not None:
                    stream._sock.shutdown(socket.SHUT_WR)  # EOF on the process's stdin
            except OSError:
                # The process stopped taking its input (it ended): what it wrote before is
                # still to be read, and says how far it got.
                pass
            for stream_id, payload in stream.frames():
                if out is not None and stream_id == 1:
                    out.write(payload)
                    if out.tell() > collect_stdout:  # type: ignore[operator]
                        raise OutputTooLarge(f"output exceeds {collect_stdout} bytes")
                else:
                    buf.add(payload)

        pump = asyncio.ensure_future(self.on_stream_pool(_pump))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(pump), timeout_s)
        except TimeoutError:
            timed_out = True
        finally:
            stream.close()
            if not pump.done():
                # Cancelled (or cut): the reader thread ends once the socket is shut down.
                pump.add_done_callback(lambda f: f.cancelled() or f.exception())
            elif not timed_out:
                pump.result()  # re-raise a reader error (OutputTooLarge, socket errors)
        raw_out = out.getvalue() if out is not None else None
        return StreamResult(exit_code=None, output=buf, stdout_raw=raw_out), timed_out
