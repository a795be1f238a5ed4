"""The control plane of the policy servers: which weights each one serves, and changing them.

One place knows, per vLLM server, the policy version it serves (the engine's own tag, set with
`/update_weight_version`), whether it is paused by the service, and whether it is in rotation.
Weight updates go through here:

- `update(version, weights_path=DIR | lora_path=DIR)`: pause every server (`keep`: running
  requests freeze; `abort` on a server that cannot report per-token versions, so that no request
  straddles the change unseen), load the weights in place (`/collective_rpc reload_weights`, or an
  in-place LoRA load), tag them `version`, check the tag, resume. A server that fails after
  retries leaves rotation, and the report says why: never a silent mix.
- `pause(mode)`, then the trainer moves the weights itself, then `tag(version)` (which resumes
  what the service paused) or `resume()`. `keep` is `abort` on a server without per-token
  versions, for the same reason.

A server that leaves rotation while the service holds it paused has the requests frozen in it
aborted (they come back with their partial tokens and continue on another server); it stays
paused, and is resumed and put back once it serves the current version (`reconcile`).

A token is never recorded under a version the service did not see its engine serve. The
service asks a server what it serves (`/weight_info`) before its first request and again after
any fault of its (a lost connection, an error answer, tokens tagged with weights the service did
not give it: a restarted engine's "default"); a server that serves something else is brought
to the current weights (when the service loaded them) or kept out of rotation until it serves
them. The policy client checks every answer's per-token versions against the versions the
service saw the server serve while the request ran (`watch`).

While the service holds a server paused, new generation requests for it wait here (`admit`)
instead of queueing in the engine with a cache salt of the old version. The policy client asks
`admit` before every generation and salts the prefix cache with the server's version.

A server without the dev-mode control routes (no VLLM_SERVER_DEV_MODE) is "unmanaged": it
follows the service's version number, and asking for a pause or a load is a ControlError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from service.policy.routing import PolicyRouter
from service.policy.vllm_wire import (
    CollectiveRpcResponse,
    IsPausedResponse,
    ModelList,
    StatusResponse,
    UpdateWeightVersionResponse,
    WeightInfoResponse,
)

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

PauseMode = Literal["keep", "abort", "wait"]
ServerStatus = Literal["serving", "paused", "out", "unknown"]
CONTROL_TIMEOUT_S = 600.0  # a reload of a large checkpoint takes minutes


class ControlError(Exception):
    """A control operation cannot be carried out as asked; the message names the server and what
    to fix."""


class WeightsRefused(ControlError):
    """The weights named could not be loaded (`field`: weights_path or lora_path): nothing was
    changed but, at most, the one server that tried them first (see PolicyFleet.update)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


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


