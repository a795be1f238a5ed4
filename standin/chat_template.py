"""The stand-in server's chat template, Qwen style (the same layout as the recorded vLLM's).

    <|im_start|>{role}\n{content}<|im_end|>\n   per message
    <|im_start|>assistant\n                     when add_generation_prompt

`parse_transcript` is the inverse the scripted behaviour uses to read its prompt back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    closed: bool  # False for a turn still open at the end (the generation prompt)


def render(messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> str:
    parts = [f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages]
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
