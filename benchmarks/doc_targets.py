"""The section of docs/performance.md on the targets the committed run missed ("Where a
target is not met, and what it would take"): what holds each one back, from the results."""

from __future__ import annotations

from typing import Any

from benchmarks.doc_text import NOT_RUN, item, median_of, para, target_value, text_of, wave_count
from benchmarks.results_tables import fig_text


def targets_section(r: dict[str, Any]) -> list[str]:
    """The blocks of "Where a target is not met", read from the results `r`."""
    from benchmarks.datapath import N_SAMPLES
    from benchmarks.datapath_service import PROMPT_TOKENS, RESPONSE_TOKENS

    d = r["details"]
    sb, ov = d.get("sandbox", {}), d.get("overlap", {})
    tpm = sb.get("trials_per_min", {})
    blocks: list[str] = []
    add = blocks.append

    missed = [k for k, f in r["figures"].items() if f.get("met") is False]
    add("## Where a target is not met, and what it would take")
    if not missed:
        add("Every target is met in the committed run.")
    sandbox_missed = {"sandbox_vs_bound", "sandbox_vs_cold_min"} & set(missed)
    if sandbox_missed and tpm:
        add("### Sandbox throughput: ours vs floor and vs cold")
        add(para(
            f"Ours / floor {text_of(r, 'sandbox_vs_floor')} at the best concurrency, which is",
            f"{text_of(r, 'sandbox_vs_bound')} of the two-lifecycle bound below (target",
            f"{_target(r, 'sandbox_vs_bound')}); ours / cold {text_of(r, 'sandbox_vs_cold')}",
            f"at the best concurrency and {text_of(r, 'sandbox_vs_cold_min')} at the worst",
            f"(target {_target(r, 'sandbox_vs_cold_min')} at every concurrency).",
        ))  # fmt: skip
        ops, engine = sb.get("engine_ops_s"), sb.get("engine")
        where = (
            f" (storage driver `{engine['storage_driver']}`, cgroup v{engine['cgroup_version']})"
            if engine
            else ""
        )
        if ops:
            names = {
                "create_start": "create + start (SDK)",
                "exec_true": "`docker exec` of `true`",
                "control_request_true": "`true` as a request to the agent container's PID 1",
                "remove": "remove",
                "docker_run_true": "`docker run --rm` of `true` (CLI, the whole lifecycle)",
            }
            rows = [f"| {names.get(op, op)} | {fig_text(v, '{:.3f}')} |" for op, v in ops.items()]
            add(f"What each engine operation costs here, one at a time{where}:")
            add("\n".join(["| operation | wall time (s) |", "|---|---|", *rows]))
        cpu = sb.get("cpu_s_per_trial", {})
        if {"ours", "cold", "floor"} <= set(cpu):
            best = str(sb["best_concurrency"])
            o, c, f = (cpu[x][best] for x in ("ours", "cold", "floor"))
            lifecycles = o["engine"]["median"] - f["engine"]["median"]
            add(para(
                "Where the CPU goes, per trial at concurrency", best + ":",
                f"the tests and the solve themselves cost {f['containers']['median']:.2f}",
                "CPU-seconds inside the floor's container, and the floor's engine share is",
                f"{f['engine']['median']:.2f}. Ours adds two fresh containers (agent and",
                "verifier), whose creation, start and removal cost the engine",
                f"{lifecycles:.2f} CPU-seconds more than the floor, and",
                f"{o['containers']['median'] - f['containers']['median']:.2f} inside the",
                "containers (their init, runc's helpers, the tar streams). The cold harness",
                "pays the same two lifecycles: its engine share is",
                f"{c['engine']['median']:.2f} against ours {o['engine']['median']:.2f}, and",
                f"its `docker` CLI processes {c['harness']['median']:.2f} against our whole",
                f"process's {o['harness']['median']:.2f}. Once the cores are saturated,",
                "throughput is CPU per trial: two container lifecycles are the floor of any",
                "design that keeps a fresh agent container and a fresh verifier container per",
                "trial: ours against cold there is what it saves per lifecycle less what it",
                "spends besides the work and the lifecycles (ours spent",
                f"{o['total']['median'] / c['total']['median']:.2f}× cold's CPU per trial),",
                "and half the floor, which creates no container at all, is out of reach while",
                "two lifecycles cost more than the work itself. The pool wins",
                "where cores are idle (low concurrency), by taking creation and removal off a",
                "trial's critical path.",
            ))  # fmt: skip
            if "engine_dockerd" in o:
                od, ok = o["engine_dockerd"]["median"], o["engine_containerd"]["median"]
                fd, fk = f["engine_dockerd"]["median"], f["engine_containerd"]["median"]
                add(para(
                    f"Ours' engine share by part: {od:.2f} CPU-seconds in dockerd and what it",
                    f"starts (the storage driver's mounts: {sb['engine']['storage_driver']} on",
                    f"this engine), {ok:.2f} in containerd, the shim it starts per container and",
                    f"runc (the floor's: {fd:.2f} and {fk:.2f}). So each of a trial's two",
                    f"container lifecycles costs about {(od - fd) / 2:.2f} CPU-seconds in dockerd",
                    f"and the storage driver and {(ok - fk) / 2:.2f} in containerd, its shim and",
                    "runc.",
                ))  # fmt: skip
            if "lifecycle_cpu_s" in sb:
                add(_lifecycle_bound(r, sb["lifecycle_cpu_s"], o, c, f))
        profile = sb.get("ours_profile", {})
        if profile.get("shares"):
            top = ", ".join(f"{g} {100 * v:.0f}%" for g, v in list(profile["shares"].items())[:4])
            add(para(
                "Our process's own share is small; py-spy shows where it goes:", top + ".",
            ))  # fmt: skip
        add("What would move it:")
        add("\n".join([
            item("**Container lifecycles, the rest of the engine share.** No exec is left on a",
                 "trial's path (the agent container's commands go to its PID 1, the verifier",
                 "talks through its own); what the engine still spends is two creates, starts",
                 "and removals per trial, each starting runc (a Go binary) and mounting a root",
                 "file system. A lighter OCI runtime (crun) would cut the runc part; that is the",
                 "engine's configuration (`--add-runtime`), which this project does not set.",
                 mark="1."),
            item("**A cheaper storage driver.** Each container's root file system is mounted by",
                 f"the engine's storage driver{where}; native overlay2 is cheaper than a FUSE",
                 "one, and its FUSE process also serves every file the tests read. That is",
                 "host configuration, outside the project.", mark="2."),
            item("**More cores.** Pool refills and removals run beside the tests; with idle",
                 "cores they are off the trials' way, which is where the pool already wins.",
                 mark="3."),
        ]))  # fmt: skip
    if "command_rtt_p50_ms" in missed and d.get("command"):
        ms = d["command"]["ms"]
        add("### One agent command")
        add(para(
            f"The terminal's p50 was {ms['command']['p50']:.0f} ms against the bare exec's",
            f"{ms['exec']['p50']:.0f} ms. What is left in a turn besides the exec: one tmux",
            "call to type, the poll's first few milliseconds, the log's size read twice while it",
            "settles, one tmux call to check the session and the log's pipe, and one process to",
            "print the output; each process costs a few milliseconds on a loaded machine.",
        ))  # fmt: skip
    if "overlap" in missed and ov:
        add("### Pipeline overlap")
        add(para(
            f"End to end took {fig_text(ov['end_to_end_s'])} s against generation alone",
            f"{fig_text(ov['gen_only_s'])} s and sandboxes alone",
            f"{fig_text(ov['sandbox_only_s'])} s: a ratio of {text_of(r, 'overlap')}, where full",
            "serialisation of the two halves would be about 2.",
        ))  # fmt: skip
        busy = ov.get("end_to_end_busy_s")
        if busy:
            gen, sbx, both = (busy[k]["median"] for k in ("generation_s", "sandbox_s", "both_s"))
            e2e = ov["end_to_end_s"]["median"]
            alone = e2e - gen  # sandbox work with no request in flight (and idle time)
            waves = wave_count(ov["tasks"], ov["n_samples"], ov["concurrency"])
            add(para(
                "The end-to-end runs' timeline (every policy request and every sandbox call of",
                f"any sample as a span): generation was in flight {gen:.1f} s of the {e2e:.1f}",
                f"s, about as long as alone, and sandbox work {sbx:.1f} s, of which",
                f"{both:.1f} s beside a request. For {alone:.1f} s no request was in flight at",
                "all: every sample in flight was in its sandbox at once, and that time adds to",
                "generation's instead of hiding behind it. The batch is",
                f"{waves} {'wave' if waves == 1 else 'waves'} ({ov['tasks']} tasks ×",
                f"{ov['n_samples']} samples,",
                f"{ov['concurrency']} in flight): the last wave's final commands and",
                "verifications come after the last request with nothing left to generate, and",
                "a wave's first turn is one n-sample request whose replies all arrive",
                "together, so the wave's first commands (writing the solution) run at once",
                "while nothing generates.",
            ))  # fmt: skip
            if "drain_s" in busy:
                drain = busy["drain_s"]["median"]
                add(para(
                    f"Of those {alone:.1f} s, {drain:.1f} s came after the last request had",
                    "ended (the drain: the last commands and every verification); sandbox work",
                    f"before it overlapped generation for {both:.1f} of",
                    f"{sbx - drain:.1f} s.",
                ))  # fmt: skip
        add("What would move it:")
        add("\n".join([
            item("A shorter drain: after the batch's last request, its last commands and",
                 "verifications run with nothing left to generate; the longest episode of",
                 "a long-tail batch decides when that is. A batch of many more samples than",
                 "slots (an RL step's) spreads it over more work.", mark="1."),
            item("Cheaper first commands: a group's first replies arrive together (one",
                 "n-sample request shares the prompt's prefix), so their commands, each a",
                 "terminal turn of ~50 ms alone, queue for the same cores.", mark="2."),
        ]))  # fmt: skip
    if "datapath_traj_per_s" in missed:
        cpu, rate = median_of(r, "service_cpu_ms_per_traj"), median_of(r, "datapath_traj_per_s")
        target = r["figures"]["datapath_traj_per_s"]["target"]
        want = target_value(r, "datapath_traj_per_s")
        step = 64 * N_SAMPLES
        add(f"### Data path (target {target} trajectories/s)")
        if cpu and rate:
            add(para(
                f"The service spends {cpu:.2f} ms of CPU per trajectory from commit through",
                f"lease to ack (all its threads together). At that cost {want:,.0f}",
                f"trajectories/s would take {want * cpu / 1000:.1f} cores for the service",
                f"alone; this machine has {r['cores']}, shared with the trainer. The measured",
                f"pipeline rate is {rate:.0f}/s, so a trainer step of 64 prompts ×",
                f"{N_SAMPLES} samples ({step} trajectories) leases in about {step / rate:.1f} s.",
            ))  # fmt: skip
        tokens = want * (PROMPT_TOKENS + RESPONSE_TOKENS) / 1e6
        add(f"{want:,.0f}/s, or {tokens:.0f}M tokens/s, would need:")
        add("\n".join([
            item("Token arrays that stay packed from the episode to the store (the token",
                 "ledger holding `array('i')` and `array('d')` rather than lists), so",
                 "committing does no per-token Python work.", mark="1."),
            item("Payloads outside SQLite, in append-only segment files indexed by the",
                 "database, so no blob is written twice (WAL, then checkpoint).", mark="2."),
            item("More than one service process, or more cores: each process is bound by its",
                 "CPU time per trajectory.", mark="3."),
        ]))  # fmt: skip
    return blocks


