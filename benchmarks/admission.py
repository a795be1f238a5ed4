"""`python -m benchmarks.admission [--quick]`: adaptive admission (`--adaptive-concurrency`) against
fixed concurrency, through the real service.

A round is one `rollouts serve` process (real Docker sandboxes and verifier, the stand-in policy:
instant, always right, never malformed) running `LEAD_IN` rollouts of the same tasks x n samples
and then `MEASURED` more, back to back, as a long collection runs one batch after another. Its
figure is the measured rollouts' trials per minute, from the first one's submission to the last
one's completion (every trial must score 1, or the run fails): a stretch of a collection under
way, long enough to hold the rest of admission's first exploration (the verdict on its first
probe above the start level and, after a revert, the probe below) and what it settles at after;
not a fresh service's first minutes (where it starts at its starting level and a fixed setting
has no such cost). Each rollout's drain and the pause before the next
submission are what a synchronous RL loop shows it between batches. The configurations are
`--fixed-concurrency` at each of `levels` and `--adaptive-concurrency` at each of `ceilings`;
they take turns within each repeat, in an order rotated per repeat, so load from the machine's
other users falls on all of them alike. Only ratios from the same run mean anything on a shared
machine: adaptive over the best fixed level, per repeat (the best fixed level being the one with
the highest median over the repeats).

While a round runs, the service's /metrics is read every `POLL_S`: `rollouts_concurrency_level`
is the level the service admits to now, so an adaptive round's trace is what the controller
(service/concurrency.py) decided, read where an operator reads it. The level a round settles at
is the time-weighted median of that trace over the measured rollouts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.stats import figure, level_spans
from clients.commands.policy_stub import free_port, stand_in_policy, stop_process, wait_healthy
from sandboxes.calibration import CALIBRATION_FILE
from sandboxes.docker_adapter import default_adapter
from sandboxes.images import ensure_base_image
from service.concurrency import ConcurrencySettings

RESULTS = Path(__file__).parent / "results" / "admission.json"
POLL_S = 0.25
API_KEY = "bench-admission"
LEVEL_METRIC = "rollouts_concurrency_level"
# Unmeasured rollouts a round runs first, then measured ones: with batches of 48 samples
# (windows of 12, the first of each batch a ramp), the controller has had its warm-up and its
# start level's windows after the first batch and starts its first probe above late in the
# second; the three measured batches hold that probe's verdict, the probe below that follows a
# revert, and the level it settles at (docs/performance.md, "Adaptive admission", lists each
# round's levels).
LEAD_IN = 2
MEASURED = 3
QUICK_LEAD_IN, QUICK_MEASURED = 1, 1  # the smoke test's rounds: seconds, not minutes


@dataclass(frozen=True)
class Config:
    adaptive: bool
    concurrency: int  # the fixed level, or the ceiling admission moves under

    @property
    def name(self) -> str:
        return f"{'adaptive' if self.adaptive else 'fixed'}-{self.concurrency}"

    def flags(self) -> list[str]:
        mode = "--adaptive-concurrency" if self.adaptive else "--fixed-concurrency"
        return ["--max-concurrent-samples", str(self.concurrency), mode]


@dataclass
class Round:
    config: str
    trials: int
    seconds: float
    # (s since the first measured rollout's submission, level): the lead-in's readings are
    # negative
    trace: list[tuple[float, int]] = field(default_factory=list)

    @property
    def per_min(self) -> float:
        return 60.0 * self.trials / self.seconds

    @property
    def settled(self) -> float:
        return settled_level(self.trace, self.seconds)


class RoundFailed(RuntimeError):
    pass


def settled_level(trace: list[tuple[float, int]], seconds: float) -> float:
    """The time-weighted median level over [0, seconds] of a step trace (each level holds from
    its reading to the next; readings before 0 are the lead-in's)."""
    spans = level_spans(trace, seconds)
    if not spans:
        return float(trace[-1][1]) if trace else float("nan")
    total, acc = sum(spans.values()), 0.0
    for level in sorted(spans):
        acc += spans[level]
        if acc >= total / 2:
            return float(level)
    raise AssertionError("unreachable")


def read_metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise RoundFailed(f"no {name} in the service's /metrics")


@contextlib.contextmanager
def serving(tmp: Path, tasks: str, policy_url: str, config: Config) -> Iterator[tuple[str, Path]]:
    """`rollouts serve` with `config` as its own process on a free loopback port; its URL and
    its log."""
    port = free_port()
    data = tmp / f"data-{port}"
    # The oracle calibrations of an earlier round carry over: a fresh service would otherwise
    # calibrate every task again inside the measured round.
    data.mkdir()
    shared = tmp / CALIBRATION_FILE
    if shared.exists():
        shutil.copy(shared, data / CALIBRATION_FILE)
    cmd = [sys.executable, "-m", "clients.cli", "serve", "--port", str(port)]
    cmd += ["--data-dir", str(data), "--api-key", API_KEY]
    cmd += ["--log-level", "warning", "--tasks-root", tasks, "--policy-url", policy_url]
    cmd += config.flags()
    log_path = tmp / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            try:
                wait_healthy(url, 90, proc, path="/healthz")
            except RuntimeError as e:
                raise RoundFailed(f"{e}\n{log_path.read_text()[-2000:]}") from e
            yield url, log_path
        finally:
            stop_process(proc, timeout_s=60)
            if (data / CALIBRATION_FILE).exists():
                shutil.copy(data / CALIBRATION_FILE, shared)


def run_round(
    tmp: Path,
    tasks: str,
    ids: list[str],
    n: int,
    policy_url: str,
    config: Config,
    lead_in: int = LEAD_IN,
    measured: int = MEASURED,
) -> Round:
    """`lead_in` rollouts, then `measured` ones, each submitted once the one before is done."""
    body = {
        "tasks": {"path": tasks, "ids": ids},
        "n_samples": n,
        "sampling": {"seed": 0},
        "advantage": {"estimator": "rloo", "min_group_size": 1},
    }
    trace: list[tuple[float, int]] = []  # times since the first submission until rebased
    with serving(tmp, tasks, policy_url, config) as (url, log_path):
        client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
        )
        with client:
            t_first = t_measured = time.monotonic()
            for i in range(lead_in + measured):
                r = client.post("/v1/rollouts", json=body)
                if i == lead_in:
                    t_measured = time.monotonic()
                if r.status_code != 202:
                    raise RoundFailed(f"submit: {r.status_code} {r.text}")
                rid = r.json()["id"]
                while True:
                    level = int(read_metric(client.get("/metrics").text, LEVEL_METRIC))
                    now = time.monotonic() - t_first
                    if not trace or trace[-1][1] != level:
                        trace.append((now, level))
                    status = client.get(f"/v1/rollouts/{rid}").json()
                    if status["status"] != "running":
                        break
                    time.sleep(POLL_S)
                expected = len(ids) * n
                if status["samples_completed"] != expected or status["mean_reward"] != 1.0:
                    raise RoundFailed(
                        f"{config.name}: {status['counts']}, mean reward "
                        f"{status['mean_reward']}\n" + log_path.read_text()[-2000:]
                    )
            seconds = time.monotonic() - t_measured
    shift = t_measured - t_first  # the first measured rollout's submission is 0
    rebased = [(round(t - shift, 2), level) for t, level in trace]
    return Round(config.name, expected * measured, seconds, rebased)


