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
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.plan import FULL, METHODS, QUICK, SECTIONS, Sizes
from benchmarks.results_tables import render_markdown
from benchmarks.run_results import Results
from benchmarks.stats import Figure, figure, percentile

RESULTS_DIR = Path(__file__).parent / "results"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sandbox_section(results: Results, tasks_path: str, sizes: Sizes, quick: bool) -> None:
    from benchmarks.sandbox_throughput import run_sandbox_section
    from sandboxes.docker_adapter import default_adapter
    from sandboxes.images import ensure_base_image
    from sandboxes.tasks import load_tasks

    asyncio.run(ensure_base_image())
    engine_info = default_adapter().client.info()
    tasks = load_tasks(tasks_path)[: sizes.sandbox_tasks]
    runs = asyncio.run(
        run_sandbox_section(
            tasks,
            list(sizes.levels),
            sizes.repeats,
            log,
            profile=not quick,
            harbor_levels=sizes.harbor_levels,
            build_harbor=not quick,  # quick mode uses Harbor only where it is already built
        )
    )
    per_min = {
        system: {c: figure([r.per_min for r in rounds]) for c, rounds in by_c.items()}
        for system, by_c in runs.rounds.items()
    }
    best = max(sizes.levels, key=lambda c: per_min["ours"][c].median)

    def ratio(c: int, other: str, system: str = "ours") -> Figure:
        pairs = zip(runs.rounds[system][c], runs.rounds[other][c], strict=True)
        return figure([o.per_min / b.per_min for o, b in pairs])

    vs_cold = {c: ratio(c, "cold") for c in sizes.levels}
    worst = min(sizes.levels, key=lambda c: vs_cold[c].median)
    stages: dict[str, dict[str, float]] = {}
    for c, rounds in runs.rounds["ours"].items():
        for stage in ("create", "agent", "verify", "teardown"):
            values = [v for r in rounds for v in r.stages.get(stage, [])]
            stages[f"c{c}.{stage}"] = {
                "p50": round(percentile(values, 50), 3),
                "p95": round(percentile(values, 95), 3),
            }
    # The targets are issue 37's: at least 1.2x cold at every level, at least 0.9 of the bound,
    # gVisor at least half of runc.
    results.add_figure("sandbox_vs_floor", ratio(best, "floor"))
    bound = _vs_bound(runs, best)
    if bound is not None:
        results.add_figure("sandbox_vs_bound", bound, target="≥ 0.9", higher_is_better=True)
    if "ours_runsc" in runs.rounds:
        # What gVisor's kernel boundary costs: ours under runsc over ours under runc.
        results.add_figure(
            "sandbox_runsc_vs_runc",
            ratio(best, "ours", "ours_runsc"),
            target="≥ 0.5",
            higher_is_better=True,
        )
    results.add_figure("sandbox_vs_cold", vs_cold[best])
    results.add_figure("sandbox_vs_cold_min", vs_cold[worst], target="≥ 1.2", higher_is_better=True)
    cpu = _cpu_per_trial(runs)
    ours = [r for rounds in runs.rounds["ours"].values() for r in rounds]
    trials = sum(r.trials for r in ours)
    if cpu:
        results.summary["cpu_s_per_trial"] = {
            system: by_c[str(best)]["total"]["median"]
            for system, by_c in cpu.items()
            if str(best) in by_c
        }
    results.details["sandbox"] = {
        "tasks": [t.id for t in tasks],
        "best_concurrency": best,
        "worst_vs_cold_concurrency": worst,
        "trials_per_min": {
            s: {str(c): f.as_dict(1) for c, f in by_c.items()} for s, by_c in per_min.items()
        },
        "vs_cold_by_concurrency": {str(c): f.as_dict() for c, f in vs_cold.items()},
        "ours_stage_seconds": stages,
        # Engine calls per trial of ours (pool refills included), over every measured round.
        "ours_engine_calls_per_trial": {
            k: round(sum(r.engine_calls.get(k, 0) for r in ours) / trials, 2)
            for k in ("create", "exec", "attach")
        },
        "engine_ops_s": {op: figure(v).as_dict() for op, v in runs.engine_ops.items()},
        # CPU-seconds (engine and containers) of one bare container lifecycle, measured alone.
        **({"lifecycle_cpu_s": figure(runs.lifecycle_cpu).as_dict()} if runs.lifecycle_cpu else {}),
        "engine": {
            "storage_driver": engine_info.get("Driver"),
            "cgroup_version": engine_info.get("CgroupVersion"),
        },
        # CPU-seconds per trial by system, concurrency and owner; None where not measurable.
        "cpu_s_per_trial": cpu or {"unavailable": runs.cpu_unavailable},
        "ours_profile": runs.profile,
        "gvisor": {"unavailable": runs.gvisor_unavailable},
        "harbor": {"unavailable": runs.harbor_unavailable}
        if runs.harbor_unavailable
        else {
            "separate_verifier": False,
            "stages_p50_s": {
                stage: round(percentile(values, 50), 2)
                for stage, values in _pooled_stages(runs.rounds.get("harbor", {})).items()
            },
        },
    }


