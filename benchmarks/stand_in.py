"""Start the stand-in policy (`rollouts policy-stub`) as its own process at a given decode speed."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def stand_in_policy(
    tasks: str, *, tokens_per_s: float | None, ttft_ms: float, p_correct: float = 1.0
) -> Iterator[str]:
    """Yields the base URL once /health answers; the process is ended on exit."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "clients.cli", "policy-stub", "--tasks", tasks,
        "--port", str(port), "--p-correct", str(p_correct), "--p-malformed", "0",
        "--ttft-ms", str(ttft_ms),
    ]  # fmt: skip
    if tokens_per_s is not None:
        cmd += ["--tokens-per-s", str(tokens_per_s)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"the stand-in policy exited: {err.strip()[-500:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the stand-in policy did not become healthy within 60 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
