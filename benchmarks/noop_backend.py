"""A `SandboxBackend` whose sandboxes cost nothing: the "generation alone" baseline of the
overlap benchmark. Commands answer at once with an empty terminal, so a run through it times
only the policy side (the stand-in's simulated decode) and the episode loop.

It still grades what matters on that side: every keystroke the agent sends is kept, the
workspace it hands the verifier is that keystroke log, and the verifier gives 1.0 only when the
keystrokes deliver the task's oracle `solve.sh` to bash: whole, as one heredoc into `bash`, or
appended to a file in parts (heredocs into `cat >`/`cat >>`, a `truncate -s -1` taking off a
heredoc's extra newline) that is then run with `bash FILE`. A reply that was cut, parsed wrong,
or typed a wrong solution scores 0, so "every sample solved its task" means the same here as
with real sandboxes: the agent protocol carried the whole solution."""

from __future__ import annotations

import io
import re
import tarfile
import uuid

from sandboxes.backend import ExecResult, Upload, Verdict, VerifyResult
from sandboxes.task import Task
from sandboxes.workspace_snapshot import KnownBlobs, Snapshot, snapshot_of
from sandboxes.workspace_tar import build_tar

KEYSTROKE_LOG = "keystrokes.log"
_WHOLE = re.compile(r"bash <<'(?P<mark>[^'\n]+)'\n(?P<body>.*?)^(?P=mark)\n", re.S | re.M)
_PART = re.compile(
    r"cat (?P<op>>>?) (?P<file>\S+) <<'(?P<mark>[^'\n]+)'\n(?P<body>.*?)^(?P=mark)\n"
    r"(?P<truncate>truncate -s -1 (?P=file)\n)?",
    re.S | re.M,
)


def solution_typed(solve: str, typed: str) -> bool:
    """Whether `typed` (every keystroke of an episode, in order) runs `solve` in bash."""
    if any(m["body"] == solve for m in _WHOLE.finditer(typed)):
        return True
    files: dict[str, str] = {}
    for m in _PART.finditer(typed):
        body = m["body"][:-1] if m["truncate"] else m["body"]
        files[m["file"]] = (files.get(m["file"], "") if m["op"] == ">>" else "") + body
        rest = typed[m.end() :]
        if files[m["file"]] == solve and re.search(rf"^bash {re.escape(m['file'])}\n", rest, re.M):
            return True
    return False


class NoopSandbox:
    def __init__(self) -> None:
        self.id = f"noop-{uuid.uuid4().hex[:12]}"
        self.typed: list[str] = []

    async def exec(
        self, command: str, timeout_s: float, upload: Upload | None = None
    ) -> ExecResult:
        return ExecResult(exit_code=0, output="")

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        self.typed.append(keystrokes)
        return ""

    async def get_workspace(self) -> bytes:
        return build_tar({KEYSTROKE_LOG: "".join(self.typed).encode()})


class NoopBackend:
    def __init__(self) -> None:
        self.created = 0

    async def create(self, task: Task, labels: dict[str, str]) -> NoopSandbox:
        self.created += 1
        return NoopSandbox()

    async def destroy(self, sandbox: NoopSandbox) -> None:
        return None

    async def verify(
        self, task: Task, workspace_tar: bytes, labels: dict[str, str], plain: bool = False
    ) -> VerifyResult:
        with tarfile.open(fileobj=io.BytesIO(workspace_tar)) as tar:
            member = tar.extractfile(KEYSTROKE_LOG)
            typed = member.read().decode() if member is not None else ""
        solve = task.solution_files.get("solve.sh", b"").decode()
        if solve and not solve.endswith("\n"):
            solve += "\n"
        solved = bool(solve) and solution_typed(solve, typed)
        return VerifyResult(1.0 if solved else 0.0, Verdict.graded, f"oracle typed: {solved}")

    async def snapshot(self, workspace_tar: bytes, known: KnownBlobs) -> Snapshot:
        return await snapshot_of(workspace_tar, known)  # kept like a real sandbox's

    async def aclose(self) -> None:
        return None
