"""docs/performance.md's "Adaptive admission" section, from benchmarks/results/admission.json
(written by `python -m benchmarks.admission`): fixed concurrency levels and adaptive admission
at ceilings far past the cores, side by side through the real service, and the level
admission settled at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.doc_text import para
from benchmarks.stats import level_spans
from service.concurrency import ConcurrencySettings

ADMISSION_RESULTS = Path(__file__).parent / "results" / "admission.json"
TARGET = 1.0  # issue 37, target 3: adaptive at a high ceiling gives at least the best fixed


def _fig(f: dict[str, Any], fmt: str = "{:.2f}") -> str:
    if f["runs"] == 1 or f["min"] == f["max"]:
        return fmt.format(f["median"])
    return f"{fmt.format(f['median'])} ({fmt.format(f['min'])}–{fmt.format(f['max'])})"


def _table(a: dict[str, Any]) -> str:
    lines = [
        "| configuration | trials/min | adaptive / best fixed | level (settled) "
        "| seconds (measured rollouts) |",
        "|---|---|---|---|---|",
    ]
    for name, f in a["trials_per_min"].items():
        kind, c = name.split("-")
        ad = a["adaptive"].get(c) if kind == "adaptive" else None
        ratio = _fig(ad["vs_best_fixed"]) if ad else "–"
        level = f"{_fig(ad['settled_level'], '{:g}')}, up to {ad['highest_level']}" if ad else c
        best = " (best fixed)" if name == a["best_fixed"] else ""
        lines.append(
            f"| {name}{best} | {_fig(f, '{:.1f}')} | {ratio} | {level} "
            f"| {_fig(a['seconds'][name], '{:.0f}')} |"
        )
    return "\n".join(lines)


def _warmup(n: int) -> str:
    if not n:
        return ""
    return (
        f"The first {'window only measures' if n == 1 else f'{n} windows only measure'}: a "
        "fresh service's first samples find no warm sandbox and all start at once."
    )


def _reading(a: dict[str, Any], ceilings: list[str]) -> str:
    parts = []
    if all(a["adaptive"][c]["highest_level"] < int(c) for c in ceilings):
        parts.append("The level stayed far below the ceiling.")
    probes = _first_probes(a, ceilings) if a.get("measured", 1) == 1 else []
    if probes:
        parts.append(
            f"Every adaptive round entered the measured batch at level {a['controller']['start']}"
            f" and first moved to another level {min(probes):.0%} to {max(probes):.0%} of the way"
            " through it: the first probe of a fresh service, which a long collection pays at"
            " ever longer intervals (each revert to a level in a row doubles the hold before the"
            " next probe), and which a round of two batches measures every time."
        )
    best_level = int(a["best_fixed"].split("-")[1])
    ctl = a["controller"]
    if ctl.get("starts_at_cores") and ctl["start"] == best_level:
        parts.append(
            f"Admission started at the best fixed level here (the engine's {ctl['start']}"
            " CPUs): the ratio measures what its probes from there cost or found, not a search"
            " from a start elsewhere."
        )
    best = a["trials_per_min"][a["best_fixed"]]
    spread = (best["max"] - best["min"]) / best["median"]
    fixed = {int(name.split("-")[1]) for name in a["trials_per_min"] if name.startswith("fixed")}
    unrun = sorted(
        {level for c in ceilings for trace in a["adaptive"][c]["traces"] for _, level in trace}
        - fixed
    )
    if any(a["adaptive"][c]["vs_best_fixed"]["median"] > 1 for c in ceilings) and unrun:
        parts.append(
            "A ratio above 1 is what admission's own levels (it also ran at"
            f" {', '.join(map(str, unrun))}, which no fixed round ran) and the spread between"
            f" rounds (the best fixed level's own differ by {spread:.0%}) gave, not a gain"
            " over every fixed level."
        )
    if spread > a["controller"]["gain"]:
        parts.append(
            f"The best fixed level's own rounds differ by {spread:.0%} of their median in this "
            f"run, more than the {a['controller']['gain']:.0%} a raise must gain: a ratio far "
            "from 1 says as much about the machine's drift between rounds as about the level "
            "(the traces are in the results file)."
        )
    return " ".join(parts)


def _first_probes(a: dict[str, Any], ceilings: list[str]) -> list[float]:
    """How far through the measured batch each adaptive round first changed level, as a share
    of it; empty unless every round entered the batch at the start level and changed in it."""
    shares = []
    for c in ceilings:
        rounds = a["rounds"][f"adaptive-{c}"]
        for trace, r in zip(a["adaptive"][c]["traces"], rounds, strict=True):
            before = [level for t, level in trace if t <= 0]
            moves = [t for t, _ in trace if 0 < t < r["seconds"]]
            if not before or before[-1] != a["controller"]["start"] or not moves:
                return []
            shares.append(moves[0] / r["seconds"])
    return shares


def _levels(a: dict[str, Any], ceilings: list[str]) -> str:
    """Each adaptive round's levels over its measured stretch, from its trace."""
    rounds = []
    for c in ceilings:
        runs = a["rounds"][f"adaptive-{c}"]
        for i, (trace, r) in enumerate(zip(a["adaptive"][c]["traces"], runs, strict=True)):
            end = r["seconds"]
            entered = [level for t, level in trace if t <= 0][-1:] or [trace[0][1]]
            steps = [f"entered at {entered[0]}"]
            steps += [f"{level} at {t:.0f} s" for t, level in trace if 0 < t < end]
            rounds.append(f"ceiling {c}, repeat {i + 1} ({end:.0f} s): {', '.join(steps)}")
    return para(
        "Levels over the measured stretch, from each adaptive round's trace:",
        "; ".join(rounds) + ".",
        _time_at_levels(a, ceilings),
    )


