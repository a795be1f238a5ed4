"""The building blocks of docs/performance.md's text: wrapped paragraphs and list items, and
a figure of a results file read as a number or as text."""

from __future__ import annotations

import textwrap
from typing import Any

from benchmarks.results_tables import fig_text

NOT_RUN = "not in this run"
_WIDTH = 96


def para(*parts: str, first: str = "", rest: str = "") -> str:
    """One paragraph (or list item) from `parts`, wrapped."""
    return textwrap.fill(
        " ".join(p.strip() for p in parts if p),
        _WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def item(*parts: str, mark: str = "-") -> str:
    """One list item (`mark` "-" or "1.", ...) from `parts`, wrapped under its mark."""
    return para(*parts, first=f"{mark} ", rest=" " * (len(mark) + 1))


def median_of(r: dict[str, Any], key: str) -> float | None:
    """A figure's median, None when the run does not hold it."""
    f = r["figures"].get(key)
    return None if f is None else float(f["median"])


def target_value(r: dict[str, Any], key: str) -> float:
    """The number in a figure's target as the runner recorded it ("≥ 0.5" -> 0.5)."""
    return float(r["figures"][key]["target"].split()[-1])


def text_of(r: dict[str, Any], key: str, fmt: str = "{:.2f}") -> str:
    """A figure as text, median (min–max), or NOT_RUN when the run does not hold it."""
    f = r["figures"].get(key)
    return NOT_RUN if f is None else fig_text(f, fmt)


def wave_count(tasks: int, n: int, concurrency: int) -> int:
    """How many rounds of `concurrency` samples a batch of tasks × n runs in."""
    return -(-tasks * n // concurrency)