def _vs_bound(runs: Any, best: int) -> Figure | None:
    """Ours / floor over the bound of any design that keeps a fresh agent container and a fresh
    verifier container per trial: at saturation (throughput = cores / CPU per trial) that is
    work / (work + 2 lifecycles), from this run's floor CPU per trial (per repeat, at ours'
    best level) and the bare lifecycle's CPU (median). None where CPU was not measured."""
    if runs.cpu_unavailable or not runs.lifecycle_cpu:
        return None
    lifecycle = statistics.median(runs.lifecycle_cpu)
    out = []
    for o, f in zip(runs.rounds["ours"][best], runs.rounds["floor"][best], strict=True):
        work = f.cpu.total_s / f.trials
        out.append((o.per_min / f.per_min) / (work / (work + 2 * lifecycle)))
    return figure(out)


def _pooled_stages(by_c: dict[int, list[Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for rounds in by_c.values():
        for r in rounds:
            for stage, values in r.stages.items():
                out.setdefault(stage, []).extend(values)
    return out


def _cpu_per_trial(runs: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """{system: {concurrency: {owner: figure}}} over the rounds, or {} when not measured."""
    if runs.cpu_unavailable:
        return {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for system, by_c in runs.rounds.items():
        for c, rounds in by_c.items():
            shares = [(r.cpu.shares(), r.trials) for r in rounds]
            out.setdefault(system, {})[str(c)] = {
                k: figure([s[k] / trials for s, trials in shares]).as_dict() for k in shares[0][0]
            }
    return out


def command_section(results: Results, tasks_path: str, sizes: Sizes) -> None:
    from benchmarks.command_rtt import run_command_rtt
    from sandboxes.images import ensure_base_image
    from sandboxes.tasks import load_tasks

    asyncio.run(ensure_base_image())
    task = load_tasks(tasks_path)[0]
    labels = {"rollouts.rollout_id": "bench-command-rtt"}
    runs = asyncio.run(run_command_rtt(task, sizes.command_rounds, labels))
    ms = {s: [1000 * v for v in values] for s, values in runs.seconds.items()}
    exec_p50 = percentile(ms["exec"], 50)
    log(
        f"  command round trip p50: terminal {percentile(ms['command'], 50):.0f} ms, "
        f"bare exec {exec_p50:.0f} ms, docker exec CLI {percentile(ms['cli_exec'], 50):.0f} ms"
    )
    results.add_figure(
        "command_rtt_p50_ms",
        _single(percentile(ms["command"], 50)),
        target=f"≤ {exec_p50 + 30:.0f}",  # the bare exec's p50 of this run, plus 30 ms
    )
    results.add_figure("exec_rtt_p50_ms", _single(exec_p50))
    results.details["command"] = {
        "task": task.id,
        "rounds": sizes.command_rounds,
        "ms": {
            s: {"p50": round(percentile(v, 50), 1), "p95": round(percentile(v, 95), 1)}
            for s, v in ms.items()
        },
    }


def _single(value: float) -> Figure:
    """A figure that is itself a percentile over many interleaved rounds of one run."""
    return figure([value])


def overlap_section(results: Results, tasks_path: str, sizes: Sizes) -> None:
    from benchmarks.overlap import LONG_TAIL, MAX_TOKENS, run_overlap_section
    from sandboxes.images import ensure_base_image
    from sandboxes.tasks import load_tasks

    asyncio.run(ensure_base_image())
    tasks = load_tasks(tasks_path)[: sizes.overlap_tasks]
    # The trial speed only starts the calibration (two steps move it to where the halves
    # match); near where it lands, the trial runs cost little.
    trial_tokens_per_s, ttft_ms = 2000.0, 50.0
    cal, rounds = asyncio.run(
        run_overlap_section(
            tasks_path,
            tasks,
            n_samples=sizes.overlap_n,
            concurrency=sizes.overlap_concurrency,
            trial_tokens_per_s=trial_tokens_per_s,
            ttft_ms=ttft_ms,
            repeats=sizes.overlap_repeats,
            log=log,
        )
    )
    slot = [r for r in rounds if r.dispatch == "slot"]
    chunk = [r for r in rounds if r.dispatch == "chunk"]
    results.add_figure("overlap", figure([r.ratio for r in slot]), target="≤ 1.15")
    # Generation alone / sandboxes alone: near 1 the ratio above can tell overlap (1) from
    # serialisation (2); far from 1 it cannot.
    results.add_figure("overlap_balance", figure([r.gen_only_s / r.sandbox_only_s for r in slot]))
    results.add_figure("occupancy", figure([r.occupancy for r in slot]))
    results.add_figure("overlap_chunk", figure([r.ratio for r in chunk]))
    results.add_figure("occupancy_chunk", figure([r.occupancy for r in chunk]))
    # Per repeat, the two dispatches' end-to-end runs of the same batch, one after the other.
    pairs = list(zip(slot, chunk, strict=True))
    results.add_figure(
        "occupancy_vs_chunk",
        figure([s.occupancy / c.occupancy for s, c in pairs]),
        target="> 1",
        higher_is_better=True,
    )
    results.add_figure(
        "end_to_end_chunk_vs_slot",
        figure([c.end_to_end_s / s.end_to_end_s for s, c in pairs]),
        higher_is_better=True,
    )

    def runs(these: list[Any]) -> dict[str, Any]:
        return {
            "end_to_end_s": figure([r.end_to_end_s for r in these]).as_dict(),
            "gen_only_s": figure([r.gen_only_s for r in these]).as_dict(),
            "sandbox_only_s": figure([r.sandbox_only_s for r in these]).as_dict(),
            # The end-to-end runs' timeline: seconds with generation, sandbox work, both in
            # flight; and the policy occupancy.
            "end_to_end_busy_s": {
                k: figure([r.busy[k] for r in these]).as_dict() for k in these[0].busy
            },
            "occupancy": figure([r.occupancy for r in these]).as_dict(),
            "ratio": figure([r.ratio for r in these]).as_dict(),
        }

    results.details["overlap"] = {
        "tasks": len(tasks),
        "n_samples": sizes.overlap_n,
        "concurrency": sizes.overlap_concurrency,
        "tokens_per_s": cal.tokens_per_s,
        "ttft_ms": ttft_ms,
        "long_tail": LONG_TAIL,
        "max_tokens": MAX_TOKENS,
        "calibration": {
            "trial_tokens_per_s": cal.trial_tokens_per_s,
            "trial_gen_only_s": round(cal.trial_gen_s, 2),
            "instant_gen_only_s": round(cal.loop_s, 2),
            "sandbox_only_s": round(cal.sandbox_s, 2),
            "steps": [{"tokens_per_s": v, "gen_only_s": round(g, 2)} for v, g in cal.steps],
        },
        **runs(slot),  # the scheduler's own dispatch
        "chunk": runs(chunk),  # the dispatch before it, same batch, same runs
    }


def datapath_section(results: Results, sizes: Sizes) -> None:
    from benchmarks.datapath import (
        DRAIN_LEASE_GROUPS,
        N_SAMPLES,
        run_datapath_round,
        summarise_leases,
    )
    from benchmarks.datapath_service import PROMPT_TOKENS, RESPONSE_TOKENS
    from benchmarks.sqlite_pages import page_size_round

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
    leases = [summarise_leases(r.leases) for r in rounds]
    pages = [page_size_round(sizes.sqlite_blobs) for _ in range(sizes.repeats)]

    def lease_fig(fmt: str, key: str, scale: float = 1.0) -> dict[str, Any]:
        return figure([scale * x[fmt][key] for x in leases]).as_dict()

    results.add_figure(
        "datapath_traj_per_s",
        figure([r.pipeline_traj_per_s for r in rounds]),
        target="≥ 400",
        higher_is_better=True,
    )
    results.add_figure(
        "arrow_vs_json_size",
        figure([r.token_arrays_json_bytes / r.token_arrays_arrow_bytes["zstd"] for r in rounds]),
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
        "trajectory_tokens": f"{PROMPT_TOKENS} prompt + {RESPONSE_TOKENS} response",
        "lease_batch": f"{DRAIN_LEASE_GROUPS} groups x {N_SAMPLES} samples",
        "lease_ttfb_ms": {f: lease_fig(f, "ttfb_s", 1000) for f in ("json", "arrow")},
        "lease_seconds": {f: lease_fig(f, "seconds") for f in ("json", "arrow")},
        "bytes_per_trajectory": {f: lease_fig(f, "bytes_per_traj") for f in ("json", "arrow")},
        "sqlite_blob_commits_per_s": {
            str(size): figure([p[size] for p in pages]).as_dict(0) for size in pages[0]
        },
        "token_arrays_bytes_64": {
            "json": figure([r.token_arrays_json_bytes for r in rounds]).as_dict(0),
            "arrow": figure([r.token_arrays_arrow_bytes["zstd"] for r in rounds]).as_dict(0),
            "arrow_lz4": figure([r.token_arrays_arrow_bytes["lz4"] for r in rounds]).as_dict(0),
            "arrow_uncompressed": figure(
                [r.token_arrays_arrow_bytes["none"] for r in rounds]
            ).as_dict(0),
        },
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
        methods=dict(METHODS),
    )
    for section in ns.only:
        t0 = time.monotonic()
        log(f"benchmarks: {section} ...")
        if section == "sandbox":
            sandbox_section(results, ns.tasks, sizes, ns.quick)
        elif section == "command":
            command_section(results, ns.tasks, sizes)
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
