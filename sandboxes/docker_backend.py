"""The local Docker implementation of `SandboxBackend` / `Sandbox` (see backend.py)."""

from __future__ import annotations

import asyncio
import logging
import posixpath
import time
import uuid
from dataclasses import dataclass, field

import docker.errors
import requests

from sandboxes.backend import (
    AgentCausedSandboxFault,
    ExecResult,
    KnownBlobs,
    SandboxExited,
    SandboxUnusable,
    Upload,
    Verdict,
    VerifyResult,
    WorkspaceTooLarge,
)
from sandboxes.control import ControlChannel
from sandboxes.docker_adapter import (
    DockerAdapter,
    DockerUnavailable,
    OutputTooLarge,
    default_adapter,
)
from sandboxes.images import ImageResolver
from sandboxes.isolation import LABEL_BACKEND, container_args
from sandboxes.pool import ContainerPool, PoolSettings
from sandboxes.reaper import reap_orphans
from sandboxes.task import Task
from sandboxes.terminal import ServiceExecKilled, TerminalSession
from sandboxes.verifier import Grader, default_grader, run_verifier
from sandboxes.workspace_snapshot import Snapshot, snapshot_of
from sandboxes.workspace_tar import (
    DEFAULT_MAX_WORKSPACE_BYTES,
    build_tar,
    sanitize_workspace_async,
)

log = logging.getLogger(__name__)

DEFAULT_EXEC_OUTPUT_CAP = 64 << 10
# `sh -c _EXEC rollouts-exec COMMAND DEST`: unpack the upload on stdin (if DEST is set: a tar
# whose members carry DEST in their names, so tar makes the folders) under /, then run COMMAND
# in /app with stdin from /dev/null and stderr merged into stdout. sh, and no mkdir: every
# program started here is a few CPU-ms of each request (the command's own shell is bash -l).
_UNPACK_FAILED = 92
_UNPACK_MARKER = "[rollouts] upload failed"
_EXEC = f"""
if [ -n "$2" ] && ! err=$(tar -x --no-same-owner -C / -f - 2>&1)
then
  echo "{_UNPACK_MARKER}: $err"
  exit {_UNPACK_FAILED}
fi
cd /app 2>/dev/null
exec bash -lc "$1" </dev/null 2>&1
"""


class SandboxExecError(RuntimeError):
    """A command that prepares the sandbox (upload, archive) failed."""


@dataclass
class BackendSettings:
    pool: PoolSettings = field(default_factory=PoolSettings)
    exec_output_cap: int = DEFAULT_EXEC_OUTPUT_CAP
    max_workspace_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES
    image_override: str | None = None  # `--image`: one image for every task
    reap_at_start: bool = True
    runtime: str | None = None  # `--runtime`: the OCI runtime of every container (runsc)


class DockerSandbox:
    """One started agent container. Created by `DockerBackend.create`."""

    def __init__(
        self,
        adapter: DockerAdapter,
        container_id: str,
        labels: dict[str, str],
        create_s: float,
        settings: BackendSettings,
    ) -> None:
        self.id = container_id
        self.labels = labels  # rollout/sample ids, kept here: pooled containers cannot carry them
        self.create_s = create_s
        self.workspace_notes: list[str] = []
        self._adapter = adapter
        self._settings = settings
        self._control = ControlChannel(adapter, container_id)
        self._terminal = TerminalSession(self._control)

    def close(self) -> None:
        """Drop the control channel's attach session (the container is removed separately)."""
        self._control.close()

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        try:
            return await self._exec(command, timeout_s, upload)
        except Exception as e:
            raise await self._classify(e) from e

    async def _exec(self, command: str, timeout_s: float, upload: Upload | None) -> ExecResult:
        dest, stdin = "", b""
        if upload is not None:
            if not upload.dest_dir.startswith("/"):
                raise ValueError(f"dest_dir must be absolute, got {upload.dest_dir!r}")
            # Streamed in with the command: the engine's archive API cannot write into tmpfs
            # mounts on a read-only root filesystem.
            dest = upload.dest_dir
            stdin = build_tar(upload.files, prefix=posixpath.normpath(dest).lstrip("/"))
        # At the limit PID 1 kills the command's process group, its background children too.
        result = await self._control.run(
            ["sh", "-c", _EXEC, "rollouts-exec", command, dest],
            limit_s=timeout_s,
            stdin=stdin,
            max_output=self._settings.exec_output_cap,
        )
        output = result.output
        assert output is not None
        if upload is not None and result.exit_code == _UNPACK_FAILED:
            text = output.text()
            if text.startswith(_UNPACK_MARKER):
                raise SandboxExecError(f"writing files to {upload.dest_dir} failed: {text}")
        return ExecResult(
            exit_code=result.exit_code,
            output=output.text(),
            timed_out=result.timed_out,
            dropped_bytes=output.dropped,
        )

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        try:
            return await self._terminal.send_keys(keystrokes, wait_s)
        except Exception as e:
            raise await self._classify(e) from e

    async def _classify(self, error: Exception) -> Exception:
        """What `error` means for the reward. Agent-caused (graded 0) when the container exited
        by itself, or when it runs and the engine answers but our tools in it failed: inside a
        running container only the agent breaks them. Unchanged (masked) when the container
        was removed from outside or the engine failed. Bytes that came out of the container
        and do not parse are agent-caused by type where they are parsed (ChannelGarbled,
        WorkspaceUnreadable, WorkspaceTooLarge), whatever the container's state."""
        if isinstance(error, AgentCausedSandboxFault):
            return error
        try:
            state = (await self._adapter.inspect_container(self.id)).get("State") or {}
        except Exception:  # 404 (removed from outside) or the engine is unreachable
            return error
        # Being removed (by the pool or from outside) is not something the agent did.
        if state.get("Status") in ("removing", "dead"):
            return error
        if state.get("Running"):
            if _is_engine_error(error):
                return error
            return SandboxUnusable(f"the service's tools in the sandbox failed: {error}")
        how = "killed by the out-of-memory killer" if state.get("OOMKilled") else "exited"
        return SandboxExited(
            f"the agent container {how} (exit code {state.get('ExitCode')}) after: {error}"
        )

    async def get_workspace(self) -> bytes:
        try:
            return await self._get_workspace()
        except Exception as e:
            raise await self._classify(e) from e

    async def _get_workspace(self) -> bytes:
        limit = self._settings.max_workspace_bytes
        try:
            result = await self._control.run(
                # Files the agent made unreadable are left out, not a reason to stop grading.
                ["tar", "-c", "--ignore-failed-read", "-C", "/app", "."],
                limit_s=300,
                collect_stdout=limit + (1 << 20),  # tar headers on top of the content cap
            )
        except OutputTooLarge as e:
            # The agent filled /app: its doing, graded 0 (WorkspaceTooLarge), never masked.
            raise WorkspaceTooLarge(f"workspace exceeds {limit} bytes") from e
        if result.exit_code == 137:
            raise ServiceExecKilled("archiving /app was killed")
        if result.exit_code != 0 or result.stdout_raw is None:
            raise SandboxExecError(f"archiving /app failed (tar exit code {result.exit_code})")
        # Parsing and re-packing a tar is CPU work: off the event loop, which other samples'
        # requests to the policy server are waiting on, on the decoders' own threads. A bad
        # archive raises WorkspaceUnreadable: the agent's doing, like everything from in there.
        data, notes = await sanitize_workspace_async(result.stdout_raw, limit)
        for note in notes:
            log.info("sandbox %s workspace: %s", self.id[:12], note)
        self.workspace_notes = notes
        return data


