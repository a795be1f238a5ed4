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
  as a shell-quoted string, then the stdin bytes (an upload);
- answer: a line `@@rollouts <nonce> begin`, the command's stdout in base64 (no newlines),
  then `\\n@@rollouts <nonce> end <exit code> <timed out 0|1>\\n`;
- `@@rollouts-abort <nonce>`: the service stopped waiting (its task was cancelled, when the
  agent's time ran out); PID 1 kills that request at once.

The command runs in a process group of its own with stdin from the request and stderr
discarded (a command that wants its stderr merges it). At `limit_us` PID 1 SIGKILLs the group,
which also ends a group the agent stopped (`kill -STOP -1`); background processes a finished
command left in its group are killed two seconds after it (a process that wants to outlive its
request starts its own session, as the tmux server does). The agent, root in its own
container, can write into this stream or steal from it through /proc/1/fd: that can only
confuse its own sandbox, whose failures are graded as its doing (docker_backend._classify).
The nonce lets the reader skip anything that is not the answer it waits for.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import shlex
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from sandboxes.docker_adapter import CappedBuffer, DockerAdapter, OutputTooLarge, take_frames

# Time for PID 1 to kill a request at its limit and answer, before the reader gives up.
ANSWER_MARGIN_S = 10.0

PID1_SCRIPT = r"""
trap '' TERM INT HUP
LC_ALL=C
set -m  # each request is a job in a process group of its own
exec {tick}<> <(:)  # a pipe nobody writes: `read -t` on it sleeps without a process
exec {done}<> <(:)  # a request's last act is to write "<nonce> rc <exit code>" here
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
  echo "@@rollouts $nonce begin"
  # The encoder is outside the job's group: killing the job at its limit keeps what it wrote.
  exec {out}> >(exec base64 -w 0)
  b64=$!
  (
    trap - TERM INT HUP
    head -c "$nin" | {
      eval "set -- $argv"
      "$@" {done}>&- 2>/dev/null
      rc=$?
      cat >/dev/null  # the rest of the upload: the next request starts after it
      exit $rc
    }
    rcs=("${PIPESTATUS[@]}")
    echo "$nonce rc ${rcs[1]}" >&$done
  ) >&$out {out}>&- {tick}>&- 2>/dev/null &
  job=$!
  exec {out}>&-
  t=${EPOCHREALTIME/./}
  deadline=$(( 10#$t + limit ))
  rc= timed_out=0 killed=
  while :; do
    if [ -z "$rc" ]; then
      if read -r -t 0.05 -u $done n k v && [ "$n $k" = "$nonce rc" ]; then
        rc=$v
      else
        kill -0 "$job" 2>/dev/null || rc=gone  # killed before it could say
      fi
      # A line while busy: the service giving up on this request (it was cancelled), or the
      # next request, kept for later. Not while an upload may still be on stdin: that is the
      # job's to read (a request with an upload is not aborted, it ends at its limit).
      if [ "$nin" = 0 ] && [ -z "$pending" ] && read -t 0 -u 0 && IFS= read -r pending; then
        [ "$pending" = "@@rollouts-abort $nonce" ] && pending= deadline=0
      fi
      if [ -n "$rc" ]; then
        # The encoder ends at its input's EOF. Background processes the command left in its
        # group that still hold that input get two seconds, then the group is killed.
        t=${EPOCHREALTIME/./}
        [ $(( 10#$t + 2000000 )) -lt "$deadline" ] && deadline=$(( 10#$t + 2000000 ))
        continue
      fi
    else
      kill -0 "$b64" 2>/dev/null || break  # the encoder has written everything
      read -t 0.002 -u $tick
    fi
    t=${EPOCHREALTIME/./}
    [ $(( 10#$t )) -ge "$deadline" ] || continue
    if [ -z "$killed" ]; then
      kill -KILL -- -"$job" 2>/dev/null
      kill -CONT "$b64" 2>/dev/null  # stopped with everything else (`kill -STOP -1`)
      [ -n "$rc" ] || rc=gone timed_out=1
      killed=1
      deadline=$(( 10#$t + 1000000 ))  # a second for the encoder to finish
    else
      kill -KILL "$b64" 2>/dev/null  # a process that left the group holds its input
      break
    fi
  done
  wait "$job" 2>/dev/null
  jrc=$?
  wait "$b64" 2>/dev/null
  [ "$rc" = gone ] && rc=$jrc
  printf '\n@@rollouts %s end %s %s\n' "$nonce" "$rc" "$timed_out"
done
"""
PID1_COMMAND = ["bash", "-c", PID1_SCRIPT, "rollouts-control"]

_BEGIN = re.compile(rb"@@rollouts ([0-9a-f]{16}) begin\n")
_END = re.compile(rb"\n@@rollouts ([0-9a-f]{16}) end (\d+) ([01])\n")


class ControlTimeout(TimeoutError):
    """PID 1 did not answer in time: it cannot be stopped from inside, so something the agent
    did (or the machine's load) holds it; graded as the agent's, like any tool of ours failing
    in a running container."""


@dataclass
class ControlResult:
    exit_code: int | None  # None when the request was killed at its limit
    timed_out: bool
    output: CappedBuffer | None  # with `max_output`
    stdout_raw: bytes | None  # with `collect_stdout`


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
        header = f"@@rollouts {nonce} {int(limit_s * 1e6)} {len(args)} {len(stdin)}\n"
        request = header.encode() + args + stdin
        wait_s = limit_s + ANSWER_MARGIN_S
        async with self._lock:
            if self._conn is None:
                sock = await self._adapter.on_stream_pool(self._adapter.attach_socket, self._cid)
                self._conn = _Conn(sock)
            conn = self._conn
            try:
                return await self._adapter.on_stream_pool(
                    conn.exchange, request, nonce, wait_s, max_output, collect_stdout
                )
            except asyncio.CancelledError:
                # The caller stopped waiting (the agent's time ran out mid-command). The
                # thread still reads this answer, and holds the connection until it has: PID 1
                # is told to kill the request now, so the next request is not held up.
                conn.abort(nonce)
                raise

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
        self._broken: OSError | None = None
        self._frames = bytearray()  # engine frames not yet demultiplexed
        self._stdout = bytearray()  # PID 1's stdout not yet parsed

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
            if self._broken is not None:
                raise ConnectionResetError(f"the sandbox's attach stream failed: {self._broken}")
            try:
                return self._exchange(request, nonce, deadline, max_output, collect_stdout)
            except OSError as e:
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
        # Skip to our answer's start: whatever came before is a stale or forged answer.
        while (m := _BEGIN.search(self._stdout)) is None or m.group(1) != key:
            if m is not None:
                del self._stdout[: m.end()]
                continue
            del self._stdout[: max(0, len(self._stdout) - 64)]
            self._read(deadline)
        del self._stdout[: m.end()]
        sink = _Sink(max_output, collect_stdout)
        mark = b"@@rollouts "
        while True:
            cut = self._stdout.find(b"\n")
            if cut < 0:  # all data so far: decode it in whole base64 quanta
                ready = len(self._stdout) - len(self._stdout) % 4
                sink.add(bytes(self._stdout[:ready]))
                del self._stdout[:ready]
                self._read(deadline)
                continue
            sink.add(bytes(self._stdout[:cut]))
            del self._stdout[:cut]
            rest = bytes(self._stdout[1 : 1 + len(mark)])
            if not mark.startswith(rest):  # a newline the agent wrote into the data
                del self._stdout[:1]
                continue
            line_end = self._stdout.find(b"\n", 1)
            if line_end < 0:
                self._read(deadline)
                continue
            end = _END.fullmatch(self._stdout[: line_end + 1])
            if end is not None and end.group(1) == key:
                del self._stdout[: line_end + 1]
                break
            # Another answer's line (stale or forged): drop it, keeping its newline, which
            # may start ours.
            del self._stdout[:line_end]
        timed_out = end.group(3) == b"1"
        return ControlResult(
            exit_code=None if timed_out else int(end.group(2)),
            timed_out=timed_out,
            output=sink.capped,
            stdout_raw=sink.raw(),
        )

    def _read(self, deadline: _Deadline) -> None:
        """Append the next stdout payloads (PID 1's stderr is dropped)."""
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
                self._stdout += payload


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

    def add(self, encoded: bytes) -> None:
        if not encoded:
            return
        usable = len(encoded) - len(encoded) % 4  # a request killed mid-write leaves a stub
        try:
            data = base64.b64decode(encoded[:usable], validate=True)
        except binascii.Error:
            data = b"[rollouts: unreadable output]"  # bytes the agent forged into the stream
        if self._raw is not None:
            self._raw += data
            if len(self._raw) > self._limit:  # type: ignore[operator]
                raise OutputTooLarge(f"output exceeds {self._limit} bytes")
        else:
            self.capped.add(data)  # type: ignore[union-attr]

    def raw(self) -> bytes | None:
        return bytes(self._raw) if self._raw is not None else None
