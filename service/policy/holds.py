"""How long a sample's generation requests are held by paused policy servers.

A pause is not the agent's time (service/agent_clock.py stops the agent's clock while one of
its requests is held). The policy client reports each generation request to the sample's
`Holds` (`begin` before it waits for its server, `end` once it is answered or given up), and
the time it is held is read off the fleet's paused clock of that server: the seconds the
service held it paused, or someone else did (seen with `/is_paused`, by the client once its
timeout passes and by `PauseProbe` while a request waits on it).
"""

from __future__ import annotations

import asyncio

from service.policy.servers import PolicyServers, ServerState


class Holds:
    """One sample's generation requests: the one out now (its server, and that server's paused
    clock when it was sent), and the seconds the finished ones were held."""

    def __init__(self, fleet: PolicyServers) -> None:
        self.fleet = fleet
        self.done_s = 0.0
        self._out: tuple[ServerState, float] | None = None
        self.changed = asyncio.Event()  # set when a request begins or ends

    def begin(self, server: ServerState) -> None:
        """A generation request is about to wait for `server` (admission), then run there."""
        self._out = (server, self.fleet.paused_clock(server))
        self.changed.set()

    def end(self) -> None:
        """The request out was answered, or given up."""
        self.done_s += self.current_s()
        self._out = None
        self.changed.set()

    @property
    def server(self) -> ServerState | None:
        """The server of the request out now, if any."""
        return self._out[0] if self._out is not None else None

    def held(self) -> bool:
        """A request is out and its server is paused now (by the service or seen paused)."""
        s = self.server
        return s is not None and (s.held or s.paused_since is not None)

    def current_s(self) -> float:
        """Seconds the request out now has been held so far."""
        if self._out is None:
            return 0.0
        server, before = self._out
        return self.fleet.paused_clock(server) - before

    def total_s(self) -> float:
        """Seconds every request of the sample was held, the one out now included."""
        return self.done_s + self.current_s()


class PauseProbe:
    """Asks a server whether someone else paused it (`/is_paused`), at most once per `poll_s`
    however many samples wait on it: the fleet's paused clock then runs from the answer on."""

    def __init__(self, fleet: PolicyServers, poll_s: float) -> None:
        self.fleet = fleet
        self.poll_s = poll_s
        self._asked: dict[str, tuple[float, asyncio.Task[bool]]] = {}

    async def __call__(self, server: ServerState) -> None:
        loop = asyncio.get_running_loop()
        last = self._asked.get(server.url)
        if last is None or loop.time() - last[0] >= self.poll_s:
            last = (loop.time(), asyncio.ensure_future(self.fleet.is_paused(server)))
            self._asked[server.url] = last
        # Shielded: a sample that stops waiting must not cancel the answer others wait for.
        await asyncio.shield(last[1])
