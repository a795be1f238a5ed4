"""The sandbox interface the service talks to: Docker (docker_backend.py), and Ray driving the
Docker Engines of many machines (ray_backend.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from sandboxes.task import Task
from sandboxes.workspace_snapshot import KnownBlobs, Snapshot

# The label of a sandbox that grades a task's oracle (sandboxes/calibration.py). The task's
# samples wait for that grade holding their own sandboxes, so a backend that bounds its
# sandboxes by slots (Ray) must never make this one wait for theirs.
LABEL_CALIBRATION = "rollouts.calibration"


class Verdict(StrEnum):
    """How a sandbox run ended, in this layer's own words (the service maps it to a status).

    Only `infrastructure` and `tests_broken` carry no reward: the fault lies outside what the
    agent controls. Everything the agent or its code can cause is `graded` (reward 0 at worst).
    """

    graded = "graded"  # the tests' reward stands
    agent_timeout = "agent_timeout"  # the solve script outlived the agent timeout; still graded
    tests_timeout = "tests_timeout"  # the tests outlived the verifier timeout: reward 0
    tests_broken = "tests_broken"  # the task's tests gave no usable reward: no reward
    infrastructure = "infrastructure"  # engine, image or container failed from outside: no reward


class AgentCausedSandboxFault(RuntimeError):
    """The sandbox broke because of what the agent did in it, not because of the infrastructure.

    Such samples are graded (reward 0, status ok), never masked: a masked sample gets advantage
    0, so a policy that cannot solve a task would learn that wrecking its sandbox beats a 0.
    """


class WorkspaceTooLarge(AgentCausedSandboxFault):
    """The agent's /app holds more than the workspace size cap."""


class WorkspaceUnreadable(AgentCausedSandboxFault):
    """The workspace archive that came out of the agent container is not a plain tar as our
    `tar -c` writes it (compressed, truncated, forged into the stream): whatever comes out of
    the agent's container is its doing."""


class SandboxExited(AgentCausedSandboxFault):
    """The agent container still exists but is no longer running (its processes were killed,
    or the kernel's OOM killer ended it). A container removed from outside or an unreachable
    engine raise other errors and stay masked."""


class SandboxUnusable(AgentCausedSandboxFault):
    """The container runs and the engine answers, yet the service's own tools in it fail: their
    processes are killed (the agent used all the memory, or `kill -9 -1` twice), they hang
    (`kill -STOP -1`), or their files were made unusable (`chmod 000 /run/rollouts`, an
    unreadable file in /app). Inside a running container only the agent can do that."""


@dataclass
class ExecResult:
    exit_code: int | None  # None when killed on timeout
    output: str  # stdout+stderr, decoded with errors="replace", head+tail capped
    timed_out: bool = False
    dropped_bytes: int = 0


@dataclass
class VerifyResult:
    reward: float | None  # None for tests_broken and infrastructure
    verdict: Verdict
    output: str = ""  # verifier stdout+stderr, truncated
    durations: dict[str, float] = field(default_factory=dict)
    # Why the reward is what it is: flags from sandboxes/reward.py (e.g. "pytest_tampered"),
    # and the files the tests left under /logs/verifier (capped), as evidence.
    flags: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    # The layers that kept the tested code from the verdict, as the tested process reported
    # them: {"user": its user id or None, "landlock": ABI version or why none} (rollouts doctor).
    isolation: dict[str, object] = field(default_factory=dict)
    # Who graded and with what: the grader's version (verifier.Grader) and the sha256 of the
    # task's tests (Task.tests_digest); empty when no verifier ran.
    grader_version: str = ""
    tests_digest: str = ""


@dataclass(frozen=True)
class Upload:
    """Files an exec writes under `dest_dir` (absolute) before its command starts."""

    dest_dir: str
    files: dict[str, bytes]


class Sandbox(Protocol):
    """One agent container for one sample. The agent never sees tests/."""

    id: str

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        """Run `bash -lc command` in /app, after writing `upload` (one round trip for both);
        on timeout kill the whole process tree."""
        ...

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        """Type into the persistent terminal session (tmux semantics: a trailing newline runs
        the line, `C-c` interrupts), wait up to wait_s (returning early once the shell is idle),
        and return the new terminal output since the previous call, capped with a marker."""
        ...

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
        self, task: Task, workspace_tar: bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        """Fresh container from the task's image; copy workspace to /app and tests/ to /tests;
        run tests/test.sh with the verifier timeout; read /logs/verifier/reward.json|txt.
        `plain`: the calibration fallback (sandboxes/calibration.py): the workspace itself as
        /app, the tests with the agent's code in their process, the grade flagged `unguarded`."""
        ...

    async def snapshot(self, workspace_tar: bytes, known: KnownBlobs) -> Snapshot:
        """`workspace_tar` (what `get_workspace` returned) as a manifest and the blobs that
        `known` does not hold yet: how the final workspace is kept for regrading. Call it
        before `verify`, which may release the workspace (on Ray it stays on its node)."""
        ...

    async def aclose(self) -> None:
        """Wait for background teardown and remove every container this process created."""
        ...
