"""When generation and sandbox work were in flight during one collect run.

The overlap figure says how much longer end to end took than the longer half alone; a timeline
says why. Every policy request (`PolicyClient.complete`) and every sandbox call (create, the
terminal, execs, the workspace tar, the verifier) of any sample is a span; `busy()` returns the
seconds with at least one span of each kind open, with both open at once, and the drain: sandbox
work after the last request ended. Full overlap
puts both near the shorter half's busy time; halves that alternate batch-wide (every sample
generating, then every sample in its sandbox) put it near 0.

`occupancy()` is the policy's side: the mean number of sequences in flight at the policy over
the run, per sample slot (what a GPU's batch is made of). Each choice of a request counts from
the request's start until its own last token: the stand-in decodes a request's choices at one
pace, so a choice of l tokens ends l / longest of the way through its request.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from sandboxes.backend import Sandbox, SandboxBackend
from service.policy.client import PolicyClient

KINDS = ("generation", "sandbox")


class Timeline:
    def __init__(self) -> None:
        self.spans: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
        self.choices: list[tuple[float, float]] = []  # (start, end) of every choice generated

    def add_request(self, start: float, end: float, lengths: list[int]) -> None:
        longest = max([*lengths, 1])
        for n in lengths:
            self.choices.append((start, start + (end - start) * max(n, 1) / longest))

    def occupancy(self, seconds: float, slots: int) -> float:
        """Mean sequences in flight at the policy over `seconds`, divided by `slots`."""
        return sum(end - start for start, end in self.choices) / (seconds * slots)

    @contextlib.asynccontextmanager
    async def span(self, kind: str) -> AsyncIterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.spans[kind].append((t0, time.monotonic()))

    def busy(self) -> dict[str, float]:
        """Seconds with generation in flight, sandbox work in flight, and both."""
        gen, sbx = (_union(self.spans[k]) for k in KINDS)
        # The drain: sandbox work after the last request ended (last commands, verification).
        drain = _intersection(sbx, [(gen[-1][1], sbx[-1][1])]) if gen and sbx else []
        return {
            "generation_s": round(_length(gen), 3),
            "sandbox_s": round(_length(sbx), 3),
            "both_s": round(_length(_intersection(gen, sbx)), 3),
            "drain_s": round(_length(drain), 3),
        }


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _intersection(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in spans)


class TimedPolicy(PolicyClient):
    """A PolicyClient whose completions are generation spans."""

    def __init__(self, timeline: Timeline, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timeline = timeline

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        async with self._timeline.span("generation"):
            generations = await super().complete(*args, **kwargs)
        self._timeline.add_request(t0, time.monotonic(), [len(g.token_ids) for g in generations])
        return generations


class _TimedSandbox:
    def __init__(self, inner: Sandbox, timeline: Timeline) -> None:
        self._inner = inner
        self._timeline = timeline
        self.id = inner.id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def exec(self, *args: Any, **kwargs: Any) -> Any:
        async with self._timeline.span("sandbox"):
            return await self._inner.exec(*args, **kwargs)

    async def send_keys(self, *args: Any, **kwargs: Any) -> Any:
        async with self._timeline.span("sandbox"):
            return await self._inner.send_keys(*args, **kwargs)

    async def get_workspace(self) -> bytes:
        async with self._timeline.span("sandbox"):
            return await self._inner.get_workspace()


class TimedBackend:
    """A SandboxBackend whose sandbox calls are sandbox spans."""

    def __init__(self, inner: SandboxBackend, timeline: Timeline) -> None:
        self._inner = inner
        self._timeline = timeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        async with self._timeline.span("sandbox"):
            return _TimedSandbox(await self._inner.create(*args, **kwargs), self._timeline)

    async def destroy(self, sandbox: Any) -> None:
        await self._inner.destroy(sandbox._inner)

    async def verify(self, *args: Any, **kwargs: Any) -> Any:
        async with self._timeline.span("sandbox"):
            return await self._inner.verify(*args, **kwargs)

    async def aclose(self) -> None:
        await self._inner.aclose()
