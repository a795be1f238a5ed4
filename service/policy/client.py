"""The policy client: token-in/token-out generation against vLLM replicas (or the stand-in).

Prompts go out as token ids and the engine's own token ids and logprobs come back, so what the
trainer sees is exactly what was sampled (no re-tokenization drift). Transient faults (5xx,
connection errors, timeouts, malformed or truncated bodies) are retried with exponential backoff
and jitter, through the router so a retry can land on another replica; after that the sample
becomes policy_error (masked). A prompt too long for the context is not retried: it raises
ContextLengthError, which the episode turns into its own status. Both are PolicyFaults.

Every generation request carries every sampling field, and its answer is checked before it is
believed (generations.py: the generation routes on the wire). Observation deltas come from the
server's own chat template (`observation_delta`).

Generation goes to vLLM's token-in/token-out route `/inference/v1/generate`: the only route of
vLLM 0.32 whose answer says which weights produced which output token (`weight_versions` spans;
`/v1/completions` drops them). A server started without `--enable-scale-out` answers it 403; the
client then uses `/v1/completions` for that server, and its tokens carry the version the server
had when the request was sent (the fleet pauses such a server with `abort`, so a request never
straddles an update unseen; one that did anyway is not kept).

A token is never recorded under a version the service did not see its server serve: an answer
whose spans name other weights (a restarted engine's "default") is not kept, its tokens are
counted as discarded, and the turn is generated again; the server is asked what it serves
before it serves again (fleet.py), as it is after any fault of its (a lost connection, a 5xx,
a model it no longer serves: a restarted engine without the LoRA adapter).

Weight updates (service/policy/fleet.py) shape generation in three ways:
- a request waits while the service holds its server paused, and is salted with the version the
  server serves (`cache_salt: policy-v<N>`), so no prefix cached under other weights is reused;
- a request held by a paused server is never timed out or retried: when the timeout passes, the
  client asks the server whether it is paused (`/is_paused`), and waits on while it is (unless
  the server is out of rotation: it then goes elsewhere);
- an aborted generation (`finish_reason: "abort"`, a pause with mode abort) is an answer, not a
  fault: its partial tokens and logprobs come back for the caller to continue from.

Sticky routing is the client's business: a request made for a `sample` goes to that sample's
server (the least-loaded healthy one on first use, the same one afterwards, where its prefix is
cached), and a retry after a server fault moves the sample. `pin` puts a sample on a given
server (a group's samples on the server of their shared first turn); `release` frees it.

This module decides what to ask and where (routing, the fleet's admission, the template frames,
reading generations); transport.py sends it: the connection pool, the faults sorted into
retryable and final ones, the backoff, and the timeout that waits out a paused server.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from service.agent.tokens import (
    TemplateError,
    TemplateFrame,
    base_renderings,
    observation_messages,
)
from service.policy.fleet import PolicyFleet
from service.policy.generations import (
    COMPLETIONS,
    GENERATE,
    ForeignWeights,
    Generation,
    Rejected,
    completions_body,
    from_completions,
    from_generate,
    generate_body,
    sampling_fields,
)
from service.policy.holds import Holds
from service.policy.routing import NoServerInRotation, PolicyRouter
from service.policy.servers import PolicyStats, ServerOut, ServerState, ServerUnasked
from service.policy.transport import (
    ContextLengthError,
    NoRoute,
    PolicyError,
    PolicyTransport,
    Retryable,
)
from service.policy.transport import PolicyFault as PolicyFault  # the callers' name for them
from service.policy.vllm_wire import (
    CompletionResponse,
    DetokenizeResponse,
    GenerateResponse,
    ModelList,
    TokenizeResponse,
)
from service.sample import SamplingParams

DEFAULT_MAX_MODEL_LEN = 32768
M = TypeVar("M", bound=BaseModel)


def normalize_base_url(url: str) -> str:
    """Accept `http://host:8000`, `http://host:8000/` and `http://host:8000/v1`."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"policy server URL must start with http:// or https://, got {url!r}")
    return url.removesuffix("/v1")


