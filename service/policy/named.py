"""Policy servers a rollout request names (`policy: {urls, model}`): a trainer's own replicas.

Each distinct set (its URLs and model) gets a policy client of its own, so its own routing,
sticky sessions and health (service/policy/client.py), over a follower fleet that never
controls the servers (service/policy/follower.py). Sets are shared by the groups that name the
same one, counted while in use, and closed once no group has used them for `idle_s`. Only URLs
under the operator's prefixes may be named (service/policy/allowlist.py): `check` refuses the
rest before anything is queued or sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.errors import Forbidden
from service.policy.allowlist import NotAllowed, PolicyAllowList
from service.policy.client import normalize_base_url
from service.sample import PolicyTarget

if TYPE_CHECKING:
    from service.episode import EpisodeRunner
    from service.policy.client import PolicyClient
    from service.sample import SampleSpec

log = logging.getLogger(__name__)

IDLE_S = 300.0  # a set no group used for this long is closed


@dataclass
class _Named:
    client: PolicyClient
    users: int = 0
    idle_since: float = 0.0


class NamedPolicies:
    """The request-named sets of one service."""

    def __init__(
        self,
        allow: PolicyAllowList,
        make: Callable[[PolicyTarget], PolicyClient],
        *,
        idle_s: float = IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`make`: a policy client for a set (the service's timeouts and retries, a follower
        fleet)."""
        self.allow = allow
        self._make = make
        self.idle_s = idle_s
        self._clock = clock
        self._sets: dict[PolicyTarget, _Named] = {}
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.Task | None = None

    def check(self, urls: list[str], field: tuple[str | int, ...]) -> None:
        """Forbidden naming the first URL (`field` + its index) that is not under an allowed
        prefix. Nothing is sent anywhere."""
        if not self.allow:
            raise Forbidden(
                "this service takes no policy servers from requests (serve --allow-policy-url)",
                field=field,
            )
        for i, url in enumerate(urls):
            try:
                self.allow.check(url)
                self.allow.check(normalize_base_url(url))  # where requests go, `/v1` dropped
            except (NotAllowed, ValueError) as e:
                raise Forbidden(f"{url!r} may not be named: {e}", field=(*field, i)) from None

    @property
    def active(self) -> dict[PolicyTarget, int]:
        """Each open set, with the groups using it now."""
        return {t: n.users for t, n in self._sets.items()}

    @contextlib.asynccontextmanager
    async def lease(self, target: PolicyTarget) -> AsyncIterator[PolicyClient]:
        """The set's client (opened on first use), counted in use until the block ends."""
        if self._sweeper is None:  # started with the first set, in the service's loop
            self._sweeper = asyncio.create_task(self.run(max(1.0, self.idle_s / 4)))
        async with self._lock:
            await self._drop_idle()
            named = self._sets.get(target)
            if named is None:
                named = self._sets[target] = _Named(self._make(target))
            named.users += 1
        try:
            yield named.client
        finally:
            named.users -= 1
            named.idle_since = self._clock()

    async def sweep(self) -> None:
        """Close the sets idle for `idle_s` (also done on each lease)."""
        async with self._lock:
            await self._drop_idle()

    async def run(self, interval_s: float) -> None:
        """`sweep` every `interval_s` seconds, for ever (the service's background task)."""
        while True:
            await asyncio.sleep(interval_s)
            await self.sweep()

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        async with self._lock:
            sets, self._sets = list(self._sets.values()), {}
        for named in sets:
            await named.client.aclose()

    async def _drop_idle(self) -> None:
        now = self._clock()
        for target, named in list(self._sets.items()):
            if named.users == 0 and now - named.idle_since >= self.idle_s:
                del self._sets[target]
                log.info("policy servers %s: idle, closed", ", ".join(target.urls))
                await named.client.aclose()


class NamedPolicyRunner:
    """The episode runner, on a request's own policy servers for groups whose samples name
    them (SampleSpec.policy), on the service's for the others. Everything else is the
    runner's."""

    def __init__(self, runner: EpisodeRunner, named: NamedPolicies) -> None:
        self.runner = runner
        self.named = named

    def __getattr__(self, item: str) -> Any:
        return getattr(self.runner, item)

    async def run_group(self, task: Any, samples: list[SampleSpec], *args: Any, **kw: Any) -> None:
        target = samples[0].policy if samples else None
        if target is None:
            await self.runner.run_group(task, samples, *args, **kw)
            return
        async with self.named.lease(target) as client:
            on_named = self.runner.with_policy(client, lambda: client.fleet.target)
            await on_named.run_group(task, samples, *args, **kw)
