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

What the service knows of each server, and the gate generation requests pass (`admit`,
`watch`), are servers.py's `PolicyServers`, which this fleet extends. A server asked what it
serves (before its first request, and again after any fault of its) that serves something
else is brought to the current weights here (when the service loaded them) or kept out of
rotation until it serves them.

A server without the dev-mode control routes (no VLLM_SERVER_DEV_MODE) is "unmanaged": it
follows the service's version number, and asking for a pause or a load is a ControlError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Literal

import httpx

from service.policy.routing import PolicyRouter
from service.policy.servers import (
    ControlError,
    PolicyServers,
    ServerReport,
    ServerState,
    check_answer,
    describe,
    parse_answer,
    parse_version,
)
from service.policy.vllm_wire import (
    CollectiveRpcResponse,
    ModelList,
    StatusResponse,
    UpdateWeightVersionResponse,
    WeightInfoResponse,
)

log = logging.getLogger(__name__)

PauseMode = Literal["keep", "abort", "wait"]
CONTROL_TIMEOUT_S = 600.0  # a reload of a large checkpoint takes minutes


class WeightsRefused(ControlError):
    """The weights named could not be loaded (`field`: weights_path or lora_path): nothing was
    changed but, at most, the one server that tried them first (see PolicyFleet.update)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class PolicyFleet(PolicyServers):
    """The service's own servers, under its control: pauses, weight loads, tags, rotation."""

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
        super().__init__(
            urls,
            router,
            http,
            version=version,
            lora=lora,
            probe_timeout_s=probe_timeout_s,
            control_timeout_s=control_timeout_s,
            clock=clock,
        )
        # Where the current version's weights are, when the service loaded them: a server that
        # comes back (restarted, or out after a failed update) is brought to them.
        self.source: dict[str, str] | None = None
        # Whether the version changed while this service ran: a fresh engine is adopted as the
        # current version only before (the operator started it with the current weights).
        self.changed = False
        self.retries = retries
        self.backoff_s = backoff_s

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
                    await self._take_out(s, f"did not pause: {describe(r)}")
            return self.report()

    async def resume(self) -> list[ServerReport]:
        """Resume what the service paused (servers out of rotation stay paused)."""
        async with self._lock:
            held = [s for s in self.servers.values() if s.held and s.out is None]
            results = await asyncio.gather(*(self._resume(s) for s in held), return_exceptions=True)
            for s, r in zip(held, results, strict=True):
                if isinstance(r, BaseException):
                    await self._take_out(s, f"did not resume: {describe(r)}")
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
                    s, f"could not be tagged with version {version}: {describe(r)}"
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

    # ------------------------------------------------------------ steps

    async def _adopt(self, s: ServerState, tag: str | None) -> None:
        """A server with the control routes that reports `tag`, asked (`_probe`). The current
        version, or an older one the service left it with (a tag that did not reach it), is
        served; a fresh engine ("default": started, or restarted) is brought to the weights of
        the last update the service loaded, or tagged with the current version when the
        version never changed while the service ran (the operator started it with the current
        weights); anything else leaves rotation."""
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
                await self._take_out(s, f"could not be tagged: {describe(e)}")
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
            version = parse_version(parse_answer(WeightInfoResponse, r).weight_version)
        except (httpx.HTTPError, ControlError):
            return
        if self.source is not None and version != self.target:
            await self._bring(s, self.target, self.source)
        elif version == self.target:
            if s.held:
                try:
                    await self._resume(s)
                except (httpx.HTTPError, ControlError) as e:
                    log.warning("policy server %s: resume: %s", s.url, describe(e))
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
                last = describe(e)
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
            parse_answer(StatusResponse, r)
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

    async def _resume(self, s: ServerState) -> None:
        parse_answer(StatusResponse, await self._send(s, "POST", "/resume", None))
        self._release(s)

    async def _load(self, s: ServerState, source: dict[str, str]) -> None:
        if "weights_path" in source:
            body = {"method": "reload_weights", "kwargs": {"weights_path": source["weights_path"]}}
            parse_answer(
                CollectiveRpcResponse, await self._send(s, "POST", "/collective_rpc", body)
            )
            return
        assert self.lora is not None
        name, path = self.lora[0], source["lora_path"]
        # In place, so that requests already running switch to the new adapter weights...
        body = {"lora_name": name, "lora_path": path, "load_inplace": True}
        check_answer(await self._send(s, "POST", "/v1/load_lora_adapter", body))
        # ...then once more under a fresh entry: vLLM keeps the in-place flag on the adapter it
        # caches and would re-read it from disk for every later request (SkyRL and prime-rl
        # reset the flag in the server; over HTTP, unloading and loading again resets it).
        check_answer(await self._send(s, "POST", "/v1/unload_lora_adapter", {"lora_name": name}))
        body = {"lora_name": name, "lora_path": path}
        check_answer(await self._send(s, "POST", "/v1/load_lora_adapter", body))

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
        parse_answer(UpdateWeightVersionResponse, r)
        info = parse_answer(WeightInfoResponse, await self._send(s, "GET", "/weight_info", None))
        if info.weight_version != str(version):
            raise ControlError(f"tagged {version} but reports {info.weight_version!r}")

    async def _ensure_lora(self, s: ServerState) -> None:
        if self.lora is None:
            return
        name, path = self.lora
        if self.source is not None and "lora_path" in self.source:
            path = self.source["lora_path"]
        try:
            served = parse_answer(ModelList, await self._send(s, "GET", "/v1/models", None))
            if any(m.id == name for m in served.data):
                return
            body = {"lora_name": name, "lora_path": path}
            check_answer(await self._send(s, "POST", "/v1/load_lora_adapter", body))
        except (httpx.HTTPError, ControlError) as e:
            await self._take_out(s, f"could not load the LoRA adapter {name!r}: {describe(e)}")

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
