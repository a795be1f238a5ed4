"""docs/performance.md's "gVisor settings" section, from benchmarks/results/gvisor_settings.json
(written by `python -m benchmarks.gvisor_settings`): each runsc setting this engine and kernel
accept, what it changes in isolation, and its measured cost beside runc."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.doc_text import item, para

GVISOR_RESULTS = Path(__file__).parent / "results" / "gvisor_settings.json"

# What each flag changes, for isolation and for speed (the flags scripts/runsc_setup.sh uses).
FLAG_NOTES = {
    "--network=none": "no network stack in the sentry at all (loopback only). Isolation: "
    "nothing lost, sandboxes have no network; required here, as this release refuses "
    "its own network stack in the root network namespace",
    "--overlay2=root:memory": "writes to the root file system go to a layer in the sentry's "
    "memory, never to the host. Isolation: the same or stronger; our root file system is "
    "read-only, so there is nothing to redirect (the mount stays the gofer's, read-only)",
    "--dcache=20000": "one dentry cache of 20,000 entries for the whole sandbox instead of "
    "1,000 per mount: fewer lookups sent to the gofer. Isolation: unchanged; the sentry "
    "holds more host file descriptors open",
    "--cpu-num-from-quota": "the sentry sizes itself to the container's CPU quota (never below "
    "2). Isolation: unchanged; on this 2-core machine it changes nothing",
    "--file-access=shared": "the sentry revalidates every cached file against the host, for a "
    "root shared with writers outside. Isolation: unchanged; more gofer round trips",
}

# Settings this runsc and kernel do not take, or that are not registered, and why.
NOT_REGISTERED = (
    "`--platform=kvm`: /dev/kvm is there, but a sandbox on KVM never boots on this kernel "
    "(nested under the machine's own hypervisor): registering it would hang every container "
    "of that runtime, so none is;",
    "`--platform=systrap` and `--directfs` (the newer platform without ptrace's stops and "
    "context switches, and the sentry's direct file access without a gofer round trip per "
    "open): not in this release, whose flags lack both;",
    "sandbox networking (no `--network=none`): refused by this release in the root network "
    "namespace, and sandboxes need none;",
    "`--host-uds` / `--fsgofer-host-uds`: let the sandbox open host Unix sockets through the "
    "gofer; a hole in the boundary with no speed to gain for containers that open none, so "
    "not registered;",
    "`--ignore-cgroups`: would drop the container's memory, CPU and pids limits, which the "
    "isolation suite holds; not registered.",
)


def _fig(f: dict[str, Any] | None, fmt: str = "{:.2f}") -> str:
    if not f:
        return "–"
    if f["min"] == f["max"]:
        return fmt.format(f["median"])
    return f"{fmt.format(f['median'])} ({fmt.format(f['min'])}–{fmt.format(f['max'])})"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _full_run_ratios(r: dict[str, Any]) -> str:
    """The full run's runsc/runc throughput beside its CPU-per-trial ratio, as text."""
    tput = r.get("figures", {}).get("sandbox_runsc_vs_runc")
    sb = r.get("details", {}).get("sandbox", {})
    cpu = sb.get("cpu_s_per_trial", {})
    best = str(sb.get("best_concurrency"))
    try:
        ratio = cpu["ours"][best]["total"]["median"] / cpu["ours_runsc"][best]["total"]["median"]
    except (KeyError, TypeError, ZeroDivisionError):
        return "the full run's Results above"
    if not tput:
        return "the full run's Results above"
    return (
        f"{tput['median']:.2f} there against a CPU ratio of {ratio:.2f}, engine included, "
        "Results above"
    )


