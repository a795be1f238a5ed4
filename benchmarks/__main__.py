"""`python -m benchmarks [--quick] [--only SECTION ...]`: run the benchmarks, write the results.

Writes a markdown table to stdout and benchmarks/results/latest.md, and every figure (median,
min, max, runs) to benchmarks/results/latest.json. Full mode repeats each measurement 3 times,
interleaved; --quick uses tiny sizes and one repeat (what the smoke test runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.report import Results, render_markdown
from benchmarks.stats import figure, percentile

RESULTS_DIR = Path(__file__).parent / "results"
SECTIONS = ("sandbox", "overlap", "datapath")


@dataclass(frozen=True)
class Sizes:
    repeats: int
    sandbox_tasks: int
    levels: tuple[int, ...]
    overlap_tasks: int
    overlap_n: int
    overlap_concurrency: int
    pipeline_trajectories: int
    stored_trajectories: int


FULL = Sizes(3, 6, (1, 2, 4), 2, 8, 8, 2048, 10_000)
QUICK = Sizes(1, 2, (1, 2), 1, 2, 2, 64, 256)  # 256: one JSON and one Arrow lease


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sandbox_section(results: Results, tasks_path: str, sizes: Sizes) -> None:
    from benchmarks.sandbox_throughput import run_sandbox_section
    from sandboxes.images import ensure_base_image
    from sandboxes.tasks import load_tasks

    asyncio.run(ensure_base_image())
    tasks = load_tasks(tasks_path)[: sizes.sandbox_tasks]
    runs = asyncio.run(run_sandbox_section(tasks, list(sizes.levels), sizes.repeats, log))
    per_min = {
        system: {c: figure([r.per_min for r in rounds]) for c, rounds in by_c.items()}
        for system, by_c in runs.rounds.items()
    }
    best = max(sizes.levels, key=lambda c: per_min["ours"][c].median)
    ours, cold, floor = (runs.rounds[s][best] for s in ("ours", "cold", "floor"))
    vs_floor = figure([o.per_min / f.per_min for o, f in zip(ours, floor, strict=True)])
    vs_cold = figure([o.per_min / c.per_min for o, c in zip(ours, cold, strict=True)])
    stages: dict[str, dict[str, float]] = {}
    for c, rounds in runs.rounds["ours"].items():
        for stage in ("create", "agent", "verify", "teardown"):
            values = [v for r in rounds for v in r.stages.get(stage, [])]
            stages[f"c{c}.{stage}"] = {
                "p50": round(percentile(values, 50), 3),
                "p95": round(percentile(values, 95), 3),
            }
    results.add_figure("sandbox_vs_floor", vs_floor, target="≥ 0.8", higher_is_better=True)
    results.add_figure("sandbox_vs_cold", vs_cold, target="≥ 5", higher_is_better=True)
    results.details["sandbox"] = {
        "tasks": [t.id for t in tasks],
        "best_concurrency": best,
        "trials_per_min": {
            s: {str(c): f.as_dict(1) for c, f in by_c.items()} for s, by_c in per_min.items()
        },
        "ours_stage_seconds": stages,
    }


def overlap_section(results: Results, tasks_path: str, sizes: Sizes) -> None:
    from benchmarks.overlap import run_overlap_section
    from sandboxes.images import ensure_base_image
    from sandboxes.tasks import load_tasks

    asyncio.run(ensure_base_image())
    tasks = load_tasks(tasks_path)[: sizes.overlap_tasks]
    tokens_per_s, ttft_ms = 400.0, 50.0
    rounds = asyncio.run(
        run_overlap_section(
            tasks_path,
            tasks,
            n_samples=sizes.overlap_n,
            concurrency=sizes.overlap_concurrency,
            tokens_per_s=tokens_per_s,
            ttft_ms=ttft_ms,
            repeats=sizes.repeats,
            log=log,
        )
    )
    results.add_figure("overlap", figure([r.ratio for r in rounds]), target="≤ 1.15")
    results.details["overlap"] = {
        "tasks": len(tasks),
        "n_samples": sizes.overlap_n,
        "concurrency": sizes.overlap_concurrency,
        "tokens_per_s": tokens_per_s,
        "ttft_ms": ttft_ms,
        "end_to_end_s": figure([r.end_to_end_s for r in rounds]).as_dict(),
        "gen_only_s": figure([r.gen_only_s for r in rounds]).as_dict(),
        "sandbox_only_s": figure([r.sandbox_only_s for r in rounds]).as_dict(),
    }


def datapath_section(results: Results, sizes: Sizes) -> None:
    from benchmarks.datapath import run_datapath_round, summarise_leases, token_array_sizes

    rounds = []
    for rep in range(sizes.repeats):
        r = run_datapath_round(sizes.pipeline_trajectories, sizes.stored_trajectories)
        rounds.append(r)
        log(
            f"  datapath rep {rep + 1}: pipeline {r.pipeline_traj_per_s:.0f}/s "
            f"({r.pipeline_cpu_ms_per_traj:.2f} CPU-ms each), commit "
            f"{r.commit_traj_per_s:.0f}/s, drain {r.drain_traj_per_s:.0f}/s, RSS "
            f"{r.rss_stored_mib:.0f} MiB stored ({r.stored}), peaks {r.rss_fill_peak_mib:.0f} "
            f"filling, {r.rss_drain_peak_mib:.0f} draining"
        )
    json_bytes, arrow_bytes = token_array_sizes()
    leases = [summarise_leases(r.leases) for r in rounds]

    def lease_fig(fmt: str, key: str, scale: float = 1.0) -> dict[str, Any]:
        return figure([scale * x[fmt][key] for x in leases]).as_dict()

    results.add_figure(
        "datapath_traj_per_s",
        figure([r.pipeline_traj_per_s for r in rounds]),
        target="≥ 2000",
        higher_is_better=True,
    )
    results.add_figure(
        "arrow_vs_json_size",
        figure([json_bytes / arrow_bytes]),
        target="≥ 3",
        higher_is_better=True,
    )
    results.add_figure("rss_mib_10k", figure([r.rss_stored_mib for r in rounds]), target="< 1024")
    results.add_figure("rss_mib_filling", figure([r.rss_fill_peak_mib for r in rounds]))
    results.add_figure("rss_mib_draining", figure([r.rss_drain_peak_mib for r in rounds]))
    results.add_figure(
        "service_cpu_ms_per_traj", figure([r.pipeline_cpu_ms_per_traj for r in rounds])
    )
    results.add_figure("commit_traj_per_s", figure([r.commit_traj_per_s for r in rounds]))
    results.add_figure("drain_traj_per_s", figure([r.drain_traj_per_s for r in rounds]))
    body_ratio = figure(
        [x["json"]["bytes_per_traj"] / x["arrow"]["bytes_per_traj"] for x in leases]
    )
    results.add_figure("arrow_vs_json_body_size", body_ratio)
    results.details["datapath"] = {
        "pipeline_trajectories": sizes.pipeline_trajectories,
        "stored_trajectories": rounds[0].stored,
        "trajectory_tokens": "1024 prompt + 7168 response",
        "lease_batch": "16 groups x 8 samples",
        "lease_ttfb_ms": {f: lease_fig(f, "ttfb_s", 1000) for f in ("json", "arrow")},
        "lease_seconds": {f: lease_fig(f, "seconds") for f in ("json", "arrow")},
        "bytes_per_trajectory": {f: lease_fig(f, "bytes_per_traj") for f in ("json", "arrow")},
        "token_arrays_bytes_64": {"json": json_bytes, "arrow": arrow_bytes},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--tasks", default="examples/tasks", help="task folder for sandboxes")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    ns = parser.parse_args(argv)
    if not Path(ns.tasks).is_dir():
        print(f"error: --tasks {ns.tasks}: not a folder of tasks", file=sys.stderr)
        return 2
    sizes = QUICK if ns.quick else FULL
    started = time.monotonic()
    results = Results(
        mode="quick" if ns.quick else "full",
        cores=os.cpu_count() or 0,
        machine=f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        load_before=os.getloadavg()[0],
    )
    for section in ns.only:
        t0 = time.monotonic()
        log(f"benchmarks: {section} ...")
        if section == "sandbox":
            sandbox_section(results, ns.tasks, sizes)
        elif section == "overlap":
            overlap_section(results, ns.tasks, sizes)
        else:
            datapath_section(results, sizes)
        results.section_seconds[section] = round(time.monotonic() - t0, 1)
    results.wall_s = round(time.monotonic() - started, 1)
    results.load_after = os.getloadavg()[0]
    markdown = render_markdown(results)
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "latest.md").write_text(markdown)
    (ns.out / "latest.json").write_text(json.dumps(results.as_json(), indent=2) + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
