"""Reply parsers with the behaviour of Harbor terminus-2's JSON and XML parsers (harbor 0.25):
which replies they accept, the commands they read, what they tolerate with a warning and what
they reject with an error, including their automatic corrections.

Only the behaviour is written here. Every error and warning is worded by the profile (its
[texts.parser] table, imported from the user's own Harbor installation by
`rollouts agent import-harbor`), by key:

    texts = {"no_json": "...", "command_missing_keystrokes": "... {n} ...", ...}

Two facts worth knowing: warnings are joined as a bulleted list ("- " before each, one per
line), and where Harbor iterates over a Python set (several unknown fields, tags or missing
sections at once) its order is not reproducible; these parsers keep the order of appearance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_DURATION_S = 1.0


@dataclass
class ParsedCommand:
    keystrokes: str
    duration: float


@dataclass
class ParseResult:
    commands: list[ParsedCommand] = field(default_factory=list)
    is_task_complete: Any = False  # truthiness is what counts, as in Harbor
    error: str = ""
    warning: str = ""
    # Kinds of the warnings, for behaviour that depends on them (XML salvage).
    warning_kinds: list[str] = field(default_factory=list)


def _bullets(warnings: list[str]) -> str:
    return "- " + "\n- ".join(warnings) if warnings else ""


class _Warnings:
    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts
        self.items: list[str] = []
        self.kinds: list[str] = []

    def add(self, kind: str, **values: Any) -> None:
        self.items.append(self.texts[kind].format(**values))
        self.kinds.append(kind)

    def add_text(self, kind: str, text: str) -> None:
        self.items.append(text)
        self.kinds.append(kind)

    def result(self, **kw: Any) -> ParseResult:
        return ParseResult(warning=_bullets(self.items), warning_kinds=list(self.kinds), **kw)


class _AutoFixing:
    texts: Mapping[str, str]

    def _try(self, response: str) -> ParseResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fixes(self) -> list[tuple[str, Callable[[str, ParseResult], str | None]]]:
        return []

    def parse_response(self, response: str) -> ParseResult:
        result = self._try(response)
        if result.error:
            for fix_name, fix in self._fixes():
                corrected = fix(response, result)
                if corrected is None:
                    continue
                fixed = self._try(corrected)
                if fixed.error == "":
                    auto = self.texts["auto_corrected"].format(fix=self.texts[fix_name])
                    fixed.warning = f"- {auto}\n{fixed.warning}" if fixed.warning else f"- {auto}"
                    fixed.warning_kinds.insert(0, "auto_corrected")
                    return fixed
        return result


# ----------------------------------------------------------------------------- JSON


class JSONParser(_AutoFixing):
    REQUIRED = ("analysis", "plan", "commands")

    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts

    def _try(self, response: str) -> ParseResult:
        t = self.texts
        w = _Warnings(t)
        content = self._extract(response, w)
        if not content:
            return w.result(error=t["no_json"])
        try:
            data = json.loads(content)
        except json.JSONDecodeError as e:
            if len(content) < 200:
                error = t["invalid_json"].format(error=str(e), content=repr(content))
            else:
                error = t["invalid_json_preview"].format(error=str(e), preview=repr(content[:100]))
            return w.result(error=error)
        problem = self._validate(data, content, w)
        if problem:
            return w.result(error=problem)
        is_complete = data.get("task_complete", False)
        if isinstance(is_complete, str):
            is_complete = is_complete.lower() in ("true", "1", "yes")
        commands, problem = self._commands(data.get("commands", []), w)
        if problem:
            if is_complete:
                w.add_text("command_error", problem)
                return w.result(is_task_complete=True)
            return w.result(error=problem)
        return w.result(commands=commands, is_task_complete=is_complete)

    def _extract(self, response: str, w: _Warnings) -> str:
        start = end = -1
        depth = 0
        in_string = escape_next = False
        for i, ch in enumerate(response):
            if escape_next:
                escape_next = False
                continue
            if ch == "\\":
                escape_next = True
                continue
            if ch == '"':
                in_string = not in_string
                continue
            if not in_string:
                if ch == "{":
                    if depth == 0:
                        start = i
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0 and start != -1:
                        end = i + 1
                        break
        if start == -1 or end == -1:
            w.add("no_json_object")
            return ""
        if response[:start].strip():
            w.add("extra_before")
        if response[end:].strip():
            w.add("extra_after")
        return response[start:end]

    def _validate(self, data: Any, content: str, w: _Warnings) -> str:
        t = self.texts
        if not isinstance(data, dict):
            return t["not_object"]
        missing = [f for f in self.REQUIRED if f not in data]
        if missing:
            return t["missing_fields"].format(fields=", ".join(missing))
        if not isinstance(data.get("analysis", ""), str):
            w.add("analysis_not_string")
        if not isinstance(data.get("plan", ""), str):
            w.add("plan_not_string")
        if not isinstance(data.get("commands", []), list):
            return t["commands_not_array"]
        self._order(content, w)
        task_complete = data.get("task_complete")
        if task_complete is not None and not isinstance(task_complete, bool | str):
            w.add("task_complete_type")
        return ""

    def _order(self, content: str, w: _Warnings) -> None:
        positions = {}
        for name in self.REQUIRED:
            m = re.search(f'"({name})"\\s*:', content)
            if m:
                positions[name] = m.start()
        if len(positions) < 2:
            return
        expected = [n for n in self.REQUIRED if n in positions]
        actual = sorted(expected, key=lambda n: positions[n])
        if actual != expected:
            sep = self.texts["order_separator"]
            w.add("wrong_order", found=sep.join(actual), expected=sep.join(expected))

    def _commands(self, items: list[Any], w: _Warnings) -> tuple[list[ParsedCommand], str]:
        t = self.texts
        commands = []
        for i, item in enumerate(items):
            n = i + 1
            if not isinstance(item, dict):
                return [], t["command_not_object"].format(n=n)
            if "keystrokes" not in item:
                return [], t["command_missing_keystrokes"].format(n=n)
            keys = item["keystrokes"]
            if not isinstance(keys, str):
                return [], t["command_keystrokes_not_string"].format(n=n)
            if "duration" in item:
                duration = item["duration"]
                if not isinstance(duration, int | float):
                    w.add("invalid_duration", n=n)
                    duration = DEFAULT_DURATION_S
            else:
                w.add("missing_duration", n=n)
                duration = DEFAULT_DURATION_S
            unknown = [k for k in item if k not in ("keystrokes", "duration")]
            if unknown:
                w.add("unknown_fields", n=n, fields=", ".join(unknown))
            if i < len(items) - 1 and keys and not keys.endswith("\n"):
                w.add("missing_newline", n=n)
            commands.append(ParsedCommand(keys, float(duration)))
        return commands, ""

    def _fixes(self) -> list[tuple[str, Callable[[str, ParseResult], str | None]]]:
        return [("fix_incomplete_json", self._fix_braces), ("fix_mixed_content", self._fix_mixed)]

    def _fix_braces(self, response: str, result: ParseResult) -> str | None:
        # Harbor applies it to "invalid JSON" and "no JSON found" errors, and to any error whose
        # text happens to contain the JSON decoder's words "Expecting" or "Unterminated".
        error = result.error
        t = self.texts
        invalid_prefix = t["invalid_json"].split("{", 1)[0]
        if (
            (invalid_prefix and invalid_prefix in error)
            or "Expecting" in error
            or "Unterminated" in error
            or t["no_json"] in error
        ):
            missing = response.count("{") - response.count("}")
            if missing > 0:
                return response + "}" * missing
        return None

    def _fix_mixed(self, response: str, result: ParseResult) -> str | None:
        for match in re.findall(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", response, re.DOTALL):
            try:
                json.loads(match)
                return match
            except json.JSONDecodeError:
                continue
        return None


# ----------------------------------------------------------------------------- XML

_SECTIONS = ("analysis", "plan", "commands", "task_complete")
_REQUIRED_SECTIONS = ("analysis", "plan", "commands")
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"), ("&quot;", '"'), ("&apos;", "'"))


class XMLParser(_AutoFixing):
    def __init__(self, texts: Mapping[str, str]) -> None:
        self.texts = texts

    # Harbor's one fix (appending a missing </response>) only runs for an error its parser never
    # reports, so it never applies: no fixes here.

    def _try(self, response: str) -> ParseResult:
        t = self.texts
        w = _Warnings(t)
        self._extra_text(response, w)
        content = self._response_content(response)
        if not content:
            return w.result(error=t["no_response"])
        is_complete = bool(
            re.search(r"<task_complete>\s*true\s*</task_complete>", content, re.IGNORECASE)
        )
        sections = self._sections(content, w)
        commands_content = sections.get("commands", "")
        if not commands_content:
            if "commands" in sections:
                if not is_complete:
                    w.add("commands_empty")
                return w.result(is_task_complete=is_complete)
            if is_complete:
                return w.result(is_task_complete=True)
            return w.result(error=t["missing_commands"])
        commands = self._commands(commands_content, w)
        return w.result(commands=commands, is_task_complete=is_complete)

    def _extra_text(self, response: str, w: _Warnings) -> None:
        start = response.find("<response>")
        end = response.find("</response>")
        if start == -1:
            return
        if response[:start].strip():
            w.add("extra_before")
        if end != -1 and response[end + len("</response>") :].strip():
            w.add("extra_after")
            count = response.count("<response>")
            if count > 1:
                w.add("multiple_responses", count=count)

    @staticmethod
    def _response_content(response: str) -> str:
        start = response.find("<response>")
        if start == -1:
            return ""
        end = response.find("</response>", start)
        if end == -1:
            return response[start + len("<response>") :].strip()
        return response[start + len("<response>") : end].strip()

    def _sections(self, content: str, w: _Warnings) -> dict[str, str]:
        sections: dict[str, str] = {}
        for name in _SECTIONS:
            m = re.search(f"<{name}>(.*?)</{name}>", content, re.DOTALL)
            if m:
                sections[name] = m.group(1).strip()
            elif re.search(f"<{name}\\s*/>", content) or re.search(f"<{name}></{name}>", content):
                sections[name] = ""
        for name in _REQUIRED_SECTIONS:
            if name not in sections:
                w.add("missing_section", section=name)
        seen = set()
        for tag in self._top_level_tags(content):
            if tag not in _SECTIONS and tag not in seen:
                seen.add(tag)
                w.add("unknown_tag", tag=tag)
        for name in _SECTIONS:
            count = len(re.findall(f"<{name}(?:\\s|>|/>)", content))
            if count > 1:
                if name == "commands":
                    w.add("multiple_commands", count=count)
                else:
                    w.add("multiple_section", section=name)
        self._order(content, w)
        return sections

    @staticmethod
    def _top_level_tags(content: str) -> list[str]:
        tags = []
        depth = 0
        i = 0
        while i < len(content):
            if content[i] != "<":
                i += 1
                continue
            end = content.find(">", i)
            if end == -1:
                break
            inner = content[i + 1 : end]
            if inner.startswith("!") or inner.startswith("?"):
                i = end + 1
                continue
            if inner.startswith("/"):
                depth -= 1
                i = end + 1
                continue
            self_closing = inner.endswith("/")
            name = inner.split()[0] if " " in inner else inner
            if name.endswith("/"):
                name = name[:-1]
            if depth == 0:
                tags.append(name)
            if not self_closing:
                depth += 1
            i = end + 1
        return tags

    def _order(self, content: str, w: _Warnings) -> None:
        positions = {}
        for name in _REQUIRED_SECTIONS:
            m = re.search(f"<{name}(?:\\s|>|/>)", content)
            if m:
                positions[name] = m.start()
        if len(positions) < 2:
            return
        expected = [n for n in _REQUIRED_SECTIONS if n in positions]
        actual = sorted(expected, key=lambda n: positions[n])
        if actual != expected:
            sep = self.texts["order_separator"]
            w.add("wrong_order", found=sep.join(actual), expected=sep.join(expected))

    def _commands(self, xml: str, w: _Warnings) -> list[ParsedCommand]:
        commands = []
        matches = re.compile(r"<keystrokes([^>]*)>(.*?)</keystrokes>", re.DOTALL).findall(xml)
        for i, (attrs, keys) in enumerate(matches):
            n = i + 1
            self._attributes(attrs, n, w)
            duration = DEFAULT_DURATION_S
            m = re.search(r'duration\s*=\s*["\']([^"\']*)["\']', attrs)
            if m:
                try:
                    duration = float(m.group(1))
                except ValueError:
                    w.add("invalid_duration", n=n, value=m.group(1))
            else:
                w.add("missing_duration", n=n)
            if i < len(matches) - 1 and not keys.endswith("\n"):
                w.add("missing_newline", n=n)
            commands.append(ParsedCommand(keys, duration))
        for entity, char in _ENTITIES:
            if entity in xml:
                w.add("entity", entity=entity, char=char)
        if "\\r\\n" in xml:
            w.add("crlf")
        return commands

    @staticmethod
    def _attributes(attrs: str, n: int, w: _Warnings) -> None:
        for name, value in re.findall(r'(\w+)\s*=\s*([^"\'\s>]+)', attrs):
            w.add("unquoted_attribute", n=n, name=name, value=value)
        for name, value in re.findall(r"(\w+)\s*=\s*'([^']*)'", attrs):
            w.add("single_quoted_attribute", n=n, name=name, value=value)
        for name in re.findall(r"(\w+)\s*=", attrs):
            if name != "duration":
                w.add("unknown_attribute", n=n, name=name, known="duration")

    def salvage(self, truncated: str) -> str | None:
        """A reply cut at max_tokens that still holds a whole response: the part up to its
        </response>, when that parses without errors and without a several-blocks warning."""
        commands_end = truncated.find("</commands>")
        if commands_end == -1:
            return None
        end = truncated.find("</response>", commands_end)
        if end == -1:
            return None
        clean = truncated[: end + len("</response>")]
        result = self.parse_response(clean)
        several = {"multiple_responses", "multiple_commands"} & set(result.warning_kinds)
        return clean if not result.error and not several else None


JSON_TEXTS: dict[str, set[str]] = {
    "no_json": set(),
    "not_object": set(),
    "invalid_json": {"error", "content"},
    "invalid_json_preview": {"error", "preview"},
    "missing_fields": {"fields"},
    "commands_not_array": set(),
    "command_not_object": {"n"},
    "command_missing_keystrokes": {"n"},
    "command_keystrokes_not_string": {"n"},
    "no_json_object": set(),
    "extra_before": set(),
    "extra_after": set(),
    "analysis_not_string": set(),
    "plan_not_string": set(),
    "task_complete_type": set(),
    "wrong_order": {"found", "expected"},
    "order_separator": set(),
    "invalid_duration": {"n"},
    "missing_duration": {"n"},
    "unknown_fields": {"n", "fields"},
    "missing_newline": {"n"},
    "auto_corrected": {"fix"},
    "fix_incomplete_json": set(),
    "fix_mixed_content": set(),
}

XML_TEXTS: dict[str, set[str]] = {
    "no_response": set(),
    "missing_commands": set(),
    "extra_before": set(),
    "extra_after": set(),
    "multiple_responses": {"count"},
    "commands_empty": set(),
    "missing_section": {"section"},
    "unknown_tag": {"tag"},
    "multiple_commands": {"count"},
    "multiple_section": {"section"},
    "wrong_order": {"found", "expected"},
    "order_separator": set(),
    "unquoted_attribute": {"n", "name", "value"},
    "single_quoted_attribute": {"n", "name", "value"},
    "unknown_attribute": {"n", "name", "known"},
    "invalid_duration": {"n", "value"},
    "missing_duration": {"n"},
    "missing_newline": {"n"},
    "entity": {"entity", "char"},
    "crlf": set(),
}