def gvisor_section(r: dict[str, Any], path: Path = GVISOR_RESULTS) -> list[str]:
    """The blocks of the section (`r`: the full run's results, for its runsc figures); a line
    saying how to measure when there is no results file."""
    blocks = ["## gVisor settings"]
    if not path.exists():
        blocks.append(
            para(
                "Not measured yet: `scripts/runsc_setup.sh --candidates`, then",
                "`python -m benchmarks.gvisor_settings`.",
            )  # fmt: skip
        )
        return blocks
    g = json.loads(path.read_text())
    acc = g.get("runsc_accepts", {})
    runtimes = g["runtimes"]
    levels = [str(c) for c in g["levels"]]
    blocks.append(para(
        "`--runtime runsc` runs every agent and verifier container under gVisor. Which runsc",
        "flags make it cheapest without weakening the boundary is measured by",
        "`python -m benchmarks.gvisor_settings` (after `scripts/runsc_setup.sh --candidates`,",
        "which registers each candidate as a runtime of its own, runsc-<setting>, beside the",
        "project's `runsc`, with a SIGHUP of the engine that leaves running containers alone):",
        "the same oracle trials through our backend under runc and under every setting, taking",
        "turns within each repeat (order rotated per repeat). Only ratios to runc from the same",
        "run mean anything. CPU per trial is the containers' own (sentry, gofer, ptrace stubs",
        "and the tasks' processes), read from a cgroup parent each runtime's containers get, so",
        "other users' containers are not counted; the engine's share is left out.",
    ))  # fmt: skip
    blocks.append(para(
        f"The committed run: {g['date']}, {g['cores']} cores, {len(g['tasks'])} tasks a round,",
        f"concurrency {', '.join(levels)}, {g['repeats']} repeats; load average",
        f"{g['load_before']} before and {g['load_after']} after. On a machine shared with other",
        "work the wall-clock rates measure the share of the machine each runtime got, not what",
        "it costs: each runtime's cgroup parent gets a full share against everyone else's load,",
        "and a runc trial spends more of its time waiting on the engine, which every user's",
        "containers load, than a gVisor trial, which spends it in its own containers. The",
        "CPU-bound ratio (runc's CPU per trial over the setting's, paired by repeat) is what a",
        "machine the trials keep busy gives, as the full run's runsc/runc throughput does",
        f"({_full_run_ratios(r)}). runsc:",
        f"{acc.get('version', '?')}, platforms {acc.get('platforms', '?')}.",
    ))  # fmt: skip
    rows = [
        "| runtime | flags beyond `--network=none` | c | trials/min | vs runc (wall) "
        "| container CPU-s / trial | CPU-bound vs runc |",
        "|---|---|---|---|---|---|---|",
    ]
    for rt, entry in runtimes.items():
        extra = [f for f in g["flags"].get(rt, []) if f != "--network=none"]
        for c in levels:
            d = entry["by_concurrency"][c]
            rows.append(
                f"| {rt} | {' '.join(f'`{f}`' for f in extra) or '–'} | {c} "
                f"| {_fig(d['trials_per_min'], '{:.1f}')} | {_fig(d['vs_runc'])} "
                f"| {_fig(d.get('container_cpu_s_per_trial'))} "
                f"| {_fig(d.get('cpu_bound_vs_runc'))} |"
            )
    blocks.append("\n".join(rows))
    flags_used = sorted({f for rt in runtimes for f in g["flags"].get(rt, [])})
    blocks.append(
        "What each flag changes:\n\n"
        + "\n".join(item(f"`{f}`: {FLAG_NOTES.get(f, 'not described')}.") for f in flags_used)
    )
    checked = para(
        "Not registered, and why (checked by the same run where it can be: directfs",
        f"{'present' if acc.get('directfs') else 'absent'}, systrap",
        f"{'present' if acc.get('systrap') else 'absent'}, /dev/kvm",
        f"{'present' if acc.get('dev_kvm') else 'absent'}, a KVM sandbox's boot:",
        f"{acc.get('kvm_boot', 'not tried')}):",
    )  # fmt: skip
    blocks.append(checked + "\n\n" + "\n".join(item(n) for n in NOT_REGISTERED))
    blocks += _where_the_time_goes(g)
    return blocks


