"""The agent's persistent terminal: a tmux session in the sample's container.

tmux keeps the shell (cwd, environment, running programs) across turns. The pane's raw output
is appended to a log file by `pipe-pane`; each `send_keys` returns the log from the previous
offset, so long outputs are never lost to the scrollback limit and are capped head+tail.

One `send_keys` is a single request to the container's PID 1 (control.py): (re)start the
session if needed, type the keys, wait until the shell is back at its prompt (returning early
matters for speed: most commands finish long before their `duration`; see _SEND for how that
is seen within milliseconds), then print the new output. No engine call at all.

The session heals itself, because anything the agent breaks here would otherwise end the sample
as a masked infrastructure error (a reward-hacking route): the log and the tmux socket live in
the service's own tmpfs (not /tmp, which the agent may fill or wipe); a tmux server that was
killed (`kill -9 -1`) is started again; a log that cannot be written any more is replaced, and
that turn shows the visible screen instead. Each of these puts a marker in the observation.
"""

from __future__ import annotations

import re
import shlex

from sandboxes.control import ControlChannel
from sandboxes.isolation import SERVICE_STATE_DIR

SESSION = "main"
STATE_DIR = SERVICE_STATE_DIR
LOG_PATH = f"{STATE_DIR}/term.log"
PROMPT_FILE = f"{STATE_DIR}/prompts"
PANE_FILE = f"{STATE_DIR}/pane"  # the pid of the pane's shell (see _SEND's pane_pid)
KEYS_FIFO = f"{STATE_DIR}/keys"  # what is written here is typed into the pane (see open_log)
PIPE_FILE = f"{STATE_DIR}/pipe"  # the pids of the pane's pipe: "<keys or -> <log writer>"
# Run by the pane's shell before each prompt (see _SEND). Errors go nowhere: an agent that breaks
# the state directory must not see hook errors at every prompt (it just loses the fast path).
PROMPT_HOOK = (
    "__rollouts_prompts=$((${__rollouts_prompts:-0}+1)); "
    f'echo "$__rollouts_prompts" 2>/dev/null > {PROMPT_FILE}'
)
# How often the prompt counter is read (a builtin, no process): every TICK_S at first, less
# often while a command runs, at least every MAX_TICK_S; and the log's size while it settles
# (one `wc -c <` each: it takes the size from fstat; coreutils' stat uses statx, which runsc
# before 2024 answers with EINVAL).
TICK_S = 0.003
MAX_TICK_S = 0.025
IDLE_CHECK_S = 0.048  # how often a shell without the hook is looked at (pane_idle)
HOOKED_CHECK_S = 0.5  # and one whose hook has answered before
SETTLE_TICK_S = 0.002
MAX_WAIT_S = 60.0
# A terminal request that has not answered this long after its wait is wedged (the agent
# stopped the tmux server with `kill -STOP -1`): it is cut, and a second such failure ends the
# sample.
ANSWER_GRACE_S = 20.0
DEFAULT_OUTPUT_CAP = 32 << 10
_READ_CAP = 1 << 20  # what one turn's answer may hold (the script caps its output)
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
# Output: a header line "<log size> [restarted] [screen] [fresh]", then the new output (from
# the log's start when "fresh", else from the offset; past <log size> it is cut by the caller).
#
# When the command is done: the shell in the pane runs PROMPT_COMMAND before each prompt, which
# writes a counter to PROMPT_FILE; a changed counter means the shell is back at its prompt.
# Checking that is a builtin `read` every TICK_S at first, no process started, so a short
# command returns a few milliseconds after it ends. A shell without the hook (the agent replaced
# it, or runs `sh`) falls back to reading /proc every IDLE_CHECK_S (HOOKED_CHECK_S where the
# hook answered before) for whether the pane's shell waits at its prompt (`pane_idle`), twice in
# a row.
#
# Each tmux client costs a program start, and under gVisor (runsc 0.0~20240729) 32 MiB of the
# sandbox's memory for good: on Linux tmux's client closes the descriptor INT_MAX, and that
# release's sentry grows the process's descriptor table to its largest size to do so, memory it
# never gives back. So a turn starts none where it can: its keys go through the pane's pipe, and
# whether the session and the pipe live is read from /proc.
_SEND = rf"""
exec 2>/dev/null
# The tmux socket lives beside the log: deleting /tmp/tmux-* must not orphan the server.
export TMUX_TMPDIR={STATE_DIR}
log={LOG_PATH}
prompts={PROMPT_FILE}
off=$5
flags=
fresh=  # " fresh" once the output starts at the log's beginning (a new or replaced log)
exec {{tick}}<> <(:)  # a pipe nobody writes: `read -t` on it sleeps without a process
# tmux asks libevent for its poll(2) backend, and gVisor's poll wakes it at once, for ever: the
# server spun a core for the sandbox's whole life, and the sandbox's memory grew until the OOM
# killer ended it. EVENT_NOPOLL makes libevent use select(2), which waits as it should. Only
# tmux gets it: the server's global environment loses it before the pane's shell starts.
tmux() {{ EVENT_NOPOLL=1 command tmux "$@"; }}
# Whether process $1 is there (not a zombie) and, with $2 = serving, not stopped either (a
# stopped reader of the keys would hold them; the pane's shell may be stopped by a debugger the
# agent runs, and still be the session's).
alive() {{
  local line stopped=$2
  [ -f /proc/$1/stat ] && read -r line < /proc/$1/stat || return 1
  set -f; set -- ${{line##*) }}; set +f
  case $1 in Z|X) return 1 ;; T|t) [ "$stopped" != serving ] ;; esac
}}
# Whether process $1 has a child.
has_child() {{
  local parent=$1 f line
  for f in /proc/[0-9]*/stat; do
    read -r line < "$f" || continue
    set -f; set -- ${{line##*) }}; set +f
    [ "$2" = "$parent" ] && return 0
  done
  return 1
}}
# The pane's pipe (tmux pipe-pane): its output appended to the log and, with tmux 2.7 or later
# (-I), what KEYS_FIFO holds typed into it, so a turn types its keys without a tmux client. The
# FIFO is opened read-write, so it never ends. PIPE_FILE names the pipe's processes, "<keys'
# reader, or -> <log's writer>", once the FIFO is open (no key is written before a reader is
# there). When the log's writer ends (a full state folder, or the pipe closed) it ends the keys'
# reader, the pipe's only other holder: tmux then closes the pipe rather than keep the pane's
# output for it.
open_log() {{
  local keys log_pid
  # A pipe left from before: its processes go (stopped ones too).
  pipe_pids && kill -KILL "$log_pid" ${{keys#-}}
  rm -f {PIPE_FILE}
  [ "$1" = fresh ] || tmux pipe-pane -t {SESSION}  # a new session's pane has no pipe yet
  rm -f "$log"  # not written through: the agent may have put a FIFO there
  : > "$log"
  [ -p {KEYS_FIFO} ] && [ ! -L {KEYS_FIFO} ] || {{ rm -f {KEYS_FIFO}; mkfifo -m 600 {KEYS_FIFO}; }}
  tmux pipe-pane -I -O -t {SESSION} "exec 5<&0; {{ cat <&5 >> $log; kill \$\$; }} & \
exec 3<> {KEYS_FIFO} 5<&-; echo \$\$ \$! > {PIPE_FILE}; exec cat <&3" ||
    tmux pipe-pane -t {SESSION} "echo - \$\$ > {PIPE_FILE}; exec cat >> $log"
  for _ in {{1..200}}; do [ -s {PIPE_FILE} ] && break; read -t {SETTLE_TICK_S} -u $tick; done
}}
# PIPE_FILE's pids, in the caller's $keys and $log_pid: read only from a plain file (the agent
# may have put a FIFO there, whose read would wait), and only pids (the agent may have written
# 0, which `kill` takes for the request's own group).
pipe_pids() {{
  [ -f {PIPE_FILE} ] && read -r keys log_pid < {PIPE_FILE} &&
    [[ $keys =~ ^(-|[1-9][0-9]*)$ && $log_pid =~ ^[1-9][0-9]*$ ]]
}}
# Whether the pane's pipe serves: its log's writer runs, and so does its keys' reader (where
# there is one), still reading KEYS_FIFO (the agent may have put another file at the name).
# With $1 = keys, a pipe without a keys' reader does not count.
pipe_alive() {{
  local keys log_pid
  pipe_pids && alive "$log_pid" serving || return 1
  if [ "$keys" = - ]; then [ "$1" != keys ]; return; fi
  alive "$keys" serving && [ /proc/$keys/fd/0 -ef {KEYS_FIFO} ]
}}
# Whether the session lives: its pane's shell runs. A pane recorded that is gone is asked of
# tmux again, once: the agent may have replaced the pane, or closed it beside another window.
pane_alive() {{
  pane_pid && alive "$pane" && return 0
  rm -f {PANE_FILE}
  pane_pid && alive "$pane"
}}
start_session() {{
  mkdir -p {STATE_DIR}
  rm -f "$prompts" {PANE_FILE}
  # Bracketed paste would wrap every prompt in escape codes; the agent gains nothing from them.
  printf 'set enable-bracketed-paste off\n' > {STATE_DIR}/inputrc
  # One tmux client (see above): it starts the server, the session and its pane, and prints
  # the pane's pid.
  if ! pane=$(INPUTRC={STATE_DIR}/inputrc PROMPT_COMMAND={shlex.quote(PROMPT_HOOK)} \
      tmux start-server \; set-environment -g -u EVENT_NOPOLL \; \
        new-session -d -P -F '#{{pane_pid}}' -s {SESSION} -x 200 -y 50 -c /app \; \
        set-option -t {SESSION} history-limit 10000); then
    echo "tmux new-session failed"
    exit 3
  fi
  echo "$pane" > {PANE_FILE}
  open_log fresh
  off=0
  fresh=" fresh"
  # Keys typed before the first prompt would still be read, but the prompt would look like
  # the end of the command: wait for it (a shell whose rc files replace the hook waits 1 s),
  # then start the log after it, as the agent's first observation never showed it.
  for _ in {{1..330}}; do [ -s "$prompts" ] && break; read -t {TICK_S} -u $tick; done
  wait_log_settled
  : > "$log"
}}
# The log's size, where it is a plain file: the agent may have put a FIFO there, whose open
# would wait for a writer that never comes (the turn then overran its timeout by the
# request's).
log_size() {{ [ -f "$log" ] && wc -c < "$log"; }}
wait_log_settled() {{
  last=-1
  for _ in {{1..40}}; do
    size=$(log_size) || break
    [ "$size" = "$last" ] && break
    last=$size
    read -t {SETTLE_TICK_S} -u $tick
  done
}}
# The pid of the pane's shell, in $pane: asked of tmux once per session (PANE_FILE is read
# only as a plain file, and only a number counts).
pane_pid() {{
  [ -f {PANE_FILE} ] && read -r pane < {PANE_FILE} && [[ $pane =~ ^[1-9][0-9]*$ ]] && return 0
  pane=$(tmux display-message -p -t {SESSION} '#{{pane_pid}}') || return 1
  rm -f {PANE_FILE}  # not written through: the agent may have put a FIFO there
  echo "$pane" > {PANE_FILE}
  return 0
}}
# ^C reaches the terminal's foreground group through the pty. gVisor's pty (runsc) never
# learns that group (the shell's stat says tpgid 0, and tmux cannot tell the foreground
# command either), so a typed ^C reaches nothing: then every job the shell started gets the
# SIGINT from here, background ones too, as nothing here can tell them apart.
# `read`, not $(< ...): no fork per file (a fork costs ~25 ms under gVisor).
interrupt_jobs() {{
  local pane line f
  pane_pid || return 0
  read -r line < /proc/$pane/stat || return 0
  set -f; set -- ${{line##*) }}; set +f
  [ "${{6:-0}}" -gt 0 ] && return 0  # the terminal has a foreground group: the pty saw to it
  for f in /proc/[0-9]*/stat; do
    read -r line < "$f" || continue
    set -f; set -- ${{line##*) }}; set +f
    [ "$2" = "$pane" ] && kill -INT -- -"$3" 2>/dev/null
  done
  return 0
}}
# Whether the pane's shell waits at its prompt: the terminal's foreground group is the shell's,
# or is led by a shell (the agent ran `sh`, which has no hook), and that shell sleeps with no
# child (`bash script.sh` running a program, or a loop of builtins, is busy). gVisor's pty never
# learns the foreground group (tpgid 0, where tmux names the pane's shell whatever runs): there
# the pane's shell is the one looked at.
pane_idle() {{
  local line pane tpgid comm shell
  pane_pid || return 1
  read -r line < /proc/$pane/stat || return 0  # the shell is gone: nothing runs there
  set -f; set -- ${{line##*) }}; set +f
  shell=$pane tpgid=${{6:-0}}
  if [ "$tpgid" -gt 0 ] && [ "$tpgid" != "$3" ]; then
    read -r line < /proc/$tpgid/stat || return 1
    comm=${{line#*\(}}
    case " {" ".join(SHELLS)} " in *" ${{comm%\)*}} "*) ;; *) return 1 ;; esac
    shell=$tpgid
    set -f; set -- ${{line##*) }}; set +f
  fi
  [ "$1" != R ] && ! has_child "$shell"
}}
# Text (and Enter, a carriage return as the terminal sends it) goes through the pane's pipe in
# one write; a named key, or text where the pipe has no keys (its reader died, or an old tmux),
# takes a tmux client. Either fails when the session is gone.
send() {{
  case "$1" in
    key) tmux send-keys -t {SESSION} "$2" && {{ [ "$2" != C-c ] || interrupt_jobs; }} ;;
    *)
      pane_alive || return 1
      if pipe_alive keys && exec {{kfd}}<> {KEYS_FIFO}; then
        case "$1$3" in
          text1) printf '%s\r' "$2" >&$kfd ;;
          text0) printf '%s' "$2" >&$kfd ;;
          none1) printf '\r' >&$kfd ;;
        esac
        exec {{kfd}}>&-
      else
        case "$1$3" in
          text1) tmux send-keys -t {SESSION} -l -- "$2" \; send-keys -t {SESSION} Enter ;;
          text0) tmux send-keys -t {SESSION} -l -- "$2" ;;
          none1) tmux send-keys -t {SESSION} Enter ;;
        esac
      fi ;;
  esac
}}
if [ "$7" = 0 ] && ! tmux has-session -t {SESSION}; then
  start_session  # the first turn of a fresh container
elif [ ! -f "$log" ]; then
  # What was written while the log was gone is lost; from here on the new log has it. (A
  # log whose pipe broke is seen after the command, which then shows the screen.)
  open_log
  off=0
  fresh=" fresh"
fi
{{ [ -f "$prompts" ] && read -r before < "$prompts"; }} || before=
if ! send "$@"; then
  # The session is gone (its processes were killed, or the agent ended it): start a new one
  # and type again.
  start_session
  flags="$flags restarted"
  {{ [ -f "$prompts" ] && read -r before < "$prompts"; }} || before=
  send "$@"
fi
now=${{EPOCHREALTIME/./}}
end=$(( 10#$now + $4 ))
idle=0
size=
prompted=0
tick_us=1000  # a short command is often done after a millisecond
checked=$(( 10#$now ))
# A shell whose hook answered before is looked at less often: it will say when it is done,
# unless the command replaced it (`exec sh`).
check_us={int(IDLE_CHECK_S * 1e6)}
[ -z "$before" ] || check_us={int(HOOKED_CHECK_S * 1e6)}
while now=${{EPOCHREALTIME/./}}; [ $(( 10#$now )) -lt "$end" ]; do
  printf -v wait_s '0.%06d' "$tick_us"
  read -t $wait_s -u $tick
  # Each look costs CPU (about a millisecond under gVisor): while the command runs, the wait
  # between two grows from TICK_S to MAX_TICK_S, the most a long command's end is seen late.
  tick_us=$(( tick_us < {int(TICK_S * 1e6)} ? {int(TICK_S * 1e6)} : tick_us * 5 / 4 ))
  [ "$tick_us" -le {int(MAX_TICK_S * 1e6)} ] || tick_us={int(MAX_TICK_S * 1e6)}
  {{ [ -f "$prompts" ] && read -r current < "$prompts"; }} || current=
  if [ -n "$before" ] && [ "$current" != "$before" ]; then
    prompted=1
    break
  fi
  [ $(( 10#$now - checked )) -ge $check_us ] || continue
  checked=$(( 10#$now ))
  if pane_idle; then idle=$((idle+1)); else idle=0; fi
  # Twice idle in a row: the line was read and the command (if any) has finished.
  [ "$idle" -ge 2 ] && break
done
# The prompt is printed just after the hook ran, and tmux then pipes it to the log: the log
# must stop growing, so the command's whole output and the prompt are in it.
[ "$prompted" = 1 ] && last=$(log_size)
pipe=1
if ! pane_alive; then
  # This command ended the session (`tmux kill-server`, `exit`): have a new one ready.
  start_session
  flags="$flags restarted"
  size=
else
  pipe_alive || pipe=0
  if [ "$prompted" = 1 ]; then
    read -t {SETTLE_TICK_S} -u $tick
    size=$(log_size)
    [ "$size" = "$last" ] || wait_log_settled
  fi
fi
# A full state directory means the log's writer has failed or is about to: the screen is the
# dependable answer then.
if [ ! -f "$log" ] || [ "$pipe" != 1 ] || [ "$(stat -f -c %a "$log")" = 0 ]; then
  # Held in a variable, not a file: the state directory may be the full one.
  screen=$(tmux capture-pane -p -J -t {SESSION})
  open_log
  echo "0 $flags screen"
  printf '%s\n' "$screen" | head -c "$6"
  exit 0
fi
[ -n "$size" ] || size=$(wc -c < "$log")
if [ "$size" -lt "$off" ]; then off=0; fresh=" fresh"; fi  # the log was truncated under us
echo "$size $flags$fresh"
new=$(( size - off ))
half=$(( $6 / 2 ))
if [ "$new" -le "$6" ]; then
  tail -c +$(( off + 1 )) "$log"  # what was appended since `size` is cut off by the caller
else
  tail -c +$(( off + 1 )) "$log" | head -c "$half"
  tail -c +$(( size - half + 1 )) "$log" | head -c "$half"
fi
"""


