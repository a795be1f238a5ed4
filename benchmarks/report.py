"""The benchmark results: collected figures, their JSON form and the markdown table."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.stats import Figure

_LABELS = {
    "sandbox_vs_floor": "sandbox throughput / physical floor (best concurrency)",
    "sandbox_vs_cold": "sandbox throughput / cold `docker run` (best concurrency)",
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
}


@dataclass
class Entry:
    figure: Figure
    target: str | None
    higher_is_better: bool

    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, _, value = self.target.partition(" ")
        bound = float(value)
        m = self.figure.median
        return {"≥": m >= bound, ">": m > bound, "≤": m <= bound, "<": m < bound}[op]


@dataclass
class Results:
    mode: str
    cores: int
    machine: str
    load_before: float
    load_after: float = 0.0
    wall_s: float = 0.0
    entries: dict[str, Entry] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    section_seconds: dict[str, float] = field(default_factory=dict)

    def add_figure(
        self, key: str, fig: Figure, target: str | None = None, higher_is_better: bool = False
    ) -> None:
        self.entries[key] = Entry(fig, target, higher_is_better)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "cores": self.cores,
            "machine": self.machine,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "load_before": round(self.load_before, 2),
            "load_after": round(self.load_after, 2),
            "wall_s": self.wall_s,
            "section_seconds": self.section_seconds,
        }
        # The headline figures as plain numbers (medians), then their spread and targets.
        for key, e in self.entries.items():
            out[key] = round(e.figure.median, 3)
        out["figures"] = {
            key: {**e.figure.as_dict(), "target": e.target, "met": e.met()}
            for key, e in self.entries.items()
        }
        out["details"] = self.details
        return out


def render_markdown(results: Results) -> str:
    lines = [
        f"### rollouts benchmarks ({results.mode} mode)",
        "",
        f"{results.cores} cores, {results.machine}; load average {results.load_before:.1f} "
        f"before, {results.load_after:.1f} after; wall time {results.wall_s:.0f} s.",
        "Median of the repeated runs, (min–max) when they differ.",
        "",
        "| figure | median (min–max) | runs | target | met |",
        "|---|---|---|---|---|",
    ]
    for key, e in results.entries.items():
        met = e.met()
        mark = "" if met is None else ("yes" if met else "**no**")
        lines.append(
            f"| {_LABELS.get(key, key)} | {e.figure.text()} | {e.figure.runs} "
            f"| {e.target or ''} | {mark} |"
        )
    sandbox = results.details.get("sandbox")
    if sandbox:
        lines += [
            "",
            "Oracle-verify trials / min by concurrency:",
            "",
            "| concurrency | ours | cold `docker run` | floor (`docker exec`) |",
            "|---|---|---|---|",
        ]
        tpm = sandbox["trials_per_min"]
        for c in tpm["ours"]:
            cells = [_fig_text(tpm[s][c]) for s in ("ours", "cold", "floor")]
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
        lines += ["", "Our stages (s), p50 / p95:", "", "| stage | " + " | ".join(
            f"c={c}" for c in tpm["ours"]) + " |", "|---|" + "---|" * len(tpm["ours"])]  # fmt: skip
        for stage in ("create", "agent", "verify", "teardown"):
            cells = []
            for c in tpm["ours"]:
                s = sandbox["ours_stage_seconds"][f"c{c}.{stage}"]
                cells.append(f"{s['p50']:.2f} / {s['p95']:.2f}")
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    overlap = results.details.get("overlap")
    if overlap:
        lines += [
            "",
            f"Overlap batch: {overlap['tasks']} tasks × n={overlap['n_samples']}, "
            f"{overlap['concurrency']} samples in flight, stand-in at "
            f"{overlap['tokens_per_s']:.0f} tokens/s and {overlap['ttft_ms']:.0f} ms TTFT: "
            f"end-to-end {_fig_text(overlap['end_to_end_s'])} s, generation alone "
            f"{_fig_text(overlap['gen_only_s'])} s, sandboxes alone "
            f"{_fig_text(overlap['sandbox_only_s'])} s.",
        ]
    datapath = results.details.get("datapath")
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
                f"| {fmt} | {_fig_text(ttfb[fmt], '{:.0f}')} | {_fig_text(secs[fmt])} "
                f"| {_fig_text(size[fmt], '{:.0f}')} |"
            )
    return "\n".join(lines) + "\n"


def _fig_text(d: dict[str, Any], fmt: str = "{:.1f}") -> str:
    return Figure(d["median"], d["min"], d["max"], d["runs"]).text(fmt)