def _target(r: dict[str, Any], key: str) -> str:
    return r["figures"].get(key, {}).get("target") or NOT_RUN


def _lifecycle_bound(
    r: dict[str, Any],
    lifecycle: dict[str, Any],
    o: dict[str, Any],
    c: dict[str, Any],
    f: dict[str, Any],
) -> str:
    """What two bare container lifecycles per trial leave reachable against floor and cold, at
    saturation (throughput = cores / CPU per trial), from the CPU figures of one concurrency,
    and what ours would have to spend to meet the targets there."""
    lc, fl, co, ours = (x["median"] for x in (lifecycle, f["total"], c["total"], o["total"]))
    least = fl + 2 * lc  # the work plus two lifecycles, nothing else
    vs_floor, vs_cold = fl / least, co / least
    needs = []
    if "sandbox_vs_bound" in r["figures"]:
        most = least / target_value(r, "sandbox_vs_bound")
        needs.append(f"{_target(r, 'sandbox_vs_bound')} of the bound needs at most {most:.3f}")
    cold_target = r["figures"].get("sandbox_vs_cold_min", {}).get("target")
    if cold_target:
        most = co / target_value(r, "sandbox_vs_cold_min")
        needs.append(f"ours / cold {cold_target} at most {most:.3f}")
    cold_verdict = (
        f"ours / cold {cold_target} is out of reach for any design that keeps both fresh "
        "containers on this engine: that is the engine's configuration (runtime, storage "
        "driver), not the project's code"
        if cold_target and vs_cold < target_value(r, "sandbox_vs_cold_min")
        else "both are within this design's reach: what stands between is what ours spends "
        "besides the work and the two lifecycles"
    )
    return para(
        "A bare container lifecycle (create, start and remove of an agent container whose PID 1",
        f"waits idle), measured alone, costs {fig_text(lifecycle, '{:.3f}')} CPU-seconds here,",
        "engine and containers together. A trial that keeps a fresh agent container and a fresh",
        "verifier container pays two of them besides its work, so at saturation ours / floor",
        f"is at most {fl:.3f} / ({fl:.3f} + 2 × {lc:.3f}) = {vs_floor:.2f} (the bound) and ours",
        f"/ cold at most {co:.3f} / {least:.3f} = {vs_cold:.2f}, with nothing else spent; ours",
        f"spent {ours:.3f} CPU-seconds a trial, {ours - least:.3f} more than that (the",
        "verifier's layout of /app, the tested process and the calls to it, the guard, the",
        "attach sessions, PID 1's loop, the tar streams and our own process).",
        f"At saturation {' and '.join(needs) or 'nothing'} CPU-seconds a trial: {cold_verdict}.",
    )  # fmt: skip
