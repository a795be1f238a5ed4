"""Where this process's CPU time goes while our trials run: py-spy samples it from outside.

py-spy (`pip install py-spy`, in the test extra) records the stacks of every thread that is
running (idle threads are left out) at 100 Hz without pausing the process; each sample is
charged to the first frame, from the top of the stack, that belongs to a group below, so
"docker SDK" means time spent inside the docker package itself, below our own code.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

# Frame file path fragment -> group; the first match from the innermost frame outwards wins.
GROUPS = (
    ("/docker/", "docker SDK (requests to the engine)"),
    ("/requests/", "HTTP client (requests, urllib3)"),
    ("/urllib3/", "HTTP client (requests, urllib3)"),
    ("/http/client.py", "HTTP client (requests, urllib3)"),
    ("/tarfile.py", "tar (workspace and uploads)"),
    ("/sandboxes/workspace_tar.py", "tar (workspace and uploads)"),
    ("/sandboxes/safe_tar.py", "tar (workspace and uploads)"),
    ("/sandboxes/docker_adapter.py", "stream demultiplexing and thread hand-off"),
    ("/sandboxes/docker_engine.py", "stream demultiplexing and thread hand-off"),
    ("/sandboxes/docker_streams.py", "stream demultiplexing and thread hand-off"),
    ("/sandboxes/image_builds.py", "stream demultiplexing and thread hand-off"),
    ("/concurrent/futures/", "stream demultiplexing and thread hand-off"),
    ("/socket.py", "sockets"),
    ("/ssl.py", "sockets"),
    ("/selectors.py", "event loop"),
    ("/asyncio/", "event loop"),
    ("/sandboxes/", "rollouts sandbox code"),
    ("/benchmarks/", "benchmark harness"),
    ("/json/", "json"),
)
OTHER = "other"


def py_spy() -> str | None:
    """The py-spy binary beside this Python (a venv's bin/), or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class SelfProfile:
    """`start()` before each stretch of measured work, `stop()` after it; `summary()` gives the
    shares of CPU samples by group over all stretches."""

    def __init__(self) -> None:
        self.unavailable: str | None = None
        self.by_group: Counter[str] = Counter()
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = Path(tempfile.mkdtemp(prefix="rollouts-profile-")) / "stacks.txt"

    def start(self) -> None:
        binary = py_spy()
        if binary is None:
            self.unavailable = "py-spy is not installed (pip install py-spy)"
        if self.unavailable:
            return
        cmd = [binary, "record", "--pid", str(os.getpid()), "--format", "raw"]
        cmd += ["--rate", "100", "--nonblocking", "-o", str(self._out)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.unavailable = "py-spy did not stop"
            return
        if not self._out.exists():
            lines = err.decode(errors="replace").strip().splitlines()
            self.unavailable = f"py-spy failed: {lines[-1] if lines else 'no output'}"
            return
        self.by_group.update(group_samples(self._out.read_text()))
        self._out.unlink()

    def summary(self) -> dict[str, object]:
        shutil.rmtree(self._out.parent, ignore_errors=True)
        if self.unavailable:
            return {"unavailable": self.unavailable}
        total = sum(self.by_group.values())
        shares = {g: round(n / total, 3) for g, n in self.by_group.most_common()} if total else {}
        return {"samples": total, "shares": shares}


def group_samples(raw: str) -> Counter[str]:
    """Collapsed stacks ("frame;frame;... count" per line, outermost first) -> samples by
    group."""
    by_group: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if count_text.isdigit():
            by_group[_group_of(stack.split(";"))] += int(count_text)
    return by_group


def _group_of(frames: list[str]) -> str:
    for frame in reversed(frames):  # innermost first
        # "function (path/to/file.py:line)"; py-spy shortens paths to their package part.
        path = "/" + frame[frame.rfind("(") + 1 : frame.rfind(":")].lstrip("/")
        for fragment, group in GROUPS:
            if fragment in path:
                return group
    return OTHER
