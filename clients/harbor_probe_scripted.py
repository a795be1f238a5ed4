"""Part of the Harbor probe (harbor_probe.py): Harbor's own terminus-2 agent, driven by a
scripted chat (replies from a list, every prompt recorded) and a scripted terminal (keystrokes
answered from a list, output read by Harbor's tmux-session code over a scripted pane).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harbor_probe_templates import ProbeError


def load_harbor():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import harbor.agents.terminus_2.terminus_2 as t2
    from harbor.agents.terminus_2.tmux_session import TmuxSession
    from harbor.llms.base import (
        ContextLengthExceededError,
        LLMResponse,
        OutputLengthExceededError,
    )
    from harbor.models.agent.context import AgentContext

    return (
        t2,
        TmuxSession,
        LLMResponse,
        OutputLengthExceededError,
        AgentContext,
        ContextLengthExceededError,
    )


def make_agent(variant: str, logs_dir: Path, summarize: dict | None = None):
    t2 = load_harbor()[0]
    extra = {}
    if summarize is not None:
        extra["proactive_summarization_threshold"] = summarize["threshold"]
    return t2.Terminus2(
        logs_dir=logs_dir,
        model_name="hosted_vllm/probe",
        parser_name=variant,
        enable_summarize=summarize is not None,
        **extra,
        record_terminal_session=False,
        suppress_max_turns_warning=True,
        model_info={
            "max_input_tokens": 1_000_000,
            "max_output_tokens": 4096,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
        },
    )


class _Env:
    """A scripted environment for Harbor's TmuxSession: capture-pane answers from a state."""

    def __init__(self, state: dict[str, str]) -> None:
        self.state = state

    async def exec(self, command: str, user: Any = None, **_: Any):
        class R:
            return_code = 0
            stderr = ""

        r = R()
        r.stdout = self.state["history"] if " -S " in f" {command} " else self.state["screen"]
        return r


def make_tmux(state: dict[str, str]):
    TmuxSession = load_harbor()[1]
    tmux = TmuxSession.__new__(TmuxSession)
    tmux._previous_buffer = None
    tmux._session_name = "terminus-2"
    tmux._user = None
    tmux.environment = _Env(state)
    return tmux


class Truncated(str):
    """A reply that hit max_tokens."""


class ContextFull(str):
    """A request the engine refuses: its context is full (the reply text is unused)."""


class _Stop(Exception):
    pass


class ScriptedChat:
    """Harbor's Chat, answered from a script; records every prompt the agent sends."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []
        self._messages: list[dict] = []  # Harbor's Chat keeps them here (and rewrites them)
        self.calls: list[dict] = []  # every request: the messages sent, in order
        self.rollout_details: list = []
        self.total_input_tokens = self.total_output_tokens = self.total_cache_tokens = 0
        self.total_cost = 0.0
        self._exhausted = False

    @property
    def messages(self) -> list[dict]:
        return self._messages

    def reset_response_chain(self) -> None:
        pass

    async def chat(self, prompt: str, **_: Any):
        _, _, LLMResponse, OutputLengthExceededError, *_ = load_harbor()
        if not self.replies:
            if not self._exhausted:
                self.prompts.append(prompt)
                self._exhausted = True
            raise _Stop()
        self.prompts.append(prompt)
        self.calls.append(
            {"kind": "main", "messages": [*self._messages, {"role": "user", "content": prompt}]}
        )
        reply = self.replies.pop(0)
        if isinstance(reply, ContextFull):
            raise load_harbor()[5]("the engine's context is full")
        if isinstance(reply, Truncated):
            raise OutputLengthExceededError("cut", truncated_response=str(reply))
        self._messages += [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": reply},
        ]
        return LLMResponse(content=reply)


class ScriptedSession:
    """Harbor's TmuxSession as the agent loop uses it: keys answered from a script, output read
    by Harbor's own incremental-output code over the scripted pane (or a fixed sentinel)."""

    def __init__(self, sends: list[dict], state: dict[str, str], output: Callable | None = None):
        self.sends = list(sends)
        self.state = state
        self.tmux = make_tmux(state)
        self.output = output
        self.sent: list[str] = []

    async def is_session_alive(self) -> bool:
        return True

    async def send_keys(self, keys, block=False, min_timeout_sec=0.0, max_timeout_sec=180.0):
        self.sent.append(keys)
        effect = self.sends.pop(0) if self.sends else {}
        if effect.get("keys") is not None and effect["keys"] != keys:
            raise ProbeError(f"scripted send {effect['keys']!r}, agent sent {keys!r}")
        self.state.update({k: effect[k] for k in ("history", "screen") if k in effect})
        if effect.get("timeout"):
            raise TimeoutError(f"Command timed out after {max_timeout_sec} seconds")

    async def get_incremental_output(self) -> str:
        if self.output is not None:
            return self.output(self)
        return await self.tmux.get_incremental_output()

    async def capture_pane(self, capture_entire: bool = False) -> str:
        return await self.tmux.capture_pane(capture_entire)


def run_episode(
    variant: str,
    instruction: str,
    replies: list[str],
    sends: list[dict],
    initial: dict[str, str],
    *,
    output_limit: int = 4096,
    output: Callable | None = None,
    summarize: dict | None = None,
    calls: list[dict] | None = None,
) -> tuple[list[str], list[str], str | None]:
    """Harbor's Terminus2.run over a scripted chat and terminal: (prompts, keys sent, the
    exception the agent failed with, if any). `summarize`: summarization on, with
    {"limit": the context limit, "threshold": the proactive threshold, "sub_replies": the
    summarization calls' replies in order (a ContextFull one fails its call)}; Harbor's token
    count is replaced by the characters of the messages' contents, so that a test can count the
    same way. `calls` receives every request's messages, main and summarization, in order."""
    t2, _, _, _, AgentContext, _ = load_harbor()
    with tempfile.TemporaryDirectory() as logs:
        agent = make_agent(variant, Path(logs), summarize)
        agent._llm.get_model_output_limit = lambda: output_limit
        chat = ScriptedChat(replies)
        if summarize is not None:
            _script_summarization(agent, chat, summarize)
        session = ScriptedSession(sends, dict(initial), output)
        agent._session = session
        original = t2.Chat
        t2.Chat = lambda *a, **k: chat
        failure = None
        try:
            asyncio.run(agent.run(instruction, None, AgentContext()))
        except _Stop:
            pass
        except Exception as e:  # noqa: BLE001 - the agent's own failure is a result here
            failure = f"{type(e).__name__}: {e}"
        finally:
            t2.Chat = original
        if calls is not None:
            calls += chat.calls
        return chat.prompts, session.sent, failure


def count_chars(messages: list[dict]) -> int:
    """The probe's stand-in for Harbor's token count: the characters of the contents."""
    return sum(len(m["content"]) for m in messages)


def _script_summarization(agent: Any, chat: ScriptedChat, summarize: dict) -> None:
    _, _, LLMResponse, _, _, ContextLengthExceededError = load_harbor()
    sub_replies = list(summarize["sub_replies"])

    async def call(prompt: str, message_history: list | None = None, **_: Any):
        messages = [*(message_history or []), {"role": "user", "content": prompt}]
        chat.calls.append({"kind": "sub", "messages": messages})
        reply = sub_replies.pop(0)
        if isinstance(reply, ContextFull):
            raise ContextLengthExceededError("the engine's context is full")
        return LLMResponse(content=reply)

    agent._llm.call = call
    agent._llm.get_model_context_limit = lambda: summarize["limit"]
    agent._count_total_tokens = lambda c: count_chars(c.messages)
