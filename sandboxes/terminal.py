"""The agent's persistent terminal: a tmux session in the sample's container.

tmux keeps the shell (cwd, environment, running programs) across turns. The pane's raw output
is appended to a log file by `pipe-pane`; each `send_keys` returns the log from the previous
offset, so long outputs are never lost to the scrollback limit and are capped head+tail.

One `send_keys` is a single exec: (re)start the session if needed, type the keys, poll whether
the shell is idle again every 50 ms (returning early matters for speed: most commands finish
long before their `duration`), then print the new output. No per-poll round trip to the engine.

The session heals itself, because anything the agent breaks here would otherwise end the sample
as a masked infrastructure error (a reward-hacking route): the log and the tmux socket live in
the service's own tmpfs (not /tmp, which the agent may fill or wipe); a tmux server that was
killed (`kill -9 -1`) is started again; a log that cannot be written any more is replaced, and
that turn shows the visible screen instead. Each of these puts a marker in the observation.
"""

from __future__ import annotations

import re

from sandboxes.docker_adapter import DockerAdapter
from sandboxes.isolation import SERVICE_STATE_DIR

SESSION = "main"
STATE_DIR = SERVICE_STATE_DIR
LOG_PATH = f"{STATE_DIR}/term.log"
MAX_WAIT_S = 60.0
# A terminal exec that has not answered this long after its wait is wedged (the agent stopped
# the tmux server with `kill -STOP -1`): it is cut, and a second such failure ends the sample.
ANSWER_GRACE_S = 20.0
DEFAULT_OUTPUT_CAP = 32 << 10
SHELLS = ("bash", "sh", "dash", "zsh")

RESTARTED_MARKER = (
    "[the terminal session was gone (its processes were killed) and has been restarted; "
    "the working directory and environment were reset]\n"
)
SCREEN_MARKER = (
    "[the terminal log could not be written (is the disk full?); showing the current screen]\n"
)
LOST_MARKER = "[the terminal's output of this command could not be read]\n"

# Keystrokes that are exactly one of these are sent as a key, not typed as text.
_NAMED_KEYS = {
    "Enter", "Escape", "Tab", "BTab", "BSpace", "Space", "Up", "Down", "Left", "Right",
    "Home", "End", "PageUp", "PageDown", "PPage", "NPage", "IC", "DC",
    *(f"F{i}" for i in range(1, 13)),
}  # fmt: skip
_MODIFIED_KEY = re.compile(r"^(?:[CMS]-)+(?:\S|" + "|".join(sorted(_NAMED_KEYS)) + r")$")


class TerminalError(RuntimeError):
    pass


class ServiceExecKilled(TerminalError):
    """A command the service ran in the container was SIGKILLed (exit 137) inside it."""


def is_key_name(keystrokes: str) -> bool:
    return keystrokes in _NAMED_KEYS or bool(_MODIFIED_KEY.match(keystrokes))


