"""Where the CPU of our containers goes in an oracle trial: by container, and by step of the
verifier script and of the task's test.sh, from the containers' own cgroup accounting.

    python -m benchmarks.grader_cpu [--tasks examples/tasks] [--trials 12] [--grader [NAME=]DIR ...]
                                    [--marks] [--plain] [--whole] [--runtime runsc]

- by container: the cpuacct usage of each agent and verifier container, read just before it is
  removed (the warm pool's idle time included, as a trial pays it), per trial; beside it the
  floor, the same solve.sh and test.sh by one exec in a running container;
- by step: the verifier script and test.sh with a mark after each step, which reads the
  container's usage (a bash builtin, so the marks cost nothing measurable), graded as usual;
- whole (`--whole`): every CPU-second a trial costs the machine, by who spent it (the engine,
  the containers, this process: benchmarks/cpu_cost.py), one trial at a time, for each arm and
  for the cold `docker run` harness of the sandbox benchmark, interleaved: what a free boundary
  (`--plain`: no stubs, no tested process) would leave between us and that harness.

Each `--grader [NAME=]DIR` is a checkout whose sandboxes/verifier_runtime and verifier script
grade a further set of trials, interleaved with this checkout's, so two graders are compared
side by side on the same machine load (CPU-seconds, not wall time); NAME (default: DIR) is its
arm's name in the results (the doc shows it: a commit, say).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import sandboxes.verifier as verifier
from benchmarks.cpu_cost import CpuCost, CpuMeter
from benchmarks.sandbox_throughput import (
    FloorContainers,
    cold_round,
    floor_upload,
    lifecycle_cpu_seconds,
)
from sandboxes.docker_adapter import DockerAdapter
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ImageResolver, ensure_base_image
from sandboxes.isolation import container_args
from sandboxes.oracle import run_oracle
from sandboxes.pool import PoolSettings
from sandboxes.reward import grade
from sandboxes.task import Task
from sandboxes.tasks import load_tasks

CGROUP = Path("/sys/fs/cgroup/cpuacct/docker")
# In the container: its own group is the root of the cpuacct hierarchy it sees.
_MARK = (
    'mark() { local u; read -r u </sys/fs/cgroup/cpuacct/cpuacct.usage; echo "@@cpu $1 $u" >&2; }'
)
_MARK_LINE = re.compile(r"@@cpu (\S+) (\d+)")


class MeteredAdapter(DockerAdapter):
    """Reads each container's CPU usage just before removing it, by kind (agent or verifier)."""

    def __init__(self) -> None:
        super().__init__()
        self.kind: dict[str, str] = {}
        self.used: dict[str, list[float]] = {"agent": [], "verifier": []}

    async def create_container(self, args: dict[str, Any]) -> str:
        cid = await super().create_container(args)
        verifying = "rollouts-verify" in args.get("command", [])
        self.kind[cid] = "verifier" if verifying else "agent"
        return cid

    async def remove(self, container_id: str) -> None:
        kind = self.kind.pop(container_id, None)
        usage = CGROUP / container_id / "cpuacct.usage"
        if kind is not None and usage.exists():
            self.used[kind].append(int(usage.read_text()) / 1e9)
        await super().remove(container_id)


def marked_script(script: str) -> str:
    """The verifier script with a mark after each step (the anchors are its own lines, of this
    checkout's script or an earlier one's: a step a script does not have is marked with the
    next)."""
    anchors = [
        ("read -r nonce tested_uid", "started"),
        ("  verdict 90 - 0; exit 0\nfi", "folders"),
        ("tar -x --no-same-owner -C / -f -", "unpacked"),
        ("chmod -R a+rX,go-w /", "chmod"),  # (since stop 55 view.py sets the modes)
        ('  echo \'{"event": "view", "python": false}\' >>"$report"\nfi', "view"),
        ("rc=$?", "tests"),
        ("sleep 0.05; kill -KILL -1 2>/dev/null", "killed"),
        ("pause 0.05; kill -KILL -1 2>/dev/null", "killed"),  # (since stop 55)
        ('verdict "$rc" "$mode" "$timed_out"', "verdict"),
        ("cd /logs && tar -c", "evidence"),
    ]
    out = script.replace("trap '' TERM INT HUP", "trap '' TERM INT HUP\n" + _MARK, 1)
    for anchor, name in anchors:
        if anchor not in out:  # (another checkout's script, compared side by side)
            continue
        at = out.index(anchor)
        end = out.index("\n", at + len(anchor))
        out = out[:end] + f"\nmark {name}" + out[end:]
    return out


def marked_test_sh(test_sh: bytes) -> bytes:
    """test.sh with marks after its first line and around each python3 run (one per line that
    starts one, for the layout of the bundled tasks' test.sh)."""
    lines = test_sh.decode().splitlines()
    out: list[str] = []
    n = 0
    for i, line in enumerate(lines):
        out.append(line)
        if i == 0:
            out += [_MARK, "mark test_sh_start"]
        if line.startswith("rc=$?") or line == ")":
            n += 1
            out.append(f"mark python_{n}")
    out.append("mark test_sh_end")
    return ("\n".join(out) + "\n").encode()


