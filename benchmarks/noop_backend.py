"""A `SandboxBackend` whose sandboxes cost nothing: the "generation alone" baseline of the
overlap benchmark. Commands answer at once with an empty terminal, the workspace is an empty
tar and the verifier returns a fixed reward, so an end-to-end run through it times only the
policy side (the stand-in's simulated decode) and the episode loop."""

from __future__ import annotations

import uuid

from sandboxes.backend import ExecResult, Verdict, VerifyResult
from sandboxes.task import Task
from sandboxes.workspace_tar import build_tar

_EMPTY_TAR = build_tar({})


class NoopSandbox:
    def __init__(self) -> None:
        self.id = f"noop-{uuid.uuid4().hex[:12]}"

    async def exec(self, command: str, timeout_s: float) -> ExecResult:
        return ExecResult(exit_code=0, output="")

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        return ""

    async def put_files(self, dest_dir: str, files: dict[str, bytes]) -> None:
        return None

    async def get_workspace(self) -> bytes:
        return _EMPTY_TAR


class NoopBackend:
    def __init__(self, reward: float = 1.0) -> None:
        self.reward = reward
        self.created = 0

    async def create(self, task: Task, labels: dict[str, str]) -> NoopSandbox:
        self.created += 1
        return NoopSandbox()

    async def destroy(self, sandbox: NoopSandbox) -> None:
        return None

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str]
    ) -> VerifyResult:
        return VerifyResult(self.reward, Verdict.graded)

    async def aclose(self) -> None:
        return None
