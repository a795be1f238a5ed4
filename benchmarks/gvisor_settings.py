"""`python -m benchmarks.gvisor_settings`: ours under runc and under each gVisor setting, side by
side, and where a gVisor trial's time goes.

The engine offers one runtime per gVisor setting (`scripts/runsc_setup.sh --candidates`
registers them as runsc-<setting>, beside the project's `runsc`). Every round runs the same
oracle trials through `DockerBackend` under one runtime; the runtimes take turns within each
repeat, in an order rotated per repeat, so load from the machine's other users falls on all of
them alike. Only ratios to runc from the same run mean anything on a shared machine.

CPU per trial here is the containers' own (sentry, gofer, the platform's stub processes and
the tasks' processes: every process in the containers' cgroups), read from a cgroup parent
that each runtime's containers get in this run (cgroup v1 cpuacct), so other users'
containers are not counted, nor is it lost when a container exits before it is removed; the
engine's share (dockerd, containerd, the shims and the `runsc` commands they run) is shared
with them and left out.

The probes (`--probes`) split a trial's cost under each runtime: one bare container lifecycle
(create, start, remove; its wall time and CPU), and, inside one started container, the cost of
a system call, of a file lookup on the image's root file system (served by the gofer under
gVisor), of starting a process and of starting Python.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.rounds import RoundResult, TrialFailed
from benchmarks.sandbox_throughput import BENCH_LABEL, TimedAdapter, ours_round
from benchmarks.stats import figure, percentile
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ImageResolver, ensure_base_image
from sandboxes.isolation import container_args, is_gvisor
from sandboxes.pool import PoolSettings
from sandboxes.runtimes import engine_runtimes
from sandboxes.task import Task
from sandboxes.tasks import load_tasks

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
RESULTS = Path(__file__).parent / "results" / "gvisor_settings.json"


def group_of(runtime: str, run_id: str) -> str:
    """The cgroup parent of one runtime's containers in this run."""
    return f"/rollouts-gvisor-{run_id}-{runtime}"


