"""The agent's persistent terminal: a tmux session in the sample's container.

tmux keeps the shell (cwd, environment, running programs) across turns. The pane's raw output
is appended to a log file by `pipe-pane`; each `send_keys` returns the log from the previous
offset, so long outputs are never lost to the scrollback limit and are capped head+tail.

One `send_keys` is a single exec: type the keys, poll whether the shell is idle again every
50 ms (returning early matters for speed: most commands finish long before their `duration`),
then print the new output. No per-poll round trip to the engine.
"""

from __future__ import annotations

import re

from sandboxes.docker_adapter import DockerAdapter

SESSION = "main"
STATE_DIR = "/tmp/.rollouts"
LOG_PATH = f"{STATE_DIR}/term.log"
MAX_WAIT_S = 60.0
DEFAULT_OUTPUT_CAP = 32 << 10
SHELLS = ("bash", "sh", "dash", "zsh")

# Keystrokes that are exactly one of these are sent as a key, not typed as text.
_NAMED_KEYS = {
    "Enter", "Escape", "Tab", "BTab", "BSpace", "Space", "Up", "Down", "Left", "Right",
    "Home", "End", "PageUp", "PageDown", "PPage", "NPage", "IC", "DC",
    *(f"F{i}" for i in range(1, 13)),
}  # fmt: skip
_MODIFIED_KEY = re.compile(r"^(?:[CMS]-)+(?:\S|" + "|".join(sorted(_NAMED_KEYS)) + r")$")


class TerminalError(RuntimeError):
    pass


def is_key_name(keystrokes: str) -> bool:
    return keystrokes in _NAMED_KEYS or bool(_MODIFIED_KEY.match(keystrokes))


_START = rf"""
set -e
mkdir -p {STATE_DIR}
: > {LOG_PATH}
# Bracketed paste would wrap every prompt in escape codes; the agent gains nothing from them.
printf 'set enable-bracketed-paste off\n' > {STATE_DIR}/inputrc
export INPUTRC={STATE_DIR}/inputrc
tmux new-session -d -s {SESSION} -x 200 -y 50 -c /app
tmux set-option -t {SESSION} history-limit 10000 >/dev/null
tmux pipe-pane -t {SESSION} -o 'cat >> {LOG_PATH}'
"""

# $1 mode (key|text|none)  $2 keys  $3 enter (0|1)  $4 wait in microseconds  $5 offset  $6 cap
_SEND = rf"""
exec 2>/dev/null
log={LOG_PATH}
if [ "$1" = key ]; then tmux send-keys -t {SESSION} "$2"
elif [ "$1" = text ]; then tmux send-keys -t {SESSION} -l -- "$2"; fi
if [ "$3" = 1 ]; then tmux send-keys -t {SESSION} Enter; fi
now() {{ local t=${{EPOCHREALTIME/./}}; echo $((10#$t)); }}
end=$(( $(now) + $4 ))
idle=0
sleep 0.05
while [ "$(now)" -lt "$end" ]; do
  cmd=$(tmux display-message -p -t {SESSION} '#{{pane_current_command}}')
  case " {" ".join(SHELLS)} " in *" $cmd "*) idle=$((idle+1)) ;; *) idle=0 ;; esac
  # Twice idle in a row: the line was read and the command (if any) has finished.
  [ "$idle" -ge 2 ] && break
  sleep 0.05
done
size=$(stat -c %s "$log")
echo "$size"
new=$(( size - $5 ))
half=$(( $6 / 2 ))
if [ "$new" -le "$6" ]; then
  tail -c +$(( $5 + 1 )) "$log" | head -c "$new"
else
  tail -c +$(( $5 + 1 )) "$log" | head -c "$half"
  tail -c +$(( size - half + 1 )) "$log" | head -c "$half"
fi
"""


class TerminalSession:
    """A tmux session in one container; started lazily on the first `send_keys`."""

    def __init__(
        self, adapter: DockerAdapter, container_id: str, output_cap: int = DEFAULT_OUTPUT_CAP
    ):
        self._adapter = adapter
        self._cid = container_id
        self._cap = output_cap
        self._offset = 0
        self._started = False

    async def start(self) -> None:
        code, out = await self._adapter.exec_quick(self._cid, ["bash", "-c", _START])
        if code != 0:
            raise TerminalError(f"starting tmux failed ({code}): {out.decode(errors='replace')}")
        self._started = True

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        if not self._started:
            await self.start()
        enter = False
        if is_key_name(keystrokes):
            mode, text = "key", keystrokes
        else:
            text = keystrokes
            if text.endswith("\n"):
                text, enter = text[:-1], True
            mode = "text" if text else "none"
        wait_us = int(max(0.0, min(float(wait_s), MAX_WAIT_S)) * 1e6)
        args = [mode, text, "1" if enter else "0", str(wait_us), str(self._offset), str(self._cap)]
        code, out = await self._adapter.exec_quick(
            self._cid, ["bash", "-c", _SEND, "rollouts-send-keys", *args]
        )
        header, _, body = out.partition(b"\n")
        try:
            size = int(header)
        except ValueError as e:
            raise TerminalError(f"terminal read failed ({code}): {out[:200]!r}") from e
        new = size - self._offset
        self._offset = size
        if new > self._cap:
            half = self._cap // 2
            text_out = (
                body[:half].decode("utf-8", errors="replace")
                + f"\n[... {new - 2 * half} bytes dropped ...]\n"
                + body[half:].decode("utf-8", errors="replace")
            )
        else:
            text_out = body.decode("utf-8", errors="replace")
        # The pty turns every newline into CRLF; that is line discipline, not program output.
        return text_out.replace("\r\n", "\n")
