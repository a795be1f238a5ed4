"""The token ledger of one episode: the exact sequence the engine saw, built by appending.

Earlier turns are never re-rendered: each generation is appended as the engine returned it
(loss 1, its logprobs), each observation as a separately tokenized template delta (loss 0,
logprob 0.0). Re-rendering the chat template would silently change earlier tokens (Qwen3
strips <think> from past turns; BPE merges across boundaries), corrupting TIS ratios.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ChatML (Qwen) turn boundaries. The delta closes the assistant turn, adds the user message and
# opens the next assistant turn.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


def observation_delta(content: str, *, turn_closed: bool) -> str:
    """Template text appended after a generation.

    `turn_closed` is True when the engine ended on its end-of-turn token (finish_reason "stop"
    without a stop string), which is then already part of the generated ids. Otherwise (length,
    stop string) the turn is closed here, with untrained template tokens."""
    close = "" if turn_closed else IM_END
    return f"{close}\n{IM_START}user\n{content}{IM_END}\n{IM_START}assistant\n"


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
    # What the engine saw on the last turn: its prompt, and what it generated from it.
    last_engine_prompt: list[int] | None = None
    last_generated: list[int] | None = None
    _checkpoint: int = 0  # response length right after the last generation

    def sequence(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    def add_generation(
        self, engine_prompt: list[int], token_ids: list[int], logprobs: list[float]
    ) -> None:
        if engine_prompt != self.sequence():
            raise InvariantError("the engine was prompted with a sequence other than the ledger's")
        if len(token_ids) != len(logprobs):
            raise InvariantError(f"{len(token_ids)} token ids but {len(logprobs)} logprobs")
        self.last_engine_prompt = engine_prompt
        self.last_generated = list(token_ids)
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.logprobs.extend(logprobs)
        self._checkpoint = len(self.response_ids)

    def add_observation(self, token_ids: list[int]) -> None:
        self.response_ids.extend(token_ids)
        self.loss_mask.extend([0] * len(token_ids))
        self.logprobs.extend([0.0] * len(token_ids))

    def rewind_to_last_generation(self) -> None:
        """Drop observation tokens the engine never saw (the episode ended before its next turn)."""
        del self.response_ids[self._checkpoint :]
        del self.loss_mask[self._checkpoint :]
        del self.logprobs[self._checkpoint :]

    def validate(self) -> None:
        n = len(self.response_ids)
        if not (len(self.loss_mask) == len(self.logprobs) == n):
            raise InvariantError("response ids, loss mask and logprobs differ in length")
        if any(lp != 0.0 for m, lp in zip(self.loss_mask, self.logprobs, strict=True) if m == 0):
            raise InvariantError("non-zero logprob on a masked token")
        if self.last_engine_prompt is None or self.last_generated is None:
            if self.response_ids:
                raise InvariantError("response tokens without any generation")
            return
        if self.sequence() != self.last_engine_prompt + self.last_generated:
            raise InvariantError("prompt + response differs from what the engine saw last")
