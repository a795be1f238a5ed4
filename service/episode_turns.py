"""One sample's conversation with the policy, turn by turn, for the episode runner (episode.py,
which owns the group, the sandboxes, the clock and the verifier): each turn generated on the
token ledger and continued after aborts, the reply decoded for the harness, the observation's
tokens from the server's chat template, the context limit, and the harness's summarizations
when the context fills (episode_summary.py). Faults end the episode with a status, never an
exception, except those the runner maps (the clock's, the ledger's invariant, the sandbox's).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from service.agent.harnesses import Harness, HarnessSession
from service.agent.harnesses.sandbox_terminal import SandboxTerminal
from service.agent.tokens import TokenLedger
from service.episode_summary import EpisodeSummaries
from service.policy.client import ContextLengthError, PolicyClient, PolicyError, PolicyFault
from service.policy.generations import Generation
from service.policy.holds import Holds
from service.sample import SampleSpec
from service.store.workspaces import KeptWorkspace
from service.trajectory import Message, Status, Timings


def turn_seed(sample_seed: int | None, turn: int | str, part: int = 0) -> int | None:
    """The seed of a turn's request, from the sample's seed alone (service.sample.sample_seed):
    the first turn's is the sample's own (an n-sample request seeded s gives its choice j the
    seed s + j, and a group's samples have consecutive seeds). A turn continued after an abort
    (`part` 1, 2, ...) gets a seed of its own: reusing the turn's would replay the random numbers
    its first part already consumed, and the continuation would not be a fair sample given the
    partial output. A summarization call's `turn` is a key naming it (service/episode_summary.py).
    """
    if sample_seed is None:
        return None
    if turn == 0 and part == 0:
        return sample_seed
    digest = hashlib.sha256(f"{sample_seed}:{turn}:{part}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class Episode:
    """Mutable state of one sample while it runs."""

    spec: SampleSpec
    harness: Harness
    ledger: TokenLedger
    messages: list[Message]
    version: int  # the policy version when it started (for a sample that generated nothing)
    holds: Holds  # its generation requests' time held by paused servers (not the agent's)
    timings: Timings = field(default_factory=Timings)
    num_turns: int = 0
    stop_reason: str | None = None
    status: Status = Status.ok
    generated_tokens: int = 0
    kept: KeptWorkspace | None = None  # its final workspace, kept for regrading
    summaries: EpisodeSummaries | None = None  # its harness summarizes its context


def policy_failed(ep: Episode, error: PolicyFault) -> None:
    """The policy failed the episode: it ends, its status says how (a full context, or a
    masked policy_error), its unseen trailing observation rewound."""
    ep.ledger.rewind_to_last_generation()
    if isinstance(error, ContextLengthError):
        ep.status, ep.stop_reason = Status.context_length, "length"
    else:
        ep.status = Status.policy_error
        ep.messages.append(Message(role="system", content=f"policy error: {error}"))


class EpisodeTurns:
    """The turns of samples on one policy client."""

    def __init__(
        self, policy: PolicyClient, template_kwargs: Callable[[SampleSpec], dict[str, Any]]
    ) -> None:
        """`template_kwargs`: a sample's chat template keyword arguments (the runner's)."""
        self.policy = policy
        self.template_kwargs = template_kwargs

    def budget(self, seq_len: int, max_tokens: int) -> int:
        """A request's max_tokens: what is asked, within what the context has left."""
        return max(1, min(max_tokens, self.policy.max_model_len - seq_len))

    async def run(
        self,
        ep: Episode,
        session: HarnessSession,
        terminal: SandboxTerminal,
        gen: Generation | None,
    ) -> None:
        """The episode's turns from `gen`, its first turn's generation, until the harness, the
        turn limit, the context or a policy fault ends it (its status says which)."""
        spec = ep.spec
        tools = ep.harness.tools()
        summaries = ep.summaries
        for turn in range(spec.agent.max_turns):
            sent = ep.ledger.sequence()
            if gen is None:
                gen = await self.generate(ep, turn, 0, spec.sampling.max_tokens)
                if gen is None and await self._summarize_when_full(ep, terminal, turn):
                    # Harbor answers the turn from the rewritten conversation.
                    sent = ep.ledger.sequence()
                    gen = await self.generate(ep, f"{turn}:handoff", 0, spec.sampling.max_tokens)
                if gen is None:
                    return
            done = await self.whole_turn(ep, turn, sent, gen)
            if done is None:
                return
            turn_ids, gen = done
            ep.num_turns = turn + 1
            ep.stop_reason = gen.finish_reason
            text = await self.reply_text(gen, turn_ids, spec.trajectory_id)
            ep.messages.append(Message(role="assistant", content=text))
            if summaries is not None:
                summaries.replied(ep, text, gen)
            truncated = gen.finish_reason == "length"
            if truncated and len(ep.ledger) >= self.policy.max_model_len and summaries is None:
                # Cut by the end of the context, not by max_tokens: nothing more fits.
                ep.status = Status.context_length
                return

            t0 = time.monotonic()
            step = await session.step(text, terminal, truncated=truncated)
            ep.timings.agent_s += time.monotonic() - t0
            if step.note:
                ep.messages.append(Message(role="system", content=step.note))
            if step.done or turn == spec.agent.max_turns - 1:
                return
            ep.messages.extend(Message(role=m["role"], content=m["content"]) for m in step.messages)
            # Ended on an end-of-sequence token: the model's EOS (stop_reason None) or another
            # one of the generation config's, which vLLM reports as a stop token id.
            turn_closed = gen.finish_reason == "stop" and not isinstance(gen.stop_reason, str)
            if summaries is not None:
                summaries.observed(step.messages[-1]["content"])
                # Before the next turn, as Harbor checks: the conversation so far, without the
                # observation, against the threshold; summarized, the observation is dropped.
                if await summaries.proactive(ep, terminal, turn):
                    gen = None
                    continue
            delta = await self._tokenize_observation(ep, step.messages, turn_closed, tools)
            if delta is None:
                return
            free = self.policy.max_model_len - len(ep.ledger) - len(delta)
            if free <= 0:
                # The engine would refuse the turn: its context is full.
                ep.status, ep.stop_reason = Status.context_length, "length"
                if not await self._summarize_when_full(ep, terminal, turn):
                    return
            else:
                ep.ledger.add_observation(delta)
            gen = None

    async def _summarize_when_full(self, ep: Episode, terminal: SandboxTerminal, turn: int) -> bool:
        """The engine's context is full (the episode's status says so): a harness that
        summarizes rewrites the conversation (True, the status reset); otherwise the episode
        ends with `context_length`."""
        if ep.summaries is None or ep.status is not Status.context_length:
            return False
        ep.status, ep.stop_reason = Status.ok, None
        await ep.summaries.passive(ep, terminal, turn)
        return True

    async def complete(
        self, ep: Episode, ledger: TokenLedger, turn: int | str, part: int, max_tokens: int
    ) -> Generation:
        """One generation from `ledger`'s sequence (raises PolicyFault; ContextLengthError when
        nothing more fits)."""
        spec = ep.spec
        prompt = ledger.sequence()
        if self.policy.max_model_len - len(prompt) <= 0:
            raise ContextLengthError(f"{len(prompt)} tokens fill the context")
        t0 = time.monotonic()
        try:
            params = replace(
                spec.sampling,
                seed=turn_seed(spec.seed, turn, part),
                max_tokens=self.budget(len(prompt), max_tokens),
            )
            (gen,) = await self.policy.complete(
                prompt, params, n=1, sample=spec.trajectory_id, holds=ep.holds
            )
        finally:
            ep.timings.generate_s += time.monotonic() - t0
        return gen

    async def generate(
        self, ep: Episode, turn: int | str, part: int, max_tokens: int
    ) -> Generation | None:
        """The sample's next generation from the ledger's sequence (None: the episode ended,
        its status set)."""
        try:
            return await self.complete(ep, ep.ledger, turn, part, max_tokens)
        except PolicyFault as e:
            policy_failed(ep, e)
            return None

    async def call_turn(
        self, ep: Episode, ledger: TokenLedger, turn: str
    ) -> tuple[list[int], Generation]:
        """A whole turn generated on `ledger` (a summarization call), continued after aborts
        like a main turn (raises PolicyFault)."""
        gen = await self.complete(ep, ledger, turn, 0, ep.spec.sampling.max_tokens)
        done = await self.whole_turn(ep, turn, ledger.sequence(), gen, ledger)
        if done is None:  # only a main turn's failure ends the episode here
            raise PolicyError("summarization call failed")
        return done

    async def whole_turn(
        self,
        ep: Episode,
        turn: int | str,
        sent: list[int],
        gen: Generation,
        ledger: TokenLedger | None = None,
    ) -> tuple[list[int], Generation] | None:
        """Record a turn's generation; while it comes back aborted (a pause with mode abort),
        keep its partial tokens and ask for the rest of the turn from the sequence so far, with
        what is left of its max_tokens. Returns the turn's token ids and its last generation
        (None: the episode ended, its status set). `ledger`: a summarization call's, whose
        faults are raised (default: the main conversation's)."""
        main = ledger is None
        ledger = ep.ledger if ledger is None else ledger
        turn_ids: list[int] = []
        part = 0
        while True:
            ledger.add_generation(sent, gen.token_ids, gen.logprobs, gen.versions)
            ep.generated_tokens += len(gen.token_ids)
            turn_ids += gen.token_ids
            if gen.finish_reason != "abort":
                return turn_ids, gen
            left = ep.spec.sampling.max_tokens - len(turn_ids)
            if left <= 0:  # aborted on its last token: the turn is complete, cut by max_tokens
                return turn_ids, replace(gen, finish_reason="length", stop_reason=None)
            part += 1
            sent = ledger.sequence()
            if main:
                nxt = await self.generate(ep, turn, part, left)
                if nxt is None:
                    return None
            else:
                nxt = await self.complete(ep, ledger, turn, part, left)
            gen = nxt

    async def _tokenize_observation(
        self,
        ep: Episode,
        observation: list[dict[str, Any]],
        turn_closed: bool,
        tools: list[dict[str, Any]] | None,
    ) -> list[int] | None:
        # One user message goes as its text (the form every template renders the same way).
        one_user = len(observation) == 1 and observation[0]["role"] == "user"
        try:
            return await self.policy.observation_delta(
                observation[0]["content"] if one_user else observation,
                turn_closed=turn_closed,
                chat_template_kwargs=self.template_kwargs(ep.spec),
                tools=tools,
                sample=ep.spec.trajectory_id,
            )
        except PolicyFault as e:
            policy_failed(ep, e)
            return None

    async def reply_text(self, gen: Generation, turn_ids: list[int], sample: str) -> str:
        # With a stop string the text ends before it while the ids include it: the ids are the
        # truth, so decode them to see what the model actually produced.
        if isinstance(gen.stop_reason, str):
            return await self.policy.detokenize(turn_ids, sample=sample)
        if len(turn_ids) != len(gen.token_ids):
            # A turn continued after an abort: decode it whole (a character may straddle the
            # parts), without the end-of-sequence token, which a reply's text never shows.
            closed = gen.finish_reason == "stop" and turn_ids
            return await self.policy.detokenize(
                turn_ids[:-1] if closed else turn_ids, sample=sample
            )
        return gen.text
