"""One run's results as markdown tables, from their JSON form alone: what the runner prints
and writes to latest.md, what `python -m benchmarks.report` prints, and the tables of
docs/performance.md."""

from __future__ import annotations

from typing import Any

from benchmarks.run_results import Results
from benchmarks.stats import Figure

_LABELS = {
    "sandbox_vs_floor": "sandbox throughput / physical floor (best concurrency)",
    "sandbox_vs_bound": "ours / floor over the two-lifecycle bound, work / (work + 2 lifecycles)",
    "sandbox_runsc_vs_runc": "ours under gVisor / ours under runc (best concurrency)",
    "sandbox_vs_cold": "sandbox throughput / cold `docker run` (best concurrency)",
    "sandbox_vs_cold_min": "sandbox throughput / cold `docker run` (worst concurrency)",
    "command_rtt_p50_ms": "one agent command through the terminal, p50 (ms)",
    "exec_rtt_p50_ms": "a bare exec of the same command, p50 (ms)",
    "overlap": "end-to-end / max(generation alone, sandboxes alone)",
    "datapath_traj_per_s": "commit → lease → ack, 8k-token trajectories / s",
    "arrow_vs_json_size": "token arrays: JSON bytes / Arrow bytes",
    "rss_mib_10k": "service RSS with 10k trajectories stored (MiB)",
    "rss_mib_filling": "service RSS peak while the 10k are committed (MiB)",
    "rss_mib_draining": "service RSS peak while the trainer drains (MiB)",
    "service_cpu_ms_per_traj": "service CPU time per trajectory, commit → lease → ack (ms)",
    "commit_traj_per_s": "commits / s (fill, all stored before any lease)",
    "drain_traj_per_s": "leases / s (drain, JSON and Arrow alternating)",
    "arrow_vs_json_body_size": "whole lease body: JSON bytes / Arrow bytes",
    "overlap_balance": "overlap batch: generation alone / sandboxes alone",
    "occupancy": "policy occupancy: mean sequences in flight / sample slots",
    "overlap_chunk": "chunk dispatch (before): end-to-end / max(halves alone)",
    "occupancy_chunk": "chunk dispatch (before): policy occupancy",
    "occupancy_vs_chunk": "policy occupancy, slot dispatch / chunk dispatch",
    "end_to_end_chunk_vs_slot": "overlap batch end to end, chunk dispatch / slot dispatch",
}


def fig_text(d: dict[str, Any], fmt: str = "{:.1f}") -> str:
    """A figure's JSON form as text: the median, then (min–max) when they differ."""
    return Figure(d["median"], d["min"], d["max"], d["runs"]).text(fmt)


def render_markdown(results: Results) -> str:
    """The table a run prints and writes to latest.md."""
    return render_results(results.as_json())


def render_results(r: dict[str, Any], heading: str = "###") -> str:
    """The results of one run as markdown tables, from its JSON form alone."""
    lines = [
        f"{heading} rollouts benchmarks ({r['mode']} mode)",
        "",
        f"{r['cores']} cores, {r['machine']}; load average {r['load_before']:.1f} "
        f"before, {r['load_after']:.1f} after; wall time {r['wall_s']:.0f} s.",
        "Median of the repeated runs, (min–max) when they differ.",
        "",
        "| figure | median (min–max) | runs | target | met |",
        "|---|---|---|---|---|",
    ]
    for key, f in r["figures"].items():
        met = f.get("met")
        mark = "" if met is None else ("yes" if met else "**no**")
        lines.append(
            f"| {_LABELS.get(key, key)} | {fig_text(f, '{:.2f}')} | {f['runs']} "
            f"| {f.get('target') or ''} | {mark} |"
        )
    sandbox = r["details"].get("sandbox")
    if sandbox:
        lines += _sandbox_tables(sandbox)
    command = r["details"].get("command")
    if command:
        ms = command["ms"]
        lines += [
            "",
            f"One agent command (`echo`), {command['rounds']} interleaved rounds (ms):",
            "",
            "| path | p50 | p95 |",
            "|---|---|---|",
            f"| terminal (`send_keys`, back at the prompt) | {ms['command']['p50']:.0f} "
            f"| {ms['command']['p95']:.0f} |",
            f"| bare exec (engine API) | {ms['exec']['p50']:.0f} | {ms['exec']['p95']:.0f} |",
            f"| `docker exec` CLI | {ms['cli_exec']['p50']:.0f} | {ms['cli_exec']['p95']:.0f} |",
        ]
    overlap = r["details"].get("overlap")
    if overlap:
        lines += [
            "",
            f"Overlap batch: {overlap['tasks']} tasks × n={overlap['n_samples']}, "
            f"{overlap['concurrency']} samples in flight, stand-in at "
            f"{overlap['tokens_per_s']:.0f} tokens/s and {overlap['ttft_ms']:.0f} ms TTFT: "
            f"end-to-end {fig_text(overlap['end_to_end_s'])} s, generation alone "
            f"{fig_text(overlap['gen_only_s'])} s, sandboxes alone "
            f"{fig_text(overlap['sandbox_only_s'])} s.",
        ]
        if "chunk" in overlap:
            lines += ["", *_dispatch_table(overlap)]
    datapath = r["details"].get("datapath")
    if datapath:
        ttfb, secs, size = (
            datapath["lease_ttfb_ms"],
            datapath["lease_seconds"],
            datapath["bytes_per_trajectory"],
        )
        lines += [
            "",
            f"Leases of {datapath['lease_batch']} ({datapath['trajectory_tokens']} tokens):",
            "",
            "| format | first byte (ms) | whole batch (s) | bytes / trajectory |",
            "|---|---|---|---|",
        ]
        for fmt in ("json", "arrow"):
            lines.append(
                f"| {fmt} | {fig_text(ttfb[fmt], '{:.0f}')} | {fig_text(secs[fmt])} "
                f"| {fig_text(size[fmt], '{:.0f}')} |"
            )
    return "\n".join(lines) + "\n"


