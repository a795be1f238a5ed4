"""The stand-in policy server: a FastAPI app speaking vLLM 0.32's HTTP subset, for tests and demos.

It is NOT a language model. It answers /v1/completions and /inference/v1/generate with the
scripted terminal agent of behaviour.py, sampled token by token with real (float32) logprobs
(sampling.py), in exactly the shapes of the vLLM recordings (models in
service/policy/vllm_wire.py). Like vLLM in dev mode it can be paused (keep, abort, wait), reload
other weights, tag them with a version and report per-token weight versions (decoding.py).
This module is the HTTP side: the routes, and vLLM's shapes of answers and errors; what the
routes serve comes from the engine (engine.py).

Errors come in vLLM's shape `{"error": {"message", "type", "param", "code"}}` with vLLM's status
codes (400 for a bad field, never 422). Decode speed is simulated with asyncio.sleep, so
concurrent requests proceed in parallel like a batched engine.

Routes under /standin/ are not vLLM's: tests use them to cause, at a moment they choose, what
a real engine does on its own (engine.py: restart, hold and release, a failing control route).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

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
)
from standin.attacks import ATTACKS
from standin.chat_template import render
from standin.decoding import ChoiceDecoder, Weights, weights_logit
from standin.engine import Ask, StubEngine, StubError, StubSettings, bad_request
from standin.tokenizer import StubTokenizer

SYSTEM_FINGERPRINT = "rollouts-policy-stub-0.1"


def _error_response(status: int, message: str, type_: str, param: str | None) -> JSONResponse:
    body = ErrorResponse(error=ErrorInfo(message=message, type=type_, param=param, code=status))
    return JSONResponse(body.model_dump(), status_code=status)


# ---------------------------------------------------------------- answers in vLLM's shapes


def _top_name(tokenizer: StubTokenizer, as_ids: bool, t: int) -> str:
    return f"token_id:{t}" if as_ids else tokenizer.token_str(t)


def completion_choice(
    tokenizer: StubTokenizer, req: CompletionRequest, index: int, d: ChoiceDecoder
) -> CompletionChoice:
    logprobs = None
    if req.logprobs is not None:
        as_ids = bool(req.return_tokens_as_token_ids)
        tokens = [_top_name(tokenizer, as_ids, t) for t in d.ids]
        offsets, off = [], 0
        for s in tokens:  # vLLM: cumulative lengths of the token strings
            offsets.append(off)
            off += len(s)
        top_logprobs: list[dict[str, float] | None] = []
        for t, lp, top in zip(d.ids, d.logprobs, d.tops, strict=True):
            entry = {_top_name(tokenizer, as_ids, t): lp}
            for tt, tlp in top:
                entry.setdefault(_top_name(tokenizer, as_ids, tt), tlp)
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


def generate_choice(
    tokenizer: StubTokenizer, req: GenerateRequest, index: int, d: ChoiceDecoder
) -> GenerateChoice:
    text_mode = req.output_mode == "text"
    logprobs = None
    if req.sampling_params.logprobs is not None:
        entries = []
        for t, lp, top in zip(d.ids, d.logprobs, d.tops, strict=True):
            cands = [(t, lp)] + [(tt, tlp) for tt, tlp in top if tt != t]
            cands = cands[: max(1, req.sampling_params.logprobs)]
            tops = [_generate_logprob(tokenizer, text_mode, tt, tlp) for tt, tlp in cands]
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


def _generate_logprob(
    tokenizer: StubTokenizer, text_mode: bool, token: int, lp: float
) -> GenerateTopLogprob:
    if text_mode:
        raw = tokenizer.token_bytes(token)
        return GenerateTopLogprob(logprob=lp, token=raw.decode(errors="replace"), bytes=list(raw))
    return GenerateTopLogprob(logprob=lp, token_id=token)


# ---------------------------------------------------------------- the app


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
            raise bad_request("Exactly one of 'messages' or 'prompt' must be given", "messages")
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
        decoders = await engine.generate(Ask.of_completion(req))
        tokens = sum(len(d.ids) for d in decoders)
        return CompletionResponse(
            id=f"cmpl-{secrets.token_hex(8)}",
            created=int(time.time()),
            model=req.model or settings.model,
            choices=[
                completion_choice(engine.tokenizer, req, i, d) for i, d in enumerate(decoders)
            ],
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
        decoders = await engine.generate(Ask.of_generate(req))
        tokens = sum(len(d.ids) for d in decoders)
        return GenerateResponse(
            request_id=f"generate-tokens-{secrets.token_hex(8)}",
            model=req.model or settings.model,
            created=int(time.time()),
            output_mode=req.output_mode,
            choices=[generate_choice(engine.tokenizer, req, i, d) for i, d in enumerate(decoders)],
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
        engine.check_fault("/pause")
        if mode not in PAUSE_MODES:
            raise bad_request(f"mode must be keep, abort or wait, got {mode!r}", "mode")
        engine.pause(mode, clear_cache)
        if mode == "wait":
            while engine.counters.running:
                await asyncio.sleep(0.01)
        return StatusResponse(status="paused").model_dump()

    @app.post("/resume")
    async def resume() -> dict:
        engine.check_fault("/resume")
        engine.resume()
        return StatusResponse(status="resumed").model_dump()

    @app.post("/collective_rpc")
    async def collective_rpc(req: CollectiveRpcRequest) -> dict:
        """reload_weights(weights_path=DIR) switches to the weights in DIR (decoding.py)."""
        engine.check_fault("/collective_rpc")
        if req.method != "reload_weights" or "weights_path" not in req.kwargs:
            raise bad_request(
                f"the stand-in runs only reload_weights(weights_path=...), not {req.method!r}",
                "method",
            )
        engine.reload(str(req.kwargs["weights_path"]))
        return CollectiveRpcResponse(results=[None]).model_dump()

    @app.post("/update_weight_version")
    async def update_weight_version(req: UpdateWeightVersionRequest) -> dict:
        engine.check_fault("/update_weight_version")
        engine.weights = Weights(req.new_version, engine.weights.logit)
        return UpdateWeightVersionResponse(success=True, new_version=req.new_version).model_dump()

    @app.get("/weight_info")
    async def weight_info() -> dict:
        engine.check_fault("/weight_info")
        return WeightInfoResponse(weight_version=engine.weights.tag).model_dump()

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(req: LoadLoraAdapterRequest) -> PlainTextResponse:
        engine.check_fault("/v1/load_lora_adapter")
        name = req.lora_name
        if name in engine.adapters and not req.load_inplace:
            raise bad_request(
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
        engine.reset_prefix_cache()
        return ResetPrefixCacheResponse(success=True).model_dump()

    # The stand-in's own routes, for tests of faults (not vLLM's).
    @app.post("/standin/restart")
    async def restart() -> dict:
        """Die and come back with the startup weights, tagged "default" (engine.restart)."""
        engine.restart()
        return {"status": "restarted"}

    @app.post("/standin/hold")
    async def hold(after_tokens: int = 0, longer_than: int = -1) -> dict:
        """Requests (with a prompt longer than `longer_than` tokens) stop once they have
        `after_tokens` tokens, until /standin/release."""
        engine.hold(after_tokens, longer_than)
        return {"status": "holding"}

    @app.get("/standin/held")
    async def held(count: int = 1) -> dict:
        """Answers once `count` requests are stopped by the hold."""
        await engine.held(count)
        return {"holding": engine.holding}

    @app.post("/standin/release")
    async def release() -> dict:
        engine.release()
        return {"status": "released"}

    @app.post("/standin/fail")
    async def fail(path: str, status: int | None = None) -> dict:
        """Control route `path` answers `status` from now on (none: it works again)."""
        if status is None:
            engine.failing.pop(path, None)
        else:
            engine.failing[path] = status
        return {"failing": engine.failing}

    return app
