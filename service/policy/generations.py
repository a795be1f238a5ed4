"""The generation routes on the wire, as the policy client (client.py) uses them: what a
request sends, and what its answer means.

Every generation request carries every sampling field (vllm_wire.SAMPLING_FIELDS), so no server
default can change the distribution sampled from. An answer's choices are checked (count, token
ids aligned 1:1 with logprobs, finish reason) and read into `Generation`s with one policy
version per output token, from the engine's `weight_versions` spans where it reports them. A
token is never labelled with a guess: a span naming weights the service did not see the server
serve while the request ran (a restarted engine's "default") is the server's fault
(`ForeignWeights`), and an answer without spans from a server whose version changed while it
ran cannot be attributed. An answer that cannot be used raises `Rejected`, counting the
generated tokens it loses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from service.policy.servers import Window, parse_version
from service.policy.vllm_wire import (
    CompletionResponse,
    ErrorResponse,
    GenerateResponse,
    WeightVersionSpan,
)
from service.sample import SamplingParams

GENERATE = "/inference/v1/generate"
COMPLETIONS = "/v1/completions"
_FINISH_REASONS = ("stop", "length", "abort")


@dataclass
class Generation:
    token_ids: list[int]  # exactly the engine's choice.token_ids (EOS included on an EOS stop)
    logprobs: list[float]  # the sampled tokens' logprobs, aligned 1:1 with token_ids
    finish_reason: str  # "stop" | "length" | "abort" (paused with mode abort: a partial output)
    stop_reason: str | int | None
    text: str
    # The policy version of the weights that produced each token: the engine's weight_versions
    # spans where it reports them, else the version its server served when the request was sent.
    versions: list[int] = field(default_factory=list)
    # Seconds the request was held by a paused server (not the model's time).
    paused_s: float = 0.0


def sampling_fields(params: SamplingParams, n: int, room: int) -> dict[str, Any]:
    """The sampling fields of a request for `n` choices with `room` tokens left in the context:
    every one, always; whatever is left out, vLLM fills from its defaults or the model's
    generation_config.json."""
    sampling: dict[str, Any] = {
        "n": n,
        # vLLM rejects prompt + max_tokens > max_model_len; a turn near the end of the
        # context gets what is left instead.
        "max_tokens": min(params.max_tokens, room),
        "min_tokens": 0,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "stop": list(params.stop or []),
        "ignore_eos": False,
        "logprobs": 1,
    }
    if params.seed is not None:
        sampling["seed"] = params.seed
    return sampling


def generate_body(
    model: str, prompt: list[int], sampling: dict[str, Any], salt: str
) -> dict[str, Any]:
    return {
        "model": model,
        "token_ids": prompt,
        "sampling_params": sampling,
        "output_mode": "text",
        "return_token_ids": True,
        "cache_salt": salt,
    }


def completions_body(
    model: str, prompt: list[int], sampling: dict[str, Any], salt: str
) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt,
        **sampling,
        "return_token_ids": True,
        "cache_salt": salt,
    }


def route_missing(resp: httpx.Response) -> bool:
    """vLLM without --enable-scale-out answers the generate route 403; a server that does not
    know the route at all, 404 without vLLM's error body (an unknown model is 404 with one)."""
    if resp.status_code == 403:
        return True
    if resp.status_code != 404:
        return False
    try:
        ErrorResponse.model_validate_json(resp.content)
    except ValidationError:
        return True
    return False


class Rejected(Exception):
    """An answer that cannot be used (a retry follows): `tokens` generated ones are lost."""

    def __init__(self, message: str, tokens: int) -> None:
        super().__init__(message)
        self.tokens = tokens


class ForeignWeights(Rejected):
    """The engine labelled tokens with weights the service did not see it serve while the
    request ran (a restarted engine's "default", a tag set behind the service's back): a fault
    of that server, whose version is unknown until it is asked again."""


class _Untiled(Exception):
    """The weight_versions spans do not cover the output tokens exactly once."""


class _Foreign(Exception):
    """A span names weights the service did not see the server serve."""


class _Unattributed(Exception):
    """No spans, and the server's version changed while the request ran."""


