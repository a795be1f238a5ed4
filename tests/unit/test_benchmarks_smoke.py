"""The benchmark runner cannot rot: `python -m benchmarks --quick` runs and writes every headline
figure as a number. No timing is asserted: these machines are shared and noisy."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sandbox_throughput import docker_run_flags, round_tasks
from benchmarks.stats import figure, percentile
from sandboxes.isolation import container_args
from sandboxes.tasks import load_tasks

REPO = Path(__file__).resolve().parents[2]
HEADLINE = (
    "sandbox_vs_floor",
    "sandbox_vs_cold",
    "sandbox_vs_cold_min",
    "command_rtt_p50_ms",
    "exec_rtt_p50_ms",
    "overlap",
    "overlap_balance",
    "occupancy",
    "overlap_chunk",
    "occupancy_chunk",
    "occupancy_vs_chunk",
    "end_to_end_chunk_vs_slot",
    "datapath_traj_per_s",
    "arrow_vs_json_size",
    "rss_mib_10k",
)


def _module(name: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m name args` from the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", name, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _module("benchmarks", "--quick", "--out", str(out), *args, timeout=540)


def _check(out: Path, keys: tuple[str, ...]) -> dict:
    result = json.loads((out / "latest.json").read_text())
    assert result["mode"] == "quick" and result["cores"] >= 1
    for key in keys:
        value = result[key]
        assert isinstance(value, int | float) and math.isfinite(value) and value > 0, key
        spread = result["figures"][key]
        assert spread["min"] <= spread["median"] <= spread["max"], key
    markdown = (out / "latest.md").read_text()
    assert "| figure |" in markdown
    return result


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `--quick` run of every section, which the tests below read (each section once: the
    datapath one used to run a second time on its own, `--only datapath`, for its details)."""
    out = tmp_path_factory.mktemp("quick")
    proc = _run(out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.docker
def test_datapath_section_figures(quick_run: Path) -> None:
    result = _check(quick_run, ("datapath_traj_per_s", "arrow_vs_json_size", "rss_mib_10k"))
    details = result["details"]["datapath"]
    lease = details["bytes_per_trajectory"]
    assert lease["json"]["median"] > lease["arrow"]["median"]  # sizes, not timings
    # Token arrays, from the API's own answers: zstd beats lz4 beats none, all beat JSON.
    tok = {k: v["median"] for k, v in details["token_arrays_bytes_64"].items()}
    assert tok["json"] > tok["arrow_uncompressed"] > tok["arrow_lz4"] >= tok["arrow"] > 0
    assert result["arrow_vs_json_size"] == pytest.approx(tok["json"] / tok["arrow"], rel=1e-3)
    assert set(details["sqlite_blob_commits_per_s"]) == {"4096", "16384", "65536"}
    assert result["methods"]["token_arrays"]


@pytest.mark.docker
def test_quick_run_writes_every_headline_figure(quick_run: Path) -> None:
    result = _check(quick_run, HEADLINE)
    sandbox, overlap = result["details"]["sandbox"], result["details"]["overlap"]
    assert set(sandbox["engine_ops_s"]) == {"create_start", "exec_true", "control_request_true",
                                             "remove", "docker_run_true"}  # fmt: skip
    calls = sandbox["ours_engine_calls_per_trial"]
    assert calls["create"] >= 2  # agent + fresh verifier
    # Two attach sessions (the agent container's control channel, the verifier's script) and
    # no exec: solve and workspace go through the agent container's PID 1.
    assert calls["attach"] == 2 and calls["exec"] == 0
    # CPU per trial by owner, or the reason it could not be split on this machine.
    cpu = sandbox["cpu_s_per_trial"]
    if "unavailable" in cpu:
        assert cpu["unavailable"], cpu
    else:
        assert {"ours", "cold", "floor"} <= set(result["cpu_s_per_trial"])
        # With the CPU split, ours against issue 37's two-lifecycle bound.
        assert result["figures"]["sandbox_vs_bound"]["median"] > 0
        best = str(sandbox["best_concurrency"])
        for system in ("ours", "cold", "floor"):
            cell = cpu[system][best]
            assert cell["containers"]["median"] > 0  # the tests ran inside containers
            parts = sum(cell[k]["median"] for k in ("engine", "containers", "harness"))
            assert cell["total"]["median"] == pytest.approx(parts, abs=0.01)
    assert result["details"]["command"]["ms"]["cli_exec"]["p50"] > 0
    # Harbor ran (every trial scored 1.0, or the run fails), or the reason it did not is kept.
    if "harbor" in sandbox["trials_per_min"]:
        assert sandbox["trials_per_min"]["harbor"]["2"]["median"] > 0
    else:
        assert sandbox["harbor"]["unavailable"]
    assert overlap["calibration"]["sandbox_only_s"] > 0 and overlap["tokens_per_s"] > 0
    assert len(overlap["calibration"]["steps"]) == 2
    busy = overlap["end_to_end_busy_s"]  # the end-to-end runs' timeline
    assert busy["generation_s"]["median"] > 0 and busy["sandbox_s"]["median"] > 0
    assert busy["both_s"]["median"] <= min(busy[k]["median"] for k in ("generation_s", "sandbox_s"))
    assert 0 <= busy["drain_s"]["median"] <= busy["sandbox_s"]["median"]
    # The chunk dispatch ran the same batch beside the scheduler's, with the same figures.
    assert set(overlap["chunk"]) == {k for k in overlap if k in overlap["chunk"]} >= {
        "end_to_end_s", "gen_only_s", "sandbox_only_s", "occupancy", "ratio", "end_to_end_busy_s"
    }  # fmt: skip
    # The document renders from this run with every figure it needs: none "not in this run".
    from benchmarks.doc_text import NOT_RUN
    from benchmarks.report import render_doc

    assert NOT_RUN not in render_doc(result)


def test_bad_task_folder_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--tasks", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--tasks" in proc.stderr


def test_every_level_fills_its_rounds() -> None:
    """A round holds at least twice its level in trials, the tasks in turn (with 6 tasks a
    round, level 8 ran 6 at once and 16 could never fill); Harbor's copies get ids of their own."""
    tasks = load_tasks(str(REPO / "examples" / "tasks"))[:6]
    assert round_tasks(tasks, 1) == tasks and round_tasks(tasks, 2) == tasks
    sixteen = round_tasks(tasks, 16)
    assert len(sixteen) == 32 and sixteen[:6] == tasks and sixteen[6:12] == tasks
    distinct = round_tasks(tasks, 16, distinct=True)
    assert len({t.id for t in distinct}) == 32
    assert distinct[:6] == tasks and distinct[6].id == f"{tasks[0].id}-r2"
    assert distinct[6].test_files == tasks[0].test_files


def test_cold_baseline_uses_the_same_isolation_as_our_containers() -> None:
    task = load_tasks(str(REPO / "examples" / "tasks"))[0]
    args = container_args(task, {"rollouts.bench_id": "x"}, "img")
    joined = " ".join(docker_run_flags(args))
    assert ("--init" in joined) == bool(args["host_config"].get("init"))
    for expected in (
        "--network none",
        "--cap-drop ALL",
        "--read-only",
        "--pids-limit",
        "--security-opt no-new-privileges",
        "--label rollouts.managed=true",
        "--label rollouts.bench_id=x",
        "--tmpfs /app:",
        "--log-driver none",
    ):
        assert expected in joined, expected


def test_figures_are_medians_with_their_spread() -> None:
    f = figure([3.0, 1.0, 2.0, 10.0])
    assert (f.median, f.low, f.high, f.runs) == (2.5, 1.0, 10.0, 4)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0
    with pytest.raises(ValueError):
        figure([])


@pytest.mark.parametrize(
    ("p_correct", "max_tokens", "reward"),
    [(1.0, 4096, 1.0), (1.0, 600, 1.0), (0.0, 4096, 0.0)],
    ids=["oracle-whole", "oracle-in-parts", "wrong-solution"],
)
async def test_generation_only_backend_grades_what_the_agent_typed(
    p_correct: float, max_tokens: int, reward: float
) -> None:
    """The overlap benchmark's "generation alone" run: the real episode loop against the
    stand-in (in process), sandboxes replaced by NoopBackend. Its verifier scores 1.0 only
    when the keystrokes delivered the oracle solve.sh (typed whole, or in parts when one reply
    cannot hold it), so a wrong or garbled solution is not counted as solved."""
    import httpx

    from benchmarks.noop_backend import NoopBackend
    from service.episode import EpisodeRunner
    from service.policy.client import PolicyClient
    from service.sample import AgentLimits, SamplingParams, sample_specs
    from standin.engine import StubSettings
    from standin.server import build_app

    [task] = load_tasks(str(REPO / "examples" / "tasks"), ids=["int-to-roman"])
    app = build_app(StubSettings(p_correct=p_correct, p_malformed=0.0), tasks=[task])
    policy = PolicyClient(["http://stub"], transport=httpx.ASGITransport(app=app))
    got = []

    async def keep(t):  # type: ignore[no-untyped-def]
        got.append(t)

    params = SamplingParams(max_tokens=max_tokens, seed=3)
    async with policy:
        runner = EpisodeRunner(policy, NoopBackend())
        await runner.run_group(task, sample_specs(task, "r", 2, params, AgentLimits()), keep)
    assert [(t.status.value, t.reward) for t in got] == [("ok", reward)] * 2
    if max_tokens < 4096:  # the solution really went in parts, one reply each
        assert min(t.num_turns for t in got) >= 4


def test_performance_doc_is_generated_from_the_committed_results() -> None:
    """docs/performance.md is exactly what `python -m benchmarks.report --doc` writes from
    benchmarks/results/latest.json: no figure in it is typed by hand."""
    from benchmarks.report import DOC, RESULTS, render_doc

    results = json.loads(RESULTS.read_text())
    doc = DOC.read_text()
    assert doc == render_doc(results), "run `python -m benchmarks.report --doc`"
    for key, f in results["figures"].items():  # every headline figure is in it, as recorded
        assert f"{f['median']:.2f}" in doc, key
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.report", "--check"], cwd=REPO, capture_output=True
    )
    assert proc.returncode == 0, proc.stderr


