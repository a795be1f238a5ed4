"""The agent container's control channel: its PID 1 runs the service's commands.

An agent container's PID 1 is `PID1_SCRIPT`, a bash loop that reads requests from its stdin,
which the service holds open through one attach session per sandbox. A request runs a command
(the terminal script, an exec, the workspace tar) as a child of PID 1, and its output comes
back on PID 1's stdout. Nothing is started by the engine per command: a `docker exec` costs a
runc process, two or three API calls and ~60 ms here, a request a few forks in the container.

PID 1 is also what makes the sandbox survive its agent: the kernel never delivers a signal to
a namespace's init from inside unless it has a handler, so `kill -9 -1` kills everything but
it, and it reaps orphans (bash reaps every child that exits).

Wire format (LC_ALL=C, so lengths are bytes):
- request: a line `@@rollouts <nonce> <limit_us> <argv bytes> <stdin bytes>`, then the argv
  as a shell-quoted string, then the stdin (an upload) in base64;
- answer: a line `@@rollouts <nonce> begin <sealed 0|1>`, the command's stdout in base64 cut
  into counted chunks (`<length in hex>:` and that many bytes), then a line
  `@@rollouts <nonce> end <exit code> <timed out 0|1>`;
- `@@rollouts-abort <nonce>`: the service stopped waiting (its task was cancelled, when the
  agent's time ran out); PID 1 kills that request at once.

The command runs in a process group of its own with stdin from the request and stderr
discarded (a command that wants its stderr merges it). At `limit_us` PID 1 SIGKILLs the group,
which also ends a group the agent stopped (`kill -STOP -1`); background processes a finished
command left in its group are killed two seconds after it (a process that wants to outlive its
request starts its own session, as the tmux server does).

The agent, root in its container, cannot reach this channel (docs/reliability.md, "The agent
container's channel"). PID 1 seals itself at start: it re-executes from a copy of bash that no
one may read, and the kernel makes a process that runs a file it cannot read non-dumpable, so
its /proc/PID/fd, /proc/PID/mem and ptrace need CAP_SYS_PTRACE, which the sandbox lacks. Forks
inherit that until they run another program, so only PID 1 and its forks that run builtins
ever hold PID 1's streams: the upload is read by such a fork (hence base64: bash strings hold
no NUL), and the encoder's output is copied to PID 1's stdout by another. The encoder's pipe
and the command's own are the agent's to write into, but whatever it writes lands inside a
counted chunk of its own request's answer, never in the framing (a chunk is one atomic pipe
write, so a kill does not cut one short); the nonce lets the reader skip stale answers.
A kernel that does not seal (gVisor, say: it keeps a process dumpable whatever it runs) is
reported as `sealed 0`, and the channel then works as before: what the agent forges into it
is still graded as its doing, never masked (docker_backend._classify).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
import shlex
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from sandboxes.backend import SandboxUnusable
from sandboxes.docker_adapter import CappedBuffer, DockerAdapter, OutputTooLarge, take_frames

log = logging.getLogger(__name__)

# Time for PID 1 to kill a request at its limit and answer, before the reader gives up.
ANSWER_MARGIN_S = 10.0
# The service's own tmpfs in the agent container (terminal log, tmux socket). PID 1's sealed
# copy of bash is made here, and removed as soon as it runs, so the mount allows exec.
SERVICE_STATE_DIR = "/run/rollouts"
# The most bytes of one output chunk: with its header it fits in one atomic pipe write
# (PIPE_BUF, 4096). A line of the answer is never longer than _MAX_LINE.
CHUNK = 4000
_MAX_LINE = 64

PID1_SCRIPT = r"""
trap '' TERM INT HUP
LC_ALL=C
exec 2>/dev/null  # nothing reads it: only stdin and stdout are the channel
kernel=
IFS= read -r kernel </proc/cmdline
if [ "$1" = sealed ]; then
  rm -f "$2/.rollouts-pid1" </dev/null >/dev/null
