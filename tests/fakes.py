"""Test doubles for the sandbox layer: a `SandboxBackend` (sandboxes/backend.py) that runs
nothing, so the episode runner can be unit-tested without Docker.

Everything is scriptable on the backend and applies to every sandbox it creates:
- `terminal(sandbox, keystrokes) -> str` answers `send_keys` (default: an echo with a prompt);
  it may raise, e.g. `SandboxExited` (the agent wrecked its container: every later call on that
  sandbox raises it too) or any other error (a fault from outside);
- `send_keys_delay_s` makes each `send_keys` take that long (agent timeouts);
- `create_error` / `workspace_error` make `create` / `get_workspace` raise;
- `verify_result` (a `VerifyResult`, or a function of the sandbox labels) is the verifier's
  verdict.
It records what happened: `created` sandboxes (each with its `labels`, `typed` keystrokes and
`files`), `destroyed` ids, `verified` labels (and whether each was `plain`), `closed`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from sandboxes.backend import ExecResult, SandboxExited, Upload, Verdict, VerifyResult
from sandboxes.task import Task
from sandboxes.workspace_tar import build_tar

Terminal = Callable[["FakeSandbox", str], str]

_ids = itertools.count()


def echo_terminal(sandbox: FakeSandbox, keystrokes: str) -> str:
    return f"root@sandbox:/app# {keystrokes}"


@dataclass
class FakeSandbox:
    backend: FakeBackend
    labels: dict[str, str]
    id: str = field(default_factory=lambda: f"fake-{next(_ids)}")
    typed: list[tuple[str, float]] = field(default_factory=list)  # (keystrokes, wait_s)
    files: dict[str, bytes] = field(default_factory=dict)  # the workspace, path -> bytes
    exited: bool = False

    @property
    def trajectory_id(self) -> str:
        return self.labels.get("rollouts.trajectory_id", "")

    def _check_running(self) -> None:
        if self.exited:
            raise SandboxExited(f"container {self.id} has exited")
        if self.id in self.backend.destroyed:
            raise RuntimeError(f"container {self.id} was removed")

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        self._check_running()
        if upload is not None:
            prefix = upload.dest_dir.removeprefix("/app").strip("/")
            for name, data in upload.files.items():
                self.files[f"{prefix}/{name}" if prefix else name] = data
        return ExecResult(exit_code=0, output="")

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        self._check_running()
        self.typed.append((keystrokes, wait_s))
        await asyncio.sleep(self.backend.send_keys_delay_s)  # yields even at 0, like real I/O
        try:
            return self.backend.terminal(self, keystrokes)
        except SandboxExited:
            self.exited = True
            raise

    async def get_workspace(self) -> bytes:
        self._check_running()
        if self.backend.workspace_error is not None:
            raise self.backend.workspace_error
        return build_tar(self.files)


@dataclass
class FakeBackend:
    terminal: Terminal = echo_terminal
    send_keys_delay_s: float = 0.0
    create_error: BaseException | None = None
    workspace_error: BaseException | None = None
    verify_result: VerifyResult | Callable[[dict[str, str]], VerifyResult] = field(
        default_factory=lambda: VerifyResult(1.0, Verdict.graded, "1 passed")
    )
    created: list[FakeSandbox] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    verified: list[dict[str, str]] = field(default_factory=list)  # labels, one per verify
    plain: list[bool] = field(default_factory=list)  # `plain` of each verify (the fallback)
    closed: bool = False

    async def create(self, task: Task, labels: dict[str, str]) -> FakeSandbox:
        await asyncio.sleep(0)
        if self.create_error is not None:
            raise self.create_error
        sandbox = FakeSandbox(self, dict(labels))
        self.created.append(sandbox)
        return sandbox

    async def destroy(self, sandbox: FakeSandbox) -> None:
        if sandbox.id in self.destroyed:
            raise AssertionError(f"{sandbox.id} destroyed twice")
        self.destroyed.append(sandbox.id)

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        await asyncio.sleep(0)
        self.verified.append(dict(labels))
        self.plain.append(plain)
        result = self.verify_result
        return result(labels) if callable(result) else result

    async def aclose(self) -> None:
        self.closed = True

    @property
    def live(self) -> list[str]:
        """Sandboxes created and never destroyed (a leak, once an episode is over)."""
        return [s.id for s in self.created if s.id not in self.destroyed]

    def sandbox_of(self, trajectory_id: str) -> FakeSandbox:
        return next(s for s in self.created if s.trajectory_id == trajectory_id)