def test_doc_follows_the_results_it_is_given() -> None:
    """A different run gives a different document: the numbers come from the file."""
    from benchmarks.report import RESULTS, render_doc

    results = json.loads(RESULTS.read_text())
    results["load_before"] = 1.5  # something else was running when the run started
    changed = json.loads(RESULTS.read_text())
    changed["figures"]["datapath_traj_per_s"].update(median=1234.5, min=1200.0, max=1250.0)
    # Quiet before; the load after is the run's own and does not count.
    changed["load_before"], changed["load_after"] = 0.1, 2.5
    a, b = render_doc(results), render_doc(changed)
    assert "1234.50 (1200.00–1250.00)" in b and "1234.50" not in a
    assert "not a quiet machine" in a and "not a quiet machine" not in b


def test_doc_renders_when_every_target_is_missed() -> None:
    """Each "what holds it back" section renders from the committed run's details (CI's quick
    run once missed the command target after the CPU split was written, and the section's
    reading of the results broke)."""
    from benchmarks.report import RESULTS, render_doc

    results = json.loads(RESULTS.read_text())
    targets = [f for f in results["figures"].values() if f.get("target")]
    for f in targets:
        f["met"] = False
    doc = render_doc(results)
    assert "Every target is met" not in doc
    for heading in ("### Sandbox throughput", "### One agent command", "### Pipeline overlap"):
        assert heading in doc, heading


