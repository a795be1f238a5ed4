"""The stand-in server's chat template, Qwen style (the same layout as the recorded vLLM's).

    <|im_start|>{role}\n{content}<|im_end|>\n   per message
    <|im_start|>assistant\n                     when add_generation_prompt

With `tools` (a /tokenize request's tool definitions) it lays them out the way Qwen3's template
does, so that a tool-calling harness runs end to end against the stand-in: a system turn (the
request's own system message first) that lists each tool as one JSON line between <tools> and
</tools>; `tool` messages become <tool_response> blocks, consecutive ones in one user turn.

`parse_transcript` is the inverse the scripted behaviour uses to read its prompt back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOLS_OPEN = "<tools>"


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    closed: bool  # False for a turn still open at the end (the generation prompt)


def render(
    messages: Sequence[dict[str, Any]],
    *,
    add_generation_prompt: bool,
    tools: Sequence[dict[str, Any]] | None = None,
) -> str:
    parts = []
    rest = list(messages)
    if tools:
        system = ""
        if rest and rest[0]["role"] == "system":
            system = rest.pop(0)["content"] + "\n\n"
        listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        parts.append(
            f'{IM_START}system\n{system}# Tools\n\nCall a tool with <tool_call>{{"name": ..., '
            f'"arguments": {{...}}}}</tool_call>. The tools:\n{TOOLS_OPEN}\n{listed}\n</tools>'
            f"{IM_END}\n"
        )
    for i, m in enumerate(rest):
        if m["role"] == "tool":
            if i == 0 or rest[i - 1]["role"] != "tool":
                parts.append(f"{IM_START}user")
            parts.append(f"\n<tool_response>\n{m['content']}\n</tool_response>")
            if i == len(rest) - 1 or rest[i + 1]["role"] != "tool":
                parts.append(f"{IM_END}\n")
            continue
        parts.append(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


_TURN_RE = re.compile(r"<\|im_start\|>([^\n]*)\n(.*?)(<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.S)


def parse_transcript(text: str) -> list[Turn]:
    """Split a rendered conversation into turns. Tolerant: a turn cut off by `length` (no
    <|im_end|>, closed by the next <|im_start|>) still counts as a turn."""
    turns: list[Turn] = []
    for m in _TURN_RE.finditer(text):
        turns.append(Turn(role=m.group(1).strip(), content=m.group(2), closed=bool(m.group(3))))
    return turns
