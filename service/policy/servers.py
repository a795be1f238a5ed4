"""The policy servers as the service knows them: which weights each one serves, whether it is
paused or out of rotation, and the gate every generation request passes on its way to one.
Changing them (pauses, loads, tags, rotation) is the control plane's: fleet.py's `PolicyFleet`,
built on `PolicyServers`.

A token is never recorded under a version the service did not see its engine serve. The
service asks a server what it serves (`/weight_info`) before its first request and again after
any fault of its (a lost connection, an error answer, tokens tagged with weights the service did
not give it: a restarted engine's "default"); what it then does with a server that serves
something else is the control plane's. The policy client checks every answer's per-token
versions against the versions the service saw the server serve while the request ran (`watch`).

While the service holds a server paused, new generation requests for it wait here (`admit`)
instead of queueing in the engine with a cache salt of the old version. The policy client asks
`admit` before every generation and salts the prefix cache with the server's version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from service.policy.routing import PolicyRouter
from service.policy.vllm_wire import IsPausedResponse, WeightInfoResponse

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

ServerStatus = Literal["serving", "paused", "out", "unknown"]


class ControlError(Exception):
    """A control operation cannot be carried out as asked; the message names the server and what
    to fix."""


class ServerOut(Exception):
    """The server left rotation while a request waited for it: send the request elsewhere."""


class ServerUnasked(ServerOut):
    """The server could not be asked which weights it serves: it serves nothing until it can
    (the request goes elsewhere, and the server cools down)."""


@dataclass
class PolicyStats:
    """Counters for /metrics (service/metrics.py reads them at every scrape)."""

    pauses: int = 0  # server pauses the service made
    pause_seconds: float = 0.0  # seconds servers were held paused by the service, summed
    external_pause_seconds: float = 0.0  # seconds requests waited on servers paused by others
    in_flight_at_pause: int = 0  # generation requests in flight when the last pause began
    in_flight_at_pauses: int = 0  # the same, summed over every pause
    aborted_generations: int = 0  # generations ended by an abort (continued from their partial)
    discarded_tokens: int = 0  # generated tokens received and not kept: must stay 0
    updates: int = 0  # weight updates the service applied


@dataclass(eq=False)
class Window:
    """What the service saw one server serve while one generation request ran on it (the
    policy client checks the answer's per-token versions against it)."""

    seen: set[int]  # every version it served meanwhile
    # The versions it served until a pause of the service's ended every running request
    # (abort, wait): an answer without per-token versions came from one of these.
    before_stop: set[int]
    stopped: bool = False

    def add(self, version: int) -> None:
        self.seen.add(version)
        if not self.stopped:
            self.before_stop.add(version)


@dataclass
class ServerState:
    url: str
    version: int | None = None  # the version the server serves (its tag), when known
    managed: bool | None = None  # offers the control routes; None: not known yet
    asked: bool = False  # what it serves is known; False: asked before it serves again
    doubt: str | None = None  # why what it serves is unknown (it served unknown weights)
    unanswered: str = ""  # why the last time it was asked got no answer
    spans: bool | None = None  # reports per-token weight versions (the generate route)
    out: str | None = None  # why it is out of rotation
    held: bool = False  # paused by the service
    in_flight: int = 0  # generation requests on it now
    paused_since: float | None = None
    paused_total: float = 0.0
    open: asyncio.Event = field(default_factory=asyncio.Event)
    windows: list[Window] = field(default_factory=list)  # one per generation request on it

    def __post_init__(self) -> None:
        self.open.set()

    def paused_clock(self, now: float) -> float:
        """Seconds it has been paused so far (held by the service, or seen paused)."""
        running = now - self.paused_since if self.paused_since is not None else 0.0
        return self.paused_total + running

    @property
    def status(self) -> ServerStatus:
        if self.out is not None:
            return "out"
        if self.held:
            return "paused"
        return "serving" if self.managed is not None and self.doubt is None else "unknown"


@dataclass(frozen=True)
class ServerReport:
    url: str
    version: int | None
    status: ServerStatus
    reason: str | None
    managed: bool | None


def parse_version(tag: str | None) -> int | None:
    """The policy version an engine tag stands for: our tags are decimal integers."""
    if tag is None or not tag.isdecimal():
        return None
    return int(tag)


class PolicyServers:
    """The servers' states and the questions asked of them on the way of a request. A subclass
    decides what becomes of a server once asked (`_adopt`, `_ensure_lora`): the service's own
    fleet brings it in line (fleet.py), a trainer's is taken as it is (follower.py)."""

    # Whether the servers' own weight tags are the versions of their tokens (a trainer's
    # servers: service/policy/follower.py); here the service tags them.
    follows = False

    def __init__(
        self,
        urls: Iterable[str],
        router: PolicyRouter,
        http: Callable[[], httpx.AsyncClient],
        *,
        version: int,
        lora: tuple[str, str] | None,
        probe_timeout_s: float,
        control_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        """See PolicyFleet."""
        self.servers = {u: ServerState(u) for u in urls}
        self.router = router
        self._http = http
        self.target = version  # the policy version; new requests are tagged with it
        self.lora = lora
        self.probe_timeout_s = probe_timeout_s
        self.control_timeout_s = control_timeout_s
        self.stats = PolicyStats()
        # In every cache salt: a server that outlives this service (or serves another one) may
        # hold blocks salted with the same version number but computed with other weights.
        self.salt_run = secrets.token_hex(4)
        self._clock = clock
        self._lock = asyncio.Lock()

    async def admit(self, url: str) -> ServerState:
        """Wait until a generation may be sent to `url`: it was asked what it serves since its
        last fault, and the service does not hold it paused. ServerOut once it is out of
        rotation; ServerUnasked when it cannot be asked."""
        s = self.servers[url]
        while True:
            if s.out is not None:
                raise ServerOut(f"{url} is out of rotation: {s.out}")
            if not s.asked:
                async with self._lock:
                    if s.out is None and not s.asked:
                        await self._probe(s)
                if s.out is None and not s.asked:
                    raise ServerUnasked(
                        f"{url} does not say which weights it serves: {s.unanswered}"
                    )
                continue
            if s.open.is_set():
                return s
            await s.open.wait()

    def salt(self, s: ServerState) -> str:
        """The prefix-cache salt of a request to `s`: one per policy version of this service's
        run, so nothing cached under other weights is reused (vLLM: no '@', '/', '\\', at
        most 128 characters)."""
        version = s.version if s.version is not None else self.target
        return f"policy-v{version}-{self.salt_run}"

    def version_of(self, s: ServerState) -> int:
        return s.version if s.version is not None else self.target

    @contextlib.contextmanager
    def watch(self, s: ServerState) -> Iterator[Window]:
        """The versions `s` serves from now until the block ends, as the service knows them:
        the one it serves now and each one the service tags it with meanwhile (added before
        the tag is sent: the engine labels tokens with it from that moment)."""
        window = Window({self.version_of(s)}, {self.version_of(s)})
        s.windows.append(window)
        try:
            yield window
        finally:
            s.windows.remove(window)

    def suspect(self, s: ServerState) -> None:
        """A request to `s` failed (a lost connection, an error answer): it may have restarted
        with other weights, so it is asked again before it serves again."""
        s.asked = False

    def doubt(self, s: ServerState, reason: str) -> None:
        """`s` answered with tokens of weights the service did not see it serve (a restarted
        engine's "default"): what it serves is unknown (reports say why) until it is asked
        again, which it is before it serves again: then it is brought to the current weights,
        or taken out of rotation until it serves them."""
        log.warning("policy server %s: %s", s.url, reason)
        s.doubt, s.asked, s.version = reason, False, None

    def saw_paused(self, s: ServerState, paused: bool) -> None:
        """The client found the server paused by someone else (or no longer paused)."""
        now = self._clock()
        if paused and s.paused_since is None:
            s.paused_since = now
        elif not paused and s.paused_since is not None and not s.held:
            seconds = now - s.paused_since
            s.paused_total += seconds
            s.paused_since = None
            self.stats.external_pause_seconds += seconds

    def paused_clock(self, s: ServerState) -> float:
        return s.paused_clock(self._clock())

    def _hold(self, s: ServerState) -> None:
        """The service holds `s` paused: its paused clock runs until `_release`."""
        if not s.held:
            s.held = True
            if s.paused_since is None:
                s.paused_since = self._clock()

    def _release(self, s: ServerState) -> None:
        """The service no longer holds `s` paused: requests for it go again."""
        if s.held and s.paused_since is not None:
            seconds = self._clock() - s.paused_since
            s.paused_total += seconds
            self.stats.pause_seconds += seconds
        s.held, s.paused_since = False, None
        s.open.set()

    async def is_paused(self, s: ServerState) -> bool:
        """Whether the server is paused now: held by the service, or says so itself (someone
        else paused it). A server that cannot say is taken as not paused, and so is one out of
        rotation: a request still on it is not waited for past its timeout (it goes elsewhere;
        the service aborted what it froze there when it took the server out)."""
        if s.out is not None:
            return False
        if s.held:
            return True
        try:
            r = await self._send(s, "GET", "/is_paused", None, timeout=self.probe_timeout_s)
            paused = parse_answer(IsPausedResponse, r).is_paused
        except (httpx.HTTPError, ControlError):
            return False
        self.saw_paused(s, paused)
        return paused

    def report(self) -> list[ServerReport]:
        return [
            ServerReport(s.url, s.version, s.status, s.out or s.doubt, s.managed)
            for s in self.servers.values()
        ]

    async def _probe(self, s: ServerState) -> None:
        """What the server serves, asked before its first request and after each of its
        faults; what becomes of it then is `_adopt`'s."""
        s.asked = True
        try:
            r = await self._send(s, "GET", "/weight_info", None, timeout=self.probe_timeout_s)
            managed = r.status_code != 404
            tag = parse_answer(WeightInfoResponse, r).weight_version if managed else None
        except (httpx.HTTPError, ControlError) as e:
            s.unanswered = f"{type(e).__name__}: {describe(e)}"
            log.info("policy server %s not answering (%s)", s.url, s.unanswered)
            s.asked = False  # asked again before it serves
            return
        s.doubt = None
        if managed:
            await self._adopt(s, tag)
        else:
            s.managed, s.version = False, None  # follows the service's number
        if s.out is None:
            await self._ensure_lora(s)
        if s.out is None:  # just checked: no cool-down from an earlier fault
            self.router.mark_ok(s.url)

    async def _adopt(self, s: ServerState, tag: str | None) -> None:
        """`s` offers the control routes and reports `tag` (see `_probe`)."""
        raise NotImplementedError

    async def _ensure_lora(self, s: ServerState) -> None:
        """`s` serves the LoRA adapter generation names, if there is one."""
        raise NotImplementedError

    def _set_version(self, s: ServerState, version: int | None) -> None:
        """`s` serves `version` (the service tagged it, or asked it)."""
        s.version = version
        if version is not None:
            for window in s.windows:
                window.add(version)

    async def _send(
        self,
        s: ServerState,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        timeout = self.control_timeout_s if timeout is None else timeout
        return await self._http().request(
            method, s.url + path, json=body, params=params, timeout=timeout
        )


def check_answer(r: httpx.Response) -> None:
    if r.status_code != 200:
        what = f"{r.request.method} {r.request.url.path}"
        raise ControlError(f"{what}: HTTP {r.status_code}: {r.text[:300]}")


def parse_answer(model: type[M], r: httpx.Response) -> M:
    check_answer(r)
    try:
        return model.model_validate_json(r.content)
    except ValidationError as e:
        raise ControlError(f"{r.request.url.path}: unexpected answer {r.text[:200]!r}: {e}") from e


def describe(e: BaseException) -> str:
    return str(e) or type(e).__name__