def run(
    tasks: str,
    ids: list[str],
    n: int,
    levels: list[int],
    ceilings: list[int],
    repeats: int,
    log: Callable[[str], None],
    warm_up: bool = True,
    batches: tuple[int, int] = (LEAD_IN, MEASURED),
    on_repeat: Callable[[dict[str, list[Round]]], None] = lambda rounds: None,
) -> dict[str, list[Round]]:
    """Every configuration's rounds, interleaved per repeat in a rotated order; `on_repeat`
    hears them after each repeat (the results so far are kept should a long run be stopped)."""
    configs = [Config(False, c) for c in levels] + [Config(True, c) for c in ceilings]
    rounds: dict[str, list[Round]] = {c.name: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="bench-admission-") as tmp_name:
        tmp = Path(tmp_name)
        extra = ["--p-malformed", "0"]
        with stand_in_policy(tasks, p_correct=1.0, extra_args=extra) as policy:
            if warm_up:  # images, page cache, the engine's first containers: unmeasured
                run_round(tmp, tasks, ids, 1, policy.url, Config(False, 2), 0, 1)
            for rep in range(repeats):
                shift = rep % len(configs)
                for config in configs[shift:] + configs[:shift]:
                    r = run_round(tmp, tasks, ids, n, policy.url, config, *batches)
                    rounds[config.name].append(r)
                    settled = f", settled at {r.settled:g}" if config.adaptive else ""
                    log(
                        f"  rep {rep + 1} {config.name}: {r.per_min:.1f} trials/min "
                        f"({r.seconds:.1f} s){settled}"
                    )
                on_repeat(rounds)
    return rounds


