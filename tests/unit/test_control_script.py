"""The control channel's PID 1 script (sandboxes/control.py), run in a local bash with no
container: how it reads the pipe that carries each request's exit code.

- It may hold lines of earlier requests: a request killed at its limit can still write its line
  after the kill (gVisor delivers a group kill one process at a time), so the next request
  finds that line first.
- A line may come slowly: bash reads a pipe a byte at a time, and on a loaded machine (gVisor
  under a full test run) a read with a timeout once ran out in the middle of a line, kept its
  first half, and the request was taken for one killed before it could say.
- The clock and the request's copier write into the same pipe (a tick, the answer's end): a test
  that writes a line in pieces stops them first (a real line is one write, which nothing
  splits).

The test plays the request's job here, writing into the pipe as it would."""

from __future__ import annotations

import os
import re
import shlex
import signal
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


def _helpers(pid: int, timeout_s: float = 30) -> tuple[int, int]:
    """The running request's clock and copier: the children of PID 1 whose stdin is PID 1's
    and stdout /dev/null, and whose stdout is PID 1's (the job's is the encoder's pipe)."""
    stdin, stdout = (os.readlink(f"/proc/{pid}/fd/{n}") for n in ("0", "1"))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        clock = copier = None
        for proc in Path("/proc").iterdir():
            try:
                if not proc.name.isdigit() or (proc / "stat").read_text().split()[3] != str(pid):
                    continue
                fds = [os.readlink(proc / "fd" / n) for n in ("0", "1")]
            except OSError:  # gone meanwhile
                continue
            if fds == [stdin, "/dev/null"]:
                clock = int(proc.name)
            elif fds[1] == stdout:
                copier = int(proc.name)
        if clock and copier:
            return clock, copier
        time.sleep(0.01)
    raise AssertionError("no clock and copier for the request")


def _wait_ended(pid: int, timeout_s: float = 30) -> None:
    """Until process `pid` has ended (gone, or a zombie its parent has not reaped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z"):
                return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not end")


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
    """The job's line arrives in two writes 1.2 s apart (longer than PID 1's longest wait, one
    second), and the job is gone before the second: the code in the line is the answer, not
    "killed before it could say"."""
    proc = _start(tmp_path)
    try:
        _request(proc, "0" * 16, "echo warm")
        nonce = f"{0xBEEF:016x}"
        # The job ends without writing its own line: its command kills it (the job's shell is
        # the command's parent) once this test lets it, so the only line for this nonce is the
        # one written here. Until then the job, its copier and the clock all run.
        go, job = tmp_path / "go", tmp_path / "job"
        os.mkfifo(go)
        _send(proc, nonce, f"echo $PPID > {job}; read _ < {go}; kill -9 $PPID")
        for helper in _helpers(proc.pid):
            os.kill(helper, signal.SIGSTOP)
        _write_pipes(proc.pid, f"{nonce} r".encode())
        first = time.monotonic()
        with open(go, "w") as f:  # (opens once the command reads it, so it has written job)
            f.write("\n")
        _wait_ended(int(job.read_text()))
        time.sleep(max(0.0, first + 1.2 - time.monotonic()))  # past PID 1's longest wait
        _write_pipes(proc.pid, b"c 9\n")
        # PID 1 sends the stopped copier SIGCONT when it kills the request's group, two seconds
        # after the code came; the clock, at the next request.
        end = END.search(_answer(proc))
        assert end is not None and end.group(1) == nonce.encode()
        assert end.group(2) == b"9", end.group(0)
    finally:
        proc.kill()
        proc.wait(10)