def test_overlap_calibration_balances_the_halves() -> None:
    from benchmarks.overlap import calibrated_speed

    # 1 s of loop, 2 s of decode at 400 tokens/s: 800 token-seconds; 10 s of sandboxes
    # leaves 9 s to decode in: 800 / 9 tokens/s.
    assert calibrated_speed(400, trial_s=3.0, loop_s=1.0, target_s=10.0) == pytest.approx(800 / 9)


async def test_every_system_gets_the_same_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any measured round, ours (under runc and under runsc), cold and floor each run one
    unmeasured round of the same tasks at the same concurrency (the engine stubbed out: this
    checks the schedule only)."""
    import benchmarks.sandbox_throughput as st

    calls: list[tuple[str, tuple[str, ...], int]] = []

    def recorder(system: str, tasks_at: int, c_at: int):  # type: ignore[no-untyped-def]
        async def fake(*args):  # type: ignore[no-untyped-def]
            calls.append((system, tuple(t.id for t in args[tasks_at]), args[c_at]))
            return st.RoundResult(len(args[tasks_at]), 1.0, {}, {})

        return fake

    class Stub:
        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            self.calls = {"create": 0, "exec": 0}

        async def resolve(self, task):  # type: ignore[no-untyped-def]
            return "image"

        async def ensure(self, *a) -> None:  # type: ignore[no-untyped-def]
            return None

        async def aclose(self) -> None:
            return None

    for name in ("TimedAdapter", "ImageResolver", "DockerBackend", "FloorContainers"):
        monkeypatch.setattr(st, name, Stub)
    monkeypatch.setattr(st, "container_args", lambda *a: {})
    monkeypatch.setattr(st, "ours_round", recorder("ours", 2, 3))
    monkeypatch.setattr(st, "cold_round", recorder("cold", 2, 3))
    monkeypatch.setattr(st, "floor_round", recorder("floor", 2, 3))

    async def no_ops(*a, **kw):  # type: ignore[no-untyped-def]
        return {}

    async def runtimes(adapter):  # type: ignore[no-untyped-def]
        return ["runc", "runsc"], "runc"

    monkeypatch.setattr(st, "engine_runtimes", runtimes)
    monkeypatch.setattr(st, "engine_op_seconds", no_ops)
    monkeypatch.setattr(st, "lifecycle_cpu_seconds", no_ops)
    tasks = load_tasks(str(REPO / "examples" / "tasks"))[:3]
    await st.run_sandbox_section(tasks, [1, 2], 1, lambda m: None)
    warm = calls[:4]
    assert [system for system, _, _ in warm] == ["ours", "ours", "cold", "floor"]  # runc, runsc
    assert {(ids, c) for _, ids, c in warm} == {(tuple(t.id for t in tasks[:2]), 2)}
    measured = calls[4:]
    assert len(measured) == 2 * 4 and {s for s, _, _ in measured} == {"ours", "cold", "floor"}


@pytest.mark.docker
def test_admission_quick_run(tmp_path: Path) -> None:
    """`python -m benchmarks.admission --quick`: one fixed round and one adaptive round through
    `rollouts serve`, each a lead-in rollout of two trials and the measured one of two, seconds
    in all. Every figure is a number, the adaptive round's level was read from the service's
    /metrics from the lead-in on and stayed under its ceiling, and the performance doc's section
    renders from the file."""
    from benchmarks.doc_admission import admission_section

    out = tmp_path / "admission.json"
    proc = _module("benchmarks.admission", "--quick", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "quick" and result["best_fixed"] == "fixed-2"
    for name, f in result["trials_per_min"].items():
        assert math.isfinite(f["median"]) and f["median"] > 0, name
    adaptive = result["adaptive"]["4"]
    assert math.isfinite(adaptive["vs_best_fixed"]["median"])
    assert 1 <= adaptive["settled_level"]["median"] <= adaptive["highest_level"] <= 4
    [trace] = adaptive["traces"]
    assert trace and all(1 <= level <= 4 for _, level in trace)
    assert result["lead_in"] == 1 and trace[0][0] < 0  # read from the lead-in's start
    # It started at the engine's CPUs, under the ceiling.
    assert result["engine_cpus"] >= 1 and result["controller"]["starts_at_cores"]
    assert trace[0][1] == min(4, result["engine_cpus"]) and adaptive["start"] == [trace[0][1]]
    section = "\n\n".join(admission_section(out))
    assert "| adaptive-4 |" in section and "fixed-2 (best fixed)" in section
    assert "unmeasured rollout" in section


def test_settled_level_is_the_time_weighted_median_over_the_measured_rollout() -> None:
    from benchmarks.admission import settled_level

    # The lead-in's readings are before 0. Over [0, 10]: 6 holds from 0 to 4 and from 7 to
    # 10 (7 s), 9 from 4 to 7 (3 s): the median second is at level 6.
    assert settled_level([(-20.0, 4), (-3.0, 6), (4.0, 9), (7.0, 6)], 10.0) == 6
    assert settled_level([(-20.0, 4), (2.0, 9)], 10.0) == 9  # 9 holds 8 s of the 10
    # 4 holds 6 s (0-4, 7-9), 5 holds 3 s, 6 holds 1 s.
    assert settled_level([(0.0, 4), (4.0, 5), (7.0, 4), (9.0, 6)], 10.0) == 4
    assert settled_level([(-5.0, 3)], 10.0) == 3


def test_the_admission_doc_says_where_each_round_first_probed() -> None:
    """The doc reads each adaptive round's trace: entered the measured batch at the start level
    and first changed level how far through it; no claim when any round did otherwise."""
    from benchmarks.doc_admission import _first_probes

    def result(traces: list[list[list[float]]]) -> dict:
        return {
            "controller": {"start": 4},
            "rounds": {"adaptive-16": [{"seconds": 30.0} for _ in traces]},
            "adaptive": {"16": {"traces": traces}},
        }

    probed = [[[-28.0, 4], [15.0, 6]], [[-30.0, 4], [-12.0, 6], [-2.0, 4], [1.0, 6], [21.0, 4]]]
    assert _first_probes(result(probed), ["16"]) == [0.5, 1.0 / 30.0]
    assert _first_probes(result([[[-28.0, 4], [-10.0, 6], [15.0, 4]]]), ["16"]) == []
    assert _first_probes(result([[[-28.0, 4]]]), ["16"]) == []  # held its level throughout


def test_the_admission_doc_says_how_long_admission_ran_at_each_level() -> None:
    """The measured time of the adaptive rounds together, by level, from their traces: a level
    read before the stretch holds from its start, one read after it counts for nothing."""
    from benchmarks.doc_admission import _time_at_levels

    traces = [[[-20.0, 2], [10.0, 3], [20.0, 2], [45.0, 5]], [[-5.0, 3], [0.0, 2]]]
    a = {
        "best_fixed": "fixed-2",
        "rounds": {"adaptive-16": [{"seconds": 40.0}, {"seconds": 40.0}]},
        "adaptive": {"16": {"traces": traces}},
    }
    assert _time_at_levels(a, ["16"]) == (
        "Over the adaptive rounds' measured time together, admission ran at the best fixed"
        " level (2) 88% of the time; 12% at 3."
    )


@pytest.mark.docker
def test_grader_cpu_whole_run(tmp_path: Path) -> None:
    """`python -m benchmarks.grader_cpu --whole --plain --marks --trials 1`: one measured trial
    of each kind (ours, ours without the boundary, the cold harness, the floor), seconds in
    all. Every share is a number, ours and the plain layout were marked step by step, and the
    performance doc's section renders from the file, with the arithmetic the targets ask."""
    from benchmarks.doc_grader import grader_section

    out = tmp_path / "grader_cpu.json"
    args = ["--whole", "--plain", "--marks", "--trials", "1", "--out", str(out)]
    proc = _module("benchmarks.grader_cpu", *args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    wholes = [result["floor"]["whole_s"], result["cold"]["whole_s"]]
    wholes += [result["arms"][arm]["whole_s"] for arm in ("this", "this, plain")]
    for whole in wholes:
        assert all(math.isfinite(v) and v >= 0 for v in whole.values()), whole
        assert whole["total"] > 0
    assert result["lifecycle_s"] > 0
    for arm in ("this", "this, plain"):
        assert {"view", "python_1", "whole"} <= set(result["arms"][arm]["marks_ms"])
    section = "\n\n".join(grader_section(out))
    assert "| ours, no boundary (plain layout) |" in section
    words = " ".join(section.split())
    assert "The boundary costs" in words and "of the bound needs at most" in words


@pytest.mark.docker
def test_terminal_cpu_run(tmp_path: Path) -> None:
    """`python -m benchmarks.terminal_cpu --runtimes runc --turns 1`: a turn of each kind and
    the idle window, added to the results file under its label beside the one already there."""
    out = tmp_path / "terminal_cpu.json"
    out.write_text(json.dumps({"older": {"turns": 1}}))
    args = ["--runtimes", "runc", "--turns", "1", "--json", str(out), "--label", "this"]
    proc = _module("benchmarks.terminal_cpu", *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(out.read_text())
    assert set(runs) == {"older", "this"}
    figures = runs["this"]["runc"]
    assert figures["echo cpu_ms_per_turn"] > 0 and figures["sleep 2 cpu_ms_per_turn"] > 0
    assert figures["idle cpu_ms_per_s"] >= 0 and math.isfinite(figures["memory_mib_per_turn"])


def test_boundary_benchmark_lays_out_what_a_verification_does(tmp_path: Path) -> None:
    """`benchmarks.boundary_calls` runs the tests phase on the upload the service makes
    (verifier.write_upload): the guard as tests/conftest.py, the runtime's bytecode, a stub in
    app/; laid out afresh before every run, so nothing a run wrote is there for the next. The
    module runs in a process of its own through the boundary, in pytest's process plainly."""
    from benchmarks import boundary_calls as bc
    from sandboxes import verifier

    # (its own copy: sandboxes.verifier is not importable in the image the benchmark runs in)
    assert bc._VIEW_START == verifier._VIEW_START
    task = bc.with_upload(
        bc.Task(
            "tiny",
            {"solution.py": b"import os\n\n\ndef pid():\n    return os.getpid()\n"},
            {
                "test_t.py": b"import os\nimport solution\n\n\n"
                b"def test_f():\n    assert solution.pid() != os.getpid()\n"
            },
        )
    )
    guard = (Path(bc.RUNTIME) / "pytest_guard.py").read_bytes()
    for _ in range(2):
        bc.lay_out(task, tmp_path / "verify")
        assert (tmp_path / "verify/tests/conftest.py").read_bytes() == guard
        assert not (tmp_path / "verify/tests/__pycache__").exists()  # (the run before's)
        assert list((tmp_path / "verify/rollouts/lib/__pycache__").glob("trusted.*.pyc"))
        assert b"_rollouts_runtime" in (tmp_path / "verify/app/solution.py").read_bytes()
        boundary = bc.run_pytest(tmp_path / "verify", True, timeout=120)
        assert boundary.summary.startswith("1 passed"), boundary
    report = (tmp_path / "verify/logs/rollouts-guard/report.jsonl").read_text()
    assert '"event": "view"' in report and '"modules": ["solution"]' in report
    bc.lay_out_plain(task, tmp_path / "plain")
    plain = bc.run_pytest(tmp_path / "plain", False, timeout=120)
    assert plain.summary.startswith("1 failed"), plain  # (one process: the same pid)
