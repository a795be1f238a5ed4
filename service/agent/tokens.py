"""The token ledger of one episode: the exact sequence the engine saw, built by appending.

Earlier turns are never re-rendered: each generation is appended as the engine returned it
(loss 1, its logprobs, the policy version of each token), each observation as a delta derived
from the server's own chat template (loss 0, logprob 0.0, version -1; see TemplateFrame). A
generation cut short by a pause (abort) is appended the same way, and the turn continues from
it: the engine is prompted with the sequence so far, partial tokens included.

Re-rendering the whole conversation would silently change earlier tokens (Qwen3 strips <think>
from past turns; BPE merges across boundaries), corrupting TIS ratios.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The fixed conversation observation deltas are derived from (see TemplateFrame). Its wording is
# irrelevant: only what the template puts around and after it matters.
BASE_CONVERSATION = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello."},
)
# Two assistant replies that end in different tokens: what follows them in their renderings is
# the template's end of an assistant turn.
_REPLIES = ("Hello alpha.", "Hello omega!")


def base_renderings() -> list[tuple[list[dict[str, str]], bool]]:
    """The (messages, add_generation_prompt) renderings a TemplateFrame is built from, in the
    order `TemplateFrame.build` takes their token ids."""
    base = [dict(m) for m in BASE_CONVERSATION]
    return [(base, False)] + [
        ([*base, {"role": "assistant", "content": r}], False) for r in _REPLIES
    ]


def observation_messages(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages whose rendering (with the generation prompt) carries an observation delta:
    `content` as one user message, or the harness's observation messages as they are (e.g.
    `tool` messages, which the template renders its own way)."""
    observed = [{"role": "user", "content": content}] if isinstance(content, str) else content
    return [*(dict(m) for m in BASE_CONVERSATION), *(dict(m) for m in observed)]


class TemplateError(Exception):
    """The chat template does not render the way observation deltas assume."""


@dataclass(frozen=True)
class TemplateFrame:
    """What the server's chat template appends after a generated assistant turn, learnt from the
    template itself (rendered by the server's /tokenize with the same chat_template_kwargs),
    never hard-coded:

    - `close`: the end of an assistant turn, from the common tail of two renderings of the base
      conversation plus one assistant reply (ChatML/Qwen3: `<|im_end|>` `\n`);
    - `base`: the base conversation rendered alone; rendered with a user message and the
      generation prompt it is a prefix, and the rest is that message plus the generation prompt
      (Qwen3: `<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n`, plus the empty
      think block with enable_thinking=False).

    Earlier turns are never re-rendered: a delta is appended to the engine's exact tokens."""

    base: tuple[int, ...]
    close: tuple[int, ...]

    @classmethod
    def build(cls, base: list[int], reply_a: list[int], reply_b: list[int]) -> TemplateFrame:
        n = 0
        while n < min(len(reply_a), len(reply_b)) and reply_a[-1 - n] == reply_b[-1 - n]:
            n += 1
        if reply_a[: len(base)] != base or len(reply_a) - n <= len(base):
            raise TemplateError("an assistant reply does not extend the rendered conversation")
        return cls(base=tuple(base), close=tuple(reply_a[len(reply_a) - n :]))

    def delta(self, rendered: list[int], *, turn_closed: bool) -> list[int]:
        """The tokens to append after a generation, from `rendered`: the rendering of
        `observation_messages(content)` with the generation prompt.

        `turn_closed`: the engine ended the turn on an end-of-sequence token (finish_reason
        "stop" without a stop string), which is then the last generated id. That token stands
        for the template's first closing token (Qwen3-8B stops on `<|im_end|>` or
        `<|endoftext|>`; either one ends the turn), so only the rest of the close follows it.
        Otherwise (max_tokens, a stop string) the whole close is appended, untrained."""
        n = len(self.base)
        if tuple(rendered[:n]) != self.base or len(rendered) <= n:
            raise TemplateError(
                "the chat template renders the base conversation differently once a user "
                "message follows it: observation deltas cannot be derived from it"
            )
        close = self.close[1:] if turn_closed else self.close
        return [*close, *rendered[n:]]


OBSERVATION_VERSION = -1  # the policy version recorded on tokens the model did not generate


class InvariantError(Exception):
    """A trajectory would reach the trainer with misaligned tokens: never store it.

    A plain exception, not an AssertionError, and raised explicitly, never by `assert`: these
    checks must hold under `python -O` too."""


@dataclass
class TokenLedger:
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # policy version per response token
    # What the engine saw on the last turn: its prompt, and what it generated from it.
    last_engine_prompt: list[int] | None = None
    last_generated: list[int] | None = None
    _checkpoint: int = 0  # response length right after the last generation

    def sequence(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def add_generation(
        self,
        engine_prompt: list[int],
        token_ids: list[int],
        logprobs: list[float],
        versions: list[int],
    ) -> None:
        if engine_prompt != self.sequence():
            raise InvariantError("the engine was prompted with a sequence other than the ledger's")
        if not len(token_ids) == len(logprobs) == len(versions):
            raise InvariantError(
                f"{len(token_ids)} token ids, {len(logprobs)} logprobs, {len(versions)} versions"
            )
        if any(v < 0 for v in versions):
            raise InvariantError("a generated token without a policy version")
        self.last_engine_prompt = engine_prompt
        self.last_generated = list(token_ids)
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.logprobs.extend(logprobs)
        self.versions.extend(versions)
        self._checkpoint = len(self.response_ids)

    def add_observation(self, token_ids: list[int]) -> None:
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([0] * len(token_ids))
        self.logprobs.extend([0.0] * len(token_ids))
        self.versions.extend([OBSERVATION_VERSION] * len(token_ids))

    def rewind_to_last_generation(self) -> None:
        """Drop observation tokens the engine never saw (the episode ended before its next turn)."""
        del self.response_ids[self._checkpoint :]
        del self.loss_mask[self._checkpoint :]
        del self.logprobs[self._checkpoint :]
        del self.versions[self._checkpoint :]

    @property
    def generated(self) -> int:
        return sum(self.loss_mask)

    def validate(self) -> None:
        n = len(self.response_ids)
        if not (len(self.loss_mask) == len(self.logprobs) == len(self.versions) == n):
            raise InvariantError("response ids, loss mask, logprobs and versions differ in length")
        if any(lp != 0.0 for m, lp in zip(self.loss_mask, self.logprobs, strict=True) if m == 0):
            raise InvariantError("non-zero logprob on a masked token")
        if any((v < 0) != (m == 0) for m, v in zip(self.loss_mask, self.versions, strict=True)):
            raise InvariantError("policy versions: -1 exactly on the tokens not generated")
        if self.last_engine_prompt is None or self.last_generated is None:
            if self.response_ids:
                raise InvariantError("response tokens without any generation")
            return
        if self.sequence() != self.last_engine_prompt + self.last_generated:
            raise InvariantError("prompt + response differs from what the engine saw last")
