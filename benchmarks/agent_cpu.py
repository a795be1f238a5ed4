"""Where the CPU of an oracle trial's agent container goes, by step, for two checkouts side by side.

    python -m benchmarks.agent_cpu [--trials 12] [--other /work/main]

The agent container's side of benchmarks/grader_cpu.py (which compares verifier runtimes):
each checkout's PID 1 (sandboxes/control.py) and exec wrapper (sandboxes/docker_backend.py)
run the task's solve.sh and the workspace tar in a fresh container, the two checkouts taking
turns in one process, so both see the same machine load. By step, from the container's
cpuacct usage: `boot` (the engine's start of the container and PID 1 sealing itself, read once
it waits for requests), `solve` (the upload and solve.sh, one request), `tar` (the workspace
tar, one request), `whole` (everything until the container is removed). CPU-seconds, not wall
time: on a shared machine only the ratio between the two columns of one run means anything.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import posixpath
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

from sandboxes.control import ControlChannel
from sandboxes.docker_adapter import DockerAdapter
from sandboxes.images import ImageResolver, ensure_base_image
from sandboxes.isolation import container_args
from sandboxes.oracle import SOLUTION_DIR
from sandboxes.tasks import load_tasks
from sandboxes.workspace_tar import build_tar

CGROUP = Path("/sys/fs/cgroup/cpuacct/docker")
STEPS = ("boot", "solve", "tar", "whole")


def _usage_ms(cid: str) -> float:
    return int((CGROUP / cid / "cpuacct.usage").read_text()) / 1e6


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_agent_cpu_{uuid.uuid4().hex[:6]}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def checkout_arm(root: Path) -> tuple[list[str], Any]:
    """A checkout's PID 1 command, and how its DockerSandbox.exec turns a command and an
    upload into a request (argv, stdin), read from its source as the sandbox builds it."""
    control = _load(root / "sandboxes" / "control.py")
    backend = _load(root / "sandboxes" / "docker_backend.py")
    source = (root / "sandboxes" / "docker_backend.py").read_text()
    shell = "sh" if '["sh", "-c", _EXEC' in source else "bash"
    prefixed = "prefix=posixpath" in source  # the upload's names carry its folder

    def request(command: str, dest: str, files: dict[str, bytes]) -> tuple[list[str], bytes]:
        prefix = posixpath.normpath(dest).lstrip("/") if prefixed else ""
        tar = build_tar(files, prefix=prefix)
        return [shell, "-c", backend._EXEC, "rollouts-exec", command, dest], tar  # noqa: SLF001

    return control.PID1_COMMAND, request


async def one_trial(adapter: DockerAdapter, args: dict[str, Any], arm: Any, task: Any) -> list:
    pid1, request = arm
    cid = await adapter.create_container({**args, "command": pid1})
    try:
        await adapter.start(cid)
        channel = ControlChannel(adapter, cid)
        # PID 1 answers once it waits for requests: its boot is over.
        await channel.run(["true"], limit_s=30)
        boot = _usage_ms(cid)
        argv, stdin = request(f"bash {SOLUTION_DIR}/solve.sh", SOLUTION_DIR, task.solution_files)
        r = await channel.run(argv, limit_s=120, stdin=stdin)
        assert r.exit_code == 0, r.output.text() if r.output else r
        solved = _usage_ms(cid)
        r = await channel.run(
            ["tar", "-c", "--ignore-failed-read", "-C", "/app", "."],
            limit_s=120,
            collect_stdout=1 << 26,
        )
        assert r.exit_code == 0, r
        tarred = _usage_ms(cid)
        channel.close()
        return [boot, solved - boot, tarred - solved, tarred]
    finally:
        await adapter.remove(cid)


async def main_async(ns: argparse.Namespace) -> None:
    await ensure_base_image()
    task = load_tasks(ns.tasks)[0]
    adapter = DockerAdapter()
    image = await ImageResolver(adapter).resolve(task)
    args = container_args(task, {"rollouts.rollout_id": f"agent-cpu-{uuid.uuid4().hex[:6]}"}, image)
    arms = {"this": checkout_arm(Path(__file__).resolve().parents[1])}
    arms.update({other: checkout_arm(Path(other).resolve()) for other in ns.other})
    rows: dict[str, list[list[float]]] = {name: [] for name in arms}
    for rep in range(ns.trials + 1):  # the first round warms up, unmeasured
        for name, arm in arms.items():
            values = await one_trial(adapter, args, arm, task)
            if rep:
                rows[name].append(values)
    print(f"agent container CPU-ms, median of {ns.trials} ({task.id}):")
    for i, step in enumerate(STEPS):
        cells = "  ".join(f"{n}: {statistics.median(v[i] for v in rows[n]):6.1f}" for n in arms)
        print(f"  {step:>6}  {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="examples/tasks")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--other", action="append", default=[], help="another checkout to compare")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