def _is_engine_error(error: BaseException) -> bool:
    """The engine or our connection to it failed (an API error, a socket error): not the
    agent's doing, whatever state the container is in. A socket error carries an errno, or is
    a ConnectionError; an OSError without one comes from parsing bytes (gzip's BadGzipFile, to
    name one), and such bytes came out of the container."""
    if isinstance(error, TimeoutError):  # an OSError, but ours: a command that hung in there
        return False
    engine = (
        docker.errors.DockerException,
        requests.RequestException,
        DockerUnavailable,
        ConnectionError,
    )
    if isinstance(error, engine):
        return True
    return isinstance(error, OSError) and error.errno is not None


class DockerBackend:
    """Sandboxes as local Docker containers, from a warm pool, removed in the background."""

    def __init__(
        self,
        settings: BackendSettings | None = None,
        adapter: DockerAdapter | None = None,
        resolver: ImageResolver | None = None,
        grader: Grader | None = None,
    ) -> None:
        """`grader`: the rules and verifier runtime that grade (default: this code's)."""
        self.settings = settings or BackendSettings()
        self.grader = grader or default_grader()
        self.adapter = adapter or default_adapter()
        self.resolver = resolver or ImageResolver(self.adapter)
        self.backend_id = uuid.uuid4().hex[:12]
        self.pool = ContainerPool(self.adapter, self.backend_id, self.settings.pool)
        self._started = False
        self._start_lock = asyncio.Lock()

    async def _ensure_started(self) -> None:
        async with self._start_lock:
            if not self._started:
                self._started = True
                if self.settings.reap_at_start:
                    removed = await reap_orphans(adapter=self.adapter)
                    if removed:
                        log.info("reaped %d orphaned containers", removed)

    async def _container_args(self, task: Task, labels: dict[str, str]) -> dict:
        image = await self.resolver.resolve(task, self.settings.image_override)
        labels = {**labels, LABEL_BACKEND: self.backend_id}
        return container_args(task, labels, image, self.settings.runtime)

    async def create(self, task: Task, labels: dict[str, str]) -> DockerSandbox:
        await self._ensure_started()
        args = await self._container_args(task, labels)
        cid, create_s = await self.pool.acquire(args)
        return DockerSandbox(self.adapter, cid, dict(labels), create_s, self.settings)

    async def destroy(self, sandbox: DockerSandbox) -> None:  # type: ignore[override]
        sandbox.close()
        self.pool.remove_in_background(sandbox.id)

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        await self._ensure_started()
        t0 = time.monotonic()
        try:
            args = await self._container_args(task, labels)
        except Exception as e:  # no image, no verdict: masked, never a fake zero
            return VerifyResult(None, Verdict.infrastructure, f"verifier image: {e}")
        image_s = time.monotonic() - t0
        result = await run_verifier(
            self.adapter, self.pool, args, task, workspace_tar, self.grader, plain
        )
        result.durations["image_s"] = image_s
        return result

    async def snapshot(self, workspace_tar: bytes, known: KnownBlobs) -> Snapshot:
        return await snapshot_of(workspace_tar, known)  # the sanitized tar get_workspace made

    async def aclose(self) -> None:
        await self.pool.aclose()

    async def __aenter__(self) -> DockerBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