def group_cpu_s(group: str) -> float | None:
    """CPU-seconds used under `group`: a cgroup v1 parent keeps the usage of its children after
    they are gone, so containers that exited or were removed still count. None: unreadable."""
    try:
        return int((CPUACCT / group.lstrip("/") / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


def remove_group(group: str) -> None:
    """Remove the (empty) cgroup parent the engine made in every hierarchy for `group`."""
    for hierarchy in CPUACCT.parent.iterdir():
        try:
            (hierarchy / group.lstrip("/")).rmdir()
        except OSError:
            pass  # not made in this hierarchy, or a container is still in it


class MeteredBackend(DockerBackend):
    """Puts every container it creates (agent and verifier) under one cgroup parent of its own,
    so their CPU can be read apart from other users' containers."""

    def __init__(self, *args: Any, cgroup_parent: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cgroup_parent = cgroup_parent

    async def _container_args(self, task: Task, labels: dict[str, str]) -> dict:
        args = await super()._container_args(task, labels)
        return {**args, "host_config": {**args["host_config"], "cgroup_parent": self.cgroup_parent}}


# ---------------------------------------------------------------- probes

# Run inside a started sandbox, one exec per operation: `python3 -c _PROBE OP N` does OP N
# times. The CPU an operation costs is read from the containers' cgroup around the exec, less
# that of the same exec with N=0 (the interpreter's own start), divided by N: CPU, not wall
# time, so other users' load does not enter it. Python is the tests' interpreter, so its start
# and pytest's import are what each verification pays (several times).
_PROBE = r"""
import os, subprocess, sys
def read_root_fs():
    with open("/etc/os-release", "rb") as f:
        f.read()
OPS = {
    "getpid": os.getppid,  # a system call that touches no file system
    "stat_root_fs": lambda: os.stat("/usr/lib/python3/dist-packages"),  # the gofer's mount
    "stat_missing_root_fs": lambda: os.path.exists("/usr/lib/nothing-here"),
    "stat_tmpfs": lambda: os.stat("/tmp"),  # the sentry's own memory
    "open_read_root_fs": read_root_fs,
    "spawn_true": lambda: subprocess.run(["/bin/true"], check=True),
    "python_start": lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    "import_pytest": lambda: subprocess.run([sys.executable, "-c", "import pytest"], check=True),
}
op, n = OPS[sys.argv[1]], int(sys.argv[2])
for _ in range(n):
    op()
"""
PROBE_OPS = {
    "getpid": 20000,
    "stat_root_fs": 5000,
    "stat_missing_root_fs": 5000,
    "stat_tmpfs": 5000,
    "open_read_root_fs": 2000,
    "spawn_true": 20,
    "python_start": 10,
    "import_pytest": 3,
}


async def _exec_cpu_s(adapter: TimedAdapter, cid: str, group: str, cmd: list[str]) -> float:
    before = group_cpu_s(group)
    result, _ = await adapter.exec_stream(cid, cmd, timeout_s=300)
    after = group_cpu_s(group)
    if result.exit_code != 0:
        raise TrialFailed(f"{cmd[-2:]} exited {result.exit_code}: {result.output.text()[-300:]}")
    if before is None or after is None:
        raise TrialFailed(f"cgroup {group} is not readable (cgroup v1 cpuacct is needed)")
    return after - before


async def probe(adapter: TimedAdapter, args: dict[str, Any], lifecycles: int) -> dict[str, Any]:
    """One runtime's costs: a bare lifecycle's wall time and CPU (create, start, one `true`,
    remove), and each operation's CPU in microseconds inside a started container."""
    walls: list[float] = []
    cpus: list[float] = []
    group = args["host_config"]["cgroup_parent"]
    for _ in range(lifecycles):
        t0 = time.monotonic()
        before = group_cpu_s(group)
        cid = await adapter.create_container(args)
        try:
            await adapter.start(cid)
            # Alive and answering: a bare start is not a usable sandbox until it can run.
            result, _ = await adapter.exec_stream(cid, ["true"], timeout_s=60)
            if result.exit_code != 0:
                raise TrialFailed(f"exec true exited {result.exit_code}")
        finally:
            await adapter.remove(cid)
        walls.append(time.monotonic() - t0)
        after = group_cpu_s(group)
        if before is not None and after is not None:
            cpus.append(after - before)
    cid = await adapter.create_container(args)
    micro: dict[str, float] = {}
    try:
        await adapter.start(cid)
        for op, n in PROBE_OPS.items():
            base = await _exec_cpu_s(adapter, cid, group, ["python3", "-c", _PROBE, op, "0"])
            used = await _exec_cpu_s(adapter, cid, group, ["python3", "-c", _PROBE, op, str(n)])
            micro[op] = round(max(used - base, 0.0) / n * 1e6, 2)
        mounts = await _mount_count(adapter, cid)
        split = process_split(group, cid)
    finally:
        await adapter.remove(cid)
    return {
        "lifecycle_wall_s": figure(walls).as_dict(),
        **({"lifecycle_cpu_s": figure(cpus).as_dict()} if cpus else {}),
        "micro": micro,
        "mounts": mounts,
        **({"process_split_s": split} if split else {}),
    }


def _proc_cpu_s(pid: str) -> tuple[str, float]:
    """(what the process is, its CPU-seconds so far, all threads)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return "gone", 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return args, (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def process_split(group: str, cid: str) -> dict[str, float] | None:
    """The container's CPU so far by process kind: under gVisor the sentry (runsc-sandbox: the
    user-space kernel, which serves every system call), the gofer (runsc-gofer: the root file
    system's files) and the rest (the platform's stub processes, in which the tasks' own code
    runs, and the processes already gone). None under runc (no such split) or where unreadable."""
    folder = CPUACCT / group.lstrip("/") / cid
    try:
        pids = (folder / "cgroup.procs").read_text().split()
        total = int((folder / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None
    out = {"sentry": 0.0, "gofer": 0.0}
    for pid in pids:
        what, cpu = _proc_cpu_s(pid)
        if what in ("runsc-sandbox", "runsc-gofer"):
            out["sentry" if what == "runsc-sandbox" else "gofer"] += cpu
    if not out["sentry"]:
        return None
    out["stubs_and_rest"] = max(total - out["sentry"] - out["gofer"], 0.0)
    return {k: round(v, 3) for k, v in out.items()}


async def _mount_count(adapter: TimedAdapter, cid: str) -> dict[str, int]:
    """The container's mounts by kind, as its spec asks for them (binds are gofer-served under
    gVisor; tmpfs lives in the sentry's memory)."""
    info = await adapter.call(lambda: adapter.client.api.inspect_container(cid))
    binds = sum(1 for m in info.get("Mounts") or [] if m.get("Type") == "bind")
    # Docker's own per-container files (hostname, hosts, resolv.conf) are bind mounts it adds.
    own = sum(1 for k in ("HostnamePath", "HostsPath", "ResolvConfPath") if info.get(k))
    tmpfs = len((info.get("HostConfig") or {}).get("Tmpfs") or {})
    return {"tmpfs": tmpfs, "volumes_and_binds": binds, "engine_files": own}


# ---------------------------------------------------------------- what runsc accepts here

KVM_BOOT_S = 30  # a sandbox that has not run `true` by then on the KVM platform never will


def runsc_version(runsc: str) -> str:
    """The first line of `runsc --version` (e.g. "runsc version 0.0~20240729.0")."""
    return subprocess.run(
        [runsc, "--version"], capture_output=True, text=True, timeout=30
    ).stdout.splitlines()[0]


def runsc_accepts(runsc: str = "runsc") -> dict[str, Any]:
    """What this runsc release and this kernel offer beyond the flags measured as runtimes:
    the release, the platforms its help lists, whether it has the newer file-system and
    platform options (directfs, systrap), and whether a sandbox boots on KVM (`runsc do`, as
    root, outside Docker: a hang there would hang every container of such a runtime)."""
    try:
        version = runsc_version(runsc)
        flags = subprocess.run([runsc, "flags"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired, IndexError) as e:
        return {"unavailable": f"runsc: {e}"}
    help_text = flags.stdout + flags.stderr
    platform = next((ln for ln in help_text.splitlines() if "which platform to use" in ln), "")
    out: dict[str, Any] = {
        "version": version,
        "platforms": platform.split("use:", 1)[-1].strip(),
        "directfs": "-directfs" in help_text,
        "systrap": "systrap" in help_text,
        "dev_kvm": Path("/dev/kvm").exists(),
    }
    if out["dev_kvm"]:
        # `runsc do` leaves its bundle in TMPDIR when it is killed: a folder of our own.
        with tempfile.TemporaryDirectory() as tmp:
            try:
                boot = subprocess.run(
                    [runsc, f"--root={tmp}/root", "--platform=kvm", "--network=none", "do",
                     "/bin/true"],
                    capture_output=True, text=True, timeout=KVM_BOOT_S, cwd=tmp,
                    env={**os.environ, "TMPDIR": tmp},
                )  # fmt: skip
                out["kvm_boot"] = "ok" if boot.returncode == 0 else f"exit {boot.returncode}"
            except subprocess.TimeoutExpired:
                out["kvm_boot"] = f"no answer in {KVM_BOOT_S} s"
    return out


# ---------------------------------------------------------------- the side-by-side run


async def run(
    tasks: list[Task],
    runtimes: list[str],
    levels: list[int],
    repeats: int,
    probes: int,
    log: Any,
    probe_runtimes: list[str] | None = None,
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:10]
    labels = {"rollouts.rollout_id": f"bench-{run_id}", BENCH_LABEL: run_id}
    pool = PoolSettings(warm_per_key=max(levels))
    adapters = {rt: TimedAdapter() for rt in runtimes}
    groups = {rt: group_of(rt, run_id) for rt in runtimes}
    backends = {
        rt: MeteredBackend(
            BackendSettings(pool=pool, runtime=None if rt == "runc" else rt),
            adapter=adapters[rt],
            resolver=ImageResolver(adapters[rt]),
            cgroup_parent=groups[rt],
        )
        for rt in runtimes
    }
    rounds: dict[str, dict[int, list[RoundResult]]] = {
        rt: {c: [] for c in levels} for rt in runtimes
    }
    cpu: dict[str, dict[int, list[float]]] = {rt: {c: [] for c in levels} for rt in runtimes}
    probed: dict[str, list[dict[str, Any]]] = {rt: [] for rt in runtimes}
    try:
        for rt in runtimes:  # warm-up, not measured: image, pool fill, caches
            await ours_round(backends[rt], adapters[rt], tasks[: max(levels)], max(levels), run_id)
        for rep in range(repeats):
            order = runtimes[rep % len(runtimes) :] + runtimes[: rep % len(runtimes)]
            for c in levels:
                for rt in order:
                    before = group_cpu_s(groups[rt])
                    r = await ours_round(backends[rt], adapters[rt], tasks, c, run_id)
                    rounds[rt][c].append(r)
                    after = group_cpu_s(groups[rt])
                    if before is not None and after is not None:
                        cpu[rt][c].append((after - before) / r.trials)
                    used = f"{cpu[rt][c][-1]:.2f}" if cpu[rt][c] else "?"
                    log(f"  rep {rep + 1} c={c} {rt}: {r.per_min:.1f}/min, {used} CPU-s/trial")
        image = await backends[runtimes[0]].resolver.resolve(tasks[0])
        for rep in range(probes):
            for rt in [r for r in runtimes if probe_runtimes is None or r in probe_runtimes]:
                args = container_args(tasks[0], labels, image, None if rt == "runc" else rt)
                args["host_config"]["cgroup_parent"] = groups[rt]
                probed[rt].append(await probe(adapters[rt], args, lifecycles=4))
                log(f"  probe {rep + 1} {rt}: {json.dumps(probed[rt][-1]['micro'])}")
    finally:
        for b in backends.values():
            await b.aclose()
        for group in groups.values():
            remove_group(group)
    return _summary(tasks, runtimes, levels, rounds, cpu, probed)


def _summary(
    tasks: list[Task],
    runtimes: list[str],
    levels: list[int],
    rounds: dict[str, dict[int, list[RoundResult]]],
    cpu: dict[str, dict[int, list[float]]],
    probed: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    out: dict[str, Any] = {"tasks": [t.id for t in tasks], "levels": levels, "runtimes": {}}
    for rt in runtimes:
        by_c: dict[str, Any] = {}
        for c in levels:
            base = rounds["runc"][c]
            mine = rounds[rt][c]
            by_c[str(c)] = {
                "trials_per_min": figure([r.per_min for r in mine]).as_dict(1),
                # Paired by repeat: the two rounds ran minutes apart at most, under the same load.
                "vs_runc": figure(
                    [m.per_min / b.per_min for m, b in zip(mine, base, strict=True)]
                ).as_dict(),
                **(
                    {
                        "container_cpu_s_per_trial": figure(cpu[rt][c]).as_dict(),
                        # What a machine the trials keep busy would give: runc's CPU per trial
                        # over this runtime's, paired by repeat.
                        "cpu_bound_vs_runc": figure(
                            [b / m for m, b in zip(cpu[rt][c], cpu["runc"][c], strict=True)]
                        ).as_dict(),
                    }
                    if cpu[rt][c] and len(cpu[rt][c]) == len(cpu["runc"][c])
                    else {}
                ),
                "verify_p50_s": round(
                    percentile([v for r in mine for v in r.stages["verify"]], 50), 3
                ),
            }
        entry: dict[str, Any] = {"by_concurrency": by_c}
        if probed[rt]:
            micro_keys = probed[rt][0]["micro"]
            entry["probes"] = {
                "micro_us": {
                    k: figure([p["micro"][k] for p in probed[rt]]).as_dict(1) for k in micro_keys
                },
                "lifecycle_wall_s": [p["lifecycle_wall_s"] for p in probed[rt]],
                "lifecycle_cpu_s": [p.get("lifecycle_cpu_s") for p in probed[rt]],
                "mounts": probed[rt][0]["mounts"],
                "process_split_s": [p.get("process_split_s") for p in probed[rt]],
            }
        out["runtimes"][rt] = entry
    return out


def _fig(f: dict[str, Any] | None) -> str:
    return "–" if not f else f"{f['median']:.2f} ({f['min']:.2f}–{f['max']:.2f})"


def markdown(summary: dict[str, Any], flags: dict[str, list[str]]) -> str:
    lines = [
        "| runtime | flags | c | trials/min | vs runc | container CPU-s / trial "
        "| CPU-bound vs runc | verify p50 (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rt, entry in summary["runtimes"].items():
        for c, d in entry["by_concurrency"].items():
            f = d["trials_per_min"]
            v = d["vs_runc"]
            cp = d.get("container_cpu_s_per_trial")
            cpu_text = f"{cp['median']:.2f} ({cp['min']:.2f}–{cp['max']:.2f})" if cp else "–"
            lines.append(
                f"| {rt} | {' '.join(flags.get(rt, [])) or '–'} | {c} "
                f"| {f['median']} ({f['min']}–{f['max']}) "
                f"| {v['median']:.2f} ({v['min']:.2f}–{v['max']:.2f}) "
                f"| {cpu_text} | {_fig(d.get('cpu_bound_vs_runc'))} | {d['verify_p50_s']} |"
            )
    probes = {rt: e["probes"] for rt, e in summary["runtimes"].items() if "probes" in e}
    if probes:
        keys = list(next(iter(probes.values()))["micro_us"])
        lines += [
            "",
            "| runtime | lifecycle CPU-s | " + " | ".join(f"{k} (CPU-µs)" for k in keys) + " |",
            "|---|---|" + "---|" * len(keys),
        ]
        for rt, p in probes.items():
            life = [x["median"] for x in p["lifecycle_cpu_s"] if x]
            cells = [str(p["micro_us"][k]["median"]) for k in keys]
            life_text = f"{sorted(life)[len(life) // 2]:.3f}" if life else "–"
            lines.append(f"| {rt} | {life_text} | " + " | ".join(cells) + " |")
        splits = {
            rt: p["process_split_s"][0] for rt, p in probes.items() if p["process_split_s"][0]
        }
        if splits:
            lines += [
                "",
                "The probe container's CPU-s by process:",
                "",
                "| runtime | sentry | gofer | stubs and the rest |",
                "|---|---|---|---|",
            ]
            for rt, sp in splits.items():
                lines.append(f"| {rt} | {sp['sentry']} | {sp['gofer']} | {sp['stubs_and_rest']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gvisor_settings", description=__doc__
    )
    parser.add_argument("--tasks", default="examples/tasks", help="task folder")
    parser.add_argument("--n-tasks", type=int, default=4, help="trials per round")
    parser.add_argument("--levels", type=int, nargs="+", default=[2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=1, help="probe passes per runtime (0: none)")
    parser.add_argument(
        "--probe-runtimes", nargs="+", default=["runc", "runsc"], help="the runtimes probed"
    )
    parser.add_argument(
        "--runtimes", nargs="+", help="default: runc and every runsc runtime the engine offers"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    ns = parser.parse_args(argv)

    async def go() -> tuple[dict[str, Any], dict[str, list[str]]]:
        await ensure_base_image()
        adapter = TimedAdapter()
        offered, _default = await engine_runtimes(adapter)
        info = await adapter.call(lambda: adapter.client.info())
        flags = {
            k: list(v.get("runtimeArgs") or []) for k, v in (info.get("Runtimes") or {}).items()
        }
        paths = {k: v["path"] for k, v in (info.get("Runtimes") or {}).items() if is_gvisor(k)}
        runtimes = ns.runtimes or ["runc", *(r for r in offered if is_gvisor(r))]
        missing = [r for r in runtimes if r != "runc" and r not in offered]
        if missing:
            raise SystemExit(
                f"error: the engine has no runtime {', '.join(missing)}: "
                "run scripts/runsc_setup.sh --candidates"
            )
        if "runc" not in runtimes:
            runtimes.insert(0, "runc")
        tasks = load_tasks(ns.tasks)[: ns.n_tasks]
        started = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cores": os.cpu_count() or 0,
            "load_before": round(os.getloadavg()[0], 1),
            "repeats": ns.repeats,
        }
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        summary = await run(
            tasks, runtimes, ns.levels, ns.repeats, ns.probes, log, ns.probe_runtimes
        )
        summary.update(started, load_after=round(os.getloadavg()[0], 1))
        summary["flags"] = {rt: flags.get(rt, []) for rt in runtimes}
        # A candidate may be another runsc release (runsc-bookworm): each one's own version.
        summary["releases"] = {rt: runsc_version(paths[rt]) for rt in runtimes if rt in paths}
        summary["runsc_accepts"] = runsc_accepts()
        return summary, flags

    summary, flags = asyncio.run(go())
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(markdown(summary, flags))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
