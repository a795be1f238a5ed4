"""Which policy server (vLLM replica) serves which sample.

A new sample goes to the least-loaded healthy server (fewest in-flight samples); a sample's later
turns stick to the same server, where its prefix is cached. A failed server leaves the rotation
for a cool-down and is tried again afterwards; if every server is cooling down, the least recently
failed one is used anyway (better a retry than a certain failure). When a sample's sticky server
fails, the sample moves; only its prefix cache is lost.

A server can also be taken out of rotation (the weight-update control plane, fleet.py, does so
when a server could not be brought to the current policy version): then it is never picked, its
samples move, and with every server out `pick` raises NoServerInRotation.

The policy client owns its router: callers say which sample a request is for (`sample=`) and
pin or release samples through the client, never here.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class NoServerInRotation(Exception):
    """Every policy server is out of rotation."""


class PolicyRouter:
    def __init__(
        self,
        urls: list[str],
        *,
        cooldown_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # No URL: a service whose requests name their own servers (service/policy/named.py).
        if len(set(urls)) != len(urls):
            raise ValueError(f"policy servers: duplicate URLs in {urls}")
        self.urls = list(urls)
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._in_flight: dict[str, int] = dict.fromkeys(urls, 0)
        self._failed_at: dict[str, float] = {}
        self._sticky: dict[str, str] = {}  # sample key -> url
        self._out: set[str] = set()  # out of rotation

    def in_flight(self, url: str) -> int:
        return self._in_flight[url]

    def healthy(self, url: str) -> bool:
        if url in self._out:
            return False
        failed = self._failed_at.get(url)
        return failed is None or self._clock() - failed >= self.cooldown_s

    def in_rotation(self, url: str) -> bool:
        return url not in self._out

    def take_out(self, url: str) -> None:
        """Never pick `url` again until `put_back`; its samples move on their next request."""
        self._check(url)
        self._out.add(url)

    def put_back(self, url: str) -> None:
        """Back in rotation: it was just checked, so no cool-down either."""
        self._check(url)
        self._out.discard(url)
        self._failed_at.pop(url, None)

    def pick(self) -> str:
        """A server for a one-off request (no sample, no stickiness, nothing counted)."""
        healthy = [u for u in self.urls if self.healthy(u)]
        if healthy:
            # ties go to the first listed server: deterministic, easy to reason about
            return min(healthy, key=lambda u: self._in_flight[u])
        usable = [u for u in self.urls if u not in self._out]
        if not self.urls:
            raise NoServerInRotation("no policy server (--policy-url)")
        if not usable:
            raise NoServerInRotation("every policy server is out of rotation")
        return min(usable, key=lambda u: self._failed_at[u])

    def acquire(self, sample_key: str) -> str:
        """The server for this sample's next request; counts the sample as in flight there."""
        url = self._sticky.get(sample_key)
        if url is not None and self.healthy(url):
            return url
        new = self.pick()  # raises with every server out of rotation: the sample stays put
        if url is not None:  # its server is cooling down or out of rotation: move the sample
            self._in_flight[url] -= 1
        self._sticky[sample_key] = new
        self._in_flight[new] += 1
        return new

    def assign(self, sample_key: str, url: str) -> None:
        """Pin a sample to a given server (e.g. where its group's shared first turn ran, so its
        prefix is cached there); counts it in flight there, like acquire."""
        if url not in self._in_flight:
            raise ValueError(f"policy servers: unknown URL {url}")
        old = self._sticky.get(sample_key)
        if old is not None:
            self._in_flight[old] -= 1
        self._sticky[sample_key] = url
        self._in_flight[url] += 1

    def release(self, sample_key: str) -> None:
        """The sample is finished: forget it and free its slot."""
        url = self._sticky.pop(sample_key, None)
        if url is not None:
            self._in_flight[url] -= 1

    def mark_failed(self, url: str) -> None:
        self._check(url)
        self._failed_at[url] = self._clock()

    def _check(self, url: str) -> None:
        if url not in self._in_flight:
            raise ValueError(f"policy servers: unknown URL {url}")

    def mark_ok(self, url: str) -> None:
        self._failed_at.pop(url, None)
