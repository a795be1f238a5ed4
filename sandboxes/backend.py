"""The sandbox interface the service talks to. Docker is the first backend (docker_backend.py);
a Ray backend driving remote Docker Engines is the planned second one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sandboxes.task import Task
from service.trajectory import Status


class AgentCausedSandboxFault(RuntimeError):
    """The sandbox broke because of what the agent did in it, not because of the infrastructure.

    Such samples are graded (reward 0, status ok), never masked: a masked sample gets advantage
    0, so a policy that cannot solve a task would learn that wrecking its sandbox beats a 0.
    """


class WorkspaceTooLarge(AgentCausedSandboxFault):
    """The agent's /app holds more than the workspace size cap."""


class SandboxExited(AgentCausedSandboxFault):
    """The agent container still exists but is no longer running (its processes were killed,
    or the kernel's OOM killer ended it). A container removed from outside or an unreachable
    engine raise other errors and stay masked."""


class SandboxUnusable(AgentCausedSandboxFault):
    """The container runs, but the service's own commands in it are SIGKILLed: the agent used
    all its memory (a full tmpfs counts) so the OOM killer takes every new process."""


@dataclass
class ExecResult:
    exit_code: int | None  # None when killed on timeout
    output: str  # stdout+stderr, decoded with errors="replace", head+tail capped
    timed_out: bool = False
    dropped_bytes: int = 0


@dataclass
class VerifyResult:
    reward: float | None  # None when masked
    status: Status  # ok / verifier_timeout / verifier_error / sandbox_error
    output: str = ""  # verifier stdout+stderr, truncated
    durations: dict[str, float] = field(default_factory=dict)


class Sandbox(Protocol):
    """One agent container for one sample. The agent never sees tests/."""

    id: str

    async def exec(self, command: str, timeout_s: float) -> ExecResult:
        """Run `bash -lc command` in /app; on timeout kill the whole process tree."""
        ...

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        """Type into the persistent terminal session (tmux semantics: a trailing newline runs
        the line, `C-c` interrupts), wait up to wait_s (returning early once the shell is idle),
        and return the new terminal output since the previous call, capped with a marker."""
        ...

    async def put_files(self, dest_dir: str, files: dict[str, bytes]) -> None: ...

    async def get_workspace(self) -> bytes:
        """A tar of /app. Symlinks pointing outside /app are refused. Raises WorkspaceTooLarge
        over the size cap; every method raises SandboxExited once the container has exited."""
        ...


class SandboxBackend(Protocol):
    async def create(self, task: Task, labels: dict[str, str]) -> Sandbox: ...

    async def destroy(self, sandbox: Sandbox) -> None:
        """Returns at once; removal happens in the background."""
        ...

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str]
    ) -> VerifyResult:
        """Fresh container from the task's image; copy workspace to /app and tests/ to /tests;
        run tests/test.sh with the verifier timeout; read /logs/verifier/reward.json|txt."""
        ...

    async def aclose(self) -> None:
        """Wait for background teardown and remove every container this process created."""
        ...