class TerminalSession:
    """A tmux session in one container; started (or restarted) by `send_keys` as needed."""

    def __init__(self, control: ControlChannel, output_cap: int = DEFAULT_OUTPUT_CAP):
        self._control = control
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
        _, out = await self._run(mode, text, enter, wait_us)
        lost = ""
        if not _has_header(out):
            # Our own request was killed with everything else (`kill -9 -1` typed by the agent):
            # look again, which restarts the session if it is gone. A second failure is raised
            # (the caller tells the agent's doing from a container gone or an engine down).
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
        result = await self._control.run(
            ["bash", "-c", _SEND, "rollouts-send-keys", *args],
            limit_s=wait_us / 1e6 + ANSWER_GRACE_S,
            collect_stdout=_READ_CAP,
        )
        # Even when this request was killed before it answered, it may have started the session.
        self._started = True
        return result.exit_code, result.stdout_raw or b""

    def _decode(self, out: bytes) -> str:
        header, _, body = out.partition(b"\n")
        # The agent can write into this output (it is its own request's): nothing here may
        # fail on what it wrote, `_has_header` checked the size.
        size_text, *flags = header.decode("ascii", errors="replace").split()
        size = int(size_text)
        prefix = RESTARTED_MARKER if "restarted" in flags else ""
        if "screen" in flags:
            self._offset = size
            return prefix + SCREEN_MARKER + _crlf(body.decode("utf-8", errors="replace"))
        # After a restart or a replaced log the output starts at the log's beginning.
        start = 0 if "fresh" in flags else self._offset
        new = size - start
        self._offset = size
        if new <= self._cap:
            body = body[:new]  # the log may have grown after the script read its size
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
    return bool(header) and header[0].isdigit() and len(header[0]) <= 20


def _crlf(text: str) -> str:
    # The pty turns every newline into CRLF; that is line discipline, not program output.
    return text.replace("\r\n", "\n")