class PolicyFleet:
    # Whether the servers' own weight tags are the versions of their tokens (a trainer's
    # servers: service/policy/follower.py); here the service tags them.
    follows = False

    def __init__(
        self,
        urls: Iterable[str],
        router: PolicyRouter,
        http: Callable[[], httpx.AsyncClient],
        *,
        version: int = 0,
        lora: tuple[str, str] | None = None,
        retries: int = 2,
        backoff_s: float = 1.0,
        probe_timeout_s: float = 10.0,
        control_timeout_s: float = CONTROL_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`lora`: (name, path) of the adapter every server serves, the one generation names.
        `probe_timeout_s`: for the questions asked on the way of a request (what it serves,
        whether it is paused); `control_timeout_s`: for pauses, loads and tags."""
        self.servers = {u: ServerState(u) for u in urls}
        self.router = router
        self._http = http
        self.target = version  # the policy version; new requests are tagged with it
        self.lora = lora
        # Where the current version's weights are, when the service loaded them: a server that
        # comes back (restarted, or out after a failed update) is brought to them.
        self.source: dict[str, str] | None = None
        # Whether the version changed while this service ran: a fresh engine is adopted as the
        # current version only before (the operator started it with the current weights).
        self.changed = False
        self.retries = retries
        self.backoff_s = backoff_s
        self.probe_timeout_s = probe_timeout_s
        self.control_timeout_s = control_timeout_s
        self.stats = PolicyStats()
        # In every cache salt: a server that outlives this service (or serves another one) may
        # hold blocks salted with the same version number but computed with other weights.
        self.salt_run = secrets.token_hex(4)
        self._clock = clock
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------ for the policy client

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
            paused = _parse(IsPausedResponse, r).is_paused
        except (httpx.HTTPError, ControlError):
            return False
        self.saw_paused(s, paused)
        return paused

    # ------------------------------------------------------------ the operations

    async def start(self) -> None:
        """Ask every server what it serves (tagging fresh ones with the current version) and
        load the LoRA adapter where it is missing. A server that does not answer is asked again
        on its first request."""
        async with self._lock:
            await asyncio.gather(*(self._probe(s) for s in self.servers.values()))

    async def pause(self, mode: PauseMode) -> list[ServerReport]:
        """Pause every server in rotation (`keep`, `abort` or `wait`); answers once all are.
        `keep` is `abort` on a server without per-token versions: a request frozen there would
        finish under the new weights with every token recorded under the old version."""
        async with self._lock:
            servers = await self._managed_in_rotation("pause")
            self._count_pause(servers)
            results = await asyncio.gather(
                *(self._pause(s, _unseen_straddle_free(s, mode)) for s in servers),
                return_exceptions=True,
            )
            for s, r in zip(servers, results, strict=True):
                if isinstance(r, BaseException):
                    await self._take_out(s, f"did not pause: {_describe(r)}")
            return self.report()

    async def resume(self) -> list[ServerReport]:
        """Resume what the service paused (servers out of rotation stay paused)."""
        async with self._lock:
            held = [s for s in self.servers.values() if s.held and s.out is None]
            results = await asyncio.gather(*(self._resume(s) for s in held), return_exceptions=True)
            for s, r in zip(held, results, strict=True):
                if isinstance(r, BaseException):
                    await self._take_out(s, f"did not resume: {_describe(r)}")
            return self.report()

    async def tag(self, version: int) -> list[ServerReport]:
        """The trainer moved the weights itself (or only the number changes): tag every server
        in rotation with `version`, and resume what the service paused."""
        async with self._lock:
            await self._probe_all()
            self.changed = self.changed or version != self.target
            self.target = version
            self.source = None  # the weights are the trainer's: we could not load them again
            servers = [s for s in self.servers.values() if s.out is None]
            results = await asyncio.gather(
                *(self._tag_and_resume(s, version) for s in servers), return_exceptions=True
            )
            for s, r in zip(servers, results, strict=True):
                if not isinstance(r, BaseException):
                    continue
                if isinstance(r, httpx.TransportError) and not s.held:
                    # Unreachable: it keeps the tag it has (its tokens say so, token by token;
                    # the report shows its version), and is tagged again by the next change.
                    # Asked again before it serves: it may come back restarted.
                    log.warning("policy server %s missed version %d: %s", s.url, version, r)
                    self.suspect(s)
                    continue
                await self._take_out(
                    s, f"could not be tagged with version {version}: {_describe(r)}"
                )
            return self.report()

    async def update(
        self, version: int, *, weights_path: str | None = None, lora_path: str | None = None
    ) -> list[ServerReport]:
        """Load new weights on every server (in place, paused with `keep`), tag them `version`
        and resume; answers once every server serves `version` or is out of rotation."""
        if (weights_path is None) == (lora_path is None):
            raise ControlError("give one of weights_path and lora_path")
        if lora_path is not None and self.lora is None:
            raise ControlError(
                "lora_path: no adapter is served (start the service with --lora NAME=DIR)"
            )
        source = {"weights_path": weights_path} if weights_path else {"lora_path": lora_path or ""}
        field, path = next(iter(source.items()))
        _refuse_local_non_checkpoint(field, path)
        async with self._lock:
            serving = await self._managed_in_rotation("load weights")
            previous = (self.target, self.source, self.changed)
            self.target, self.source, self.changed = version, source, True
            self.stats.updates += 1
            # One server first: a load that fails leaves the engine unusable (vLLM 0.32 on CPU:
            # its engine core is gone, /health still says 200), so weights that do not load
            # must cost one server, not the fleet. The others load together once it has.
            before = {s.url: s.in_flight for s in self.servers.values()}  # for the metrics
            done: list[ServerState] = []
            for first in serving or list(self.servers.values()):
                done.append(first)
                refused = await self._bring(first, version, source)
                if refused is None and first.out is None:
                    break
                if refused is not None:  # the engine answered: these weights do not load
                    self.target, self.source, self.changed = previous
                    raise WeightsRefused(
                        f"{field}: {path!r} did not load on {first.url} ({refused}); that "
                        "server is out of rotation, the others keep the weights they serve",
                        field,
                    )
                # It did not answer at all: out of rotation; the next one goes first.
            rest = [s for s in self.servers.values() if s not in done]
            self._count_pause(done + [s for s in rest if s.out is None], before)
            await asyncio.gather(*(self._bring(s, version, source) for s in rest))
            return self.report()

    async def reconcile(self) -> None:
        """Bring back what can be: servers to be asked (again) what they serve, and servers
        out of rotation that now serve the current version, or can be brought to it (the
        service knows its weights)."""
        async with self._lock:
            for s in self.servers.values():
                if s.out is not None:
                    await self._readmit(s)
                elif not s.asked:
                    await self._probe(s)

    async def run(self, interval_s: float) -> None:
        """`reconcile` every `interval_s` seconds, for ever (the service's background task)."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.reconcile()
            except Exception:  # noqa: BLE001 - tried again at the next round
                log.exception("policy servers: reconciling failed")

    def report(self) -> list[ServerReport]:
        return [
            ServerReport(s.url, s.version, s.status, s.out or s.doubt, s.managed)
            for s in self.servers.values()
        ]

    # ------------------------------------------------------------ steps

    async def _probe(self, s: ServerState) -> None:
        """What the server serves, asked before its first request and after each of its
        faults. The current version, or an older one the service left it with (a tag that
        did not reach it), is served; a fresh engine ("default": started, or restarted) is
        brought to the weights of the last update the service loaded, or tagged with the
        current version when the version never changed while the service ran (the operator
        started it with the current weights); anything else leaves rotation."""
        s.asked = True
        try:
            r = await self._send(s, "GET", "/weight_info", None, timeout=self.probe_timeout_s)
            managed = r.status_code != 404
            tag = _parse(WeightInfoResponse, r).weight_version if managed else None
        except (httpx.HTTPError, ControlError) as e:
            s.unanswered = f"{type(e).__name__}: {_describe(e)}"
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
        """A server with the control routes that reports `tag`: see `_probe`."""
        s.managed = True
        version = parse_version(tag)
        if version is not None and version in (self.target, s.version):
            self._set_version(s, version)
        elif self.source is not None:
            await self._bring(s, self.target, self.source)
        elif version is None and not self.changed:
            try:
                await self._set_tag(s, self.target)
                self._set_version(s, self.target)
            except (httpx.HTTPError, ControlError) as e:
                await self._take_out(s, f"could not be tagged: {_describe(e)}")
        elif version is None:
            await self._take_out(
                s, f"a fresh engine (restarted?) while the policy is at {self.target}, whose "
                f"weights the trainer moved: load them there and tag it {self.target} "
                "(/update_weight_version); it then comes back",
            )  # fmt: skip
        else:
            await self._take_out(
                s, f"serves version {version} but the policy is at {self.target}, and the "
                "service does not know where that version's weights are",
            )  # fmt: skip

    async def _readmit(self, s: ServerState) -> None:
        """A server out of rotation comes back once it serves the current version: brought to
        it when the service knows its weights, else once someone tagged it so. A pause of the
        service's is lifted first (its engine would hold every request sent to it)."""
        try:
            r = await self._send(s, "GET", "/weight_info", None, timeout=self.probe_timeout_s)
            version = parse_version(_parse(WeightInfoResponse, r).weight_version)
        except (httpx.HTTPError, ControlError):
            return
        if self.source is not None and version != self.target:
            await self._bring(s, self.target, self.source)
        elif version == self.target:
            if s.held:
                try:
                    await self._resume(s)
                except (httpx.HTTPError, ControlError) as e:
                    log.warning("policy server %s: resume: %s", s.url, _describe(e))
                    return
            s.managed = True
            self._set_version(s, version)
            self._put_back(s)
        if s.out is None:
            await self._ensure_lora(s)

    async def _bring(self, s: ServerState, version: int, source: dict[str, str]) -> str | None:
        """Pause, load, tag, check, resume one server, retrying; on failure take it out (what
        it holds is aborted: the samples continue elsewhere from their partial tokens).
        Returns why, when it was the load that the engine answered with an error (the weights,
        most likely: the caller decides); None otherwise (see `s.out` for the outcome)."""
        mode = _unseen_straddle_free(s, "keep")
        last = ""
        refused: str | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * attempt)
            step = "pause"
            try:
                if not s.held:
                    await self._pause(s, mode)
                step = "load"
                await self._load(s, source)
                step = "tag"
                await self._tag_and_resume(s, version)
            except (httpx.HTTPError, ControlError) as e:
                last = _describe(e)
                # An answer to the load (not a lost connection): the weights, most likely.
                refused = last if step == "load" and isinstance(e, ControlError) else None
                log.warning("policy server %s: %s for version %d: %s", s.url, step, version, last)
                continue
            self._put_back(s)
            return None
        await self._take_out(s, f"update to version {version} failed: {last}")
        return refused

    async def _pause(self, s: ServerState, mode: PauseMode) -> None:
        s.open.clear()
        try:
            r = await self._send(s, "POST", "/pause", None, params={"mode": mode})
            _parse(StatusResponse, r)
        except httpx.TimeoutException as e:
            if isinstance(e, httpx.ConnectTimeout):
                if not s.held:
                    s.open.set()
                raise
            # The engine took the pause and did not answer in time (a wait pause whose running
            # requests outlast the control timeout): it is paused, or will be. Held, so that it
            # is resumed before it serves again.
            self._hold(s)
            raise
        except BaseException:
            if not s.held:
                s.open.set()
            raise
        self._hold(s)
        if mode != "keep":  # every request running on it has ended: no token comes after
            for window in s.windows:
                window.stopped = True

    def _hold(self, s: ServerState) -> None:
        if not s.held:
            s.held = True
            if s.paused_since is None:
                s.paused_since = self._clock()

    async def _resume(self, s: ServerState) -> None:
        _parse(StatusResponse, await self._send(s, "POST", "/resume", None))
        self._release(s)

    async def _load(self, s: ServerState, source: dict[str, str]) -> None:
        if "weights_path" in source:
            body = {"method": "reload_weights", "kwargs": {"weights_path": source["weights_path"]}}
            _parse(CollectiveRpcResponse, await self._send(s, "POST", "/collective_rpc", body))
            return
        assert self.lora is not None
        name, path = self.lora[0], source["lora_path"]
        # In place, so that requests already running switch to the new adapter weights...
        body = {"lora_name": name, "lora_path": path, "load_inplace": True}
        _check(await self._send(s, "POST", "/v1/load_lora_adapter", body))
        # ...then once more under a fresh entry: vLLM keeps the in-place flag on the adapter it
        # caches and would re-read it from disk for every later request (SkyRL and prime-rl
        # reset the flag in the server; over HTTP, unloading and loading again resets it).
        _check(await self._send(s, "POST", "/v1/unload_lora_adapter", {"lora_name": name}))
        body = {"lora_name": name, "lora_path": path}
        _check(await self._send(s, "POST", "/v1/load_lora_adapter", body))

    async def _tag_and_resume(self, s: ServerState, version: int) -> None:
        if s.managed:
            await self._set_tag(s, version)
        self._set_version(s, version)
        if s.held:
            await self._resume(s)

    async def _set_tag(self, s: ServerState, version: int) -> None:
        # The engine labels tokens with the new tag from the moment it takes it: requests
        # running on it accept it from now on, whether or not its answer reaches us.
        for window in s.windows:
            window.add(version)
        body = {"new_version": str(version)}
        r = await self._send(s, "POST", "/update_weight_version", body)
        _parse(UpdateWeightVersionResponse, r)
        info = _parse(WeightInfoResponse, await self._send(s, "GET", "/weight_info", None))
        if info.weight_version != str(version):
            raise ControlError(f"tagged {version} but reports {info.weight_version!r}")

    def _set_version(self, s: ServerState, version: int | None) -> None:
        """`s` serves `version` (the service tagged it, or asked it)."""
        s.version = version
        if version is not None:
            for window in s.windows:
                window.add(version)

    async def _ensure_lora(self, s: ServerState) -> None:
        if self.lora is None:
            return
        name, path = self.lora
        if self.source is not None and "lora_path" in self.source:
            path = self.source["lora_path"]
        try:
            served = _parse(ModelList, await self._send(s, "GET", "/v1/models", None))
            if any(m.id == name for m in served.data):
                return
            body = {"lora_name": name, "lora_path": path}
            _check(await self._send(s, "POST", "/v1/load_lora_adapter", body))
        except (httpx.HTTPError, ControlError) as e:
            await self._take_out(s, f"could not load the LoRA adapter {name!r}: {_describe(e)}")

    # ------------------------------------------------------------ bookkeeping

    async def _probe_all(self) -> None:
        for s in self.servers.values():
            if s.out is None and not s.asked:
                await self._probe(s)

    async def _managed_in_rotation(self, what: str) -> list[ServerState]:
        """The servers in rotation, once each was asked what it is. One that answers without
        the control routes makes the operation impossible (ControlError, nothing changed); one
        that does not answer is included, fails the operation and leaves rotation."""
        await self._probe_all()
        servers = [s for s in self.servers.values() if s.out is None]
        unmanaged = [s.url for s in servers if s.managed is False]
        if unmanaged:
            raise ControlError(
                f"cannot {what}: {', '.join(unmanaged)} offer no control routes (start vLLM "
                "with VLLM_SERVER_DEV_MODE=1)"
            )
        return servers

    def _count_pause(
        self, servers: list[ServerState], in_flight: dict[str, int] | None = None
    ) -> None:
        """`in_flight`: the servers' requests as they were when their pause began."""
        n = sum(s.in_flight if in_flight is None else in_flight[s.url] for s in servers)
        self.stats.pauses += len(servers)
        self.stats.in_flight_at_pause = n
        self.stats.in_flight_at_pauses += n

    def _release(self, s: ServerState) -> None:
        if s.held and s.paused_since is not None:
            seconds = self._clock() - s.paused_since
            s.paused_total += seconds
            self.stats.pause_seconds += seconds
        s.held, s.paused_since = False, None
        s.open.set()

    async def _take_out(self, s: ServerState, reason: str) -> None:
        log.warning("policy server %s out of rotation: %s", s.url, reason)
        s.out = reason
        self.router.take_out(s.url)
        s.open.set()  # waiting requests look again, see it is out and go elsewhere
        if not s.held:
            return
        if s.paused_since is not None:  # its pause no longer holds anyone up
            seconds = self._clock() - s.paused_since
            s.paused_total += seconds
            self.stats.pause_seconds += seconds
            s.paused_since = None
        # Requests frozen in its engine would wait for a resume that does not come while it is
        # out: aborted, they come back with their partial tokens and continue on another
        # server. It stays paused (held) until it is readmitted.
        with contextlib.suppress(httpx.HTTPError):
            await self._send(
                s, "POST", "/pause", None, params={"mode": "abort"}, timeout=self.probe_timeout_s
            )

    def _put_back(self, s: ServerState) -> None:
        if s.out is not None:
            log.info("policy server %s back in rotation at version %s", s.url, s.version)
        s.out, s.doubt, s.asked = None, None, True
        self.router.put_back(s.url)

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


def _unseen_straddle_free(s: ServerState, mode: PauseMode) -> PauseMode:
    """The pause mode to use on `s` for `mode`: `keep` would freeze requests on a server that
    reports no per-token versions (the /v1/completions fallback) and resume them under the new
    weights, every token recorded under the old version; there they are aborted instead (their
    partial tokens come back and the turn continues under the new weights)."""
    return "abort" if mode == "keep" and s.spans is False else mode


def _refuse_local_non_checkpoint(field: str, path: str) -> None:
    """Weights the service can see itself must at least be a folder with files in it before
    any server tries them (a file, or an empty folder, is a mistake in every format). A path
    the service cannot see may exist on the policy servers' machines: they decide."""
    if not path:
        raise WeightsRefused(f"{field}: empty", field)
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise WeightsRefused(f"{field}: {path!r} is a file, not a folder of weights", field)
    if not any(os.path.isfile(os.path.join(path, n)) for n in os.listdir(path)):
        raise WeightsRefused(f"{field}: {path!r} holds no files", field)


def _check(r: httpx.Response) -> None:
    if r.status_code != 200:
        what = f"{r.request.method} {r.request.url.path}"
        raise ControlError(f"{what}: HTTP {r.status_code}: {r.text[:300]}")


def _parse(model: type[M], r: httpx.Response) -> M:
    _check(r)
    try:
        return model.model_validate_json(r.content)
    except ValidationError as e:
        raise ControlError(f"{r.request.url.path}: unexpected answer {r.text[:200]!r}: {e}") from e


def _describe(e: BaseException) -> str:
    return str(e) or type(e).__name__
