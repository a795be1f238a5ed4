"""`rollouts policy-stub`: run the stand-in policy server (a stand-in for vLLM, not a model).

The stand-in is a program of its own (the `standin` package, `python -m standin`), not part of
the service or its clients, which never import it: this command replaces itself with that program,
passing every argument on (`rollouts policy-stub --help` lists its flags). `stand_in_policy` starts
it as a child process and waits until it is healthy: `rollouts collect` without a policy URL uses
it, and so do tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import typer

STANDIN = [sys.executable, "-m", "standin"]


def policy_stub(ctx: typer.Context) -> None:
    """Serve a stand-in for vLLM's OpenAI-compatible API, scripted from a task set."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [*STANDIN, *ctx.args])


def register(app: typer.Typer) -> None:
    app.command(
        "policy-stub",
        # Every argument, --help included, belongs to the stand-in program.
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(policy_stub)


@dataclass
class StandIn:
    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL, as a crashed policy server would die."""
        self.process.kill()
        self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(
    url: str,
    timeout_s: float = 60.0,
    process: subprocess.Popen | None = None,
    path: str = "/health",
) -> None:
    """Poll `url + path` until it answers 200; fail early if `process` exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"{url}: the process exited: {err.strip()[-800:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not become healthy within {timeout_s:.0f} s")
        time.sleep(0.1)


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
    if proc.poll() is None:
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def stand_in_policy(
    tasks: str,
    *,
    p_correct: float = 0.5,
    seed: int = 0,
    tokens_per_s: float | None = None,
    ttft_ms: float | None = None,
    record: str | None = None,
    attack: str | None = None,
    extra_args: list[str] | None = None,
) -> Iterator[StandIn]:
    """The stand-in as its own process (it gets a core of its own) on a free loopback port."""
    port = free_port()
    cmd = [
        *STANDIN, "--tasks", tasks,
        "--port", str(port), "--p-correct", str(p_correct), "--seed", str(seed),
    ]  # fmt: skip
    for flag, value in (
        ("--tokens-per-s", tokens_per_s),
        ("--ttft-ms", ttft_ms),
        ("--record", record),
        ("--attack", attack),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    cmd += extra_args or []
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stand_in = StandIn(url=f"http://127.0.0.1:{port}", process=proc)
    try:
        wait_healthy(stand_in.url, process=proc)
        yield stand_in
    finally:
        stop_process(proc)


if __name__ == "__main__":  # `python -m clients.commands.policy_stub`, without the full CLI
    _app = typer.Typer(add_completion=False)
    register(_app)
    _app()
