"""The reliability results file: one JSON object per case per test run (JSON lines).

Tests append to it; `scripts/reliability_table.py` renders `docs/reliability.md` from it. The
path comes from ROLLOUTS_RELIABILITY_RESULTS (default: build/reliability-results.jsonl).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PATH = REPO / "build" / "reliability-results.jsonl"


def results_path() -> Path:
    return Path(os.environ.get("ROLLOUTS_RELIABILITY_RESULTS", str(DEFAULT_PATH)))


@dataclass
class CaseResult:
    """What one test tried and saw. `passed` is filled from the test's outcome at teardown."""

    case: str
    delivery: str  # how the attack/fault was delivered: agent, solve.sh, loader, proxy, ...
    tried: str = ""
    observed: dict[str, object] = field(default_factory=dict)
    passed: bool | None = None
    seconds: float = 0.0
    test: str = ""
    at: float = field(default_factory=time.time)


def append_result(result: CaseResult, path: Path | None = None) -> None:
    path = path or results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # One write per line, O_APPEND: concurrent writers (xdist) cannot interleave inside a line.
    line = json.dumps(asdict(result), default=str) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
