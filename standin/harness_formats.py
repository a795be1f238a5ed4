"""The harnesses the stand-in answers in, and its replies in each of their formats.

The harness is recognised from the prompt (`detect_format`):
- `tools`: the system turn lists tools (<tools>): the terminal is called with <tool_call> blocks,
  and the last step is a plain answer without a tool call;
- `terminus-xml`: no system turn, and the first user message asks for <response> replies with
  <keystrokes>: one XML <response>;
- `terminus-json`: no system turn otherwise: one JSON object, read back with terminus-2's
  leniency (a reply its parser completes with closing braces counts as said);
- `json`: the default harness (a system prompt): one JSON object.

The scripted agent (behaviour.py) composes each reply as a protocol object (`protocol_reply`,
JSON), `render_reply` puts it in the harness's format, and `read_reply` reads an earlier reply
back as the harness would.
"""

from __future__ import annotations

import json
import re

from standin.chat_template import TOOLS_OPEN, Turn

_PROTOCOL_KEYS = {"analysis", "plan", "commands", "task_complete"}


def protocol_reply(analysis: str, plan: str, commands: list[tuple[str, float]], done: bool) -> str:
    """A reply as our protocol object (JSON), before `render_reply` puts it in a format."""
    return json.dumps(
        {
            "analysis": analysis,
            "plan": plan,
            "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done,
        }
    )


def is_protocol_reply(content: str) -> bool:
    try:
        obj = json.loads(content)
    except ValueError:
        return False
    return isinstance(obj, dict) and _PROTOCOL_KEYS <= obj.keys()


FORMATS = ("json", "terminus-json", "terminus-xml", "tools")
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_XML_KEYS_RE = re.compile(r"<keystrokes([^>]*)>(.*?)</keystrokes>", re.S)


def detect_format(turns: list[Turn]) -> str:
    """Which harness the prompt speaks (see the module docstring)."""
    system = next((t.content for t in turns if t.role == "system"), None)
    if system is not None and TOOLS_OPEN in system:
        return "tools"
    if system is not None:
        return "json"
    first_user = next((t.content for t in turns if t.role == "user"), "")
    if "<response>" in first_user and "<keystrokes" in first_user:
        return "terminus-xml"
    return "terminus-json"


def read_reply(content: str, fmt: str) -> dict | None:
    """An earlier reply of ours as a protocol object, if the harness could use it."""
    if fmt == "json":
        return json.loads(content) if is_protocol_reply(content) else None
    if fmt == "terminus-json":
        if is_protocol_reply(content):
            return json.loads(content)
        missing = content.count("{") - content.count("}")
        if missing > 0 and is_protocol_reply(content + "}" * missing):
            return json.loads(content + "}" * missing)
        return None
    if fmt == "terminus-xml":
        start = content.find("<response>")
        m = re.search(r"<commands>(.*?)</commands>", content[start:], re.S) if start >= 0 else None
        if m is None:
            return None
        commands = [
            {"keystrokes": keys, "duration": 1.0} for _, keys in _XML_KEYS_RE.findall(m.group(1))
        ]
        done = bool(re.search(r"<task_complete>\s*true\s*</task_complete>", content, re.I))
        return {"analysis": "", "plan": "", "commands": commands, "task_complete": done}
    # tools: every call must parse, as the harness requires
    commands = []
    for body in _TOOL_CALL_RE.findall(content):
        try:
            call = json.loads(body)
            commands.append({"keystrokes": call["arguments"]["keystrokes"], "duration": 1.0})
        except (ValueError, KeyError, TypeError):
            return None
    if not commands or "<tool_call>" in _TOOL_CALL_RE.sub("", content):
        return None
    return {"analysis": "", "plan": "", "commands": commands, "task_complete": False}


def render_reply(text: str, fmt: str) -> str:
    """A protocol reply (our JSON) in the harness's format."""
    if fmt in ("json", "terminus-json"):
        return text
    obj = json.loads(text)
    commands = [(c["keystrokes"], c["duration"]) for c in obj["commands"]]
    if fmt == "terminus-xml":
        keys = "".join(f'<keystrokes duration="{d}">{k}</keystrokes>\n' for k, d in commands)
        done = "\n<task_complete>true</task_complete>" if obj["task_complete"] else ""
        return (
            f"<response>\n<analysis>{obj['analysis']}</analysis>\n<plan>{obj['plan']}</plan>\n"
            f"<commands>\n{keys}</commands>{done}\n</response>"
        )
    if not commands:  # tools: the final answer calls no tool
        return obj["analysis"]
    calls = "".join(
        "<tool_call>\n"
        + json.dumps({"name": "terminal", "arguments": {"keystrokes": k, "duration": d}})
        + "\n</tool_call>\n"
        for k, d in commands
    )
    return f"{obj['plan']}\n{calls}".rstrip("\n")