# $1 mode (key|text|none)  $2 keys  $3 enter (0|1)  $4 wait in microseconds  $5 offset  $6 cap
# $7 whether a session was started before (0|1).
# Output: a header line "<log size> [restarted] [screen]", then the new output.
_SEND = rf"""
exec 2>/dev/null
# The tmux socket lives beside the log: deleting /tmp/tmux-* must not orphan the server.
export TMUX_TMPDIR={STATE_DIR}
log={LOG_PATH}
off=$5
flags=
open_log() {{
  tmux pipe-pane -t {SESSION}
  : > "$log"
  tmux pipe-pane -t {SESSION} "cat >> $log"
}}
log_ok() {{
  [ -f "$log" ] && [ "$(tmux display-message -p -t {SESSION} '#{{pane_pipe}}')" = 1 ]
}}
start_session() {{
  mkdir -p {STATE_DIR}
  # Bracketed paste would wrap every prompt in escape codes; the agent gains nothing from them.
  printf 'set enable-bracketed-paste off\n' > {STATE_DIR}/inputrc
  if ! INPUTRC={STATE_DIR}/inputrc tmux new-session -d -s {SESSION} -x 200 -y 50 -c /app; then
    echo "tmux new-session failed"
    exit 3
  fi
  tmux set-option -t {SESSION} history-limit 10000 >/dev/null
  open_log
  off=0
}}
if ! tmux has-session -t {SESSION}; then
  start_session
  [ "$7" = 1 ] && flags="$flags restarted"
elif ! log_ok; then
  # What was written while the log was broken is lost; from here on the new log has it.
  open_log
  off=0
fi
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
if ! tmux has-session -t {SESSION}; then
  # This command ended the session (`tmux kill-server`, `exit`): have a new one ready.
  start_session
  flags="$flags restarted"
fi
if ! log_ok; then
  # Held in a variable, not a file: the state directory may be the full one.
  screen=$(tmux capture-pane -p -J -t {SESSION})
  open_log
  echo "0 $flags screen"
  printf '%s\n' "$screen" | head -c "$6"
  exit 0
fi
size=$(stat -c %s "$log")
echo "$size $flags"
new=$(( size - off ))
half=$(( $6 / 2 ))
if [ "$new" -le "$6" ]; then
  tail -c +$(( off + 1 )) "$log" | head -c "$new"
else
  tail -c +$(( off + 1 )) "$log" | head -c "$half"
  tail -c +$(( size - half + 1 )) "$log" | head -c "$half"
fi
"""


class TerminalSession:
    """A tmux session in one container; started (or restarted) by `send_keys` as needed."""

    def __init__(
        self, adapter: DockerAdapter, container_id: str, output_cap: int = DEFAULT_OUTPUT_CAP
    ):
        self._adapter = adapter
        self._cid = container_id
        self._cap = output_cap
        self._offset = 0
        self._started = False

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        enter = False
        if is_key_name(keystrokes):
            mode, text = "key", keystrokes
        else:
            text = keystrokes
            if text.endswith("\n"):
                text, enter = text[:-1], True
            mode = "text" if text else "none"
        wait_us = int(max(0.0, min(float(wait_s), MAX_WAIT_S)) * 1e6)
        code, out = await self._run(mode, text, enter, wait_us)
        lost = ""
        if not _has_header(out):
            # Our own exec was killed with everything else (`kill -9 -1` typed by the agent):
            # look again, which restarts the session if it is gone. A second failure is not
            # the agent's doing (the container is gone, the engine is down): raise.
            lost = LOST_MARKER
            code, out = await self._run("none", "", False, 0)
            if not _has_header(out):
                kind = ServiceExecKilled if code == 137 else TerminalError
                raise kind(f"terminal read failed ({code}): {out[:200]!r}")
        return lost + self._decode(out)

    async def _run(
        self, mode: str, text: str, enter: bool, wait_us: int
    ) -> tuple[int | None, bytes]:
        args = [
            mode,
            text,
            "1" if enter else "0",
            str(wait_us),
            str(self._offset),
            str(self._cap),
            "1" if self._started else "0",
        ]
        code, out = await self._adapter.exec_quick(
            self._cid,
            ["bash", "-c", _SEND, "rollouts-send-keys", *args],
            timeout_s=wait_us / 1e6 + ANSWER_GRACE_S,
        )
        # Even when this exec was killed before it answered, it may have started the session.
        self._started = True
        return code, out

    def _decode(self, out: bytes) -> str:
        header, _, body = out.partition(b"\n")
        size_text, *flags = header.decode().split()
        size = int(size_text)
        prefix = RESTARTED_MARKER if "restarted" in flags else ""
        if "screen" in flags:
            self._offset = size
            return prefix + SCREEN_MARKER + _crlf(body.decode("utf-8", errors="replace"))
        # After a restart or a replaced log the offset restarts at 0 (the script knows).
        start = 0 if "restarted" in flags or size < self._offset else self._offset
        new = size - start
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
        return prefix + _crlf(text_out)


def _has_header(out: bytes) -> bool:
    header = out.partition(b"\n")[0].split()
    return bool(header) and header[0].isdigit()


def _crlf(text: str) -> str:
    # The pty turns every newline into CRLF; that is line discipline, not program output.
    return text.replace("\r\n", "\n")