def token_versions(
    spans: list[WeightVersionSpan] | None,
    n_tokens: int,
    sent_version: int,
    window: Window | None,
    *,
    follow: bool = False,
) -> list[int]:
    """One policy version per output token. `window`: what the service saw the server serve
    while the request ran (fleet.watch); every span must name one of its versions. Without
    spans every token gets `sent_version`, which is exact only if the server served no other
    version before the request ended. `window` None: a server the service does not tag (no
    control routes), whose tokens carry the service's number when the request was sent.
    `follow`: a trainer's own server (service/policy/follower.py), whose weights the trainer
    tags: each span's decimal tag is its tokens' version, and tokens without one keep
    `sent_version`."""
    out = [sent_version] * n_tokens
    if follow:
        return _followed(spans, out)
    if window is None:
        return out
    if not spans:
        if len(window.before_stop) > 1:
            raise _Unattributed(
                f"the server's weights changed (versions {sorted(window.before_stop)}) while "
                "this request ran, and its answer does not say which tokens came from which"
            )
        return out
    seen = window.seen
    pos = 0
    for span in sorted(spans, key=lambda sp: sp.start):
        if span.start != pos or not span.start <= span.end <= n_tokens:
            raise _Untiled(f"weight_versions spans do not tile the {n_tokens} tokens: {spans}")
        version = parse_version(span.version)
        if version is None or version not in seen:
            raise _Foreign(
                f"tokens {span.start}..{span.end} came from weights tagged {span.version!r}, "
                f"while the service saw it serve {sorted(seen)} (restarted?)"
            )
        out[span.start : span.end] = [version] * (span.end - span.start)
        pos = span.end
    if pos != n_tokens:
        raise _Untiled(f"weight_versions spans do not tile the {n_tokens} tokens: {spans}")
    return out


def _followed(spans: list[WeightVersionSpan] | None, out: list[int]) -> list[int]:
    pos = 0
    for span in sorted(spans or (), key=lambda sp: sp.start):
        if span.start != pos or not span.start <= span.end <= len(out):
            raise _Untiled(f"weight_versions spans do not tile the {len(out)} tokens: {spans}")
        version = parse_version(span.version)
        if version is not None:
            out[span.start : span.end] = [version] * (span.end - span.start)
        pos = span.end
    if spans and pos != len(out):
        raise _Untiled(f"weight_versions spans do not tile the {len(out)} tokens: {spans}")
    return out


def _versions(
    spans: list[WeightVersionSpan] | None,
    n_tokens: int,
    sent_version: int,
    window: Window | None,
    tokens: int,
    follow: bool,
) -> list[int]:
    """token_versions, its faults as Rejected (`tokens`: the answer's, all lost)."""
    try:
        return token_versions(spans, n_tokens, sent_version, window, follow=follow)
    except _Foreign as e:
        raise ForeignWeights(str(e), tokens) from e
    except (_Untiled, _Unattributed) as e:
        raise Rejected(str(e), tokens) from e


def _choices_checked(choices: list[Any], n: int) -> list[Any]:
    """The choices in index order; a wrong count or finish reason is retried (any tokens
    already in the answer are then lost, and counted)."""
    tokens = sum(len(c.token_ids or ()) for c in choices)
    if len(choices) != n:
        raise Rejected(f"expected {n} choices, got {len(choices)}", tokens)
    for c in choices:
        if c.token_ids is None or c.logprobs is None:
            raise Rejected(f"choice {c.index}: token_ids or logprobs missing", tokens)
        if c.finish_reason not in _FINISH_REASONS:
            raise Rejected(f"choice {c.index}: finish_reason {c.finish_reason!r}", tokens)
    return sorted(choices, key=lambda c: c.index)


def from_generate(
    resp: GenerateResponse,
    n: int,
    sent_version: int,
    window: Window | None,
    *,
    follow: bool = False,
) -> list[Generation]:
    out: list[Generation] = []
    choices = _choices_checked(resp.choices, n)
    tokens = sum(len(c.token_ids) for c in choices)
    for choice in choices:
        entries = choice.logprobs.content or []
        if len(entries) != len(choice.token_ids):
            raise Rejected(
                f"choice {choice.index}: {len(choice.token_ids)} token ids but {len(entries)} "
                "logprobs",
                tokens,
            )
        versions = _versions(
            choice.weight_versions, len(choice.token_ids), sent_version, window, tokens, follow
        )
        out.append(
            Generation(
                token_ids=list(choice.token_ids),
                logprobs=[float(e.logprob) for e in entries],
                finish_reason=choice.finish_reason,
                stop_reason=choice.stop_reason,
                text=choice.text or "",
                versions=versions,
            )
        )
    return out


def from_completions(
    resp: CompletionResponse,
    n: int,
    sent_version: int,
    window: Window | None,
    *,
    follow: bool = False,
) -> list[Generation]:
    out: list[Generation] = []
    choices = _choices_checked(resp.choices, n)
    tokens = sum(len(c.token_ids) for c in choices)
    for choice in choices:
        lps = choice.logprobs.token_logprobs
        if len(lps) != len(choice.token_ids) or any(lp is None for lp in lps):
            raise Rejected(
                f"choice {choice.index}: {len(choice.token_ids)} token ids but {len(lps)} logprobs",
                tokens,
            )
        out.append(
            Generation(
                token_ids=list(choice.token_ids),
                logprobs=[float(lp) for lp in lps if lp is not None],
                finish_reason=choice.finish_reason,
                stop_reason=choice.stop_reason,
                text=choice.text,
                versions=_versions(
                    None, len(choice.token_ids), sent_version, window, tokens, follow
                ),
            )
        )
    return out
