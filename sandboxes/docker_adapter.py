"""The one async adapter over the blocking `docker` SDK.

Every Docker Engine call of the project goes through `DockerAdapter`, which runs it on a bounded
thread pool so the event loop never blocks. Two pools: short control calls (create, start,
remove, list, inspect) and long output streams (attach sessions, execs). Keeping them apart
means a flood of long-running streams can never starve the calls that create or remove
containers.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import docker
import docker.errors

T = TypeVar("T")
logger = logging.getLogger(__name__)

# Engine API calls block for at most this long (image builds get their own timeout).
_API_TIMEOUT_S = 120
# A build's step containers left when it ends (stopped at its timeout, failed, cancelled) are
# removed by the build itself, waiting at most this long for them to be gone; each engine call
# of that removal blocks for at most _STEP_CALL_S (a forced removal waits for the kill).
BUILD_CLEANUP_S = 120.0
_STEP_CALL_S = 30
# How the classic builder names the container of a RUN step in the build's output.
_RUNNING_IN = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")
# The engine frames each read of a container's stream (32 KiB here); a bigger frame header is
# a broken stream, refused before its payload is waited for and buffered.
MAX_FRAME = 16 << 20


class DockerUnavailable(RuntimeError):
    """The Docker Engine could not be reached."""


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


class DockerAdapter:
    """Async facade over the docker SDK. One per process is enough (see `default_adapter`)."""

    def __init__(self, control_workers: int = 16, stream_workers: int = 128) -> None:
        self._control = ThreadPoolExecutor(control_workers, thread_name_prefix="docker-ctl")
        self._stream = ThreadPoolExecutor(stream_workers, thread_name_prefix="docker-stream")
        self._client_lock = threading.Lock()
        self._client: docker.DockerClient | None = None
        self._cleanups: set[asyncio.Future[Any]] = set()  # of cancelled builds, still running

    @property
    def client(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                try:
                    self._client = docker.from_env(timeout=_API_TIMEOUT_S)
                except docker.errors.DockerException as e:
                    raise DockerUnavailable(f"cannot reach the Docker Engine: {e}") from e
            return self._client

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a short blocking SDK call on the control pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._control, partial(fn, *args, **kwargs))

    async def on_stream_pool(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking stream conversation (reads that last as long as a command)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._stream, partial(fn, *args))

    # ---- containers -------------------------------------------------------------------------

    async def create_container(self, args: dict[str, Any]) -> str:
        """Create (not start) a container from `isolation.container_args` output."""

        def _create() -> str:
            api = self.client.api
            kwargs = dict(args)
            host_config = api.create_host_config(**kwargs.pop("host_config"))
            return api.create_container(host_config=host_config, **kwargs)["Id"]

        return await self.call(_create)

    async def start(self, container_id: str) -> None:
        await self.call(self.client.api.start, container_id)

    async def remove(self, container_id: str) -> None:
        """Force-remove; a container that is already gone is not an error."""

        def _rm() -> None:
            try:
                self.client.api.remove_container(container_id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:
                # "removal already in progress" means someone else finishes the job.
                if "already in progress" not in str(e):
                    raise

        await self.call(_rm)

    async def list_containers(self, labels: dict[str, str] | list[str]) -> list[dict[str, Any]]:
        items = [f"{k}={v}" for k, v in labels.items()] if isinstance(labels, dict) else labels
        return await self.call(self.client.api.containers, all=True, filters={"label": items})

    async def inspect_container(self, container_id: str) -> dict[str, Any]:
        return await self.call(self.client.api.inspect_container, container_id)

    # ---- exec -------------------------------------------------------------------------------

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
        the container."""

        def _open() -> _ExecStream:
            params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            return _ExecStream(self.client.api.attach_socket(container_id, params=params))

        stream = await self.call(_open)
        return await self._pump(stream, stdin, max_output, collect_stdout, timeout_s)

    def attach_socket(self, container_id: str) -> socket.socket:
        """Blocking (call it on the stream pool): a socket attached to the main process's stdin,
        stdout and stderr (multiplexed), kept open by the caller for many exchanges."""
        # Attaching to a container that is not running waits for it to start: ask first.
        state = self.client.api.inspect_container(container_id).get("State") or {}
        if not state.get("Running"):
            raise ContainerNotRunning(f"container {container_id[:12]} is not running")
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        raw = self.client.api.attach_socket(container_id, params=params)
        return getattr(raw, "_sock", raw)

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
            if callable(stdin):
                stdin(stream._sock.sendall)  # never whole in memory (a large workspace)
            elif stdin is not None:
                stream._sock.sendall(stdin)
            if stdin is not None:
                stream._sock.shutdown(socket.SHUT_WR)  # EOF on the process's stdin
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

    # ---- images -----------------------------------------------------------------------------

    async def image_exists(self, ref: str) -> bool:
        def _exists() -> bool:
            try:
                self.client.api.inspect_image(ref)
                return True
            except docker.errors.ImageNotFound:
                return False

        return await self.call(_exists)

    async def try_pull(self, ref: str, timeout_s: float) -> bool:
        """Whether `ref` could be pulled (used to detect a reachable registry)."""

        def _pull() -> bool:
            try:
                docker.APIClient(timeout=int(timeout_s)).pull(ref)
                return True
            except Exception:  # registry unreachable, DNS failure, timeout: all mean "no"
                return False

        return await self.call(_pull)

    async def build(
        self,
        *,
        context_tar: bytes | None = None,
        path: str | None = None,
        dockerfile: str | None = None,
        tag: str,
        timeout_s: float,
        network_mode: str | None = None,
        labels: dict[str, str] | None = None,
        memory_bytes: int | None = None,
        cpus: float | None = None,
    ) -> list[str]:
        """Build an image; returns the log lines. Raises BuildFailed with the log on error.

        A build from `context_tar` (a task's environment: code from outside) runs its RUN steps
        with `network_mode` ("none": no network), at most `memory_bytes` of memory (no swap)
        and `cpus` CPUs, and never pulls a FROM image it already has. `timeout_s` is
        wall-clock: when it passes the build's connection is shut down, which makes the engine
        cancel the build, and BuildTimedOut is raised. However the build ends, its step
        containers that are still there are then force-removed and waited for (at most
        BUILD_CLEANUP_S; in the background when the build was cancelled): the engine's own
        removal of a killed step can fail or lag, and must not leave it behind. (A `path`
        build, the trusted base image, keeps the engine's defaults.)"""
        if context_tar is None:
            return await self._build_path(path, dockerfile, tag, timeout_s, network_mode, labels)
        # Every step container of this build, and only those, carries this host name: how a
        # container the build's output names is told from one a RUN step's output pretends
        # to name (cache lookups go by the image config, so this costs no cache hits).
        token = f"rollouts-build-{uuid.uuid4().hex}"
        params: dict[str, Any] = {"t": tag, "rm": True, "forcerm": True, "pull": False}
        params["extrahosts"] = [f"{token}:127.0.0.1"]
        if network_mode:
            params["networkmode"] = network_mode
        if labels:
            params["labels"] = json.dumps(labels)
        if memory_bytes:
            params["memory"] = params["memswap"] = memory_bytes
        if cpus:
            params["cpuperiod"] = 100_000
            params["cpuquota"] = max(1_000, int(cpus * 100_000))
        log: list[str] = []
        try:
            await self._build_tar(context_tar, params, timeout_s, log)
        except asyncio.CancelledError:
            cleanup = asyncio.ensure_future(self.remove_build_containers(log, token))
            self._cleanups.add(cleanup)
            cleanup.add_done_callback(self._cleanups.discard)
            raise
        except BaseException:
            await self.remove_build_containers(log, token)
            raise
        await self.remove_build_containers(log, token)  # the engine removed them: one list
        return log

    async def _build_tar(
        self, context_tar: bytes, params: dict[str, Any], timeout_s: float, log: list[str]
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # Reads never time out before the wall clock does: a silent RUN step is not stuck.
        api = docker.APIClient(timeout=int(timeout_s) + 60)
        response: Any = None
        sock: socket.socket | None = None
        abandoned = threading.Event()  # set once we stopped waiting for _start
        # The reader thread's state, "reading" while it may be in a read (which a close of the
        # response waits for): the last of the reader and the build closes the connection.
        reading = _ReaderState()

        def _start() -> Any:
            nonlocal sock
            r = api._post(
                api._url("/build"),
                data=context_tar,
                params=params,
                headers={"Content-Type": "application/tar"},
                stream=True,
            )
            if abandoned.is_set():  # timed out or cancelled while sending: stop it now
                r.close()
                raise BuildFailed("build abandoned", log)
            try:
                api._raise_for_status(r)
            except docker.errors.APIError as e:
                r.close()
                raise BuildFailed(str(e), log) from e
            sock = _response_socket(r)
            return r

        def _read() -> list[str]:
            with reading:
                if reading.state == "closed":  # given up on before it started
                    return log
                reading.state = "reading"
            try:
                for chunk in api._stream_helper(response, decode=True):
                    _read_build_chunk(chunk, log)
                return log
            finally:
                with reading:
                    close_here, reading.state = reading.state == "close when read", "read"
                if close_here:
                    _close()

        def _shut() -> None:
            # Ends the connection, and the engine cancels the build. Closing the response is
            # not enough: while the reader thread waits in recv() (a silent step sends
            # nothing) the close waits for that read, on the caller's thread, and the engine
            # builds on until the read timeout. shutdown() wakes the recv() at once.
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        def _close() -> None:
            if response is not None:
                response.close()
            api.close()

        reader: asyncio.Future[list[str]] | None = None
        try:
            starting = asyncio.ensure_future(self.on_stream_pool(_start))
            try:
                response = await asyncio.wait_for(asyncio.shield(starting), timeout_s)
            except BaseException:
                abandoned.set()
                starting.add_done_callback(
                    lambda f: f.cancelled() or f.exception() or f.result().close()
                )
                raise
            reader = asyncio.ensure_future(self.on_stream_pool(_read))
            try:
                await asyncio.wait_for(asyncio.shield(reader), deadline - loop.time())
            except BaseException:
                _shut()
                await asyncio.gather(reader, return_exceptions=True)
                raise
        except TimeoutError:
            raise BuildTimedOut(
                f"the build did not finish within {timeout_s:.0f} s and was stopped", log
            ) from None
        finally:
            _shut()
            with reading:  # cancelled again while the reader reads: it closes when it ends
                close_now = reading.state != "reading"
                reading.state = "closed" if close_now else "close when read"
            if close_now:
                _close()

    async def remove_build_containers(self, lines: list[str], token: str) -> list[str]:
        """Force-remove the step containers of one build that are still there, and wait until
        they are gone (at most BUILD_CLEANUP_S). The candidates are the containers its output
        names (" ---> Running in ID"); only those carrying the build's `token` host name are
        touched, so a RUN step that prints another container's ID cannot get it removed.
        Returns the IDs still there at the deadline (logged; never raises)."""
        wanted = build_step_containers(lines)
        if not wanted:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BUILD_CLEANUP_S
        api = docker.APIClient(timeout=_STEP_CALL_S)

        def _ours() -> list[str]:
            found = []
            for c in api.containers(all=True, quiet=True):
                cid = c["Id"]
                if not any(cid.startswith(w) for w in wanted):
                    continue
                try:
                    info = api.inspect_container(cid)
                except docker.errors.NotFound:
                    continue  # removed meanwhile
                extra_hosts = (info.get("HostConfig") or {}).get("ExtraHosts") or []
                if any(h.split(":", 1)[0] == token for h in extra_hosts):
                    found.append(cid)
            return found

        def _remove(cid: str) -> None:
            try:
                # A killed step dies only once its processes get the CPU to exit, and a fork
                # bomb's thousand runnable processes under the build's CPU quota can take
                # minutes for that: lift the quota (the memory limit still bounds it; the
                # engine killed it when the build's connection ended, and kills it again
                # below).
                api.update_container(cid, cpu_quota=-1)
            except docker.errors.APIError:
                pass  # gone, or not running any more
            try:
                api.remove_container(cid, force=True, v=True)
            except docker.errors.NotFound:
                pass

        left: list[str] = []
        try:
            while True:
                try:
                    left = await self.on_stream_pool(_ours)
                except Exception as e:  # noqa: BLE001 - the engine is busy: ask again
                    logger.debug("listing build containers failed: %s", e)
                if not left or loop.time() >= deadline:
                    break
                for cid in left:
                    logger.debug("removing build container %s", cid[:12])
                    try:
                        await self.on_stream_pool(_remove, cid)
                    except Exception as e:  # noqa: BLE001 - in progress, kill pending: retry
                        logger.debug("removing build container %s: %s", cid[:12], e)
                    if loop.time() >= deadline:
                        break
                await asyncio.sleep(min(0.5, max(0.0, deadline - loop.time())))
        finally:
            api.close()
        if left:
            logger.warning(
                "build containers %s were still there %.0f s after the build ended",
                ", ".join(c[:12] for c in left), BUILD_CLEANUP_S,
            )  # fmt: skip
        return left

    async def _build_path(
        self,
        path: str | None,
        dockerfile: str | None,
        tag: str,
        timeout_s: float,
        network_mode: str | None,
        labels: dict[str, str] | None,
    ) -> list[str]:
        def _build() -> list[str]:
            api = docker.APIClient(timeout=int(timeout_s))
            log: list[str] = []
            kwargs: dict[str, Any] = dict(
                path=path, dockerfile=dockerfile, tag=tag, rm=True, forcerm=True, decode=True,
                network_mode=network_mode,
            )  # fmt: skip
            if labels:
                kwargs["labels"] = labels
            for chunk in api.build(**kwargs):
                _read_build_chunk(chunk, log)
            return log

        return await self.on_stream_pool(_build)

    async def import_image(
        self, tarball: str, repository: str, tag: str, changes: list[str]
    ) -> None:
        def _import() -> None:
            api = docker.APIClient(timeout=1800)
            out = api.import_image_from_file(
                tarball, repository=repository, tag=tag, changes=changes
            )
            if isinstance(out, str) and '"error"' in out:
                raise RuntimeError(f"docker import failed: {out}")

        await self.on_stream_pool(_import)

    def close(self) -> None:
        self._control.shutdown(wait=False, cancel_futures=True)
        self._stream.shutdown(wait=False, cancel_futures=True)


class _ReaderState:
    """A lock and a state word, shared by a build and the thread reading its output."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.state = "not started"

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def build_step_containers(lines: list[str]) -> list[str]:
    """The IDs (12 or more hex digits) of the step containers a classic-builder output names,
    in order, each once. A RUN step's own output can name others: check before acting."""
    found: dict[str, None] = {}
    for line in lines:
        m = _RUNNING_IN.match(line)
        if m:
            found[m.group(1)] = None
    return list(found)


def _response_socket(response: Any) -> socket.socket | None:
    """The socket under a streamed `requests` response from the engine (None if not found)."""
    raw = getattr(getattr(getattr(response.raw, "_fp", None), "fp", None), "raw", None)
    sock = getattr(raw, "_sock", raw)
    return sock if isinstance(sock, socket.socket) else None


class BuildFailed(RuntimeError):
    def __init__(self, message: str, log: list[str]) -> None:
        super().__init__(message)
        self.log = log


class BuildTimedOut(BuildFailed):
    """The build ran past its wall-clock timeout and was stopped."""


_default: DockerAdapter | None = None
_default_pid: int | None = None


def default_adapter() -> DockerAdapter:
    """The process-wide adapter (re-created after fork, as thread pools do not survive it)."""
    global _default, _default_pid
    if _default is None or _default_pid != os.getpid():
        _default, _default_pid = DockerAdapter(), os.getpid()
    return _default


def _read_build_chunk(chunk: dict[str, Any], log: list[str]) -> None:
    """One decoded message of a build's output: its lines go to `log`; an error ends the build
    (BuildFailed, with the log so far)."""
    if "stream" in chunk:
        log.extend(chunk["stream"].rstrip("\n").splitlines())
    if "error" in chunk:
        log.append(chunk["error"].rstrip())
        raise BuildFailed(chunk["error"].strip(), log)
