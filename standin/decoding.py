"""How the stand-in produces a choice: token by token, under the weights loaded at that moment.

The stand-in's "weights" are the logit its sampler puts on the scripted token (sampling.py): a
reload (`/collective_rpc reload_weights`, or a LoRA adapter) switches to another logit, read from
`standin_weights.json` in the folder loaded (`{"script_logit": L}`) or derived from the folder's
path, so two checkpoints give every scripted token a different, deterministic logprob. A test can
then tell from a token's logprob which weights produced it (`logprob_of`), as the real-engine
tests do by re-scoring.

A decoder takes one token per `step`, so the engine can pause it between tokens (keep), end it
with its partial output (abort), or switch the weights under it; each token records the engine's
weight version when it was produced, which become the choice's `weight_versions` spans.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from standin.sampling import LogprobsMode, ScriptSampler
from standin.tokenizer import EOS_ID, StubTokenizer

WEIGHTS_FILE = "standin_weights.json"


@dataclass(frozen=True)
class Weights:
    """What the stand-in serves: its weight version tag and its scripted-token logit."""

    tag: str
    logit: float


def weights_logit(path: str) -> float:
    """The scripted-token logit of the weights in folder `path`: its standin_weights.json's
    `script_logit`, else one derived from the path (between 8 and 16)."""
    file = Path(path) / WEIGHTS_FILE
    if file.is_file():
        return float(json.loads(file.read_text())["script_logit"])
    digest = hashlib.sha256(str(Path(path)).encode()).digest()
    return 8.0 + int.from_bytes(digest[:2], "big") % 800 / 100.0


@dataclass(frozen=True)
class SamplingKnobs:
    vocab_size: int
    temperature: float
    top_p: float
    top_k: int
    mode: LogprobsMode


def sampler(knobs: SamplingKnobs, logit: float) -> ScriptSampler:
    return ScriptSampler(
        vocab_size=knobs.vocab_size,
        logit=logit,
        temperature=knobs.temperature,
        top_p=knobs.top_p,
        top_k=knobs.top_k,
        mode=knobs.mode,
    )


def logprob_of(knobs: SamplingKnobs, logit: float, scripted: bool) -> float:
    """The logprob the stand-in reports for a token under the weights with `logit`: the
    scripted token's, or any other token's."""
    s = sampler(knobs, logit)
    return s.lp_scripted if scripted else s.lp_other


@dataclass
class ChoiceDecoder:
    """One choice: the script it follows (from `start` on), and what it produced so far."""

    tokenizer: StubTokenizer
    script: list[int]
    start: int
    rng: random.Random
    knobs: SamplingKnobs
    max_tokens: int
    stops: list[str]
    stop_ids: set[int]
    n_top: int
    include_stop: bool
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    stop_reason: str | int | None = None

    def __post_init__(self) -> None:
        self._decoder = self.tokenizer.incremental_decoder()
        self._longest_stop = max((len(s) for s in self.stops), default=0)
        self._samplers: dict[float, ScriptSampler] = {}

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def position(self) -> int:
        """Where in the script the next token is."""
        return self.start + len(self.ids)

    def step(self, weights: Weights) -> None:
        """Produce the next token under `weights`."""
        if self.done:
            return
        if len(self.ids) >= self.max_tokens:
            self._finish("length", None)
            return
        s = self._samplers.get(weights.logit)
        if s is None:
            s = self._samplers[weights.logit] = sampler(self.knobs, weights.logit)
        # Past the script's end (after a deviation skipped the EOS), keep asking for EOS.
        pos = self.position
        scripted = self.script[pos] if pos < len(self.script) else EOS_ID
        draw = s.draw(self.rng, scripted, self.n_top)
        self.ids.append(draw.token_id)
        self.logprobs.append(draw.logprob)
        self.tops.append(draw.top)
        self.versions.append(weights.tag)
        tok = self.tokenizer
        if draw.token_id == EOS_ID:
            self._finish("stop", None)
        elif draw.token_id in self.stop_ids:
            self._finish("stop", draw.token_id)
        elif draw.token_id not in tok.special_ids:  # skip_special_tokens: not part of the text
            before = len(self.text)
            self.text += self._decoder.decode(tok.token_bytes(draw.token_id))
            if self.stops:
                # Like vLLM: look for a stop string overlapping the newly added text only.
                window_start = max(0, before - self._longest_stop + 1)
                hits = [(i, s) for s in self.stops if (i := self.text.find(s, window_start)) >= 0]
                if hits:
                    at, stop = min(hits)
                    cut = at + len(stop) if self.include_stop else at
                    self.text = self.text[:cut]
                    self.finish_reason, self.stop_reason = "stop", stop
                    return
        if not self.done and len(self.ids) >= self.max_tokens:
            self._finish("length", None)

    def abort(self) -> None:
        """Paused with mode abort: end now with what was produced (the text holds back an
        incomplete character, as vLLM's incremental detokenizer does)."""
        if not self.done:
            self.finish_reason, self.stop_reason = "abort", None

    def _finish(self, reason: str, stop_reason: str | int | None) -> None:
        self.finish_reason, self.stop_reason = reason, stop_reason
        if not isinstance(stop_reason, str):
            self.text += self._decoder.decode(b"", final=True)

    def spans(self) -> list[tuple[str, int, int]]:
        """(version, start, end) over output-token indexes: the engine's weight_versions."""
        out: list[tuple[str, int, int]] = []
        for i, v in enumerate(self.versions):
            if out and out[-1][0] == v:
                out[-1] = (v, out[-1][1], i + 1)
            else:
                out.append((v, i, i + 1))
        return out
