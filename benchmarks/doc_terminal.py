"""docs/performance.md's section on what a terminal turn costs the agent container, from the
committed `benchmarks/results/terminal_cpu.json` (`python -m benchmarks.terminal_cpu --json
... --label NAME`, one label per checkout measured side by side)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.doc_text import para
from benchmarks.terminal_cpu import IDLE_S, KINDS

RESULTS = Path(__file__).parent / "results" / "terminal_cpu.json"
_COLUMNS = (
    *(f"{kind} cpu_ms_per_turn" for kind in KINDS),
    "idle cpu_ms_per_s",
    "memory_mib_per_turn",
)


def terminal_section(path: Path = RESULTS) -> list[str]:
    if not path.exists():
        return []
    runs = json.loads(path.read_text())
    rows = [
        "| checkout | runtime | "
        + " | ".join(f"`{kind}`: CPU-ms a turn" for kind in KINDS)
        + " | idle: CPU-ms a second | memory: MiB a turn |",
        "|---|---|" + "---|" * len(_COLUMNS),
    ]
    for label, run in runs.items():
        for runtime, figures in run.items():
            if isinstance(figures, dict):
                cells = " | ".join(f"{figures[c]:.1f}" for c in _COLUMNS)
                rows.append(f"| {label} | {runtime} | {cells} |")
    started = ", ".join(f"{label} {run['started']}" for label, run in runs.items())
    return [
        "## What a terminal turn costs the agent container",
        para(
            "`python -m benchmarks.terminal_cpu` types turns into one sandbox's terminal per",
            "runtime, as an episode does: `echo` (a short command) and `sleep 2` (a turn that",
            f"waits on its command) taking turns, then {IDLE_S:.0f} seconds with nothing asked.",
            "CPU is the container's own (its cgroup, the Sentry's under gVisor); memory is how",
            "much the container's usage grew a turn, which under gVisor includes the Sentry's",
            "own. CPU figures are medians of the run's turns, memory the growth over all of them",
            "a turn; checkouts were measured one after the other on the same machine",
            f"({started}). Under runsc the checkouts before stop 56 end a `sleep 2` turn before",
            'its command does (docs/reliability.md, "Under gVisor"), so their figure covers',
            "less of the wait.",
        ),
        "\n".join(rows),
    ]
