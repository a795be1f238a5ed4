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
    "nothing lost, sandboxes have no network, and the sentry has no network code for the "
    "tasks to reach",
    "--platform=ptrace": "every system call of the tasks stops them and wakes the sentry "
    "through ptrace: two context switches and the host kernel's ptrace bookkeeping per call "
    "(bookworm's release had no other platform). Isolation: the same boundary as systrap; "
    "the tasks reach the host kernel through neither, only the sentry",
    "--platform=systrap": "this release's default: a system call of the tasks traps through "
    "a seccomp filter into their stub, which hands it to the sentry through shared memory: "
    "cheaper per call than ptrace's stop (the probes below), but dearer to start a process "
    "and to start and end a sandbox (the spawn and the bare lifecycle below), and a trial is "
    "two short-lived sandboxes that start a few dozen processes, so it costs more per trial "
    "here. Isolation: the same boundary as ptrace",
    "--directfs=false": "the gofer, a process of its own, opens every file of the container "
    "for the sentry and passes it the descriptor (a round trip per open, as in the previous "
    "release). Isolation: the stricter split; with directfs, this release's default, the "
    "sentry opens the container's files itself, below the mount roots the gofer hands it at "
    "start, with the file system calls that takes allowed by its seccomp filter, so a sentry "
    "the tasks took over would reach the container's own files, which "
    "it serves anyway, and no more of the host's; the tasks still never reach the host "
    "kernel",
    "--dcache=20000": "one dentry cache of 20,000 entries for the whole sandbox instead of "
    "1,000 per mount: fewer lookups of the root's files go to the host. Isolation: "
    "unchanged; the sentry holds more host file descriptors open",
}

# Candidates that are another runsc release than the installed one (scripts/runsc_setup.sh).
RELEASE_NOTES = {
    "runsc-bookworm": "Debian bookworm's runsc, the release the installed one replaced, unpacked "
    "beside it by `scripts/runsc_setup.sh --candidates` and never installed: the ptrace "
    "platform alone and a gofer round trip per open, measured in the same run as the release "
    "it is compared with. Isolation: the same boundary as `--platform=ptrace "
    "--directfs=false` of this release, less the fixes of the 19 months between them",
}

