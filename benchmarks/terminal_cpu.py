"""What a terminal turn costs the agent container, by runtime: CPU and memory, not wall time.

    python -m benchmarks.terminal_cpu [--runtimes runc runsc] [--turns N]
                                      [--json FILE --label NAME]

In one sandbox per runtime (the backend's own containers, under a cgroup parent of this run,
so only their CPU is read): a first turn that starts the tmux session, then `--turns` turns of
`echo` (a short command) and as many of `sleep 2` (a turn that waits on its command), taking
turns; then three seconds with nothing asked. Reported per runtime: the container's CPU-ms a
turn of each kind, its CPU-ms a second while idle, and how much the container's memory grew a
turn (cgroup v1 `memory.usage_in_bytes`; under gVisor that includes the Sentry's own).
`--json FILE --label NAME` adds this run to FILE under NAME (other labels are kept).

A CPU-second a turn spends in the agent container is one the host's other sandboxes and the
verifier do not get; memory a turn leaves behind brings the container nearer its limit, where
the OOM killer ends the sample. Run it from another checkout (`git worktree`) for a side by
side comparison: it measures the `sandboxes` package it imports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.gvisor_settings import MeteredBackend, group_cpu_s, group_of, remove_group
from sandboxes.docker_backend import BackendSettings
from sandboxes.pool import PoolSettings
from sandboxes.tasks import load_tasks

MEMORY = Path("/sys/fs/cgroup/memory")
TASKS = Path(__file__).resolve().parent.parent / "examples" / "tasks"
IDLE_S = 3.0
KINDS = {"echo": ("echo hi\n", 5.0), "sleep 2": ("sleep 2\n", 10.0)}


def group_memory_mib(group: str) -> float:
    return int((MEMORY / group.lstrip("/") / "memory.usage_in_bytes").read_text()) / (1 << 20)


async def measure(runtime: str, turns: int) -> dict[str, Any]:
    """One sandbox under `runtime`: CPU-ms a turn by kind, idle CPU-ms a second, MiB a turn."""
    task = load_tasks(TASKS)[0]
    group = group_of(runtime, uuid.uuid4().hex[:8])
    settings = BackendSettings(
        pool=PoolSettings(warm_per_key=0), runtime=None if runtime == "runc" else runtime
    )
    backend = MeteredBackend(settings, cgroup_parent=group)
    sandbox = await backend.create(task, {"rollouts.rollout_id": "bench-terminal"})
    cpu_ms: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        await sandbox.send_keys("echo start\n", 5.0)  # starts the session: not a turn's cost
        memory_before = group_memory_mib(group)
        for _ in range(turns):
            for kind, (keys, wait_s) in KINDS.items():
                before = group_cpu_s(group)
                await sandbox.send_keys(keys, wait_s)
                cpu_ms[kind].append(1000 * (group_cpu_s(group) - before))  # type: ignore[operator]
        memory_growth = (group_memory_mib(group) - memory_before) / (turns * len(KINDS))
        before = group_cpu_s(group)
        await asyncio.sleep(IDLE_S)  # the measured window itself: nothing is asked of the sandbox
        idle = 1000 * (group_cpu_s(group) - before) / IDLE_S  # type: ignore[operator]
    finally:
        await backend.destroy(sandbox)
        await backend.aclose()
        remove_group(group)
    return {
        **{f"{kind} cpu_ms_per_turn": round(statistics.median(v), 1) for kind, v in cpu_ms.items()},
        "idle cpu_ms_per_s": round(idle, 1),
        "memory_mib_per_turn": round(memory_growth, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtimes", nargs="+", default=["runc", "runsc"])
    parser.add_argument("--turns", type=int, default=5, help="turns of each kind (default 5)")
    parser.add_argument("--json", type=Path, help="add the results to this file")
    parser.add_argument("--label", default="this checkout", help="their name in --json")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {rt: asyncio.run(measure(rt, args.turns)) for rt in args.runtimes}
    for runtime, figures in results.items():
        print(runtime, json.dumps(figures))
    if args.json:
        runs = json.loads(args.json.read_text()) if args.json.exists() else {}
        runs[args.label] = {"started": started, "turns": args.turns, **results}
        args.json.write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