def load_checkout(checkout: Path) -> tuple[Any, dict[str, bytes]]:
    """A checkout's sandboxes/verifier.py (loaded apart: its script and upload) and runtime
    files."""
    spec = importlib.util.spec_from_file_location(
        f"_grader_{uuid.uuid4().hex[:6]}", checkout / "sandboxes" / "verifier.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    folder = checkout / "sandboxes" / "verifier_runtime"
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix == ".py"}
    return module, files


async def floor_cpu(
    adapter: DockerAdapter,
    args: dict[str, Any],
    image: str,
    task: Task,
    trials: int,
    meter: CpuMeter,
    whole: list[CpuCost],
) -> tuple[list[float], dict[str, list[float]]]:
    floor = FloorContainers(adapter)
    await floor.ensure(args, image, 1)
    cid = floor.all[0]
    usage = CGROUP / cid / "cpuacct.usage"
    out: list[float] = []
    marks: dict[str, list[float]] = {}
    try:
        script = "\n".join(
            [
                "rm -rf /app/* /tmp/solution /logs/verifier /tests/*",
                "mkdir -p /logs/verifier /tmp/solution",
                "tar -x --no-same-owner -C / || exit 91",
                "bash /tmp/solution/solve.sh >/dev/null 2>&1",
                "bash /tests/test.sh 2>&1 >/dev/null | grep @@cpu",
                "cat /logs/verifier/reward.txt",
            ]
        )
        for _ in range(trials):
            before, sample = int(usage.read_text()), meter.sample()
            result, _ = await adapter.exec_stream(
                cid, ["bash", "-c", script], stdin=floor_upload(task), timeout_s=300
            )
            out.append((int(usage.read_text()) - before) / 1e9)
            if meter.engine_groups:
                whole.append(meter.sample().minus(sample))
            text = result.output.text()
            assert text.strip().splitlines()[-1] == "1", text  # the reward, after any marks
            _record_marks(marks, text)
    finally:
        await floor.aclose()
    return out, marks


@dataclasses.dataclass
class Arm:
    name: str
    script: str
    upload: Any  # the checkout's verifier.write_upload
    backend: DockerBackend
    adapter: MeteredAdapter
    plain: bool = False  # the calibration fallback's layout: no stubs, no tested process
    marks: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    whole: list[CpuCost] = dataclasses.field(default_factory=list)


def _record_marks(marks: dict[str, list[float]], output: str) -> None:
    """Each mark's usage minus the one before; "whole": the last mark's (the container's
    usage from its start, as the verifier script nears its end)."""
    last = None
    for name, ns in _MARK_LINE.findall(output):
        v = int(ns) / 1e9
        if last is not None:
            marks.setdefault(name, []).append(v - last)
        last = v
    if last is not None:
        marks.setdefault("whole", []).append(last)


