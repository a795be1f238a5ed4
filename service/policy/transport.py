"""HTTP to the policy servers, for the policy client (client.py, which decides where each
request goes): the connection pool, one request at a time with its faults sorted into retryable
ones (5xx, 429, connection errors, timeouts, malformed bodies) and final ones (ContextLengthError,
other 4xx: PolicyError), retries with exponential backoff and jitter, each attempt on the server
the caller's route picks then, and generation requests whose timeout runs only while their
server is not paused.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from service.policy.generations import GENERATE, route_missing
from service.policy.routing import NoServerInRotation, PolicyRouter
from service.policy.servers import PolicyServers, ServerState
from service.policy.vllm_wire import ErrorResponse

_MAX_BACKOFF_S = 30.0
_CONTEXT_PARAMS = frozenset({"input_tokens", "max_tokens"})  # vLLM's "does not fit" errors

M = TypeVar("M", bound=BaseModel)


class PolicyFault(Exception):
    """Generation could not go on: the base of every error the policy client raises."""


class PolicyError(PolicyFault):
    """The policy servers failed (after retries, or with a non-retryable 4xx)."""


class ContextLengthError(PolicyFault):
    """The prompt does not fit the model's context (vLLM 400, param input_tokens)."""


class Retryable(Exception):
    """A transient fault: try again (maybe elsewhere). The client's own, never raised to its
    callers."""


class NoRoute(Exception):
    """The server does not offer the generate route (no --enable-scale-out)."""


def _error_message(resp: httpx.Response) -> tuple[str, str | None]:
    try:
        err = ErrorResponse.model_validate_json(resp.content).error
        return err.message, err.param
    except ValidationError:
        return resp.text[:500] or resp.reason_phrase, None


class PolicyTransport:
    """The policy client's HTTP: requests to the servers and their faults."""

    def __init__(
        self,
        router: PolicyRouter,
        fleet: PolicyServers,
        *,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        pause_poll_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """See PolicyClient: its settings of the same names."""
        self.router = router
        self.fleet = fleet
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.pause_poll_s = pause_poll_s
        self._transport = transport
        self._http: httpx.AsyncClient | None = None

    def open(self) -> None:
        """Open the connection pool (a no-op once open)."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0)),
                limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
                transport=self._transport,
            )

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError("PolicyClient.start() was not called")
        return self._http

    async def backoff(self, attempt: int) -> None:
        """Wait before retry number `attempt` (the first attempt, 0, goes at once)."""
        if attempt:
            delay = min(_MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + random.random()))  # jitter: no thundering herd

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        model: type[M],
        route: Callable[[int], str],
    ) -> M:
        """One request, retried: `route(attempt)` is the server of each attempt."""
        http = self.client()
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            await self.backoff(attempt)
            try:
                url = route(attempt)
            except NoServerInRotation as e:
                raise PolicyError(f"{e}: see GET /v1/policy") from e
            try:
                result = await self._once(http, method, url + path, body, model)
            except Retryable as e:
                last = f"{url}{path}: {e}"
                self.router.mark_failed(url)
                self.fleet.suspect(self.fleet.servers[url])
                continue
            self.router.mark_ok(url)
            return result
        raise PolicyError(f"{last} (gave up after {self.max_retries + 1} attempts)")

    async def generation(
        self,
        http: httpx.AsyncClient,
        state: ServerState,
        path: str,
        body: dict[str, Any],
        model: type[M],
    ) -> M:
        """One generation request. Its timeout runs only while the server is not paused: when
        it passes, the server is asked, and a paused one is waited for (held requests finish
        after /resume, or come back aborted with their partial output)."""
        loop = asyncio.get_running_loop()
        url = state.url + path
        request = asyncio.ensure_future(
            http.post(url, json=body, timeout=httpx.Timeout(None, connect=10.0))
        )
        deadline = loop.time() + self.timeout_s
        was_paused = False
        try:
            while True:
                done, _ = await asyncio.wait({request}, timeout=max(0.0, deadline - loop.time()))
                if done:
                    break
                if await self.fleet.is_paused(state):
                    was_paused = True
                    deadline = loop.time() + self.pause_poll_s
                    continue
                if was_paused:  # resumed: the request gets its whole timeout again
                    was_paused = False
                    self.fleet.saw_paused(state, False)
                    deadline = loop.time() + self.timeout_s
                    continue
                raise Retryable(f"timed out after {self.timeout_s:g} s (server not paused)")
        finally:
            if not request.done():
                request.cancel()
                await asyncio.gather(request, return_exceptions=True)
            if was_paused:
                self.fleet.saw_paused(state, False)
        try:
            resp = request.result()
        except httpx.TimeoutException as e:
            raise Retryable(f"timed out ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise Retryable(f"{type(e).__name__}: {e}") from e
        if path == GENERATE and route_missing(resp):
            raise NoRoute(resp.text[:200])
        return self._answer(url, resp, model)

    async def healthy(self) -> bool:
        """True when a server in rotation answers /health with 200 (what a re-run of a masked
        sample waits for: one out of rotation answers /health all the same)."""
        http = self.client()

        async def one(url: str) -> bool:
            try:
                return (await http.get(url + "/health", timeout=5.0)).status_code == 200
            except httpx.HTTPError:
                return False

        urls = [u for u in self.router.urls if self.router.in_rotation(u)]
        return any(await asyncio.gather(*(one(u) for u in urls)))

    async def _once(
        self,
        http: httpx.AsyncClient,
        method: str,
        url: str,
        body: dict[str, Any] | None,
        model: type[M],
    ) -> M:
        try:
            resp = await http.request(method, url, json=body)
        except httpx.TimeoutException as e:
            raise Retryable(f"timed out ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise Retryable(f"{type(e).__name__}: {e}") from e
        return self._answer(url, resp, model)

    def _answer(self, url: str, resp: httpx.Response, model: type[M]) -> M:
        """A response as `model`, or the fault it is: 5xx, 429 and malformed bodies are
        retryable, a prompt that does not fit is ContextLengthError, other 4xx PolicyError."""
        if resp.status_code >= 500 or resp.status_code == 429:
            message, _ = _error_message(resp)
            raise Retryable(f"HTTP {resp.status_code}: {message}")
        if resp.status_code >= 400:
            message, param = _error_message(resp)
            unknown_model = param == "model" or "does not exist" in message  # vLLM's words
            if resp.status_code == 404 and unknown_model and self.fleet.lora is not None:
                # It no longer serves the adapter (a restarted engine): the server's fault, not
                # the sample's. Another one may; this one is asked again (and given the adapter)
                # before it serves again.
                raise Retryable(f"HTTP 404: {message}")
            # /v1/completions names the parameter; /inference/v1/generate (vLLM 0.32) does not,
            # only its message says so (tests/fixtures/vllm-wire/updates/generate_too_long.json).
            too_long = param in _CONTEXT_PARAMS or "longer than the maximum model length" in message
            if resp.status_code == 400 and too_long:
                raise ContextLengthError(message)
            raise PolicyError(f"{url}: HTTP {resp.status_code}: {message}")
        try:
            return model.model_validate_json(resp.content)
        except (ValidationError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise Retryable(f"malformed response body ({len(resp.content)} bytes): {e}") from e