def _where_the_time_goes(g: dict[str, Any]) -> list[str]:
    runtimes = g["runtimes"]
    if "runsc" not in runtimes or "probes" not in runtimes["runsc"]:
        return []
    blocks = ["### Where a trial's time goes under gVisor"]
    runc, runsc = runtimes["runc"]["probes"], runtimes["runsc"]["probes"]
    keys = list(runsc["micro_us"])
    rows = ["| operation (CPU-µs each) | runc | runsc | runsc / runc |", "|---|---|---|---|"]
    for k in keys:
        a, b = runc["micro_us"][k]["median"], runsc["micro_us"][k]["median"]
        ratio = f"{b / a:.1f}×" if a >= 1 else "–"
        rows.append(f"| {k.replace('_', ' ')} | {a:.1f} | {b:.1f} | {ratio} |")
    life = {
        rt: _median([x["median"] for x in p["lifecycle_cpu_s"] if x])
        for rt, p in (("runc", runc), ("runsc", runsc))
    }
    rows.append(
        f"| one bare lifecycle (create, start, `true`, remove; CPU-s) | {life['runc']:.3f} "
        f"| {life['runsc']:.3f} | {life['runsc'] / life['runc']:.1f}× |"
    )
    blocks.append("\n".join(rows))
    blocks.append(para(
        "One probe pass per runtime in a started sandbox: the CPU of an exec that does the",
        "operation many times, less that of the same exec doing it none, per operation; figures",
        "near zero are within the noise of that subtraction.",
    ))  # fmt: skip
    c = str(max(g["levels"], key=int))
    per_trial = {
        rt: runtimes[rt]["by_concurrency"][c].get("container_cpu_s_per_trial", {}).get("median")
        for rt in ("runc", "runsc")
    }
    split = next((s for s in runsc.get("process_split_s", []) if s), None)
    mounts = runsc.get("mounts", {})
    if per_trial["runc"] and per_trial["runsc"]:
        work = {rt: per_trial[rt] - 2 * life[rt] for rt in ("runc", "runsc")}
        blocks.append(para(
            f"At concurrency {c} a trial's containers spend {per_trial['runsc']:.2f} CPU-s under",
            f"runsc against {per_trial['runc']:.2f} under runc. Two container lifecycles (agent",
            f"and verifier) account for {2 * life['runsc']:.2f} of them under runsc",
            f"({2 * life['runc']:.2f} under runc): the sentry's and the gofer's start and end.",
            f"The rest, {work['runsc']:.2f} against {work['runc']:.2f}",
            f"({work['runsc'] / work['runc']:.1f}×), is the trial's own work paying gVisor's",
            "price per operation, above: on the ptrace platform every system call stops the",
            "task and wakes the sentry (two context switches and the ptrace bookkeeping), every",
            "new process gets a stub process of its own, and every file looked up on the image's",
            "root file system that the sentry has not cached is a round trip to the gofer. A",
            "verification starts several Python processes and imports pytest: thousands of",
            "system calls and file lookups each.",
        ))  # fmt: skip
    if split:
        total = sum(split.values())
        blocks.append(para(
            "The probe container's CPU by process: sentry",
            f"{100 * split['sentry'] / total:.0f}% (the user-space kernel serving the system",
            f"calls), gofer {100 * split['gofer'] / total:.0f}% (the root file system's files),",
            f"ptrace stubs and the rest {100 * split['stubs_and_rest'] / total:.0f}% (the tasks'",
            "own code, and the kernel's side of each ptrace stop). The mounts a sandbox asks for:",
            f"{mounts.get('tmpfs', '?')} tmpfs (in the sentry's memory, no gofer),",
            f"{mounts.get('volumes_and_binds', '?')} volumes or binds, and",
            f"{mounts.get('engine_files', '?')} of the engine's own files (of hostname, hosts",
            "and resolv.conf: with no network only the hostname), the only gofer-served mount",
            "besides the root: the gofer's cost is the root file system's lookups, not the",
            "number of mounts.",
        ))  # fmt: skip
    blocks.append(_verdict(g, per_trial, life))
    return blocks


def _verdict(g: dict[str, Any], per_trial: dict[str, float | None], life: dict[str, float]) -> str:
    """Which setting `runsc` gets, and what 0.5 of runc's throughput would take."""
    c = str(max(g["levels"], key=int))
    ratios = {
        rt: e["by_concurrency"][c]["cpu_bound_vs_runc"]
        for rt, e in g["runtimes"].items()
        if rt != "runc" and "cpu_bound_vs_runc" in e["by_concurrency"][c]
    }
    if "runsc" not in ratios or not per_trial["runc"] or not per_trial["runsc"]:
        return ""
    mine = ratios["runsc"]
    better = [rt for rt, f in ratios.items() if rt != "runsc" and f["median"] > mine["max"]]
    others = ", ".join(f"{rt} {f['median']:.2f}" for rt, f in ratios.items() if rt != "runsc")
    choice = (
        f"{', '.join(better)} measured cheaper than the registered setting beyond its spread"
        if better
        else "No candidate is cheaper than the registered setting beyond the spread of its "
        f"repeats ({others}, against runsc's {mine['median']:.2f}, "
        f"{mine['min']:.2f}–{mine['max']:.2f}), so `scripts/runsc_setup.sh` keeps `runsc` at "
        "`--network=none` alone: every isolation test runs under exactly that."
    )
    budget = 2 * per_trial["runc"]  # 0.5 of the throughput on a CPU-bound machine
    work_now = per_trial["runsc"] - 2 * life["runsc"]
    work_runc = per_trial["runc"] - 2 * life["runc"]
    left = budget - 2 * life["runsc"]
    return para(
        choice,
        "**The target (gVisor at 0.5 of runc's throughput) is not reachable with this runsc on",
        "this kernel.** On a CPU-bound machine it asks for a gVisor trial of at most twice",
        f"runc's CPU: {budget:.2f} CPU-s here. Its two lifecycles take {2 * life['runsc']:.2f},",
        f"which leaves {left:.2f} for the work that takes {work_now:.2f} now: the work would",
        f"have to cost {left / work_runc:.1f}× runc's instead of {work_now / work_runc:.1f}×.",
        "Flags cannot remove the per-system-call stop, which is the platform's: only a platform",
        "without it (systrap, or KVM where it boots) or directfs's gofer-less lookups would, and",
        "neither is available here (above). What the sandboxes can still do is make fewer",
        "system calls and processes per trial (the verifier's interpreter starts, issue 37",
        "target 1), which helps under both runtimes and more under gVisor.",
    )
