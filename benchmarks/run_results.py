"""The results of one benchmark run as it is collected: each headline figure with its target
(`Entry`), the run's details beside them (`Results`), and their JSON form, which
benchmarks/results/latest.json holds and everything else is rendered from."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.stats import Figure


@dataclass
class Entry:
    figure: Figure
    target: str | None
    higher_is_better: bool

    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, _, value = self.target.partition(" ")
        bound = float(value)
        m = self.figure.median
        return {"≥": m >= bound, ">": m > bound, "≤": m <= bound, "<": m < bound}[op]


@dataclass
class Results:
    mode: str
    cores: int
    machine: str
    load_before: float
    load_after: float = 0.0
    wall_s: float = 0.0
    entries: dict[str, Entry] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    section_seconds: dict[str, float] = field(default_factory=dict)
    methods: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)  # headline values that are not figures

    def add_figure(
        self, key: str, fig: Figure, target: str | None = None, higher_is_better: bool = False
    ) -> None:
        self.entries[key] = Entry(fig, target, higher_is_better)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "cores": self.cores,
            "machine": self.machine,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "load_before": round(self.load_before, 2),
            "load_after": round(self.load_after, 2),
            "wall_s": self.wall_s,
            "section_seconds": self.section_seconds,
            "methods": self.methods,
        }
        # The headline figures as plain numbers (medians), then their spread and targets.
        for key, e in self.entries.items():
            out[key] = round(e.figure.median, 3)
        out.update(self.summary)
        out["figures"] = {
            key: {**e.figure.as_dict(), "target": e.target, "met": e.met()}
            for key, e in self.entries.items()
        }
        out["details"] = self.details
        return out
