"""What a benchmark run measures and how much of it: the sections, the sizes of a full and a
quick run, and the methods recorded with every run. `python -m benchmarks` runs it and
benchmarks/report.py writes docs/performance.md from it."""

from __future__ import annotations

from dataclasses import dataclass

SECTIONS = ("sandbox", "command", "overlap", "datapath")
# How this code measures, recorded with every run (docs/performance.md notes runs without it).
METHODS = {
    "baseline_warmup": "one unmeasured round for every system",
    "token_arrays": "the same trajectories leased as Arrow, then as JSON, from the API",
    "overlap": "decode speed calibrated to balance the halves; generation alone graded; "
    "a long-tail batch (stand-in --long-tail); several waves; the scheduler's dispatch and the "
    "chunk dispatch before it side by side, with the policy occupancy of the end-to-end runs",
    "cpu_split": "CPU time by owner from cgroup accounting (engine, containers, harness)",
    "datapath_warmup": "one unmeasured rollout through the service before its timed pipeline",
}


@dataclass(frozen=True)
class Sizes:
    repeats: int
    sandbox_tasks: int
    levels: tuple[int, ...]
    harbor_levels: tuple[int, ...]  # Harbor runs once per level: its trials are slow
    command_rounds: int
    overlap_repeats: int  # each is three collect runs of the whole batch
    overlap_tasks: int
    overlap_n: int
    overlap_concurrency: int
    pipeline_trajectories: int
    stored_trajectories: int
    sqlite_blobs: int


# The full run takes about half an hour on 2 cores. The sandbox levels are issue 37's (1 to 16;
# a round holds at least twice as many trials as its level: sandbox_throughput.round_tasks).
# The overlap batch (4 tasks x 8 through 8 slots) is four waves, as an RL step's batch is
# several times the samples in flight.
FULL = Sizes(3, 6, (1, 2, 4, 8, 16), (8, 16), 40, 2, 4, 8, 8, 2048, 10_000, 1280)
QUICK = Sizes(1, 2, (2,), (2,), 5, 1, 1, 2, 2, 64, 256, 128)  # 256: one JSON and one Arrow lease