def _time_at_levels(a: dict[str, Any], ceilings: list[str]) -> str:
    """The share of the adaptive rounds' measured time at each level, the best fixed first."""
    best = int(a["best_fixed"].split("-")[1])
    spans: dict[int, float] = {}
    for c in ceilings:
        runs = a["rounds"][f"adaptive-{c}"]
        for trace, r in zip(a["adaptive"][c]["traces"], runs, strict=True):
            for level, s in level_spans(trace, r["seconds"]).items():
                spans[level] = spans.get(level, 0.0) + s
    total = sum(spans.values())
    if not total:
        return ""
    others = ", ".join(
        f"{spans[lv] / total:.0%} at {lv}" for lv in sorted(spans) if lv != best and spans[lv]
    )
    return (
        f"Over the adaptive rounds' measured time together, admission ran at the best fixed"
        f" level ({best}) {spans.get(best, 0.0) / total:.0%} of the time"
        + (f"; {others}." if others else ".")
    )


def _round(a: dict[str, Any], trials: int) -> str:
    """How a round runs, and why it is that long."""
    if "lead_in" not in a:
        return para(
            "This run predates rounds with a lead-in and the controller's demand-aware windows:",
            "a round was one rollout from a fresh service, whose drain at the end counted as",
            "windows the level held back. Its ratios are shown, not counted; a rerun is due.",
        )
    ctl = a["controller"]
    measured = a.get("measured", 1)
    per_batch = -(-trials // ctl["window"])  # windows a batch starts, its ramp included
    if measured == 1:
        return para(
            f"A round is a fresh service running {a['lead_in']} unmeasured rollout(s) and then",
            f"the measured one, back to back, each the same {trials} trials: a long",
            "collection's second batch, which admission enters at its start level or with its",
            "first probe under way (about",
            f"{a['lead_in'] * per_batch} windows of {ctl['window']} samples before it, each",
            "batch's first a ramp that decides nothing). A round of two batches measures that",
            "first exploration every time; a long collection pays it once.",
        )
    rounds = (len(a["trials_per_min"])) * a["repeats"] + 1
    return para(
        f"A round is a fresh service running {a['lead_in']} unmeasured rollouts and then",
        f"{measured} measured ones, back to back, each the same {trials} trials; the figure is",
        "the measured rollouts' trials per minute, from the first one's submission to the last",
        "one's completion. A collection is many batches, and admission carries its level from",
        "one to the next: what a user gets over a long collection is mostly the level the",
        "first batches found, with the probes a settled collection keeps making, not the climb",
        f"from its start level (a fixed setting pays no such climb). With {per_batch} windows",
        f"of {ctl['window']} samples a batch, each batch's first a ramp that decides nothing,",
        "the lead-in holds the controller's warm-up, the windows its start level needs before",
        "a raise, and the start of its first probe; the measured stretch holds what follows,",
        "with the rest of that first exploration where it runs on, so it still charges",
        "admission part of what a long collection pays once (each round's levels are listed",
        "below the table). Each",
        "batch's drain, the pause before the next submission and the next batch's start are",
        "what a synchronous RL loop shows between batches: windows in which samples waited for",
        f"a slot under {ctl['saturated']:.0%} of the time count for nothing (neither keep nor",
        "undo a probe, nor back off), so they cannot count against the level. The whole run,",
        f"{rounds - 1} rounds of {a['lead_in'] + measured} rollouts (the configurations x",
        "repeats) and a warm-up round, takes about 40 minutes on an idle 2-core machine.",
    )


def _early(ctl: dict[str, Any]) -> str:
    """The early verdict's clause, where the run had it."""
    if "early_confidence" not in ctl:
        return ""
    return (
        "; once a third of a probe's window has finished, a probe that"
        f" {ctl['early_confidence']:g} standard errors above its figure would still leave"
        " short goes back then"
    )


def _controller(ctl: dict[str, Any]) -> str:
    if "settle_windows" not in ctl:
        return para(
            "This run predates the controller's windows by start, its ramp windows and its",
            "evidence rule (a window was the first samples to finish after a change of level,",
            "which read a just-raised level as faster than it was); a rerun is due.",
        )
    return para(
        (
            f"The controller starts at the sandbox machine's cores, {ctl['start']} here (the"
            f" Docker Engine's CPUs; without them, at {ConcurrencySettings.start})."
            if ctl.get("starts_at_cores")
            else f"The controller starts at level {ctl['start']}."
        ),
        f"A window is the next {ctl['window']}",
        f"samples to take a slot (over at least {ctl['min_window_s']:g} s), judged once the",
        "last of them has finished, and it counts only if samples waited for a slot for",
        f"{ctl['saturated']:.0%} of it and it is not a batch's first (its ramp: samples that",
        "start together into a machine with no verifications yet behind them hold their slots",
        "for less than they will). Its throughput is the level over the mean time a sample",
        "held its slot (Little's law, exact while every slot is taken). Windows go by when",
        "their samples started: the first samples to finish after a raise are the quick ones,",
        "and windows of them read a raise as a gain on a machine where no level did better. A",
        f"level's figure pools its last {ctl['pool_windows']} windows, with a standard error",
        "from the spread of its samples' slot times or, when larger, from the spread between",
        "windows at one level (the load drifts between windows), and a level needs",
        f"{ctl['settle_windows']} windows before a raise from it. A raise (x{ctl['grow']:g}, at",
        f"least one) stays once it beats the level it came from by {ctl['gain']:.0%} and by",
        f"{ctl['confidence']:g} standard error(s) of the ratio, and goes back once even that",
        f"margin would not make the gain, or after {ctl['probe_windows']} windows that did not",
        f"tell{_early(ctl)}. The first time a raise from a level buys nothing, the next window",
        f"probes below it (/{ctl['grow']:g}, at least one), kept while throughput stays within",
        f"{ctl['gain']:.0%} of where the descent began (the start level is a guess, and a",
        "machine's best may be under it), going on down only where it did better. A probe",
        "starts only while a window's worth of samples wait for a slot. A level gone back to",
        f"holds for {ctl['hold_windows']} windows, doubled for each revert in a row up to",
        f"{ctl['max_hold_windows']}, so a settled collection probes less and less.",
        _warmup(ctl.get("warmup_windows", 0)),
    )


def admission_section(path: Path = ADMISSION_RESULTS) -> list[str]:
    """The blocks of the section; a line saying how to measure when there is no results file."""
    blocks = ["## Adaptive admission"]
    if not path.exists():
        blocks.append(para("Not measured yet: `python -m benchmarks.admission`."))
        return blocks
    a = json.loads(path.read_text())
    ctl = a["controller"]
    trials = len(a["tasks"]) * a["n_samples"]
    ceilings = sorted(a["adaptive"], key=int)
    blocks.append(para(
        "With `--adaptive-concurrency`, `--max-concurrent-samples` is a ceiling and the number",
        "of samples in their episode finds its own level under it (service/concurrency.py):",
        "it grows while the throughput of finished samples grows, goes back when a raise buys",
        "nothing, and backs off on a sandbox-start or verify latency cliff or on sandbox",
        "failures. `python -m benchmarks.admission` runs the same rollout (the stand-in policy,",
        "instant and always right; real Docker sandboxes and verifier) through `rollouts serve`",
        "at fixed levels and under admission at ceilings far past the cores, taking turns within",
        "each repeat (order rotated per repeat). The level is read from the service's",
        "`/metrics` (`rollouts_concurrency_level`, also the web view's concurrency card) while",
        "the round runs; the settled level is its time-weighted median over the measured",
        "rollout(s). Target: admission at every ceiling gives at least the best fixed level's",
        f"throughput (adaptive / best fixed ≥ {TARGET:g}, paired by repeat).",
    ))  # fmt: skip
    blocks.append(_round(a, trials))
    if a.get("finishing_follows_level"):
        blocks.append(para(
            "What the level bounds (service/scheduler.py): samples in their episode and, in as",
            "many finishing slots, samples verifying or committing: what a fixed setting of the",
            "same number bounds, so the ratio compares the level alone.",
        ))  # fmt: skip
    else:
        blocks.append(para(
            "Read the ratio with what the level bounded when this run was made: samples in",
            "their episode only. Its adaptive rounds verified in the ceiling's finishing slots",
            "while a fixed level K verified at most K at once, so an adaptive round could verify",
            "more at once than a fixed one at the same level. The scheduler now sizes the",
            "finishing slots to the level too; this run predates that, and a rerun is due",
            "before its ratios are cited.",
        ))  # fmt: skip
    blocks.append(para(
        f"The committed run: {a['date']}, {a['cores']} cores, {len(a['tasks'])} tasks x",
        f"{a['n_samples']} samples = {trials} trials a rollout, {a['repeats']} repeat(s); load",
        f"average {a['load_before']} before and {a['load_after']} after (a busy machine gives",
        "noisy rates: read the ratios, paired by repeat).",
    ))  # fmt: skip
    blocks.append(_table(a))
    if a.get("measured", 1) > 1:
        blocks.append(_levels(a, ceilings))
    ratios = {c: a["adaptive"][c]["vs_best_fixed"]["median"] for c in ceilings}
    met = [c for c in ceilings if ratios[c] >= TARGET]
    missed = [c for c in ceilings if ratios[c] < TARGET]
    if not a.get("finishing_follows_level") or "lead_in" not in a:
        met, missed = [], ceilings  # not a like-for-like run (above): shown, not counted
    verdict = (
        f"The target holds at ceiling {' and '.join(met)}"
        + (f" and is missed at {', '.join(missed)}." if missed else ".")
        if met
        else f"The target is not shown at ceiling {', '.join(missed)}."
    )
    reached = ", ".join(f"{a['adaptive'][c]['highest_level']} under {c}" for c in ceilings)
    settled = ", ".join(
        f"{_fig(a['adaptive'][c]['settled_level'], '{:g}')} under {c}" for c in ceilings
    )
    blocks.append(para(
        verdict,
        f"The best fixed level here is {a['best_fixed'].split('-')[1]}; admission settled at",
        f"{settled} (the highest level it reached: {reached}).",
        _reading(a, ceilings),
    ))  # fmt: skip
    blocks.append(_controller(ctl))
    return blocks
