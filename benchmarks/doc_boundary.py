"""docs/performance.md's section on the verifier's process boundary, from the committed
`benchmarks/results/boundary_calls.json` (`python -m benchmarks.boundary_calls`, run once
with the runtime before a change and once after; see that module) and
`boundary_calls_docker.json` (`--docker runc runsc`: the same inside the sandbox image)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.doc_text import para

RESULTS = Path(__file__).parent / "results" / "boundary_calls.json"
DOCKER_RESULTS = Path(__file__).parent / "results" / "boundary_calls_docker.json"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} s"


def _cell(task: dict[str, Any] | None) -> str:
    """session ratio (wall, CPU), or what stopped the run."""
    if task is None:
        return "not run"
    if task.get("session_ratio") is None:
        return f"{task.get('boundary_outcome') or 'no result'}"
    return (
        f"{_x(task['session_ratio'])} ({_x(task.get('wall_ratio'))}, {_x(task.get('cpu_ratio'))})"
    )


def _read(path: Path, key: str) -> tuple[dict[str, Any], dict[str, Any], list[str]] | None:
    """(the results, its runs under `key`, the task names of all runs in order), or None."""
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    runs = r[key]
    return r, runs, list(dict.fromkeys(n for run in runs.values() for n in run["tasks"]))


def boundary_section(path: Path = RESULTS) -> list[str]:
    found = _read(path, "runs")
    if found is None:
        return []
    r, runs, names = found
    rows = [
        "| task | plain pytest, session | before: boundary / plain | after: boundary / plain "
        "| after: boundary outcome |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        before = runs["before"]["tasks"].get(name)
        after = runs["after"]["tasks"].get(name)
        plain = (after or before or {}).get("plain_session_s")
        outcome = (after or {}).get("boundary_outcome", "")
        rows.append(f"| {name} | {_s(plain)} | {_cell(before)} | {_cell(after)} | {outcome} |")
    return [
        "## The verifier's process boundary: tests phase against plain pytest",
        para(
            "`python -m benchmarks.boundary_calls` runs each task's test files twice, side by",
            "side and interleaved on one machine and interpreter: through the verifier runtime",
            "(stubs in `/app`, the module in the tested process, every use a round trip over the",
            "socket) and plain (the module on `PYTHONPATH`). Each cell is the ratio boundary /",
            "plain of pytest's own session time, then (in brackets) of the command's wall time",
            "and of the CPU time of all its processes, medians of the repeats; a ratio is taken",
            "within one run. The real-package tasks run their projects' own tests",
            "(`tests/real_tasks.py`); `synthetic-calls` makes thousands of small calls, passes",
            "iterators both ways, calls back and runs a parametrized suite; `synthetic-files`",
            "(since stop 54) writes files in its tmp_path and hands them over by name, one by",
            f"one and as a folder. Before: {r['before']}; after: {r['after']}.",
        ),
        para(r["conditions"]),
        "\n".join(rows),
        para(*r["notes"]),
    ]


def container_section(path: Path = DOCKER_RESULTS) -> list[str]:
    """The tests phase against plain pytest inside the sandbox image, under runc and runsc."""
    found = _read(path, "runtimes")
    if found is None:
        return []
    r, runtimes, names = found
    head = "| task |"
    rule = "|---|"
    for oci in runtimes:
        head += f" {oci}: plain session | {oci}: boundary / plain (wall, CPU) |"
        rule += "---|---|"
    rows = [head, rule]
    for name in names:
        row = f"| {name} |"
        for run in runtimes.values():
            t = run["tasks"].get(name)
            row += f" {_s((t or {}).get('plain_session_s'))} | {_cell(t)} |"
        rows.append(row)
    return [
        "### Inside the sandbox image, under runc and runsc",
        para(
            "`python -m benchmarks.boundary_calls --docker runc runsc` runs the same comparison",
            "inside a container of the sandbox base image, one OCI runtime after the other:",
            "the image's interpreter and pytest, the container's capabilities as a verifier's",
            "(the tested process switches to its own user, so each path the tests hand over",
            "is granted to it), and under gVisor every system call of both processes through",
            "the sentry. Both arms run in the one container, interleaved; a ratio is taken",
            "within one runtime's run. The container's /tmp, /app, /tests, /logs and /rollouts",
            "are tmpfs mounts, as a verifier container's are, and since stop 55 the boundary's",
            "arm is laid out there as a verification lays it out, from the upload the service",
            "makes (the pytest guard as /tests/conftest.py, the runtime's bytecode), afresh",
            "before every run of either arm, as every verification starts in a fresh container.",
        ),
        para(r["conditions"]),
        "\n".join(rows),
        para(*r["notes"]),
    ]
