"""Part of the Harbor probe (harbor_probe.py): model replies in terminus-2's JSON and XML forms,
with a known parse, from which Harbor's parsers and agent loop produce the messages to learn.
"""

from __future__ import annotations

import json
from typing import Any


def json_reply(commands: list[dict], complete: bool = False, **extra: Any) -> str:
    body = {"analysis": "a", "plan": "p", "commands": commands, **extra}
    if complete:
        body["task_complete"] = True
    return json.dumps(body)


def ok_commands(k: int) -> list[dict]:
    return [{"keystrokes": f"echo {i}\n", "duration": 0.1} for i in range(k)]


def xml_reply(inner: str) -> str:
    return f"<response>\n{inner}\n</response>"


XML_HEAD = "<analysis>a</analysis>\n<plan>p</plan>\n"


def xml_commands(items: list[str]) -> str:
    return "<commands>\n" + "".join(items) + "</commands>"


def xml_ok(k: int) -> list[str]:
    return [f'<keystrokes duration="0.1">echo {i}\n</keystrokes>\n' for i in range(k)]


def xml_valid(complete: bool = False, k: int = 1) -> str:
    tail = "\n<task_complete>true</task_complete>" if complete else ""
    return xml_reply(XML_HEAD + xml_commands(xml_ok(k)) + tail)