class PolicyClient:
    def __init__(
        self,
        base_urls: list[str],
        model: str | None = None,
        *,
        timeout_s: float = 600,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        max_model_len: int | None = None,
        cooldown_s: float = 10.0,
        pause_poll_s: float = 5.0,
        update_retries: int = 2,
        lora: tuple[str, str] | None = None,
        version: int = 0,
        transport: httpx.AsyncBaseTransport | None = None,
        fleet: type[PolicyFleet] = PolicyFleet,
    ) -> None:
        """`lora`: (name, path) of a LoRA adapter every server serves; requests name it as their
        model. `version`: the policy version the servers serve now. `pause_poll_s`: how often a
        request held by a paused server asks whether it still is. `transport` replaces the
        network (tests pass an `httpx.MockTransport`). `fleet`: FollowerFleet for servers a
        trainer owns (service/policy/follower.py)."""
        urls = [normalize_base_url(u) for u in base_urls]
        self._router = PolicyRouter(urls, cooldown_s=cooldown_s)
        self.fleet = fleet(
            urls,
            self._router,
            lambda: self._transport.client(),  # control requests share the pool
            version=version,
            lora=lora,
            retries=update_retries,
            probe_timeout_s=min(timeout_s, 10.0),
        )
        if lora is not None:
            model = lora[0]
        self.model: str = model or ""
        self._model_given = model is not None
        self.max_model_len: int = max_model_len or DEFAULT_MAX_MODEL_LEN
        self._max_model_len_given = max_model_len is not None
        self._resolved = False
        self._transport = PolicyTransport(
            self._router,
            self.fleet,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            pause_poll_s=pause_poll_s,
            transport=transport,
        )
        # (server, chat_template_kwargs and tools as JSON) -> the template's frame, derived once
        self._frames: dict[tuple[str, str, str], TemplateFrame] = {}
        self._frame_locks: dict[tuple[str, str, str], asyncio.Lock] = {}

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the connection pool; ask the servers what they serve (service/policy/fleet.py);
        resolve the model and max_model_len from /v1/models."""
        self._transport.open()
        if self._resolved or (self._model_given and self._max_model_len_given):
            return
        await self.fleet.start()  # tags fresh servers, loads the LoRA adapter where missing
        models = await self._call("GET", "/v1/models", None, ModelList)
        if not self._model_given:
            ids = [m.id for m in models.data]
            if len(ids) != 1:
                raise PolicyError(
                    f"model: the policy server serves {len(ids)} models ({', '.join(ids)}); "
                    "name one explicitly"
                )
            self.model = ids[0]
        card = next((m for m in models.data if m.id == self.model), None)
        if card is None:
            served = ", ".join(m.id for m in models.data)
            raise PolicyError(f"model: {self.model!r} is not served (served: {served})")
        if card.max_model_len is None and card.parent is not None:  # an adapter: its base's
            card = next((m for m in models.data if m.id == card.parent), card)
        if not self._max_model_len_given and card.max_model_len:
            self.max_model_len = card.max_model_len
        self._resolved = True

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> PolicyClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------ routing

    @property
    def urls(self) -> list[str]:
        """The policy servers' base URLs, normalised."""
        return list(self._router.urls)

    # The settings of its requests (transport.py applies them).

    @property
    def timeout_s(self) -> float:
        return self._transport.timeout_s

    @property
    def max_retries(self) -> int:
        return self._transport.max_retries

    @property
    def backoff_s(self) -> float:
        return self._transport.backoff_s

    @property
    def pause_poll_s(self) -> float:
        """How often a request held by a paused server asks whether it still is."""
        return self._transport.pause_poll_s

    @property
    def stats(self) -> PolicyStats:
        """Counters of pauses, aborts and discarded tokens (for /metrics)."""
        return self.fleet.stats

    def pin(self, sample: str, server: str | None = None) -> str:
        """Pin `sample` to `server` (for a group's samples: the server of their shared first
        turn, which holds their prefix), or with none given keep it where it is (moving it if
        that server is cooling down) or put it on the least-loaded healthy server. It counts as
        in flight there until `release(sample)`. Returns its server."""
        if server is None:
            return self._router.acquire(sample)
        server = normalize_base_url(server)
        self._router.assign(sample, server)
        return server

    def release(self, sample: str) -> None:
        """The sample is finished: free its place (a no-op for one never pinned)."""
        self._router.release(sample)

    # ------------------------------------------------------------ endpoints
    #
    # Where a request goes: with `sample`, that sample's server (pinned on first use, so the
    # caller releases it), and a retry moves the sample; with `server`, that server first; with
    # neither, the least-loaded healthy server.

    async def tokenize_messages(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        sample: str | None = None,
        server: str | None = None,
    ) -> list[int]:
        """The server's chat template applied to `messages` (and `tools`, which the template
        renders its own way), as token ids."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
        }
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        if tools:
            body["tools"] = tools
        resp = await self._call(
            "POST", "/tokenize", body, TokenizeResponse, sample=sample, server=server
        )
        return resp.tokens

    async def observation_delta(
        self,
        content: str | list[dict[str, Any]],
        *,
        turn_closed: bool,
        chat_template_kwargs: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        sample: str | None = None,
    ) -> list[int]:
        """The tokens that follow a generated turn to hand the model `content` as the next user
        message (or a harness's observation messages, e.g. tool results) and open its next
        turn: the server's own chat template, rendered with these kwargs and tools (see
        service.agent.tokens.TemplateFrame; the frame is derived once per server, kwargs and
        tools). `turn_closed`: the generation ended on an end-of-sequence token."""
        kwargs = chat_template_kwargs or None
        frame = await self._frame(kwargs, sample, tools)
        rendered = await self.tokenize_messages(
            observation_messages(content),
            chat_template_kwargs=kwargs,
            tools=tools,
            sample=sample,
        )
        try:
            return frame.delta(rendered, turn_closed=turn_closed)
        except TemplateError as e:
            raise PolicyError(f"chat template: {e}") from e

    async def _frame(
        self,
        kwargs: dict[str, Any] | None,
        sample: str | None,
        tools: list[dict[str, Any]] | None = None,
    ) -> TemplateFrame:
        server = self._router.acquire(sample) if sample is not None else self._router.pick()
        key = (server, json.dumps(kwargs, sort_keys=True), json.dumps(tools, sort_keys=True))
        frame = self._frames.get(key)
        if frame is not None:
            return frame
        # One derivation per key at a time; samples arriving meanwhile wait and reuse it.
        async with self._frame_locks.setdefault(key, asyncio.Lock()):
            frame = self._frames.get(key)
            if frame is None:
                ids = [
                    await self.tokenize_messages(
                        messages,
                        add_generation_prompt=agp,
                        chat_template_kwargs=kwargs,
                        tools=tools,
                        sample=sample,
                    )
                    for messages, agp in base_renderings()
                ]
                try:
                    frame = self._frames[key] = TemplateFrame.build(*ids)
                except TemplateError as e:
                    raise PolicyError(f"chat template: {e}") from e
        return frame

    async def tokenize_text(
        self, text: str, *, sample: str | None = None, server: str | None = None
    ) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        resp = await self._call(
            "POST", "/tokenize", body, TokenizeResponse, sample=sample, server=server
        )
        return resp.tokens

    async def detokenize(
        self, token_ids: list[int], *, sample: str | None = None, server: str | None = None
    ) -> str:
        body = {"model": self.model, "tokens": token_ids}
        resp = await self._call(
            "POST", "/detokenize", body, DetokenizeResponse, sample=sample, server=server
        )
        return resp.prompt

    async def complete(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        n: int = 1,
        sample: str | None = None,
        server: str | None = None,
        holds: Holds | None = None,
    ) -> list[Generation]:
        """Generate `n` continuations of the prompt: on `sample`'s server (a retry after a server
        fault moves the sample), or on `server`, or on the least-loaded healthy one. A choice
        may come back aborted (finish_reason "abort", its partial output): the caller continues
        it. The request is salted with its server's policy version. `holds`: told of each
        attempt, so that the caller can tell the time a pause holds it from its own."""
        if sample is not None and server is not None:
            raise ValueError("a request goes to a sample's server or to a given one, not both")
        if not prompt_token_ids:
            raise ValueError("prompt_token_ids: empty prompt")
        room = self.max_model_len - len(prompt_token_ids)
        if room <= 0:
            raise ContextLengthError(
                f"prompt of {len(prompt_token_ids)} tokens leaves no room for output "
                f"(max_model_len {self.max_model_len})"
            )
        sampling = sampling_fields(params, n, room)
        http = self._transport.client()
        retries = self.max_retries
        last = "no attempt made"
        for attempt in range(retries + 1):
            await self._transport.backoff(attempt)
            try:
                url = self._server_for(server, sample, attempt)
            except NoServerInRotation as e:
                last = f"{e}: see GET /v1/policy"
                continue
            paused_before = self.fleet.paused_clock(self.fleet.servers[url])
            if holds is not None:
                holds.begin(self.fleet.servers[url])
            try:
                try:
                    state = await self.fleet.admit(url)  # waits while the service holds it paused
                except ServerOut as e:
                    last = str(e)
                    if isinstance(e, ServerUnasked):
                        self._router.mark_failed(url)
                    continue
                try:
                    return await self._generate_on(
                        http, state, prompt_token_ids, sampling, n, paused_before
                    )
                except ServerOut as e:
                    last = str(e)
                except Retryable as e:
                    last = f"{url}: {e}"
                    self._router.mark_failed(url)
                    self.fleet.suspect(state)
            finally:
                if holds is not None:
                    holds.end()
        raise PolicyError(f"{last} (gave up after {retries + 1} attempts)")

    async def _generate_on(
        self,
        http: httpx.AsyncClient,
        state: ServerState,
        prompt: list[int],
        sampling: dict[str, Any],
        n: int,
        paused_before: float,
    ) -> list[Generation]:
        version = self.fleet.version_of(state)
        salt = self.fleet.salt(state)
        state.in_flight += 1
        try:
            # The versions the server serves while the request runs: every token's must be one.
            with self.fleet.watch(state) as window:
                known = window if state.managed else None  # untagged: the number it was sent
                follow = self.fleet.follows  # a trainer's server: its own tags (follower.py)
                if state.spans is not False:
                    body = generate_body(self.model, prompt, sampling, salt)
                    try:
                        resp = await self._transport.generation(
                            http, state, GENERATE, body, GenerateResponse
                        )
                        state.spans = True
                        gens = from_generate(resp, n, version, known, follow=follow)
                    except NoRoute:
                        state.spans = False
                if state.spans is False:
                    body = completions_body(self.model, prompt, sampling, salt)
                    resp = await self._transport.generation(
                        http, state, COMPLETIONS, body, CompletionResponse
                    )
                    gens = from_completions(resp, n, version, known, follow=follow)
        except Rejected as e:
            self.fleet.stats.discarded_tokens += e.tokens
            if isinstance(e, ForeignWeights):
                self.fleet.doubt(state, str(e))
            raise Retryable(str(e)) from e
        finally:
            state.in_flight -= 1
        paused = self.fleet.paused_clock(state) - paused_before
        for g in gens:
            g.paused_s = paused
            if g.finish_reason == "abort":
                self.fleet.stats.aborted_generations += 1
        return gens

    async def healthy(self) -> bool:
        """True when a server in rotation answers /health with 200 (what a re-run of a masked
        sample waits for: one out of rotation answers /health all the same)."""
        return await self._transport.healthy()

    def _server_for(self, server: str | None, sample: str | None, attempt: int) -> str:
        if sample is not None:
            return self._router.acquire(sample)  # moves the sample once its server has failed
        if server is not None:
            server = normalize_base_url(server)
            if attempt == 0 or self._router.healthy(server):
                return server
        return self._router.pick()

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        model: type[M],
        *,
        sample: str | None = None,
        server: str | None = None,
    ) -> M:
        if sample is not None and server is not None:
            raise ValueError("a request goes to a sample's server or to a given one, not both")
        return await self._transport.call(
            method, path, body, model, lambda attempt: self._server_for(server, sample, attempt)
        )
