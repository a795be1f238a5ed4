"""Docker images through the engine: existence, pulls, imports, and builds (a task's
environment from a tar under limits and a wall-clock timeout, or the trusted base image from a
folder), with the removal of the step containers a build leaves."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
import uuid
from typing import Any

import docker
import docker.errors

from sandboxes.docker_engine import EngineCalls

logger = logging.getLogger(__name__)

# A build's step containers left when it ends (stopped at its timeout, failed, cancelled) are
# removed by the build itself, waiting at most this long for them to be gone; each engine call
# of that removal blocks for at most _STEP_CALL_S (a forced removal waits for the kill).
BUILD_CLEANUP_S = 120.0
_STEP_CALL_S = 30
# How the classic builder names the container of a RUN step in the build's output.
_RUNNING_IN = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")


class ImageBuilds(EngineCalls):
    """DockerAdapter's image calls."""

    def __init__(self, control_workers: int = 16, stream_workers: int = 128) -> None:
        super().__init__(control_workers, stream_workers)
        self._cleanups: set[asyncio.Future[Any]] = set()  # of cancelled builds, still running

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


def _read_build_chunk(chunk: dict[str, Any], log: list[str]) -> None:
    """One decoded message of a build's output: its lines go to `log`; an error ends the build
    (BuildFailed, with the log so far)."""
    if "stream" in chunk:
        log.extend(chunk["stream"].rstrip("\n").splitlines())
    if "error" in chunk:
        log.append(chunk["error"].rstrip())
        raise BuildFailed(chunk["error"].strip(), log)
