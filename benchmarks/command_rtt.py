"""Round trip of one agent command, what a multi-turn episode pays 10 to 30 times.

In one sandbox, interleaved: the agent's path (`send_keys` of `echo <marker>` + Enter through the
tmux terminal, returning once the shell is back at its prompt with the output) beside a bare
exec of the same `echo` through the same engine connection (exec create, start, read, inspect:
the least any exec-based harness pays), and the `docker exec` CLI for reference. The terminal's
session is started before the first measured round, as an episode's first turn does.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.pool import PoolSettings
from sandboxes.task import Task

SYSTEMS = ("command", "exec", "cli_exec")


class RoundTripFailed(RuntimeError):
    """A command's output did not come back: the timing would not be of a working terminal."""


@dataclass
class RttRuns:
    seconds: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SYSTEMS})


async def _cli_exec(container_id: str, marker: str) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        "docker", "exec", container_id, "echo", marker,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RoundTripFailed(f"docker exec exited {proc.returncode}: {err.decode()[-200:]}")
    return out


async def run_command_rtt(task: Task, rounds: int, labels: dict[str, str]) -> RttRuns:
    runs = RttRuns()
    async with DockerBackend(BackendSettings(pool=PoolSettings(warm_per_key=0))) as backend:
        sandbox = await backend.create(task, labels)
        try:
            await sandbox.send_keys("true\n", 10)  # starts the session: an episode's first turn
            for i in range(rounds):
                marker = f"rtt-{i}-ok"
                t0 = time.monotonic()
                out = await sandbox.send_keys(f"echo {marker}\n", 10)
                runs.seconds["command"].append(time.monotonic() - t0)
                if f"\n{marker}\n" not in out:
                    raise RoundTripFailed(f"terminal answered {out[-200:]!r}")
                t0 = time.monotonic()
                result, _ = await backend.adapter.exec_stream(
                    sandbox.id, ["echo", marker], timeout_s=30
                )
                runs.seconds["exec"].append(time.monotonic() - t0)
                if result.exit_code != 0 or marker not in result.output.text():
                    raise RoundTripFailed(f"exec answered {result.output.text()[-200:]!r}")
                t0 = time.monotonic()
                cli_out = await _cli_exec(sandbox.id, marker)
                runs.seconds["cli_exec"].append(time.monotonic() - t0)
                if marker.encode() not in cli_out:
                    raise RoundTripFailed(f"docker exec answered {cli_out[-200:]!r}")
        finally:
            await backend.destroy(sandbox)
    return runs
