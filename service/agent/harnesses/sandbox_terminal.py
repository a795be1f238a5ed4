"""A sample's terminal for the harnesses: its sandbox's tmux session (sandboxes/terminal.py).

Keys and the terminal log go through the sandbox's `send_keys`; the pane itself (its whole
history or the visible screen, as `tmux capture-pane` prints them) and its size are read and set
with a short exec in the container, which is how the terminus-2 harness sees the terminal the way
Harbor's tmux session does."""

from __future__ import annotations

import shlex

from sandboxes.backend import Sandbox
from sandboxes.terminal import SESSION, STATE_DIR

CAPTURE_TIMEOUT_S = 20.0
_TMUX = f"TMUX_TMPDIR={shlex.quote(STATE_DIR)} tmux"


class SandboxTerminal:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        return await self.sandbox.send_keys(keystrokes, max(0.0, float(wait_s)))

    async def capture(self, *, entire: bool) -> str | None:
        history = "-S - " if entire else ""
        result = await self.sandbox.exec(
            f"{_TMUX} capture-pane -p {history}-t {SESSION}", CAPTURE_TIMEOUT_S
        )
        if result.exit_code != 0 or result.timed_out or result.dropped_bytes:
            return None  # no session, or a pane too large to read whole
        return result.output

    async def resize(self, width: int, height: int) -> None:
        await self.sandbox.exec(
            f"{_TMUX} resize-window -t {SESSION} -x {int(width)} -y {int(height)}",
            CAPTURE_TIMEOUT_S,
        )