async def main_async(args: argparse.Namespace) -> None:
    await ensure_base_image()
    tasks = load_tasks(args.tasks)[: args.task_count]
    marked = [
        dataclasses.replace(
            t, test_files={**t.test_files, "test.sh": marked_test_sh(t.test_files["test.sh"])}
        )
        for t in tasks
    ]
    arms = []
    checkouts = [("this", Path(__file__).resolve().parents[1])] + [
        (name or p, Path(p).resolve()) for name, _, p in (g.rpartition("=") for g in args.grader)
    ]
    for name, checkout in checkouts:
        module, runtime = load_checkout(checkout)
        script = module._SCRIPT  # noqa: SLF001
        adapter = MeteredAdapter()
        grader = verifier.Grader(grade, runtime, f"profile-{name}")
        backend = DockerBackend(
            BackendSettings(pool=PoolSettings(warm_per_key=1), runtime=args.runtime),
            adapter=adapter,
            resolver=ImageResolver(adapter),
            grader=grader,
        )
        script = marked_script(script) if args.marks else script
        arms.append(Arm(name, script, module.write_upload, backend, adapter))
    if args.plain:  # this checkout again, graded as plain pytest with the guard
        first = arms[0]
        arms.append(dataclasses.replace(first, name="this, plain", plain=True, marks={}, whole=[]))
    labels = {"rollouts.rollout_id": f"grader-cpu-{uuid.uuid4().hex[:6]}"}
    load = []
    meter = CpuMeter()
    cold: list[CpuCost] = []
    if args.whole:
        meter.setup()
        if meter.unavailable:
            raise SystemExit(f"--whole: {meter.unavailable}")
        resolver = arms[0].backend.resolver
        images = {t.id: await resolver.resolve(t) for t in tasks}
        cold_args = {t.id: container_args(t, labels, images[t.id]) for t in tasks}
    try:
        for rep in range(args.trials + 1):  # the first round warms up, unmeasured
            for arm in arms:
                for task in marked if args.marks else tasks:
                    # Read at each verification by verifier_container_args and _send_upload.
                    verifier._SCRIPT, verifier.write_upload = arm.script, arm.upload  # noqa: SLF001
                    load.append(os.getloadavg()[0])
                    before = meter.sample()
                    r = await run_oracle(
                        task, arm.backend, solve_script=None, labels=labels, plain=arm.plain
                    )
                    if r.reward != 1.0:
                        raise SystemExit(f"{arm.name} {task.id}: {r.verdict} {r.output[-2000:]}")
                    await _settle(arm.backend)
                    if rep > 0:
                        _record_marks(arm.marks, r.output)
                        if args.whole:
                            arm.whole.append(meter.sample().minus(before))
                if rep == 0:
                    for k in arm.adapter.used:
                        arm.adapter.used[k].clear()
                    arm.marks.clear()
            for task in tasks if args.whole else []:
                before = meter.sample()
                await cold_round(cold_args, images, [task], 1)
                if rep > 0:
                    cold.append(meter.sample().minus(before))
        task = (marked if args.marks else tasks)[0]
        image = await arms[0].backend.resolver.resolve(task)
        floor_whole: list[CpuCost] = []
        lifecycles = (
            await lifecycle_cpu_seconds(
                DockerAdapter(), meter, container_args(task, labels, image), 5
            )
            if args.whole
            else []
        )
        floor, floor_marks = await floor_cpu(
            DockerAdapter(),
            container_args(task, labels, image),
            image,
            task,
            args.trials,
            meter,
            floor_whole,
        )
    finally:
        for arm in arms:
            await arm.backend.aclose()
    ms = lambda values: round(statistics.median(values) * 1e3, 1)  # noqa: E731
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": os.cpu_count() or 0,
        "load_while_measured": round(statistics.mean(load), 1),
        "tasks": [t.id for t in tasks],
        "trials": args.trials,
        "floor": {
            "containers_s": round(statistics.median(floor), 3),
            # (no "whole": the floor's container runs every trial, its usage is all of theirs)
            "marks_ms": {name: ms(v) for name, v in floor_marks.items() if name != "whole"},
        },
        "arms": {},
    }
    for arm in arms:
        used = arm.adapter.used["agent"]
        results["arms"][arm.name] = {
            "plain": arm.plain,
            "agent_container_s": round(statistics.median(used), 3) if used else None,
            "marks_ms": {name: ms(v) for name, v in arm.marks.items()},
        }
    if args.whole:
        results["floor"]["whole_s"] = whole_figures(floor_whole)
        for arm in arms:
            results["arms"][arm.name]["whole_s"] = whole_figures(arm.whole)
        results["cold"] = {"whole_s": whole_figures(cold)}
        results["lifecycle_s"] = round(statistics.median(lifecycles), 3)
    print(report(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


def whole_figures(costs: list[CpuCost]) -> dict[str, float]:
    """Each share's median over the trials, CPU-seconds (the total: the median of the totals)."""
    shares = [c.shares() for c in costs]
    return {
        k: round(statistics.median(s[k] for s in shares if k in s), 3)
        for k in dict.fromkeys(k for s in shares for k in s)
    }


def report(results: dict[str, Any]) -> str:
    lines = [
        f"load average while measured: {results['load_while_measured']} ({results['cores']} cores)",
        f"floor (one exec: solve.sh + test.sh): {results['floor']['containers_s']:.3f} CPU-s "
        "in its container",
    ]
    marked = [("floor", results["floor"])] + list(results["arms"].items())
    for name, arm in marked:
        if arm.get("agent_container_s") is not None:
            lines.append(f"[{name}] agent container: {arm['agent_container_s']:.3f} CPU-s")
        lines += [f"[{name}] {step:>18}: {v:7.1f} ms" for step, v in arm["marks_ms"].items()]
    whole = [(n, a["whole_s"]) for n, a in marked if "whole_s" in a]
    if "cold" in results:
        whole.append(("cold docker run", results["cold"]["whole_s"]))
    if "lifecycle_s" in results:
        lines.append(f"a bare container lifecycle: {results['lifecycle_s']:.3f} CPU-s")
    lines += [
        f"whole trial, {n}, CPU-s (medians): " + ", ".join(f"{k} {v:.3f}" for k, v in w.items())
        for n, w in whole
    ]
    return "\n".join(lines)


async def _settle(backend: DockerBackend) -> None:
    pending = backend.pool._tasks  # noqa: SLF001 - benchmark instrumentation only
    while pending:
        await asyncio.gather(*list(pending), return_exceptions=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="examples/tasks")
    ap.add_argument("--task-count", type=int, default=1)
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--marks", action="store_true", help="mark each step (script and test.sh)")
    ap.add_argument("--plain", action="store_true", help="also this checkout's plain layout")
    ap.add_argument(
        "--grader", action="append", default=[], help="[NAME=]DIR: another checkout to compare"
    )
    ap.add_argument("--whole", action="store_true", help="whole trials' CPU, and the cold harness")
    ap.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    ap.add_argument(
        "--runtime",
        help="the OCI runtime of the arms' containers (runsc: the marks are then gVisor's own "
        "accounting, not the host's; the whole trial's figures are the host's)",
    )
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