def summarise(
    rounds: dict[str, list[Round]],
    levels: list[int],
    ceilings: list[int],
    engine_cpus: int | None = None,
) -> dict:
    per_min = {name: figure([r.per_min for r in rs]) for name, rs in rounds.items()}
    best = max((f"fixed-{c}" for c in levels), key=lambda name: per_min[name].median)
    s = ConcurrencySettings(ceiling=max(ceilings))
    # Where each service started: its first reading, before any window closed; under the
    # ceiling, the engine's CPUs where the service learnt them (ConcurrencySettings.starting_at).
    starts = {
        c: sorted({r.trace[0][1] for r in rounds[f"adaptive-{c}"] if r.trace}) for c in ceilings
    }
    at_cores = engine_cpus is not None and all(
        started == [min(engine_cpus, c)] for c, started in starts.items()
    )
    adaptive: dict[str, Any] = {}
    for c in ceilings:
        rs = rounds[f"adaptive-{c}"]
        pairs = zip(rs, rounds[best], strict=True)  # the same repeat: side by side
        adaptive[str(c)] = {
            "vs_best_fixed": figure([a.per_min / b.per_min for a, b in pairs]).as_dict(),
            "settled_level": figure([r.settled for r in rs]).as_dict(1),
            "final_level": [r.trace[-1][1] for r in rs],
            "highest_level": max(level for r in rs for _, level in r.trace),
            "start": starts[c],
            "traces": [r.trace for r in rs],
        }
    return {
        "rounds": {
            name: [{"trials": r.trials, "seconds": round(r.seconds, 2)} for r in rs]
            for name, rs in rounds.items()
        },
        "trials_per_min": {name: f.as_dict(1) for name, f in per_min.items()},
        "seconds": {n: figure([r.seconds for r in rs]).as_dict(1) for n, rs in rounds.items()},
        "best_fixed": best,
        "adaptive": adaptive,
        # The controller's settings the service ran with (its defaults): what a round gives
        # it to work with.
        "controller": {
            "start": engine_cpus if at_cores else min(min(v) for v in starts.values()),
            "starts_at_cores": at_cores,
            "window": s.window,
            "min_window_s": s.min_window_s,
            "saturated": s.saturated,
            "grow": s.grow,
            "gain": s.gain,
            "confidence": s.confidence,
            "early_confidence": s.early_confidence,
            "pool_windows": s.pool_windows,
            "probe_windows": s.probe_windows,
            "settle_windows": s.settle_windows,
            "window_noise": s.window_noise,
            "hold_windows": s.hold_windows,
            "max_hold_windows": s.max_hold_windows,
            "warmup_windows": s.warmup_windows,
        },
    }


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| configuration | trials/min | vs best fixed | settled level |", "|---|---|---|---|"]
    best = summary["trials_per_min"][summary["best_fixed"]]["median"]
    for name, f in summary["trials_per_min"].items():
        kind, c = name.split("-")
        a = summary["adaptive"].get(c) if kind == "adaptive" else None
        ratio = f"{a['vs_best_fixed']['median']:.2f}" if a else f"{f['median'] / best:.2f}"
        level = f"{a['settled_level']['median']:g}" if a else c
        lines.append(f"| {name} | {f['median']} ({f['min']}–{f['max']}) | {ratio} | {level} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.admission", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two tiny rounds (the smoke test)")
    parser.add_argument("--tasks", default="examples/tasks", help="task folder")
    parser.add_argument("--n-tasks", type=int, default=6)
    parser.add_argument("--n-samples", type=int, default=8, help="samples per task per round")
    # Not 1: one sample at a time leaves a core idle while its sandbox starts (the sandbox
    # benchmark's concurrency 1 runs well under its best, docs/performance.md), and its rounds
    # are the longest: they would cost the run minutes to show a level that cannot be best.
    parser.add_argument("--levels", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--ceilings", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    ns = parser.parse_args(argv)
    if ns.quick:
        ns.n_tasks, ns.n_samples, ns.levels, ns.ceilings, ns.repeats = 2, 1, [2], [4], 1
    tasks = str(Path(ns.tasks).resolve())
    ids = sorted(p.name for p in Path(tasks).iterdir() if (p / "task.toml").is_file())
    ids = ids[: ns.n_tasks]
    started = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "mode": "quick" if ns.quick else "full",
        "cores": os.cpu_count() or 0,
        # Since the scheduler sizes its finishing (verify) slots to the level too: what the
        # doc's reading of the ratio depends on (benchmarks/doc_admission.py).
        "finishing_follows_level": True,
        "load_before": round(os.getloadavg()[0], 1),
        "tasks": ids,
        "n_samples": ns.n_samples,
        "lead_in": QUICK_LEAD_IN if ns.quick else LEAD_IN,
        "measured": QUICK_MEASURED if ns.quick else MEASURED,
        "repeats": ns.repeats,
    }
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    asyncio.run(ensure_base_image())
    started["engine_cpus"] = asyncio.run(default_adapter().cpus())

    def write(rounds: dict[str, list[Round]]) -> dict[str, Any]:
        done = min(len(rs) for rs in rounds.values())
        summary = {**started, "repeats": done}
        summary.update(
            summarise(
                {n: rs[:done] for n, rs in rounds.items()},
                ns.levels,
                ns.ceilings,
                started["engine_cpus"],
            )
        )
        summary["load_after"] = round(os.getloadavg()[0], 1)
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    args = (tasks, ids, ns.n_samples, ns.levels, ns.ceilings, ns.repeats, log, not ns.quick)
    batches = (started["lead_in"], started["measured"])
    print(markdown(write(run(*args, batches=batches, on_repeat=write))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
