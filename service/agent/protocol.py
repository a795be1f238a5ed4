"""The default harness's reply format (a terminus-2-like JSON object), parsed leniently: the first
top-level JSON object in the text is the reply. The error texts come from the default profile."""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, Field, ValidationError

MAX_DURATION_S = 60.0  # a model asking to wait an hour must not stall the pipeline


class Command(BaseModel):
    keystrokes: str
    duration: float = Field(default=1.0, ge=0.0)


class AgentReply(BaseModel):
    analysis: str = ""
    plan: str = ""
    commands: list[Command] = Field(default_factory=list)
    task_complete: bool = False


class ReplyError(ValueError):
    """The reply could not be used; the message goes back to the model as its observation."""


def _first_json_object(text: str, errors: Mapping[str, str]) -> str:
    start = text.find("{")
    if start < 0:
        raise ReplyError(errors["no_json"].format())
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    raise ReplyError(errors["unclosed"].format())


def parse_reply(text: str, errors: Mapping[str, str]) -> AgentReply:
    """`errors`: the harness profile's [texts.errors], by name without the prefix."""
    raw = _first_json_object(text, errors)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ReplyError(errors["invalid_json"].format(msg=e.msg, pos=e.pos)) from e
    try:
        return AgentReply.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ReplyError(errors["invalid_field"].format(field=field, msg=first["msg"])) from e
