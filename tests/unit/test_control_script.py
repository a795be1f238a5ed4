"""The control channel's PID 1 script (sandboxes/control.py), run in a local bash with no
container: how it reads the pipe that carries each request's exit code.

- It may hold lines of earlier requests: a request killed at its limit can still write its line
  after the kill (gVisor delivers a group kill one process at a time), so the next request
  finds that line first.
- A line may come slowly: bash reads a pipe a byte at a time, and on a loaded machine (gVisor
  under a full test run) a read with a timeout once ran out in the middle of a line, kept its
  first half, and the request was taken for one killed before it could say.

The test plays the request's job here, writing into the pipe as it would."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import time
from pathlib import Path

import pytest

from sandboxes.control import PID1_SCRIPT

END = re.compile(rb"@@rollouts ([0-9a-f]{16}) end (\d+) ([01])\n")


def _start(tmp_path: Path) -> subprocess.Popen:
    # Not "boot": the script then skips sealing itself, so this test's process (root or not)
    # may open its pipes through /proc.
    return subprocess.Popen(
        ["bash", "-c", PID1_SCRIPT, "rollouts-control", "unsealed", str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def _send(proc: subprocess.Popen, nonce: str, command: str) -> None:
    args = shlex.join(["bash", "-c", command]).encode()
    header = f"@@rollouts {nonce} 10000000 {len(args)} 0\n".encode()
    assert proc.stdin is not None
    proc.stdin.write(header + args)
    proc.stdin.flush()


def _answer(proc: subprocess.Popen) -> bytes:
    assert proc.stdout is not None
    answer = b""
    while not END.search(answer):
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, f"PID 1 ended; so far: {answer!r}"
        answer += chunk
    return answer


def _write_pipes(pid: int, data: bytes) -> None:
    """`data` into each of PID's file descriptors of 10 and up that is a pipe (`exec {fd}<>
    <(:)` opens them: the exit-code pipe, and the idle tick's, which ignores it)."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        if int(fd.name) >= 10 and stat.S_ISFIFO(os.stat(fd).st_mode):
            with open(fd, "wb", buffering=0) as f:
                f.write(data)


def _request(proc: subprocess.Popen, nonce: str, command: str) -> bytes:
    _send(proc, nonce, command)
    return _answer(proc)


@pytest.mark.timeout(60)
def test_an_earlier_requests_exit_code_line_is_not_taken_for_silence(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        first = _request(proc, "0" * 16, "echo warm")  # PID 1 is up, its pipes are open
        assert END.search(first).group(2) == b"0"  # type: ignore[union-attr]
        # Lines of killed requests, many: the reader meets them while the next request's
        # job has already exited, which is when a stale line was once taken for "killed
        # before it could say" and the job's own exit status (0) reported.
        stale = b"".join(b"%016x rc 137\n" % i for i in range(1, 400))
        _write_pipes(proc.pid, stale)
        for i in range(3):
            nonce = f"{0xABC0 + i:016x}"
            answer = _request(proc, nonce, "echo $((6*7)); exit 3")
            end = END.search(answer)
            assert end is not None and end.group(1) == nonce.encode()
            assert end.group(2) == b"3", answer[-200:]
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.timeout(60)
def test_a_line_that_comes_in_pieces_is_read_whole(tmp_path: Path) -> None:
    """The job's line arrives in two writes 0.4 s apart (longer than a read's 0.05 s timeout),
    and the job is gone before the second: the code in the line is the answer, not "killed
    before it could say"."""
    proc = _start(tmp_path)
    try:
        _request(proc, "0" * 16, "echo warm")
        nonce = f"{0xBEEF:016x}"
        # The job ends without writing its own line: its command kills it (the job's shell is
        # the command's parent), so the only line for this nonce is the one written here.
        _send(proc, nonce, "sleep 0.3; kill -9 $PPID")
        time.sleep(0.1)
        _write_pipes(proc.pid, f"{nonce} r".encode())
        time.sleep(0.4)  # the job is gone by now
        _write_pipes(proc.pid, b"c 9\n")
        end = END.search(_answer(proc))
        assert end is not None and end.group(1) == nonce.encode()
        assert end.group(2) == b"9", end.group(0)
    finally:
        proc.kill()
        proc.wait(10)
