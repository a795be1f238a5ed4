"""The agent's clock: its time budget counts the agent's own time, not the time a paused policy
server holds its generation requests.

A weight update pauses the servers for as long as a checkpoint takes to load (minutes, for a
large model), and a trainer may pause them itself. Charging that to the agent would time out
long episodes during the pause and grade them 0 for the trainer's doing. So the clock stops
while one of the sample's requests is held (service/policy/holds.py), and a request held
longer than `max_hold_s` ends the sample instead, masked as a policy fault (`HeldTooLong`):
a server stuck paused is the policy's fault, and the sample is re-run, never graded. The
first turn, before the agent's clock starts, has the same bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from service.policy.holds import Holds
from service.policy.servers import ServerState

log = logging.getLogger(__name__)

# Seconds a generation request may be held by a paused server before its sample is masked and
# re-run: longer than a large checkpoint takes to load, short enough that a server left paused
# (an operator's mistake, a trainer gone) does not hold its samples for ever.
MAX_HOLD_S = 900.0

Probe = Callable[[ServerState], Awaitable[None]]


class AgentClock:
    """`budget_s` seconds of the agent's time (None: no budget, only the hold bound). Inside
    `running()`, TimeoutError is raised when the budget is spent or a request was held longer
    than `max_hold_s` (then `held_too_long` says so). `probe` asks a server that is not held by
    the service whether someone else paused it; it is called every `poll_s` while a request is
    out, so that such a pause stops the clock within that time."""

    def __init__(
        self,
        holds: Holds,
        probe: Probe,
        *,
        budget_s: float | None,
        max_hold_s: float,
        poll_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.holds = holds
        self.probe = probe
        self.budget_s = budget_s
        self.max_hold_s = max_hold_s
        self.poll_s = poll_s
        self._now = now
        self._started: float | None = None
        self.held_too_long: str | None = None

    def used_s(self) -> float:
        """The agent's seconds so far: wall time less the time its requests were held."""
        if self._started is None:
            return 0.0
        return self._now() - self._started - self.holds.total_s()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[AgentClock]:
        self._started = self._now()
        async with asyncio.timeout(None) as timeout:
            watch = asyncio.create_task(self._watch(timeout))
            try:
                yield self
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

    async def _watch(self, timeout: asyncio.Timeout) -> None:
        while True:
            self.holds.changed.clear()
            server = self.holds.server
            # Paused by someone else? (A server without the control routes cannot say.)
            if server is not None and not server.held and server.managed is not False:
                try:
                    await self.probe(server)
                except Exception as e:  # noqa: BLE001 - the clock must keep running whatever
                    log.warning("asking %s whether it is paused failed: %s", server.url, e)
            if self.holds.held():
                held = self.holds.current_s()
                if held >= self.max_hold_s:
                    self.held_too_long = (
                        f"a generation request was held {held:.0f} s by a paused policy server "
                        f"(more than {self.max_hold_s:g} s)"
                    )
                    break
                wait = min(self.poll_s, self.max_hold_s - held)
            else:
                left = math.inf if self.budget_s is None else self.budget_s - self.used_s()
                if left <= 0:
                    break
                wait = min(left, self.poll_s) if server is not None else left
            # Woken early when a request begins or ends; otherwise look again after `wait`.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if math.isinf(wait) else wait):
                    await self.holds.changed.wait()
        timeout.reschedule(asyncio.get_running_loop().time())