def _dispatch_table(overlap: dict[str, Any]) -> list[str]:
    """The overlap batch under both dispatches, side by side (seconds, ratio, occupancy)."""
    rows = [
        "| dispatch | end to end (s) | generation alone (s) | sandboxes alone (s) "
        "| end-to-end / max(halves) | policy occupancy |",
        "|---|---|---|---|---|---|",
    ]
    for name, d in (("by the slot (now)", overlap), ("by the chunk (before)", overlap["chunk"])):
        rows.append(
            f"| {name} | {fig_text(d['end_to_end_s'])} | {fig_text(d['gen_only_s'])} "
            f"| {fig_text(d['sandbox_only_s'])} | {fig_text(d['ratio'], '{:.2f}')} "
            f"| {fig_text(d['occupancy'], '{:.2f}')} |"
        )
    return rows


_SYSTEMS = {
    "ours": "ours",
    "ours_runsc": "ours under gVisor (`--runtime runsc`)",
    "cold": "cold `docker run`",
    "floor": "floor (`docker exec`)",
    "harbor": "Harbor 0.25 (`harbor run`, oracle)",
}


def _sandbox_tables(sandbox: dict[str, Any]) -> list[str]:
    tpm = sandbox["trials_per_min"]
    systems = [s for s in _SYSTEMS if s in tpm]
    levels = list(tpm["ours"])
    vs_cold = sandbox.get("vs_cold_by_concurrency", {})
    lines = [
        "",
        "Oracle-verify trials / min by concurrency:",
        "",
        "| concurrency | " + " | ".join(_SYSTEMS[s] for s in systems) + " | ours / cold |",
        "|---|" + "---|" * (len(systems) + 1),
    ]
    for c in levels:
        cells = [fig_text(tpm[s][c]) if c in tpm[s] else "–" for s in systems]
        ratio = fig_text(vs_cold[c], "{:.2f}") if c in vs_cold else "–"
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {ratio} |")
    cpu = sandbox.get("cpu_s_per_trial", {})
    best = str(sandbox["best_concurrency"])
    if cpu and "unavailable" not in cpu:
        lines += [
            "",
            f"CPU-seconds per trial at concurrency {best}, by who spent them:",
            "",
            "| system | engine (dockerd, containerd, shims, runc) | inside the containers "
            "| harness process | total |",
            "|---|---|---|---|---|",
        ]
        for system in (s for s in _SYSTEMS if s in cpu):
            # Harbor runs at fewer concurrencies: its row is its highest one when not `best`.
            at = best if best in cpu[system] else max(cpu[system], key=int)
            cell = cpu[system][at]
            name = _SYSTEMS[system] + ("" if at == best else f" at c={at}")
            lines.append(
                f"| {name} | "
                + " | ".join(
                    fig_text(cell[k], "{:.2f}")
                    for k in ("engine", "containers", "harness", "total")
                )
                + " |"
            )
    elif cpu:
        lines += ["", f"CPU time by owner: not measured ({cpu['unavailable']})."]
    lines += [
        "",
        "Our stages (s), p50 / p95:",
        "",
        "| stage | " + " | ".join(f"c={c}" for c in levels) + " |",
        "|---|" + "---|" * len(levels),
    ]
    for stage in ("create", "agent", "verify", "teardown"):
        cells = []
        for c in levels:
            st = sandbox["ours_stage_seconds"][f"c{c}.{stage}"]
            cells.append(f"{st['p50']:.2f} / {st['p95']:.2f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    profile = sandbox.get("ours_profile", {})
    if profile.get("shares"):
        parts = [f"{g} {100 * v:.0f}%" for g, v in profile["shares"].items()]
        lines += [
            "",
            f"Where our process's CPU went in a profiled round ({profile['samples']} py-spy "
            "samples of running threads): " + ", ".join(parts) + ".",
        ]
    return lines
