"""The stand-in policy server: a FastAPI app speaking vLLM 0.32's HTTP subset, for tests and demos.

It is NOT a language model. It answers /v1/completions and /inference/v1/generate with the
scripted terminal agent of behaviour.py, sampled token by token with real (float32) logprobs
(sampling.py), in exactly the shapes of the vLLM recordings (models in
service/policy/vllm_wire.py). Like vLLM in dev mode it can be paused (keep, abort, wait), reload
other weights, tag them with a version and report per-token weight versions (decoding.py).

Errors come in vLLM's shape `{"error": {"message", "type", "param", "code"}}` with vLLM's status
codes (400 for a bad field, never 422). Decode speed is simulated with asyncio.sleep, so
concurrent requests proceed in parallel like a batched engine.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from sandboxes.task import Task
from service.policy.vllm_wire import (
    PAUSE_MODES,
    CollectiveRpcRequest,
    CollectiveRpcResponse,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    ErrorInfo,
    ErrorResponse,
    GenerateChoice,
    GenerateLogprobEntry,
    GenerateLogprobs,
    GenerateRequest,
    GenerateResponse,
    GenerateTopLogprob,
    IsPausedResponse,
    LoadLoraAdapterRequest,
    ModelCard,
    ModelList,
    ModelPermission,
    ResetPrefixCacheResponse,
    StatusResponse,
    TokenizeRequest,
    TokenizeResponse,
    UnloadLoraAdapterRequest,
    UpdateWeightVersionRequest,
    UpdateWeightVersionResponse,
    UsageInfo,
    WeightInfoResponse,
    WeightVersionSpan,
    cache_salt_problem,
)
from standin.attacks import ATTACKS
from standin.behaviour import BehaviourSettings, ScriptedAgent
from standin.chat_template import render
from standin.decoding import ChoiceDecoder, SamplingKnobs, Weights, weights_logit
from standin.sampling import LogprobsMode, choice_rng
from standin.tokenizer import EOS_ID, StubTokenizer

SYSTEM_FINGERPRINT = "rollouts-policy-stub-0.1"
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
PREFIX_BLOCK = 16  # tokens per simulated KV-cache block
PREFIX_CACHE_BLOCKS = 100_000


class StubSettings(BaseModel):
    """Configuration of the stand-in (the `rollouts policy-stub` flags)."""

    model_config = ConfigDict(extra="forbid")

    tasks: str | None = None  # path given to sandboxes.tasks.iter_tasks
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "stub"
    max_model_len: int = Field(default=32768, ge=16)
    p_correct: float = Field(default=1.0, ge=0, le=1)
    p_malformed: float = Field(default=0.02, ge=0, le=1)
    seed: int = 0
    tokens_per_s: float | None = Field(default=None, gt=0)  # None: infinitely fast
    # False: every request decodes at tokens_per_s on its own. True: tokens_per_s is the
    # engine's whole decode throughput, shared by all requests in arrival order, as a GPU
    # serving a batch is: then generation is a resource the sandboxes' time can overlap with.
    shared_decode: bool = False
    ttft_ms: float = Field(default=0.0, ge=0)
    record: str | None = None  # JSONL file, one line per served choice
    attack: str | None = None
    length_jitter: int = Field(default=0, ge=0)  # extra analysis words per reply, at most
    # Long-tail episodes: sigma of the lognormal of each sample's verbosity (behaviour.py).
    long_tail: float = Field(default=0.0, ge=0, le=4)
    # Strong enough that an unscripted token is ~1e-8 per position: p_correct=1 means every
    # sample passes, while logprobs stay real samples of this distribution.
    script_logit: float = Field(default=24.0, gt=0)
    logprobs_mode: LogprobsMode = "processed"
    # Like vLLM's --enable-scale-out: without it /inference/v1/generate answers 403.
    scale_out: bool = True


class StubError(Exception):
    def __init__(self, status: int, message: str, type_: str, param: str | None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


def _bad_request(message: str, param: str | None) -> StubError:
    return StubError(400, message, "BadRequestError", param)


def _error_response(status: int, message: str, type_: str, param: str | None) -> JSONResponse:
    body = ErrorResponse(error=ErrorInfo(message=message, type=type_, param=param, code=status))
    return JSONResponse(body.model_dump(), status_code=status)


@dataclass
class _Counters:
    running: int = 0
    waiting: int = 0
    running_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=dict)
    prefix_queries: int = 0
    prefix_hits: int = 0


class _PrefixCache:
    """Block hashes of served prompts (salted like vLLM's cache_salt), to report prefix-cache hits
    on /metrics: tests see whether sticky routing and cache salts work."""

    def __init__(self) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def query(self, prompt: list[int], salt: str | None) -> int:
        h = hash(salt)
        hits, missing = 0, False
        for start in range(0, len(prompt) - len(prompt) % PREFIX_BLOCK, PREFIX_BLOCK):
            h = hash((h, tuple(prompt[start : start + PREFIX_BLOCK])))
            if not missing and h in self._blocks:
                hits += PREFIX_BLOCK
                self._blocks.move_to_end(h)
            else:
                missing = True
                self._blocks[h] = None
        while len(self._blocks) > PREFIX_CACHE_BLOCKS:
            self._blocks.popitem(last=False)
        return hits


@dataclass(frozen=True)
class _Ask:
    """One generation request, whichever route it came by."""

    route: str  # "completions" | "generate"
    model: str | None
    prompt: list[int]
    n: int
    seed: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    max_tokens: int | None
    stop: list[str]
    stop_token_ids: list[int]
    include_stop: bool
    logprobs: int | None
    cache_salt: str | None

    @classmethod
    def of_completion(cls, r: CompletionRequest) -> _Ask:
        return cls(
            "completions", r.model, r.prompt, r.n, r.seed, r.temperature, r.top_p, r.top_k,
            r.max_tokens, r.stop_list(), list(r.stop_token_ids or ()),
            r.include_stop_str_in_output, r.logprobs, r.cache_salt,
        )  # fmt: skip

    @classmethod
    def of_generate(cls, r: GenerateRequest) -> _Ask:
        p = r.sampling_params
        return cls(
            "generate", r.model, r.token_ids, p.n, p.seed, p.temperature, p.top_p, p.top_k,
            p.max_tokens, list(p.stop or ()), list(p.stop_token_ids or ()),
            p.include_stop_str_in_output, p.logprobs, r.cache_salt,
        )  # fmt: skip


PARTIALS_KEPT = 10_000  # aborted choices remembered, so that their continuation is coherent


class StubEngine:
    """Everything except HTTP: tokenizer, behaviour, sampling, weights, pauses, counters,
    recording."""

    def __init__(self, settings: StubSettings, tasks: list[Task]) -> None:
        self.settings = settings
        self.tokenizer = StubTokenizer()
        self.agent = ScriptedAgent(
            tasks,
            BehaviourSettings(
                p_correct=settings.p_correct,
                p_malformed=settings.p_malformed,
                seed=settings.seed,
                attack=settings.attack,
                length_jitter=settings.length_jitter,
                long_tail=settings.long_tail,
            ),
            self.tokenizer,
        )
        self.created = int(time.time())
        self.counters = _Counters()
        self.prefix_cache = _PrefixCache()
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        self.pause_mode: str | None = None
        self._aborts = 0  # pauses with mode abort so far: running choices end when it changes
        self.weights = Weights(tag="default", logit=settings.script_logit)
        self.adapters: dict[str, tuple[str, float]] = {}  # LoRA name -> (path, logit)
        # prompt + partial output of an aborted choice -> (its script, where it stopped in it)
        self._partials: OrderedDict[tuple[int, ...], tuple[list[int], int]] = OrderedDict()
        self._record_lock = threading.Lock()
        self._decode_free_at = 0.0  # shared_decode: when the engine finishes what it was given

    # ------------------------------------------------------------ checks shared by endpoints

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.settings.model and model not in self.adapters:
            served = ", ".join([self.settings.model, *self.adapters])
            raise StubError(
                404,
                f"The model `{model}` does not exist. Valid aliases: {served}.",
                "NotFoundError",
                "model",
            )

    def check_ids(self, ids: list[int], param: str) -> None:
        bad = self.tokenizer.check_ids(ids)
        if bad is not None:
            raise _bad_request(f"Token id {bad} is out of vocabulary", param)

    def weights_for(self, model: str | None) -> Weights:
        """The weights a request runs under now: the base's, or its LoRA adapter's."""
        if model in self.adapters:
            return Weights(self.weights.tag, self.adapters[model][1])
        return self.weights

    # ------------------------------------------------------------ generation

    def _script(self, ask: _Ask, index: int, max_tokens: int) -> tuple[list[int], int]:
        """The script a choice follows and where in it the choice starts: a continuation of an
        aborted choice (its prompt is that choice's prompt plus its partial output) picks up
        the script where the partial output left it."""
        tok = self.tokenizer
        remembered = self._partials.pop(tuple(ask.prompt), None)
        if remembered is not None:
            return remembered
        # Not remembered (another process served the first part): the reply to the prompt
        # without the partial output, from where the partial output ends.
        partial = self._partial_length(ask.prompt)
        base = ask.prompt[: len(ask.prompt) - partial]
        rng = choice_rng(ask.seed, index, len(base))
        reply = self.agent.reply(
            tok.decode(base), seed=ask.seed, index=index, rng=rng, max_tokens=max_tokens
        )
        return tok.encode(reply) + [EOS_ID], partial

    def _partial_length(self, prompt: list[int]) -> int:
        """How many tokens of an open assistant turn end the prompt (what an aborted choice
        had produced)."""
        opener = self.tokenizer.encode("<|im_start|>assistant\n")
        for at in range(len(prompt) - len(opener), -1, -1):
            if prompt[at : at + len(opener)] == opener:
                return len(prompt) - at - len(opener)
        return 0

    def decoders(self, ask: _Ask) -> list[ChoiceDecoder]:
        max_tokens = ask.max_tokens or (self.settings.max_model_len - len(ask.prompt))
        knobs = SamplingKnobs(
            vocab_size=self.tokenizer.vocab_size,
            temperature=1.0 if ask.temperature is None else ask.temperature,
            top_p=1.0 if ask.top_p is None else ask.top_p,
            top_k=-1 if ask.top_k is None else ask.top_k,
            mode=self.settings.logprobs_mode,
        )
        out = []
        for index in range(ask.n):
            script, start = self._script(ask, index, max_tokens)
            out.append(
                ChoiceDecoder(
                    tokenizer=self.tokenizer,
                    script=script,
                    start=start,
                    rng=choice_rng(ask.seed, index, len(ask.prompt)),
                    knobs=knobs,
                    max_tokens=max_tokens,
                    stops=ask.stop,
                    stop_ids=set(ask.stop_token_ids),
                    n_top=ask.logprobs or 0,
                    include_stop=ask.include_stop,
                )
            )
        return out

    def validate(self, ask: _Ask) -> None:
        self.check_model(ask.model)
        if ask.route == "generate" and not self.settings.scale_out:
            raise StubError(
                403,
                "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out "
                "to enable them.",
                "PermissionDeniedError",
                None,
            )
        if not ask.prompt:
            raise _bad_request("Prompt cannot be empty", "prompt")
        self.check_ids(ask.prompt, "prompt")
        if ask.cache_salt is not None and (problem := cache_salt_problem(ask.cache_salt)):
            raise _bad_request(problem, "cache_salt")
        if ask.logprobs is not None and ask.logprobs > MAX_LOGPROBS:
            raise _bad_request(
                f"Requested sample logprobs of {ask.logprobs}, which is greater than max allowed: "
                f"{MAX_LOGPROBS}",
                "logprobs",
            )
        n, limit = len(ask.prompt), self.settings.max_model_len
        if n > limit:
            raise _bad_request(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {n} input tokens, which exceeds this limit even without any output "
                "tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={n})",
                "input_tokens",
            )
        if ask.max_tokens is not None and n + ask.max_tokens > limit:
            raise _bad_request(
                f"'max_tokens' or 'max_completion_tokens' is too large: {ask.max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has {n} input "
                f"tokens ({ask.max_tokens} > {limit} - {n}). "
                f"(parameter=max_tokens, value={ask.max_tokens})",
                "max_tokens",
            )

    def _decode_s(self, longest: int, total: int) -> float:
        """How long this request's decoding takes: its longest choice at the per-request speed,
        or, with a shared engine, until the engine has decoded everything queued before it and
        all of its tokens."""
        rate = self.settings.tokens_per_s
        assert rate is not None
        if not self.settings.shared_decode:
            return longest / rate
        now = time.monotonic()
        self._decode_free_at = max(now, self._decode_free_at) + total / rate
        return self._decode_free_at - now

    async def generate(self, ask: _Ask) -> list[ChoiceDecoder]:
        """Serve one request: wait while paused, then produce its choices token by token over
        the decode time, under the weights of the moment; a keep pause freezes them between
        tokens, an abort pause ends them with their partial output."""
        self.validate(ask)
        c = self.counters
        c.waiting += 1
        try:
            await self.unpaused.wait()  # new requests wait while the engine is paused
        finally:
            c.waiting -= 1
        c.running += 1
        c.prompt_tokens += len(ask.prompt)
        c.prefix_queries += len(ask.prompt)
        c.prefix_hits += self.prefix_cache.query(ask.prompt, ask.cache_salt)
        decoders = self.decoders(ask)
        held = len(ask.prompt) * ask.n
        c.running_tokens += held
        try:
            await self._produce(ask, decoders)
            if self.pause_mode == "keep":
                await self.unpaused.wait()  # pause(mode=keep) holds finished work too
        finally:
            c.running_tokens -= held
            c.running -= 1
        for d in decoders:
            c.generation_tokens += len(d.ids)
            c.success[d.finish_reason or "abort"] = c.success.get(d.finish_reason or "abort", 0) + 1
            if d.finish_reason == "abort":
                self._remember_partial(ask, d)
        if self.settings.record:
            await asyncio.to_thread(self._record, ask, decoders)
        return decoders

    async def _produce(self, ask: _Ask, decoders: list[ChoiceDecoder]) -> None:
        """Token k of every choice is due after ttft + k x the per-token time, on a clock
        that stands still while the engine is paused with keep."""
        rate = self.settings.tokens_per_s
        # The script's length (deviations aside) is what each choice will take.
        lengths = [max(1, min(d.max_tokens, len(d.script) - d.start)) for d in decoders]
        expected = max(lengths)
        ttft = self.settings.ttft_ms / 1000.0
        per_token = self._decode_s(expected, sum(lengths)) / expected if rate else 0.0
        aborts = self._aborts
        active = 0.0  # seconds of decoding so far (paused time excluded)
        produced = 0
        while not all(d.done for d in decoders):
            if self._aborts != aborts:
                for d in decoders:
                    d.abort()
                return
            if self.pause_mode == "keep":
                await self.unpaused.wait()
                continue
            wait = ttft + per_token * produced - active
            if wait > 0:
                step = min(wait, 0.05)
                t0 = time.monotonic()
                await asyncio.sleep(step)
                active += time.monotonic() - t0
                continue
            for d in decoders:
                d.step(self.weights_for(ask.model))
            produced += 1

    def _remember_partial(self, ask: _Ask, d: ChoiceDecoder) -> None:
        self._partials[tuple(ask.prompt + d.ids)] = (d.script, d.position)
        while len(self._partials) > PARTIALS_KEPT:
            self._partials.popitem(last=False)

    # ------------------------------------------------------------ answers

    def _top_name(self, as_ids: bool, t: int) -> str:
        return f"token_id:{t}" if as_ids else self.tokenizer.token_str(t)

    def completion_choice(
        self, req: CompletionRequest, index: int, d: ChoiceDecoder
    ) -> CompletionChoice:
        logprobs = None
        if req.logprobs is not None:
            as_ids = bool(req.return_tokens_as_token_ids)
            tokens = [self._top_name(as_ids, t) for t in d.ids]
            offsets, off = [], 0
            for s in tokens:  # vLLM: cumulative lengths of the token strings
                offsets.append(off)
                off += len(s)
            top_logprobs: list[dict[str, float] | None] = []
            for t, lp, top in zip(d.ids, d.logprobs, d.tops, strict=True):
                entry = {self._top_name(as_ids, t): lp}
                for tt, tlp in top:
                    entry.setdefault(self._top_name(as_ids, tt), tlp)
                top_logprobs.append(entry)
            logprobs = CompletionLogprobs(
                text_offset=offsets,
                token_logprobs=list(d.logprobs),
                tokens=tokens,
                top_logprobs=top_logprobs,
            )
        return CompletionChoice(
            index=index,
            text=d.text,
            logprobs=logprobs,
            finish_reason=d.finish_reason,
            stop_reason=d.stop_reason,
            token_ids=list(d.ids) if req.return_token_ids else None,
            prompt_logprobs=None,
            prompt_token_ids=list(req.prompt) if req.return_token_ids else None,
            routed_experts=None,
        )

    def generate_choice(self, req: GenerateRequest, index: int, d: ChoiceDecoder) -> GenerateChoice:
        text_mode = req.output_mode == "text"
        logprobs = None
        if req.sampling_params.logprobs is not None:
            entries = []
            for t, lp, top in zip(d.ids, d.logprobs, d.tops, strict=True):
                cands = [(t, lp)] + [(tt, tlp) for tt, tlp in top if tt != t]
                cands = cands[: max(1, req.sampling_params.logprobs)]
                tops = [self._generate_logprob(text_mode, tt, tlp) for tt, tlp in cands]
                entries.append(GenerateLogprobEntry(**tops[0].model_dump(), top_logprobs=tops))
            logprobs = GenerateLogprobs(content=entries)
        return GenerateChoice(
            index=index,
            finish_reason=d.finish_reason,
            stop_reason=d.stop_reason,
            token_ids=list(d.ids),
            text=d.text if text_mode else None,
            logprobs=logprobs,
            weight_versions=[WeightVersionSpan(version=v, start=a, end=b) for v, a, b in d.spans()]
            or None,
        )

    def _generate_logprob(self, text_mode: bool, token: int, lp: float) -> GenerateTopLogprob:
        if text_mode:
            raw = self.tokenizer.token_bytes(token)
            return GenerateTopLogprob(
                logprob=lp, token=raw.decode(errors="replace"), bytes=list(raw)
            )
        return GenerateTopLogprob(logprob=lp, token_id=token)

    def _record(self, ask: _Ask, decoders: list[ChoiceDecoder]) -> None:
        assert self.settings.record is not None
        lines = [
            json.dumps(
                {
                    "route": ask.route,
                    "model": ask.model,
                    "prompt_token_ids": ask.prompt,
                    "token_ids": d.ids,
                    "logprobs": d.logprobs,
                    "finish_reason": d.finish_reason,
                    "stop_reason": d.stop_reason,
                    "weight_versions": d.spans(),
                    "index": i,
                    "seed": ask.seed,
                    "cache_salt": ask.cache_salt,
                }
            )
            + "\n"
            for i, d in enumerate(decoders)
        ]
        with self._record_lock, open(self.settings.record, "a", encoding="utf-8") as f:
            f.writelines(lines)

    # ------------------------------------------------------------ control

    def pause(self, mode: str, clear_cache: bool) -> None:
        self.pause_mode = mode
        self.unpaused.clear()
        if mode == "abort":
            self._aborts += 1
        if clear_cache:  # vLLM 0.32 empties the prefix cache on every mode
            self.prefix_cache = _PrefixCache()

    def resume(self) -> None:
        self.pause_mode = None
        self.unpaused.set()

    def reload(self, weights_path: str) -> None:
        if not Path(weights_path).is_dir():
            raise StubError(
                500, f"reload_weights: no checkpoint at {weights_path}", "InternalServerError", None
            )
        self.weights = Weights(self.weights.tag, weights_logit(weights_path))
        self.prefix_cache = _PrefixCache()

    def metrics_text(self) -> str:
        c, m = self.counters, self.settings.model
        capacity = self.settings.max_model_len * 16
        lab = f'engine="0",model_name="{m}"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(c.running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} {float(c.waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lab}}} {min(1.0, c.running_tokens / capacity)}",
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of "
            "queried tokens.",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{lab}}} {float(c.prefix_queries)}",
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached "
            "tokens.",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{{{lab}}} {float(c.prefix_hits)}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {float(c.prompt_tokens)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(c.generation_tokens)}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, count in sorted(c.success.items()):
            lines.append(
                f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} {float(count)}'
            )
        return "\n".join(lines) + "\n"


def load_tasks(path: str) -> list[Task]:
    # Imported here: the task loader is a sibling module; the stub needs it only with --tasks.
    from sandboxes.tasks import iter_tasks

    if not Path(path).exists():
        raise ValueError(f"tasks: {path} does not exist")
    return list(iter_tasks(path))


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """vLLM's format: '1 validation error:\\n  {...}', param 'body.<field>'."""
    errors = exc.errors()
    lines = []
    for e in errors:
        loc = ".".join(str(p) for p in e.get("loc", ()))
        lines.append(
            "  "
            + repr(
                {"type": e.get("type"), "loc": loc, "msg": e.get("msg"), "input": e.get("input")}
            )
        )
    word = "error" if len(errors) == 1 else "errors"
    first = errors[0] if errors else {}
    param = ".".join(str(p) for p in first.get("loc", ())) or None
    return f"{len(errors)} validation {word}:\n" + "\n".join(lines), param


def build_app(settings: StubSettings, tasks: list[Task] | None = None) -> FastAPI:
    """The stand-in vLLM server as an ASGI app (in-process use: uvicorn in a thread or a task).
    `tasks` overrides loading `settings.tasks` from disk."""
    if settings.attack is not None and settings.attack not in ATTACKS:
        raise ValueError(f"attack: unknown {settings.attack!r}; known: {', '.join(ATTACKS)}")
    if tasks is None:
        tasks = load_tasks(settings.tasks) if settings.tasks else []
    engine = StubEngine(settings, tasks)
    app = FastAPI(
        title="rollouts policy stub (a stand-in for vLLM)",
        description=__doc__,
        docs_url=None,
        redoc_url=None,
    )
    app.state.engine = engine

    @app.exception_handler(StubError)
    async def _stub_error(_: Request, exc: StubError) -> JSONResponse:
        return _error_response(exc.status, exc.message, exc.type, exc.param)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return _error_response(400, message, "Bad Request", param)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict:
        perm = ModelPermission(id=f"modelperm-{secrets.token_hex(8)}", created=engine.created)
        card = ModelCard(
            id=settings.model,
            created=engine.created,
            root=settings.tasks or settings.model,
            parent=None,
            max_model_len=settings.max_model_len,
            permission=[perm],
        )
        adapters = [  # like vLLM: an adapter's card names its base and has no max_model_len
            ModelCard(id=name, created=engine.created, root=path, parent=settings.model)
            for name, (path, _) in engine.adapters.items()
        ]
        return ModelList(data=[card, *adapters]).model_dump()

    @app.post("/tokenize")
    async def tokenize(req: TokenizeRequest) -> dict:
        engine.check_model(req.model)
        if (req.messages is None) == (req.prompt is None):
            raise _bad_request("Exactly one of 'messages' or 'prompt' must be given", "messages")
        if req.messages is not None:
            text = render(
                [m.model_dump() for m in req.messages],
                add_generation_prompt=req.add_generation_prompt,
                tools=req.tools,
            )
        else:
            text = req.prompt or ""
        ids = engine.tokenizer.encode(text)
        strs = [engine.tokenizer.token_str(t) for t in ids] if req.return_token_strs else None
        return TokenizeResponse(
            count=len(ids), max_model_len=settings.max_model_len, tokens=ids, token_strs=strs
        ).model_dump()

    @app.post("/detokenize")
    async def detokenize(req: DetokenizeRequest) -> dict:
        engine.check_model(req.model)
        engine.check_ids(req.tokens, "tokens")
        return DetokenizeResponse(prompt=engine.tokenizer.decode(req.tokens)).model_dump()

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> dict:
        decoders = await engine.generate(_Ask.of_completion(req))
        tokens = sum(len(d.ids) for d in decoders)
        return CompletionResponse(
            id=f"cmpl-{secrets.token_hex(8)}",
            created=int(time.time()),
            model=req.model or settings.model,
            choices=[engine.completion_choice(req, i, d) for i, d in enumerate(decoders)],
            service_tier=None,
            system_fingerprint=SYSTEM_FINGERPRINT,
            usage=UsageInfo(
                prompt_tokens=len(req.prompt),
                total_tokens=len(req.prompt) + tokens,
                completion_tokens=tokens,
            ),
            kv_transfer_params=None,
            ec_transfer_params=None,
            metrics=None,
        ).model_dump()

    @app.post("/inference/v1/generate")
    async def generate(req: GenerateRequest) -> dict:
        """vLLM's token-in/token-out route (with --enable-scale-out): per choice the token ids,
        their logprobs and the weight_versions spans."""
        decoders = await engine.generate(_Ask.of_generate(req))
        tokens = sum(len(d.ids) for d in decoders)
        return GenerateResponse(
            request_id=f"generate-tokens-{secrets.token_hex(8)}",
            model=req.model or settings.model,
            created=int(time.time()),
            output_mode=req.output_mode,
            choices=[engine.generate_choice(req, i, d) for i, d in enumerate(decoders)],
            usage=UsageInfo(
                prompt_tokens=len(req.token_ids),
                total_tokens=len(req.token_ids) + tokens,
                completion_tokens=tokens,
            ),
            prompt_token_ids=list(req.token_ids) if req.return_token_ids else None,
        ).model_dump()

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(engine.metrics_text(), media_type="text/plain; version=0.0.4")

    # Dev-mode control endpoints (vLLM needs VLLM_SERVER_DEV_MODE=1 for these).
    @app.post("/pause")
    async def pause(mode: str = "abort", clear_cache: bool = True) -> dict:
        """keep: running requests freeze between tokens; abort: they end now with their
        partial output; wait: answered once running requests are done. New ones wait."""
        if mode not in PAUSE_MODES:
            raise _bad_request(f"mode must be keep, abort or wait, got {mode!r}", "mode")
        engine.pause(mode, clear_cache)
        if mode == "wait":
            while engine.counters.running:
                await asyncio.sleep(0.01)
        return StatusResponse(status="paused").model_dump()

    @app.post("/resume")
    async def resume() -> dict:
        engine.resume()
        return StatusResponse(status="resumed").model_dump()

    @app.post("/collective_rpc")
    async def collective_rpc(req: CollectiveRpcRequest) -> dict:
        """reload_weights(weights_path=DIR) switches to the weights in DIR (decoding.py)."""
        if req.method != "reload_weights" or "weights_path" not in req.kwargs:
            raise _bad_request(
                f"the stand-in runs only reload_weights(weights_path=...), not {req.method!r}",
                "method",
            )
        engine.reload(str(req.kwargs["weights_path"]))
        return CollectiveRpcResponse(results=[None]).model_dump()

    @app.post("/update_weight_version")
    async def update_weight_version(req: UpdateWeightVersionRequest) -> dict:
        engine.weights = Weights(req.new_version, engine.weights.logit)
        return UpdateWeightVersionResponse(success=True, new_version=req.new_version).model_dump()

    @app.get("/weight_info")
    async def weight_info() -> dict:
        return WeightInfoResponse(weight_version=engine.weights.tag).model_dump()

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(req: LoadLoraAdapterRequest) -> PlainTextResponse:
        name = req.lora_name
        if name in engine.adapters and not req.load_inplace:
            raise _bad_request(
                f"The lora adapter '{name}' has already been loaded. If you want to load the "
                "adapter in place, set 'load_inplace' to True.",
                None,
            )
        if not Path(req.lora_path).is_dir():
            raise StubError(404, f"No adapter found at {req.lora_path}", "NotFoundError", None)
        engine.adapters[name] = (req.lora_path, weights_logit(req.lora_path))
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(req: UnloadLoraAdapterRequest) -> PlainTextResponse:
        if engine.adapters.pop(req.lora_name, None) is None:
            raise StubError(
                404, f"The lora adapter '{req.lora_name}' cannot be found.", "NotFoundError", None
            )
        return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")

    @app.get("/is_paused")
    async def is_paused() -> dict:
        return IsPausedResponse(is_paused=not engine.unpaused.is_set()).model_dump()

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict:
        engine.prefix_cache = _PrefixCache()
        return ResetPrefixCacheResponse(success=True).model_dump()

    return app
