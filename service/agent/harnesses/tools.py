"""The tools harness: the terminal as a native tool (`--agent tools`), in the model's own
tool-call format, as many current recipes train.

The tool definition goes to the server's chat template with the first prompt (`tools` in
/tokenize), which renders it the model's way (Qwen3: a system block listing the tools). Replies
call it Hermes style, as Qwen3 and most open models do: `<tool_call>{"name": "terminal",
"arguments": {"keystrokes": ..., "duration": ...}}</tool_call>` blocks in the generated text,
several per reply allowed. Each call's output comes back as one `tool` message, which the chat
template renders (Qwen3: `<tool_response>` blocks in a user turn); a reply that cannot be used
gets a user message saying why. A reply without any tool call ends the episode.
Texts: service/agent/profiles/tools.toml (our own words).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from service.agent.harnesses.base import (
    PROFILES_DIR,
    Command,
    HarnessSession,
    Profile,
    Step,
    SystemPromptHarness,
    Terminal,
    load_profile,
)

NAME = "tools"
TOOL_NAME = "terminal"
TEXTS: dict[str, set[str]] = {
    "system": set(),
    "first_user": {"instruction", "terminal_state"},
    "tool_description": set(),
    "keystrokes_description": set(),
    "duration_description": set(),
    "observation": {"output"},
    "error": {"problem"},
    "output_truncated": {"head", "tail", "dropped"},
    "errors.unclosed": set(),
    "errors.invalid_json": {"msg"},
    "errors.not_a_call": set(),
    "errors.unknown_tool": {"name"},
    "errors.bad_arguments": set(),
}
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


class ToolCallError(ValueError):
    pass


@functools.cache
def tools_profile() -> Profile:
    return load_profile(PROFILES_DIR / "tools.toml")


def parse_tool_calls(text: str, errors: dict[str, str]) -> list[Command]:
    """The terminal calls in a reply, in order. Raises ToolCallError (worded by `errors`)."""
    calls = []
    for m in _CALL.finditer(text):
        body = m.group(1).strip()
        try:
            call = json.loads(body)
        except json.JSONDecodeError as e:
            raise ToolCallError(errors["invalid_json"].format(msg=e.msg)) from e
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ToolCallError(errors["not_a_call"].format())
        args = call.get("arguments", {})
        if isinstance(args, str):  # some models send the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError as e:
                raise ToolCallError(errors["invalid_json"].format(msg=e.msg)) from e
        if call["name"] != TOOL_NAME:
            raise ToolCallError(errors["unknown_tool"].format(name=call["name"]))
        keys = args.get("keystrokes") if isinstance(args, dict) else None
        duration = args.get("duration", 1.0) if isinstance(args, dict) else None
        if (
            not isinstance(keys, str)
            or isinstance(duration, bool)
            or not isinstance(duration, int | float)
        ):
            raise ToolCallError(errors["bad_arguments"].format())
        calls.append(Command(keys, float(duration)))
    rest = _CALL.sub("", text)
    if "<tool_call>" in rest:
        raise ToolCallError(errors["unclosed"].format())
    return calls


class ToolsHarness(SystemPromptHarness):
    name = NAME

    def __init__(self, profile: Profile | None = None) -> None:
        self.profile = profile or tools_profile()
        self.profile.check(TEXTS)
        self.errors = {
            k.removeprefix("errors."): v
            for k, v in self.profile.texts.items()
            if k.startswith("errors.")
        }
        self.max_duration_s = float(self.profile.number("max_duration_s", 60.0))
        self.max_chars = int(self.profile.number("max_observation_chars", 16_000))

    def tools(self) -> list[dict[str, Any]]:
        p = self.profile
        return [
            {
                "type": "function",
                "function": {
                    "name": TOOL_NAME,
                    "description": p.text("tool_description"),
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "keystrokes": {
                                "type": "string",
                                "description": p.text("keystrokes_description"),
                            },
                            "duration": {
                                "type": "number",
                                "description": p.text("duration_description"),
                            },
                        },
                        "required": ["keystrokes"],
                    },
                },
            }
        ]

    def session(self, *, max_tokens: int = 4096) -> HarnessSession:
        return _Session(self)


class _Session(HarnessSession):
    def __init__(self, harness: ToolsHarness) -> None:
        self.h = harness

    async def step(self, reply: str, terminal: Terminal, *, truncated: bool = False) -> Step:
        h = self.h
        try:
            calls = parse_tool_calls(reply, h.errors)
        except ToolCallError as e:
            return Step(messages=[{"role": "user", "content": h.profile.text("error", problem=e)}])
        if not calls:
            return Step(done=True)
        commands = [Command(c.keystrokes, min(c.duration, h.max_duration_s)) for c in calls]
        messages = []
        for c in commands:
            output = h.truncate(await terminal.send_keys(c.keystrokes, c.duration))
            messages.append(
                {"role": "tool", "content": h.profile.text("observation", output=output)}
            )
        return Step(messages=messages, commands=commands)
