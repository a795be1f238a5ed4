"""Sampling with real logprobs around a script.

At each position the stand-in has a distribution of its own: a logit of +L on the scripted next
token and 0 on every other token of the vocabulary. Temperature, top_k and top_p are applied to it
as an engine would, the token is sampled from it with a seeded RNG, and the chosen token's logprob
under that distribution is reported, rounded to float32 (vLLM's logprobs are float32 values; this
keeps them exact through Arrow float32 storage). Deviations from the script are real samples, rare
with a strong logit.

Because all "other" tokens share one logit, the distribution has two levels and everything is in
closed form; no per-position vocabulary-sized arrays.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import struct
from dataclasses import dataclass
from typing import Literal

LogprobsMode = Literal["processed", "raw"]


def to_float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def choice_rng(seed: int | None, index: int, prompt_len: int) -> random.Random:
    """Deterministic per (choice seed, prompt length); random when seed is None. A choice's
    seed is the request's plus its index, as vLLM's: choice j of a request seeded s draws what
    the only choice of a request seeded s + j would."""
    if seed is None:
        return random.Random(os.urandom(16))
    digest = hashlib.sha256(f"{seed + index}:{prompt_len}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


@dataclass(frozen=True)
class Draw:
    token_id: int
    logprob: float  # float32-exact
    top: list[tuple[int, float]]  # the most likely tokens, best first, for top_logprobs


class ScriptSampler:
    """The per-position distribution: +logit on the scripted token, 0 on the others."""

    def __init__(
        self,
        *,
        vocab_size: int,
        logit: float,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = -1,
        mode: LogprobsMode = "processed",
    ) -> None:
        self.vocab_size = vocab_size
        self.greedy = temperature == 0.0
        others = vocab_size - 1
        if top_k is not None and 0 < top_k < vocab_size:
            others = top_k - 1
        t = 1.0 if self.greedy else temperature
        # log of unnormalised weights: scripted exp(L/t), each other exp(0) = 1
        z_s = logit / t
        p_s = 1.0 / (1.0 + others * math.exp(-z_s))
        p_o = (1.0 - p_s) / others if others else 0.0
        if top_p < 1.0 and others:
            # keep the fewest tokens (scripted first: it is the most likely) reaching top_p
            if p_s >= top_p:
                others = 0
            else:
                others = min(others, math.ceil((top_p - p_s) / p_o - 1e-12))
            p_s = 1.0 / (1.0 + others * math.exp(-z_s))
            p_o = (1.0 - p_s) / others if others else 0.0
        if self.greedy:
            others, p_s, p_o = 0, 1.0, 0.0
        self.kept_others = others
        self.p_scripted = p_s
        if mode == "raw":
            # what the model gives before any processing (vLLM's default logprobs_mode)
            log_z = logit + math.log1p((vocab_size - 1) * math.exp(-logit))
            self.lp_scripted = to_float32(logit - log_z)
            self.lp_other = to_float32(-log_z)
        else:
            self.lp_scripted = to_float32(math.log(p_s))
            # vLLM reports impossible tokens as -9999.0 (JSON has no -inf)
            self.lp_other = to_float32(math.log(p_o)) if p_o > 0 else -9999.0

    def _other_id(self, scripted: int, k: int) -> int:
        """The k-th kept non-scripted token: the lowest ids, skipping the scripted one."""
        return k if k < scripted else k + 1

    def draw(self, rng: random.Random, scripted: int, n_top: int) -> Draw:
        u = rng.random()
        if self.kept_others == 0 or u < self.p_scripted:
            chosen, lp = scripted, self.lp_scripted
        else:
            chosen = self._other_id(scripted, rng.randrange(self.kept_others))
            lp = self.lp_other
        top: list[tuple[int, float]] = []
        if n_top > 0:
            top.append((scripted, self.lp_scripted))
            for k in range(min(n_top - 1, self.vocab_size - 1)):
                top.append((self._other_id(scripted, k), self.lp_other))
        return Draw(token_id=chosen, logprob=lp, top=top)