elif [ "$1" = boot ] && [ "${kernel/gvisor/}" = "$kernel" ]; then
  # Seal (see control.py): run on from a copy of bash nobody may read. Nothing else runs yet.
  # (Not under gVisor, which keeps every process dumpable whatever it runs: the copy would
  # seal nothing there, and its programs cost about 20 CPU-ms a sandbox.)
  shopt -s execfail
  # One program for copy and mode (each program started here costs a few CPU-ms a trial).
  install -m 0111 "$BASH" "$2/.rollouts-pid1" </dev/null >/dev/null &&
    exec "$2/.rollouts-pid1" -c "$BASH_EXECUTION_STRING" "$0" sealed "$2"
  shopt -u execfail
  rm -f "$2/.rollouts-pid1" </dev/null >/dev/null
fi
# Sealed when a process running another program can no longer look at us.
sealed=0
[ "$1" = sealed ] && ! readlink /proc/1/exe </dev/null >/dev/null && sealed=1
set -m  # each request is a job in a process group of its own
exec {tick}<> <(:)  # a pipe nobody writes: `read -t` on it sleeps without a process
# A request's events, a line each: its job's "<nonce> rc <exit code>" (the job's last act),
# its copier's "<nonce> out" (once the whole answer is written) and the clock's "t" (a line
# came on PID 1's stdin). PID 1 waits for them with `read -t`, for a second at most and a
# quarter of one at least: a `read -t` whose time is up before it starts reading can leave
# bash with SIGCHLD blocked for good, and PID 1 then reaps no child again. Under load, with
# waits of 50 and 2 ms, that took 9 in about 610 requests that ran `kill -9 -1` (under gVisor:
# their killed job stayed a zombie, which `kill -0` finds, and each ran to its limit); with
# waits of a second, none in 240. The clock, a fork that looks at PID 1's stdin every 50 ms
# while a request runs, makes the service's abort act at once: the agent's command must not
# go on changing the workspace once its time is up. If the agent stops or kills the clock,
# PID 1 sees an abort within a second.
exec {done}<> <(:)
exec {ctl}<> <(:)  # the clock's switch: "1" at a request's start, "0" at its end
# upload and copy run in forks of PID 1 that hold its stdin or stdout, so they use builtins
# only: a fork that ran another program could be looked at again. (No `read -t` here: with a
# timeout bash reads a byte per two system calls.)
upload() {  # the request's upload: base64 from PID 1's stdin to stdout
  local left=$1 c
  while [ "$left" -gt 0 ]; do
    c=
    read -r -N $(( left < @CHUNK@ ? left : @CHUNK@ )) c
    [ -n "$c" ] || return
    printf %s "$c"
    left=$(( left - ${#c} ))
  done
}
copy() {  # the encoder's output to PID 1's stdout, as chunks "<length in hex>:<bytes>"
  local c h
  while c=; read -r -N @CHUNK@ c || [ -n "$c" ]; do
    printf -v h %x "${#c}"
    # One write(2) of at most PIPE_BUF bytes, which no kill cuts short (bash's stdout is
    # line-buffered: a newline the agent put in the pipe splits it, and a cut is its doing).
    printf %s "$h:$c"
  done
}
# The request's command. An upload it did not read is drained: the next request starts after.
# (By a builtin: a command mostly reads its whole upload, and `cat` would cost a program start
# per request to read nothing.)
run() {
  eval "set -- $argv"
  "$@" {done}>&- 2>/dev/null
  rc=$?
  [ "$nin" = 0 ] || while read -r -N @CHUNK@ _; do :; done
  return $rc
}
clock() {  # (one byte a command: a read with a timeout cannot cut it in two)
  local on= c
  while :; do
    if [ -z "$on" ]; then
      read -r -n 1 -u $ctl c && [ "$c" = 1 ] && on=1
    elif read -r -t 0.05 -n 1 -u $ctl c; then
      [ "$c" = 0 ] && on=
    elif read -t 0 -u 0; then
      echo t >&$done  # a line on PID 1's stdin (it reads it: an abort, or the next request)
    fi
  done
}
alive() {  # the process has not ended (a zombie has, though `kill -0` still finds it)
  local s
  IFS= read -r s </proc/$1/stat || return
  s=${s##*) }
  [ "${s%% *}" != Z ]
}
event() {  # a line of the events pipe; another request's is skipped (a request killed at its
  # limit can still say its code after the kill: gVisor delivers a group kill one process at a
  # time)
  case $1 in
    "$nonce rc "*) [ -n "$rc" ] || rc=${1##* } ;;
    "$nonce out") answered=1 ;;
  esac
}
clock >/dev/null &
clk=$!
pending=
while :; do
  if [ -n "$pending" ]; then
    line=$pending pending=
  elif ! IFS= read -r line; then
    read -t 1 -u $tick  # nobody attached
    continue
  fi
  # Bytes of an upload its command did not read may come first: the request starts at the mark.
  case $line in *"@@rollouts "*) line="@@rollouts ${line##*@@rollouts }" ;; esac
  set -f; set -- $line; set +f
  [ $# -eq 5 ] && [ "$1" = @@rollouts ] || continue
  nonce=$2 limit=$3 nargs=$4 nin=$5
  case "$limit$nargs$nin" in *[!0-9]*) continue ;; esac
  read -r -N "$nargs" argv && [ ${#argv} -eq "$nargs" ] || continue
  echo "@@rollouts $nonce begin $sealed"
  # The encoder writes into the copier's pipe (a process substitution's: no fork just to make
  # a pipe), which the copier empties. Both are outside the job's group: killing the job keeps
  # what it wrote.
  exec {encw}> >({ copy; echo "$nonce out" >&$done; } {tick}<&- {ctl}>&-)
  copier=$!
  exec {out}> >(exec base64 -w 0 >&$encw {encw}>&- {tick}<&- {done}>&- {ctl}>&-)
  b64=$!
  exec {encw}>&-
  (
    trap - TERM INT HUP
    if [ "$nin" = 0 ]; then
      run </dev/null
      rc=$?
    else
      upload "$nin" | base64 -d {done}>&- | run
      rc=${PIPESTATUS[2]}
    fi
    echo "$nonce rc $rc" >&$done
  ) >&$out {out}>&- {tick}<&- {ctl}>&- 2>/dev/null &
  job=$!
  exec {out}>&-
  if [ "$nin" = 0 ]; then  # (a request with an upload is not aborted: stdin is its job's)
    # On again if the agent stopped it, started again if it killed it.
    kill -CONT "$clk" 2>/dev/null || { clock >/dev/null & clk=$!; }
    printf 1 >&$ctl
  fi
  t=${EPOCHREALTIME/./}
  deadline=$(( 10#$t + limit ))
  rc= timed_out=0 killed= answered= graced=
  while :; do
    t=${EPOCHREALTIME/./}
    w=$(( deadline - 10#$t ))
    [ "$w" -gt 250000 ] || w=250000
    [ "$w" -lt 1000000 ] || w=1000000
    printf -v w %d.%06d $(( w / 1000000 )) $(( w % 1000000 ))
    # One byte with a timeout, then the rest of the line without one: a `read -t` that times
    # out keeps what it consumed, and bash reads a pipe a byte at a time, so on a loaded
    # machine a line read with a timeout can be cut in two, its first half lost. A line is
    # written whole (one write, under PIPE_BUF), so its rest is there.
    c=
    if IFS= read -r -t "$w" -n 1 -u $done c || [ -n "$c" ]; then
      said=
      [ -z "$c" ] || IFS= read -r -u $done said
      event "$c$said"
    fi
    if [ -z "$rc" ] && ! alive "$job"; then
      # Its code, if it said one, is in the pipe already: it wrote it before it ended.
      while [ -z "$rc" ] && read -t 0 -u $done && IFS= read -r -u $done said; do
        event "$said"
      done
      [ -n "$rc" ] || rc=gone
    fi
    # A line while busy: the service giving up on this request (it was cancelled), or the
    # next request, kept for later. Not while an upload may still be on stdin: that is the
    # job's to read (a request with an upload is not aborted, it ends at its limit).
    if [ "$nin" = 0 ] && [ -z "$pending" ] && read -t 0 -u 0 && IFS= read -r pending; then
      [ "$pending" = "@@rollouts-abort $nonce" ] && pending= deadline=0
    fi
    if [ -n "$rc" ]; then
      { [ -n "$answered" ] || ! alive "$copier"; } && break  # everything is written
      if [ -z "$graced" ]; then
        # The encoder ends at its input's EOF, and the copier at the encoder's. Background
        # processes the command left in its group that still hold that input get two
        # seconds, then the group is killed.
        graced=1
        t=${EPOCHREALTIME/./}
        [ $(( 10#$t + 2000000 )) -lt "$deadline" ] && deadline=$(( 10#$t + 2000000 ))
      fi
    fi
    t=${EPOCHREALTIME/./}
    [ $(( 10#$t )) -ge "$deadline" ] || continue
    if [ -z "$killed" ]; then
      kill -KILL -- -"$job" 2>/dev/null
      # Stopped with everything else (`kill -STOP -1`): the encoder and copier are outside
      # the job's group.
      kill -CONT "$b64" 2>/dev/null
      kill -CONT "$copier" 2>/dev/null
      [ -n "$rc" ] || rc=gone timed_out=1
      killed=1
      deadline=$(( 10#$t + 1000000 ))  # a second for the encoder and copier to finish
    else
      # Something that left the group holds the encoder's input, or the agent its output.
      kill -KILL "$b64" 2>/dev/null
      kill -KILL "$copier" 2>/dev/null
      break
    fi
  done
  [ "$nin" = 0 ] && printf 0 >&$ctl
  [ -n "$answered" ] || kill -KILL "$b64" 2>/dev/null  # what it still writes goes nowhere
  wait "$job" 2>/dev/null
  jrc=$?
  wait "$b64" "$copier" 2>/dev/null
  [ "$rc" = gone ] && rc=$jrc
  printf '@@rollouts %s end %s %s\n' "$nonce" "$rc" "$timed_out"
done
""".replace("@CHUNK@", str(CHUNK))
PID1_COMMAND = ["bash", "-c", PID1_SCRIPT, "rollouts-control", "boot", SERVICE_STATE_DIR]

_BEGIN = re.compile(rb"@@rollouts ([0-9a-f]{16}) begin ([01])")
_END = re.compile(rb"@@rollouts ([0-9a-f]{16}) end (\d{1,3}) ([01])")
_CHUNK_HEADER = re.compile(rb"[0-9a-f]{1,4}")
_MAX_CHUNK_HEADER = 5  # "fa0:"
_unsealed_seen = threading.Event()


class ControlTimeout(TimeoutError):
    """PID 1 did not answer in time: it cannot be stopped from inside, so something the agent
    did (or the machine's load) holds it; graded as the agent's, like any tool of ours failing
    in a running container."""


class ChannelGarbled(SandboxUnusable):
    """PID 1's stdout did not follow the wire format. Only PID 1 writes there, so whatever
    disturbed it happened inside the container: graded as the agent's doing, never masked."""


@dataclass
class ControlResult:
    exit_code: int | None  # None when the request was killed at its limit
    timed_out: bool
    output: CappedBuffer | None  # with `max_output`
    stdout_raw: bytes | None  # with `collect_stdout`
    sealed: bool = True  # whether PID 1 could seal itself (see the module docstring)


class ControlChannel:
    """Requests to one agent container's PID 1, one at a time, over one attach session."""

    def __init__(self, adapter: DockerAdapter, container_id: str) -> None:
        self._adapter = adapter
        self._cid = container_id
        self._lock = asyncio.Lock()
        self._conn: _Conn | None = None

    async def run(
        self,
        argv: list[str],
        *,
        limit_s: float,
        stdin: bytes = b"",
        max_output: int = 1 << 20,
        collect_stdout: int | None = None,
    ) -> ControlResult:
        """Run `argv` in the container; at most `limit_s` seconds, then its group is killed.
        The output is kept capped (`max_output`, head and tail) or, with `collect_stdout=N`,
        raw; more than N bytes raises OutputTooLarge."""
        nonce = uuid.uuid4().hex[:16]
        args = shlex.join(argv).encode()
        upload = base64.b64encode(stdin)
        header = f"@@rollouts {nonce} {int(limit_s * 1e6)} {len(args)} {len(upload)}\n"
        request = header.encode() + args + upload
        wait_s = limit_s + ANSWER_MARGIN_S
        async with self._lock:
            if self._conn is None:
                sock = await self._adapter.on_stream_pool(self._adapter.attach_socket, self._cid)
                self._conn = _Conn(sock)
            conn = self._conn
            try:
                result = await self._adapter.on_stream_pool(
                    conn.exchange, request, nonce, wait_s, max_output, collect_stdout
                )
            except asyncio.CancelledError:
                # The caller stopped waiting (the agent's time ran out mid-command). The
                # thread still reads this answer, and holds the connection until it has: PID 1
                # is told to kill the request now, so the next request is not held up.
                conn.abort(nonce)
                raise
        if not result.sealed and not _unsealed_seen.is_set():
            _unsealed_seen.set()  # once per process: it holds for every sandbox on this kernel
            log.warning(
                "sandbox %s: PID 1 could not seal its control channel on this kernel or "
                "runtime; the agent can reach it (what it forges there is still graded as its "
                "own doing, never masked)",
                self._cid[:12],
            )
        return result

    def close(self) -> None:
        """Drop the attach session. PID 1 then sees its stdin end (the engine closes it with
        the last client's), so this is for a sandbox that is being removed."""
        if self._conn is not None:
            self._conn.close()


class _Conn:
    """The attach session (one for the sandbox's life: the engine does not reopen PID 1's
    stdin once a client closes it) and what has been read from it."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._turn = threading.Lock()  # one exchange reads at a time
        self._send = threading.Lock()  # an abort never lands inside a request's bytes
        self._broken: Exception | None = None
        self._frames = bytearray()  # engine frames not yet demultiplexed
        self._answers = AnswerParser()  # PID 1's stdout

    def abort(self, nonce: str) -> None:
        with self._send:
            try:
                self._sock.sendall(f"@@rollouts-abort {nonce}\n".encode())
            except OSError:
                pass

    def close(self) -> None:
        for op in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close):
            try:
                op()
            except OSError:
                pass

    # ---- on a stream thread -------------------------------------------------------------------

    def exchange(
        self,
        request: bytes,
        nonce: str,
        wait_s: float,
        max_output: int,
        collect_stdout: int | None,
    ) -> ControlResult:
        deadline = _Deadline(wait_s)
        with self._turn:
            if isinstance(self._broken, ChannelGarbled):
                raise ChannelGarbled(str(self._broken))
            if self._broken is not None:
                raise ConnectionResetError(f"the sandbox's attach stream failed: {self._broken}")
            try:
                return self._exchange(request, nonce, deadline, max_output, collect_stdout)
            except (OSError, ChannelGarbled) as e:
                if not isinstance(e, TimeoutError):
                    self._broken = e
                raise

    def _exchange(
        self,
        request: bytes,
        nonce: str,
        deadline: _Deadline,
        max_output: int,
        collect_stdout: int | None,
    ) -> ControlResult:
        with self._send:
            self._sock.settimeout(max(deadline.left(), 0.001))
            self._sock.sendall(request)
        key = nonce.encode()
        sink: _Sink | None = None
        sealed = True
        while True:
            event = self._answers.next_event()
            if event is None:
                self._read(deadline)
            elif event.nonce != key:
                continue  # a stale answer (of a request whose caller gave up): skipped
            elif event.kind == "begin":
                sink, sealed = _Sink(max_output, collect_stdout), event.sealed
            elif sink is None:
                raise ChannelGarbled("an answer's data or end came before its begin line")
            elif event.kind == "data":
                sink.add(event.data)
            else:
                return ControlResult(
                    exit_code=None if event.timed_out else event.exit_code,
                    timed_out=event.timed_out,
                    output=sink.capped,
                    stdout_raw=sink.raw(),
                    sealed=sealed,
                )

    def _read(self, deadline: _Deadline) -> None:
        """Feed the next stdout payloads to the parser (PID 1's stderr is dropped)."""
        left = deadline.left()
        late = ControlTimeout(f"no answer from the sandbox's PID 1 in {deadline.total:.0f} s")
        if left <= 0:
            raise late
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(1 << 16)
        except TimeoutError:
            raise late from None
        if not chunk:
            raise ConnectionResetError("the sandbox's attach stream ended (container gone?)")
        self._frames += chunk
        for stream_id, payload in take_frames(self._frames):
            if stream_id == 1:
                self._answers.feed(payload)


@dataclass
class Event:
    """One piece of PID 1's stdout: an answer's begin line, a data chunk, or its end line."""

    kind: str  # "begin" | "data" | "end"
    nonce: bytes
    sealed: bool = True  # begin
    data: bytes = b""  # data
    exit_code: int = 0  # end
    timed_out: bool = False  # end


class AnswerParser:
    """PID 1's stdout, parsed as it arrives. Linear in its input and holding at most one read
    plus one line: a data chunk is handed on as it comes, and a line longer than any the
    wire format has is refused (ChannelGarbled) rather than waited for."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._chunk_left = 0  # bytes of the current data chunk still to come
        self._answer: bytes | None = None  # the nonce of the answer being read

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_event(self) -> Event | None:
        """The next event, or None when more input is needed."""
        if self._chunk_left:
            if not self._buf:
                return None
            take = min(self._chunk_left, len(self._buf))
            data = bytes(self._buf[:take])
            del self._buf[:take]
            self._chunk_left -= take
            return Event("data", self._answer or b"", data=data)
        if not self._buf:
            return None
        if self._buf[:1] != b"@":  # a chunk's header, "<length in hex>:"
            colon = self._buf.find(b":", 0, _MAX_CHUNK_HEADER)
            if colon < 0:
                if len(self._buf) >= _MAX_CHUNK_HEADER:
                    raise ChannelGarbled(f"not a chunk header: {bytes(self._buf[:8])!r}")
                return None
            m = _CHUNK_HEADER.fullmatch(self._buf[:colon])
            size = int(m.group(0), 16) if m is not None else 0
            if self._answer is None or not 0 < size <= CHUNK:
                raise ChannelGarbled(f"a bad chunk header: {bytes(self._buf[:colon])!r}")
            del self._buf[: colon + 1]
            self._chunk_left = size
            return self.next_event()
        cut = self._buf.find(b"\n", 0, _MAX_LINE + 1)
        if cut < 0:
            if len(self._buf) > _MAX_LINE:
                raise ChannelGarbled(f"a line from PID 1 is over {_MAX_LINE} bytes")
            return None
        line = bytes(self._buf[:cut])
        del self._buf[: cut + 1]
        if (m := _BEGIN.fullmatch(line)) is not None and self._answer is None:
            self._answer = m.group(1)
            return Event("begin", m.group(1), sealed=m.group(2) == b"1")
        if (m := _END.fullmatch(line)) is not None and self._answer == m.group(1):
            self._answer = None
            return Event("end", m.group(1), exit_code=int(m.group(2)), timed_out=m.group(3) == b"1")
        raise ChannelGarbled(f"unexpected line from PID 1: {line!r}")


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.total = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        return self._end - time.monotonic()


class _Sink:
    """Decoded output: capped head and tail, or collected raw up to a limit."""

    def __init__(self, max_output: int, collect: int | None) -> None:
        self.capped = CappedBuffer(max_output) if collect is None else None
        self._raw = bytearray() if collect is not None else None
        self._limit = collect
        self._carry = b""  # base64 left over from the last chunk: less than a quantum

    def add(self, encoded: bytes) -> None:
        encoded = self._carry + encoded
        usable = len(encoded) - len(encoded) % 4  # a request killed mid-write leaves a stub
        self._carry = encoded[usable:]
        if not usable:
            return
        try:
            data = base64.b64decode(encoded[:usable], validate=True)
        except binascii.Error:
            data = b"[rollouts: unreadable output]"  # bytes the agent wrote into the pipe
        if self._raw is not None:
            self._raw += data
            if len(self._raw) > self._limit:  # type: ignore[operator]
                raise OutputTooLarge(f"output exceeds {self._limit} bytes")
        else:
            self.capped.add(data)  # type: ignore[union-attr]

    def raw(self) -> bytes | None:
        return bytes(self._raw) if self._raw is not None else None
