"""The overlap benchmark's baseline dispatch: the scheduler as it was before slot-level dispatch
(issue 27), run side by side with the scheduler's own.

A group's samples start in chunks of at most `max_concurrent_samples`, each chunk only once as
many slots as it has samples are free, with a first request of n = the chunk's size: so a chunk
waits for the slowest episode of the one before it. Only the slot-taking differs
(`Scheduler._take_slots`); everything else is the service's own code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import service.collect
from service.scheduler import Scheduler


class ChunkScheduler(Scheduler):
    async def _take_slots(self, samples: int) -> tuple[int, int]:
        chunk = min(samples, self.max_concurrent)
        return chunk, await self._slots.start_group(chunk, least=chunk)


@contextlib.contextmanager
def chunk_dispatch() -> Iterator[None]:
    """`service.collect.collect` dispatches by the chunk while this is entered."""
    with mock.patch.object(service.collect, "Scheduler", ChunkScheduler):
        yield
