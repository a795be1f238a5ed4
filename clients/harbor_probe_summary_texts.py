"""Part of the Harbor probe (harbor_probe.py): the messages of terminus-2's context
summarization (the summary, questions and answers requests, the hand-off, the short summary and
the fallback without the model) and its numbers, learnt by running Harbor's own `_summarize` and
`_query_llm` over a scripted model and pane with sentinel arguments.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from harbor_probe_scripted import ContextFull, ScriptedChat, load_harbor, make_agent
from harbor_probe_templates import ProbeError, templatize


class _Pane:
    def __init__(self, screen: str) -> None:
        self.screen = screen

    async def capture_pane(self, capture_entire: bool = False) -> str:
        return self.screen


def _agent(logs: str, replies: list[Any], calls: list[dict]):
    _, _, LLMResponse, _, _, ContextLengthExceededError = load_harbor()
    agent = make_agent("json", Path(logs), {"threshold": 0})
    agent._count_total_tokens = lambda chat: 0  # nothing to unwind
    agent._llm.get_model_context_limit = lambda: 1_000_000

    async def call(prompt: str, message_history: list | None = None, **_: Any):
        calls.append({"prompt": prompt, "history": list(message_history or [])})
        reply = replies.pop(0)
        if isinstance(reply, ContextFull):
            raise ContextLengthExceededError("full")
        return LLMResponse(content=reply)

    agent._llm.call = call
    return agent


def summary_texts() -> dict[str, str]:
    cases: dict[str, list[tuple[str, dict[str, Any]]]] = {
        k: []
        for k in (
            "request",
            "questions",
            "answers",
            "handoff",
            "short",
            "short_handoff",
            "fallback",
        )
    }
    for tag in ("a", "b"):
        instruction = f"@@TASK-{tag}@@"
        screen = f"@@SCREEN-{tag}@@"
        summary, questions, answers = (f"@@{w}-{tag}@@" for w in ("SUMMARY", "QUESTIONS", "ANS"))
        history = [
            {"role": "user", "content": f"@@U0-{tag}@@"},
            {"role": "assistant", "content": f"@@A0-{tag}@@"},
        ]
        with tempfile.TemporaryDirectory() as logs:
            calls: list[dict] = []
            agent = _agent(logs, [summary, questions, answers], calls)
            chat = ScriptedChat([])
            chat._messages = list(history)
            handoff, _ = asyncio.run(agent._summarize(chat, instruction, _Pane(screen)))
            if len(calls) != 3 or calls[1]["history"] or chat.messages[0] != history[0]:
                raise ProbeError("Harbor's summarization is not the three calls this probe knows")
            cases["request"].append((calls[0]["prompt"], {"instruction": instruction}))
            cases["questions"].append(
                (
                    calls[1]["prompt"],
                    {"instruction": instruction, "summary": summary, "screen": screen},
                )
            )
            cases["answers"].append((calls[2]["prompt"], {"questions": questions}))
            cases["handoff"].append((handoff, {"answers": answers}))
        # The passive path: the full summary fails (its first call), then the short one is asked
        # for; with that failing too, the fallback without the model.
        for short_fails in (False, True):
            with tempfile.TemporaryDirectory() as logs:
                calls = []
                short = f"@@SHORT-{tag}@@"
                failing = [ContextFull("x"), ContextFull("x") if short_fails else short]
                agent = _agent(logs, failing, calls)
                chat = ScriptedChat([ContextFull("x"), "@@AFTER@@"])
                chat._messages = list(history)
                asyncio.run(agent._query_llm(chat, "@@PROMPT@@", instruction, _Pane(screen)))
                sent = chat.prompts[-1]
                if short_fails:
                    cases["fallback"].append((sent, {"instruction": instruction, "screen": screen}))
                    continue
                cases["short"].append(
                    (calls[1]["prompt"], {"instruction": instruction, "screen": screen})
                )
                cases["short_handoff"].append(
                    (sent, {"instruction": instruction, "summary": short})
                )
    return {name: templatize(f"summary.{name}", c) for name, c in cases.items()}


def summary_numbers() -> dict[str, int]:
    """The free tokens the passive path unwinds to (Harbor's call passes it explicitly)."""
    seen: list[int] = []
    with tempfile.TemporaryDirectory() as logs:
        agent = _agent(logs, [ContextFull("x"), ContextFull("x")], [])
        agent._unwind_messages_to_free_tokens = lambda chat, target_free_tokens: seen.append(
            target_free_tokens
        )
        chat = ScriptedChat([ContextFull("x"), "@@AFTER@@"])
        chat._messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        asyncio.run(agent._query_llm(chat, "p", "task", _Pane("\u00a7" * 100_000)))
    if len(seen) != 1:
        raise ProbeError("Harbor's passive summarization did not unwind once")
    # How much of the screen the short summary and the fallback keep: its last characters.
    tail = chat.prompts[-1].count("\u00a7")
    return {"unwind_to_free_tokens": int(seen[0]), "summary_screen_chars": tail}
