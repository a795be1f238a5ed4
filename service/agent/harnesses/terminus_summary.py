"""terminus-2's context summarization, message for message (Harbor 0.25's `_summarize`,
`_check_proactive_summarization` and the context-length branch of `_query_llm`). Every text is
the profile's (`[texts.summary]`, imported from the user's Harbor); this module decides which
calls are made, with which messages, and what the main conversation becomes. It never touches
tokens: the agent loop (service/episode_summary.py) runs each call on the policy token in, token
out, and tells it how full the context is.

- Proactive: before a turn, when the context limit minus the tokens of the conversation so far
  (the pending observation not counted, as in Harbor) is under the profile's threshold, the
  conversation is summarized and the observation is replaced by the hand-off.
- Passive: when the engine refuses a turn (its context is full), the most recent user/assistant
  pairs are dropped until `unwind_to_free_tokens` are free (at least the first message stays
  while two or more are left), then: the full summary; if that fails, a short summary asked for
  in a fresh context from the task and the screen's tail; if that fails too, a fallback without
  the model. The conversation continues with the hand-off as its next user message.
- The full summary is three calls: `summary` (the conversation so far and the request),
  `questions` (a fresh context: the task, the summary, the screen), `answers` (the
  conversation, the summary request and its reply, and the questions). The main conversation
  becomes its first message, the questions request and the questions; its next user message
  hands over the answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from service.agent.harnesses.base import Profile, ProfileError, Terminal

SUMMARY_TEXTS: dict[str, set[str]] = {
    "summary.request": {"instruction"},
    "summary.questions": {"instruction", "summary", "screen"},
    "summary.answers": {"questions"},
    "summary.handoff": {"answers"},
    "summary.short": {"instruction", "screen"},
    "summary.short_handoff": {"instruction", "summary"},
    "summary.fallback": {"instruction", "screen"},
}

# What a call continues from: the main conversation's kept history, the summary call's own
# conversation (history, request, summary), or nothing (a fresh context).
HISTORY, AFTER_SUMMARY, FRESH = "history", "after_summary", "fresh"


class CallFailed(Exception):
    """A summarization call the engine could not answer (its context is full, or it failed):
    Harbor moves on to its next fallback."""


@dataclass(frozen=True)
class Call:
    """One summarization call: the messages Harbor sends (its history, then the request)."""

    kind: str  # summary, questions or answers (a short summary is a `summary` in a fresh context)
    messages: list[dict[str, Any]]
    continues: str  # HISTORY, AFTER_SUMMARY or FRESH


# Runs a call on the policy and returns the reply's text (raises CallFailed).
Model = Callable[[Call], Awaitable[str]]


@dataclass
class Handoff:
    """What the main conversation becomes: `history` (the messages kept before the next user
    message) and `prompt` (that message). `kept` is how many messages of the old history open
    the new one: all of `history` for a short summary or the fallback (the unwound history),
    1 after a full summary (the first message, then the questions request and the questions),
    0 when nothing was left to summarize (the hand-off is the bare instruction)."""

    how: str  # full, short, fallback or none
    history: list[dict[str, Any]]
    prompt: str
    kept: int


def summary_settings(profile: Profile) -> tuple[bool, int, int, int]:
    """(on, proactive threshold or 0, free tokens to unwind to, screen characters kept)."""
    b = profile.behaviour
    on = bool(b.get("summarize", True))
    if on:
        missing = [n for n in SUMMARY_TEXTS if n not in profile.texts]
        numbers = [n for n in ("unwind_to_free_tokens", "summary_screen_chars") if n not in b]
        if missing or numbers:
            where = profile.path or "the terminus-2 profile"
            raise ProfileError(
                f"{where} has no summarization texts ({', '.join(missing + numbers)}): import it "
                "again with `rollouts agent import-harbor`, or set summarize = false"
            )
        profile.check(SUMMARY_TEXTS)
    threshold = int(b.get("summarize_below_free_tokens", 0)) if on else 0
    return (
        on,
        threshold,
        int(b.get("unwind_to_free_tokens", 0)),
        int(b.get("summary_screen_chars", 0)),
    )


class Summarizer:
    """One harness's summarization: the decisions and messages of Harbor's terminus-2."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.on, self.threshold, self.unwind_to, self.screen_chars = summary_settings(profile)

    def proactive_due(self, free_tokens: int) -> bool:
        """Summarize before the next turn (`free_tokens`: the limit minus the conversation so
        far, the pending user message not counted)."""
        return self.on and free_tokens < self.threshold

    def unwind(self, n_messages: int, free_at: Callable[[int], int]) -> int:
        """How many messages of the history stay: the most recent user/assistant pairs go
        until `free_at(kept)` (the free tokens with the first `kept` messages) reaches the
        target, as Harbor unwinds (which keeps the first message only while two or more are
        left, so a history of one pair can be dropped whole)."""
        kept = n_messages
        while kept > 1 and free_at(kept) < self.unwind_to:
            kept -= 2
        return max(kept, 0)

    def _text(self, name: str, **values: Any) -> str:
        return self.profile.text(f"summary.{name}", **values)

    def _screen_tail(self, screen: str) -> str:
        return screen[-self.screen_chars :] if screen and self.screen_chars else ""

    async def full(
        self, model: Model, history: list[dict[str, Any]], instruction: str, terminal: Terminal
    ) -> Handoff:
        """Harbor's `_summarize`: the three calls and the rewritten conversation (raises
        CallFailed when one of them fails)."""
        if not history:
            return Handoff("none", [], instruction, 0)
        request = self._text("request", instruction=instruction)
        summary_call = Call("summary", [*history, {"role": "user", "content": request}], HISTORY)
        summary = await model(summary_call)
        screen = (await terminal.capture(entire=False)) or ""
        ask = self._text("questions", instruction=instruction, summary=summary, screen=screen)
        questions_call = Call("questions", [{"role": "user", "content": ask}], FRESH)
        questions = await model(questions_call)
        answers_call = Call(
            "answers",
            [
                *history,
                {"role": "user", "content": request},
                {"role": "assistant", "content": summary},
                {"role": "user", "content": self._text("answers", questions=questions)},
            ],
            AFTER_SUMMARY,
        )
        answers = await model(answers_call)
        rewritten = [
            history[0],
            {"role": "user", "content": ask},
            {"role": "assistant", "content": questions},
        ]
        return Handoff(
            "full",
            rewritten,
            self._text("handoff", answers=answers),
            1,
        )

    async def passive(
        self,
        model: Model,
        history: list[dict[str, Any]],
        instruction: str,
        terminal: Terminal,
    ) -> Handoff:
        """Harbor's answer to a context-length error, on the history already unwound: the full
        summary, else a short one, else the fallback without the model."""
        try:
            return await self.full(model, history, instruction, terminal)
        except CallFailed:
            pass
        screen = self._screen_tail((await terminal.capture(entire=False)) or "")
        short_call = Call(
            "summary",
            [
                {
                    "role": "user",
                    "content": self._text("short", instruction=instruction, screen=screen),
                }
            ],
            FRESH,
        )
        try:
            short = await model(short_call)
        except CallFailed:
            screen = self._screen_tail((await terminal.capture(entire=False)) or "")
            prompt = self._text("fallback", instruction=instruction, screen=screen)
            return Handoff("fallback", history, prompt, len(history))
        prompt = self._text("short_handoff", instruction=instruction, summary=short)
        return Handoff("short", history, prompt, len(history))
