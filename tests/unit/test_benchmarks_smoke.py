"""The benchmark runner cannot rot: `python -m benchmarks --quick` runs and writes every headline
figure as a number. No timing is asserted: these machines are shared and noisy."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.sandbox_throughput import docker_run_flags
from benchmarks.stats import figure, percentile
from sandboxes.isolation import container_args
from sandboxes.tasks import load_tasks

REPO = Path(__file__).resolve().parents[2]
HEADLINE = (
    "sandbox_vs_floor",
    "sandbox_vs_cold",
    "overlap",
    "datapath_traj_per_s",
    "arrow_vs_json_size",
    "rss_mib_10k",
)


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )


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


def test_datapath_section_runs_without_docker(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--only", "datapath")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = _check(tmp_path, ("datapath_traj_per_s", "arrow_vs_json_size", "rss_mib_10k"))
    lease = result["details"]["datapath"]["bytes_per_trajectory"]
    assert lease["json"]["median"] > lease["arrow"]["median"]  # sizes, not timings


@pytest.mark.docker
def test_quick_run_writes_every_headline_figure(tmp_path: Path) -> None:
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _check(tmp_path, HEADLINE)


def test_bad_task_folder_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--tasks", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--tasks" in proc.stderr


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
    ):
        assert expected in joined, expected


def test_figures_are_medians_with_their_spread() -> None:
    f = figure([3.0, 1.0, 2.0, 10.0])
    assert (f.median, f.low, f.high, f.runs) == (2.5, 1.0, 10.0, 4)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 95) == 95.0
    with pytest.raises(ValueError):
        figure([])