# Settings this runsc and kernel do not take, or that are not registered, and why.
NOT_REGISTERED = (
    "`--platform=kvm`: /dev/kvm is there, but a sandbox on KVM never boots on this kernel "
    "(nested under the machine's own hypervisor): registering it would hang every container "
    "of that runtime, so none is;",
    "`--overlay2` (root:memory, none, or the default root:self, which keeps the root's "
    "writes in a file beside it on the host): runsc wraps no read-only mount in an overlay, "
    "and our root file system is read-only, so the root is the same mount under each (9p, "
    "read-only, directfs, in the sandbox's /proc/mounts): nothing to choose, or to measure;",
    "sandbox networking (no `--network=none`): sandboxes need none, and `runsc do` refuses "
    "its network stack in the host's network namespace;",
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
        f"{tput['median']:.2f} in the full run of {r.get('date', '?')} against a CPU ratio of "
        f"{ratio:.2f}, engine included, Results above"
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
    releases = g.get("releases", {})
    blocks.append(para(
        "`--runtime runsc` runs every agent and verifier container under gVisor. Which runsc",
        "flags make it cheapest without weakening the boundary is measured by",
        "`python -m benchmarks.gvisor_settings` (after `scripts/runsc_setup.sh --candidates`,",
        "which registers each candidate as a runtime of its own, runsc-<setting>, beside the",
        "project's `runsc`, with a SIGHUP of the engine that leaves running containers alone):",
        "the same oracle trials through our backend under runc and under every setting, taking",
        "turns within each repeat (order rotated per repeat). Only ratios to runc from the same",
        "run mean anything. CPU per trial is the containers' own (sentry, gofer, the platform's",
        "stub processes and the tasks' processes), read from a cgroup parent each runtime's",
        "containers get, so other users' containers are not counted; the engine's share is left",
        "out.",
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
        extra = [f"`{f}`" for f in g["flags"].get(rt, []) if f != "--network=none"]
        if rt in releases and releases[rt] != releases.get("runsc"):
            extra.append(f"release {releases[rt].split()[-1]}")
        for c in levels:
            d = entry["by_concurrency"][c]
            rows.append(
                f"| {rt} | {', '.join(extra) or '–'} | {c} "
                f"| {_fig(d['trials_per_min'], '{:.1f}')} | {_fig(d['vs_runc'])} "
                f"| {_fig(d.get('container_cpu_s_per_trial'))} "
                f"| {_fig(d.get('cpu_bound_vs_runc'))} |"
            )
    blocks.append("\n".join(rows))
    flags_used = sorted({f for rt in runtimes for f in g["flags"].get(rt, [])})
    notes = [item(f"`{f}`: {FLAG_NOTES.get(f, 'not described')}.") for f in flags_used]
    for rt, release in releases.items():
        if rt != "runsc" and release != releases.get("runsc"):
            notes.append(item(
                f"{rt} ({release.split()[-1]}): {RELEASE_NOTES.get(rt, 'another release')}.",
            ))  # fmt: skip
    blocks.append("What each flag or release changes:\n\n" + "\n".join(notes))
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
    probed = {rt: e["probes"] for rt, e in runtimes.items() if "probes" in e}
    runc, runsc = probed["runc"], probed["runsc"]
    gv = [rt for rt in probed if rt != "runc"]  # runsc first: the registered setting
    keys = list(runsc["micro_us"])
    rows = [
        "| operation (CPU-µs each) | runc | "
        + " | ".join(f"{rt} | {rt} / runc" for rt in gv)
        + " |",
        "|---|---|" + "---|---|" * len(gv),
    ]
    for k in keys:
        a = runc["micro_us"][k]["median"]
        cells = []
        for rt in gv:
            b = probed[rt]["micro_us"][k]["median"]
            cells += [f"{b:.1f}", f"{b / a:.1f}×" if a >= 1 else "–"]
        rows.append(f"| {k.replace('_', ' ')} | {a:.1f} | " + " | ".join(cells) + " |")
    life = {
        rt: _median([x["median"] for x in p["lifecycle_cpu_s"] if x]) for rt, p in probed.items()
    }
    cells = [c for rt in gv for c in (f"{life[rt]:.3f}", f"{life[rt] / life['runc']:.1f}×")]
    rows.append(
        f"| one bare lifecycle (create, start, `true`, remove; CPU-s) | {life['runc']:.3f} | "
        + " | ".join(cells)
        + " |"
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
            "price per operation, above: every system call of the tasks leaves them for the",
            "sentry (on systrap a seccomp trap handed over through memory shared with the",
            "task's stub, on ptrace a ptrace stop and two context switches), every new process",
            "gets a stub process of its own, and every file looked up on the image's root file",
            "system that the sentry has not cached is a host system call (directfs) or a round",
            "trip to the gofer. A verification starts several Python processes and imports",
            "pytest: thousands of system calls and file lookups each.",
        ))  # fmt: skip
    if split:
        total = sum(split.values())
        blocks.append(para(
            "The probe container's CPU by process: sentry",
            f"{100 * split['sentry'] / total:.0f}% (the user-space kernel serving the system",
            f"calls), gofer {100 * split['gofer'] / total:.0f}% (the root file system's files),",
            f"stubs and the rest {100 * split['stubs_and_rest'] / total:.0f}% (the tasks' own",
            "code, and the kernel's side of each switch to the sentry). The mounts a sandbox",
            f"asks for: {mounts.get('tmpfs', '?')} tmpfs (in the sentry's memory, no host file),",
            f"{mounts.get('volumes_and_binds', '?')} volumes or binds, and",
            f"{mounts.get('engine_files', '?')} of the engine's own files (of hostname, hosts",
            "and resolv.conf: with no network only the hostname), the only mount of host files",
            "besides the root: what files cost is the root file system's lookups, not the number",
            "of mounts.",
        ))  # fmt: skip
    blocks.append(_verdict(g, per_trial, life))
    return blocks


def _verdict(g: dict[str, Any], per_trial: dict[str, float | None], life: dict[str, float]) -> str:
    """Which setting `runsc` gets, what the release and each setting changed, and where that
    leaves 0.5 of runc's throughput."""
    c = str(max(g["levels"], key=int))
    ratios = {
        rt: e["by_concurrency"][c]["cpu_bound_vs_runc"]
        for rt, e in g["runtimes"].items()
        if rt != "runc" and "cpu_bound_vs_runc" in e["by_concurrency"][c]
    }
    if "runsc" not in ratios or not per_trial["runc"] or not per_trial["runsc"]:
        return ""
    mine = ratios["runsc"]
    releases = g.get("releases", {})
    # Only a setting of the installed release can become `runsc`'s flags.
    better = [
        rt
        for rt, f in ratios.items()
        if rt != "runsc" and f["median"] > mine["max"] and releases.get(rt) == releases.get("runsc")
    ]
    others = ", ".join(f"{rt} {f['median']:.2f}" for rt, f in ratios.items() if rt != "runsc")
    if better:
        best = max(better, key=lambda rt: ratios[rt]["median"])
        flags = " ".join(f"`{f}`" for f in g["flags"][best] if f != "--network=none")
        choice = (
            f"{best} is cheaper than the registered setting beyond the spread of its repeats "
            f"({_fig(ratios[best])} against runsc's {_fig(mine)}; {others}), so "
            f"`scripts/runsc_setup.sh` now registers `runsc` with {best}'s flags ({flags}), and "
            "every isolation test passes under them; the next run measures that setting as "
            "`runsc`."
        )
    else:
        choice = (
            "No candidate is cheaper than the registered setting beyond the spread of its "
            f"repeats ({others}, against runsc's {_fig(mine)}), so `scripts/runsc_setup.sh` "
            "keeps it: every isolation test runs under exactly that."
        )
    old = ratios.get("runsc-bookworm")
    release = (
        f"The release change on its own, in the same run: bookworm's release at {_fig(old)},"
        f" this one at {_fig(mine)}."
        if old
        else ""
    )
    budget = 2 * per_trial["runc"]  # 0.5 of the throughput on a CPU-bound machine
    work_now = per_trial["runsc"] - 2 * life["runsc"]
    work_runc = per_trial["runc"] - 2 * life["runc"]
    left = budget - 2 * life["runsc"]
    if mine["median"] >= 0.5:
        target = [
            f"**On this run's CPU-bound measure gVisor is at {mine['median']:.2f} of runc, the",
            "target's 0.5;** the full run's throughput on an idle machine is the figure that",
            "settles it.",
        ]
    else:
        target = [
            "**The target (gVisor at 0.5 of runc's throughput) is not reached:",
            f"{mine['median']:.2f} here.** On a CPU-bound machine it asks for a gVisor trial of",
            f"at most twice runc's CPU: {budget:.2f} CPU-s here. Its two lifecycles take",
            f"{2 * life['runsc']:.2f}, which leaves {left:.2f} for the work that takes",
            f"{work_now:.2f} now: the work would have to cost {left / work_runc:.1f}× runc's",
            f"instead of {work_now / work_runc:.1f}×. Every",
            "system call still leaves the task for the sentry on either platform (systrap makes",
            "the switch cheaper than ptrace's stop, not absent), and the platform without it,",
            "KVM, does not boot here. What the sandboxes can still do is make fewer system calls",
            "and processes per trial (the verifier's interpreter starts, issue 37 target 1), which",
            "helps under both runtimes and more under gVisor.",
        ]
    return para(choice, release, *target)
