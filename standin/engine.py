"""The stand-in's engine: everything of the stand-in vLLM except HTTP (server.py).

It serves a generation request (`Ask`, whichever route it came by): checks it as vLLM does,
makes it wait while the engine is paused, and produces its choices token by token over the
simulated decode time with the scripted agent (behaviour.py) under the weights of the moment
(decoding.py); a keep pause freezes them, an abort pause ends them with their partial output,
and a later request whose prompt continues an aborted choice picks its script up where it
stopped. It also keeps the pause state, the loaded weights and LoRA adapters, a simulated
prefix cache, vLLM's /metrics counters and the optional JSONL record of served choices.

For tests of faults, things a real engine does on its own and a test must be able to cause at
a moment it chooses: `restart` (the process dies and comes back behind the same address with
its startup weights), `hold` (requests stop after some tokens, as on a busy GPU, until
`release`: the engine is not paused) and `fail` (a control route answers an error).

Errors are `StubError`s carrying vLLM's status, type and param; server.py shapes them.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from sandboxes.task import Task
from service.policy.vllm_wire import CompletionRequest, GenerateRequest, cache_salt_problem
from standin.behaviour import BehaviourSettings, ScriptedAgent
from standin.decoding import ChoiceDecoder, SamplingKnobs, Weights, weights_logit
from standin.sampling import LogprobsMode, choice_rng
from standin.tokenizer import EOS_ID, StubTokenizer

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
    # Filler words of analysis in every reply (as many as fit): long replies that fill a small
    # context in a few turns, so that a harness's context summarization runs (behaviour.py).
    verbose_words: int = Field(default=0, ge=0)
    # Strong enough that an unscripted token is ~1e-8 per position: p_correct=1 means every
    # sample passes, while logprobs stay real samples of this distribution.
    script_logit: float = Field(default=24.0, gt=0)
    logprobs_mode: LogprobsMode = "processed"
    # Like vLLM's --enable-scale-out: without it /inference/v1/generate answers 403.
    scale_out: bool = True


class StubError(Exception):
    """A request the stand-in refuses, answered in vLLM's error shape (server.py)."""

    def __init__(self, status: int, message: str, type_: str, param: str | None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param


def bad_request(message: str, param: str | None) -> StubError:
    return StubError(400, message, "BadRequestError", param)


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
class Ask:
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
    def of_completion(cls, r: CompletionRequest) -> Ask:
        return cls(
            "completions", r.model, r.prompt, r.n, r.seed, r.temperature, r.top_p, r.top_k,
            r.max_tokens, r.stop_list(), list(r.stop_token_ids or ()),
            r.include_stop_str_in_output, r.logprobs, r.cache_salt,
        )  # fmt: skip

    @classmethod
    def of_generate(cls, r: GenerateRequest) -> Ask:
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
                verbose_words=settings.verbose_words,
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
        self._life = 0  # restarts so far: requests of an earlier life fail
        # Set and replaced at every change of the control state: whatever waits on it (a frozen
        # choice, a held one, a new request on a paused engine) looks again.
        self._wake = asyncio.Event()
        self.hold_at: int | None = None  # requests stop once they have this many tokens
        self.hold_longer_than = -1  # ...if their prompt is longer than this
        self.holding = 0  # requests stopped by the hold now
        self.failing: dict[str, int] = {}  # control route -> the HTTP status it answers
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
            raise bad_request(f"Token id {bad} is out of vocabulary", param)

    def weights_for(self, model: str | None) -> Weights:
        """The weights a request runs under now: the base's, or its LoRA adapter's."""
        if model in self.adapters:
            return Weights(self.weights.tag, self.adapters[model][1])
        return self.weights

    # ------------------------------------------------------------ generation

    def _script(self, ask: Ask, index: int, max_tokens: int) -> tuple[list[int], int]:
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

    def decoders(self, ask: Ask) -> list[ChoiceDecoder]:
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

    def validate(self, ask: Ask) -> None:
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
            raise bad_request("Prompt cannot be empty", "prompt")
        self.check_ids(ask.prompt, "prompt")
        if ask.cache_salt is not None and (problem := cache_salt_problem(ask.cache_salt)):
            raise bad_request(problem, "cache_salt")
        if ask.logprobs is not None and ask.logprobs > MAX_LOGPROBS:
            raise bad_request(
                f"Requested sample logprobs of {ask.logprobs}, which is greater than max allowed: "
                f"{MAX_LOGPROBS}",
                "logprobs",
            )
        n, limit = len(ask.prompt), self.settings.max_model_len
        if n > limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {n} input tokens, which exceeds this limit even without any output "
                "tokens. Please reduce the length of the input prompt. "
                f"(parameter=input_tokens, value={n})",
                "input_tokens",
            )
        if ask.max_tokens is not None and n + ask.max_tokens > limit:
            raise bad_request(
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

    async def generate(self, ask: Ask) -> list[ChoiceDecoder]:
        """Serve one request: wait while paused, then produce its choices token by token over
        the decode time, under the weights of the moment; a keep pause freezes them between
        tokens, an abort pause ends them with their partial output."""
        self.validate(ask)
        c, life = self.counters, self._life
        c.waiting += 1
        try:
            while not self.unpaused.is_set():  # new requests wait while the engine is paused
                await self._changed(life)
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
            aborts = self._aborts
            await self._produce(ask, decoders, life)
            while self.pause_mode == "keep" and self._aborts == aborts:
                await self._changed(life)  # pause(mode=keep) holds finished work too
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

    async def _changed(self, life: int) -> None:
        """Until the control state changes; a request of an earlier life fails (HTTP 500, as
        vLLM's requests do when its engine core dies)."""
        await self._wake.wait()
        if self._life != life:
            raise StubError(500, "EngineCore encountered an issue", "InternalServerError", None)

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    async def _produce(self, ask: Ask, decoders: list[ChoiceDecoder], life: int) -> None:
        """Token k of every choice is due after ttft + k x the per-token time, on a clock
        that stands still while the engine is paused with keep (or holds the request)."""
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
                await self._changed(life)
                continue
            if (
                self.hold_at is not None
                and produced >= self.hold_at
                and len(ask.prompt) > self.hold_longer_than
            ):
                self.holding += 1
                self._notify()  # for whoever waits to see it held (`held`)
                try:
                    await self._changed(life)
                finally:
                    self.holding -= 1
                continue
            wait = ttft + per_token * produced - active
            if wait > 0:
                step = min(wait, 0.05)
                t0 = time.monotonic()
                await asyncio.sleep(step)
                active += time.monotonic() - t0
                if self._life != life:
                    raise StubError(
                        500, "EngineCore encountered an issue", "InternalServerError", None
                    )
                continue
            for d in decoders:
                d.step(self.weights_for(ask.model))
            produced += 1

    def _remember_partial(self, ask: Ask, d: ChoiceDecoder) -> None:
        self._partials[tuple(ask.prompt + d.ids)] = (d.script, d.position)
        while len(self._partials) > PARTIALS_KEPT:
            self._partials.popitem(last=False)

    def _record(self, ask: Ask, decoders: list[ChoiceDecoder]) -> None:
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
        if mode == "abort":  # every running request ends, frozen ones included
            self._aborts += 1
        if clear_cache:  # vLLM 0.32 empties the prefix cache on every mode
            self.reset_prefix_cache()
        self._notify()

    def resume(self) -> None:
        self.pause_mode = None
        self.unpaused.set()
        self._notify()

    def restart(self) -> None:
        """The process dies and comes back behind the same address (a supervisor's restart):
        running and waiting requests fail with HTTP 500, and the engine is as it started:
        its startup weights tagged "default", no LoRA adapter, not paused, no hold, caches and
        counters empty."""
        self._life += 1
        self.weights = Weights(tag="default", logit=self.settings.script_logit)
        self.adapters = {}
        self.pause_mode, self.hold_at, self.failing = None, None, {}
        self.unpaused.set()
        self.counters = _Counters()
        self._partials.clear()
        self.reset_prefix_cache()
        self._notify()

    def hold(self, after_tokens: int, longer_than: int = -1) -> None:
        """Running and new requests whose prompt is longer than `longer_than` tokens (a later
        turn of an episode whose first prompt is that long) stop once they have `after_tokens`
        tokens, until `release` (the engine is busy, not paused: /is_paused says false)."""
        self.hold_at, self.hold_longer_than = after_tokens, longer_than
        self._notify()

    def release(self) -> None:
        self.hold_at = None
        self._notify()

    async def held(self, count: int) -> None:
        """Until `count` requests are stopped by the hold."""
        while self.holding < count:
            await self._wake.wait()

    def check_fault(self, route: str) -> None:
        """A control route made to fail (`failing`) answers its status."""
        status = self.failing.get(route)
        if status is not None:
            raise StubError(status, f"{route} failed (a fault the test asked for)", "Error", None)

    def reload(self, weights_path: str) -> None:
        if not Path(weights_path).is_dir():
            raise StubError(
                500, f"reload_weights: no checkpoint at {weights_path}", "InternalServerError", None
            )
        self.weights = Weights(self.weights.tag, weights_logit(weights_path))
        self.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
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
