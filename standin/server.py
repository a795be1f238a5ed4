"""The stand-in policy server: a FastAPI app speaking vLLM 0.32's HTTP subset, for tests and demos.

It is NOT a language model. It answers /v1/completions with the scripted terminal agent of
behaviour.py, sampled token by token with real (float32) logprobs (sampling.py), in exactly the
shapes of the vLLM recordings (models in service/policy/vllm_wire.py). Errors come in vLLM's shape
`{"error": {"message", "type", "param", "code"}}` with vLLM's status codes (400 for a bad field,
never 422). Decode speed is simulated with asyncio.sleep, so concurrent requests proceed in
parallel like a batched engine.
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
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    DetokenizeRequest,
    DetokenizeResponse,
    ErrorInfo,
    ErrorResponse,
    IsPausedResponse,
    ModelCard,
    ModelList,
    ModelPermission,
    ResetPrefixCacheResponse,
    StatusResponse,
    TokenizeRequest,
    TokenizeResponse,
    UsageInfo,
    cache_salt_problem,
)
from standin.behaviour import ATTACKS, BehaviourSettings, ScriptedAgent
from standin.chat_template import render
from standin.sampling import LogprobsMode, ScriptSampler, choice_rng
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
    # Strong enough that an unscripted token is ~1e-8 per position: p_correct=1 means every
    # sample passes, while logprobs stay real samples of this distribution.
    script_logit: float = Field(default=24.0, gt=0)
    logprobs_mode: LogprobsMode = "processed"


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


@dataclass
class _Generated:
    token_ids: list[int]
    logprobs: list[float]
    tops: list[list[tuple[int, float]]]
    text: str
    finish_reason: str
    stop_reason: str | int | None


class StubEngine:
    """Everything except HTTP: tokenizer, behaviour, sampling, counters, recording."""

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
            ),
            self.tokenizer,
        )
        self.created = int(time.time())
        self.counters = _Counters()
        self.prefix_cache = _PrefixCache()
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        self._record_lock = threading.Lock()
        self._decode_free_at = 0.0  # shared_decode: when the engine finishes what it was given

    # ------------------------------------------------------------ checks shared by endpoints

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.settings.model:
            raise StubError(
                404,
                f"The model `{model}` does not exist. Valid aliases: {self.settings.model}.",
                "NotFoundError",
                "model",
            )

    def check_ids(self, ids: list[int], param: str) -> None:
        bad = self.tokenizer.check_ids(ids)
        if bad is not None:
            raise _bad_request(f"Token id {bad} is out of vocabulary", param)

    # ------------------------------------------------------------ generation

    def generate_choice(self, req: CompletionRequest, index: int) -> _Generated:
        tok = self.tokenizer
        prompt = req.prompt
        rng = choice_rng(req.seed, index, len(prompt))
        max_tokens = req.max_tokens or (self.settings.max_model_len - len(prompt))
        reply = self.agent.reply(
            tok.decode(prompt), seed=req.seed, index=index, rng=rng, max_tokens=max_tokens
        )
        script = tok.encode(reply) + [EOS_ID]
        temperature = 1.0 if req.temperature is None else req.temperature
        sampler = ScriptSampler(
            vocab_size=tok.vocab_size,
            logit=self.settings.script_logit,
            temperature=temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=-1 if req.top_k is None else req.top_k,
            mode=self.settings.logprobs_mode,
        )
        stops = req.stop_list()
        longest_stop = max((len(s) for s in stops), default=0)
        stop_ids = set(req.stop_token_ids or ())
        n_top = req.logprobs or 0
        decoder = tok.incremental_decoder()
        ids: list[int] = []
        lps: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        text = ""
        finish, stop_reason = "length", None
        for pos in range(max_tokens):
            # Past the script's end (after a deviation skipped the EOS), keep asking for EOS.
            scripted = script[pos] if pos < len(script) else EOS_ID
            draw = sampler.draw(rng, scripted, n_top)
            ids.append(draw.token_id)
            lps.append(draw.logprob)
            tops.append(draw.top)
            if draw.token_id == EOS_ID:
                finish = "stop"
                break
            if draw.token_id in stop_ids:
                finish, stop_reason = "stop", draw.token_id
                break
            if draw.token_id in tok.special_ids:
                continue  # skip_special_tokens: not part of the text
            before = len(text)
            text += decoder.decode(tok.token_bytes(draw.token_id))
            if stops:
                # Like vLLM: look for a stop string overlapping the newly added text only.
                window_start = max(0, before - longest_stop + 1)
                hits = [(i, s) for s in stops if (i := text.find(s, window_start)) >= 0]
                if hits:
                    at, s = min(hits)
                    text = text[: at + len(s)] if req.include_stop_str_in_output else text[:at]
                    finish, stop_reason = "stop", s
                    break
        else:
            text += decoder.decode(b"", final=True)
        if finish == "stop" and not isinstance(stop_reason, str):
            text += decoder.decode(b"", final=True)
        return _Generated(ids, lps, tops, text, finish, stop_reason)

    def choice_model(self, req: CompletionRequest, index: int, g: _Generated) -> CompletionChoice:
        logprobs = None
        if req.logprobs is not None:
            as_ids = bool(req.return_tokens_as_token_ids)

            def name(t: int) -> str:
                return f"token_id:{t}" if as_ids else self.tokenizer.token_str(t)

            tokens = [name(t) for t in g.token_ids]
            offsets, off = [], 0
            for s in tokens:  # vLLM: cumulative lengths of the token strings
                offsets.append(off)
                off += len(s)
            top_logprobs: list[dict[str, float] | None] = []
            for t, lp, top in zip(g.token_ids, g.logprobs, g.tops, strict=True):
                entry = {name(t): lp}
                for tt, tlp in top:
                    entry.setdefault(name(tt), tlp)
                top_logprobs.append(entry)
            logprobs = CompletionLogprobs(
                text_offset=offsets,
                token_logprobs=list(g.logprobs),
                tokens=tokens,
                top_logprobs=top_logprobs,
            )
        return CompletionChoice(
            index=index,
            text=g.text,
            logprobs=logprobs,
            finish_reason=g.finish_reason,
            stop_reason=g.stop_reason,
            token_ids=list(g.token_ids) if req.return_token_ids else None,
            prompt_logprobs=None,
            prompt_token_ids=list(req.prompt) if req.return_token_ids else None,
            routed_experts=None,
        )

    def validate_completion(self, req: CompletionRequest) -> None:
        self.check_model(req.model)
        if not req.prompt:
            raise _bad_request("Prompt cannot be empty", "prompt")
        self.check_ids(req.prompt, "prompt")
        if req.cache_salt is not None and (problem := cache_salt_problem(req.cache_salt)):
            raise _bad_request(problem, "cache_salt")
        if req.logprobs is not None and req.logprobs > MAX_LOGPROBS:
            raise _bad_request(
                f"Requested sample logprobs of {req.logprobs}, which is greater than max allowed: "
                f"{MAX_LOGPROBS}",
                "logprobs",
            )
        n, limit = len(req.prompt), self.settings.max_model_len
        if n > limit:
            raise _bad_request(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {n} input tokens, which exceeds this limit even without any output "
                "tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={n})",
                "input_tokens",
            )
        if req.max_tokens is not None and n + req.max_tokens > limit:
            raise _bad_request(
                f"'max_tokens' or 'max_completion_tokens' is too large: {req.max_tokens}. This "
                f"model's maximum context length is {limit} tokens and your request has {n} input "
                f"tokens ({req.max_tokens} > {limit} - {n}). "
                f"(parameter=max_tokens, value={req.max_tokens})",
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

    async def complete(self, req: CompletionRequest) -> CompletionResponse:
        self.validate_completion(req)
        c = self.counters
        c.waiting += 1
        try:
            await self.unpaused.wait()
        finally:
            c.waiting -= 1
        c.running += 1
        c.prompt_tokens += len(req.prompt)
        c.prefix_queries += len(req.prompt)
        c.prefix_hits += self.prefix_cache.query(req.prompt, req.cache_salt)
        try:
            gens = [self.generate_choice(req, i) for i in range(req.n)]
            longest = max(len(g.token_ids) for g in gens)
            completion_tokens = sum(len(g.token_ids) for g in gens)
            held = len(req.prompt) * req.n + sum(len(g.token_ids) for g in gens)
            c.running_tokens += held
            try:
                delay = self.settings.ttft_ms / 1000.0
                if self.settings.tokens_per_s:
                    delay += self._decode_s(longest, completion_tokens)
                if delay > 0:
                    await asyncio.sleep(delay)
                await self.unpaused.wait()  # pause(mode=keep) holds finished work too
            finally:
                c.running_tokens -= held
        finally:
            c.running -= 1
        c.generation_tokens += completion_tokens
        for g in gens:
            c.success[g.finish_reason] = c.success.get(g.finish_reason, 0) + 1
        if self.settings.record:
            await asyncio.to_thread(self._record, req, gens)
        return CompletionResponse(
            id=f"cmpl-{secrets.token_hex(8)}",
            created=int(time.time()),
            model=self.settings.model,
            choices=[self.choice_model(req, i, g) for i, g in enumerate(gens)],
            service_tier=None,
            system_fingerprint=SYSTEM_FINGERPRINT,
            usage=UsageInfo(
                prompt_tokens=len(req.prompt),
                total_tokens=len(req.prompt) + completion_tokens,
                completion_tokens=completion_tokens,
            ),
            kv_transfer_params=None,
            ec_transfer_params=None,
            metrics=None,
        )

    def _record(self, req: CompletionRequest, gens: list[_Generated]) -> None:
        assert self.settings.record is not None
        lines = [
            json.dumps(
                {
                    "prompt_token_ids": req.prompt,
                    "token_ids": g.token_ids,
                    "logprobs": g.logprobs,
                    "finish_reason": g.finish_reason,
                    "stop_reason": g.stop_reason,
                    "index": i,
                    "seed": req.seed,
                    "cache_salt": req.cache_salt,
                }
            )
            + "\n"
            for i, g in enumerate(gens)
        ]
        with self._record_lock, open(self.settings.record, "a", encoding="utf-8") as f:
            f.writelines(lines)

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
        return ModelList(data=[card]).model_dump()

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
        return (await engine.complete(req)).model_dump()

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(engine.metrics_text(), media_type="text/plain; version=0.0.4")

    # Dev-mode control endpoints (vLLM needs VLLM_SERVER_DEV_MODE=1 for these).
    @app.post("/pause")
    async def pause(mode: str = "keep") -> dict:
        if mode not in ("keep", "abort", "wait"):
            raise _bad_request(f"mode must be keep, abort or wait, got {mode!r}", "mode")
        engine.unpaused.clear()
        return StatusResponse(status="paused").model_dump()

    @app.post("/resume")
    async def resume() -> dict:
        engine.unpaused.set()
        return StatusResponse(status="resumed").model_dump()

    @app.get("/is_paused")
    async def is_paused() -> dict:
        return IsPausedResponse(is_paused=not engine.unpaused.is_set()).model_dump()

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict:
        engine.prefix_cache = _PrefixCache()
        return ResetPrefixCacheResponse(success=True).model_dump()

    return app
