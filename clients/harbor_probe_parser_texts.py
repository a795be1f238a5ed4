"""Part of the Harbor probe (harbor_probe.py): the errors and warnings of Harbor's terminus-2
JSON and XML parsers, learnt as templates from replies that trigger each one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from harbor_probe_replies import (
    XML_HEAD,
    json_reply,
    ok_commands,
    xml_commands,
    xml_ok,
    xml_reply,
    xml_valid,
)
from harbor_probe_templates import ProbeError, templatize


def _one(parser, reply: str, *, error: bool = False, index: int | None = None) -> str:
    result = parser.parse_response(reply)
    if error:
        if not result.error:
            raise ProbeError(f"no parser error for {reply[:60]!r}")
        return result.error
    warnings = result.warning[2:].split("\n- ") if result.warning else []
    if index is None:
        if len(warnings) != 1:
            raise ProbeError(f"expected one warning for {reply[:60]!r}, got {warnings}")
        return warnings[0]
    return warnings[index]


def json_parser_texts(parser) -> dict[str, str]:
    texts: dict[str, str] = {}

    def with_n(name: str, build: Callable[[int], str], *, error: bool, **extra: Any) -> None:
        cases = []
        for k in (6, 7):
            cases.append((_one(parser, build(k), error=error), {"n": k + 1, **extra}))
        texts[name] = templatize(name, cases)

    def fixed(name: str, replies: list[str], *, error: bool) -> None:
        texts[name] = templatize(name, [(_one(parser, r, error=error), {}) for r in replies])

    fixed("no_json", ["just words", "no object here"], error=True)
    texts["not_object"] = templatize(
        "not_object", [(parser._validate_json_structure([], "", []), {})]
    )
    cases = []
    for content in ('{"analysis": x}', '{"plan": ]}'):
        try:
            json.loads(content)
        except json.JSONDecodeError as e:
            cases.append(
                (_one(parser, content, error=True), {"error": str(e), "content": repr(content)})
            )
    texts["invalid_json"] = templatize("invalid_json", cases)
    cases = []
    for filler in ("q" * 250, "z" * 300):
        content = '{"analysis": "' + filler + '", "plan": x}'
        try:
            json.loads(content)
        except json.JSONDecodeError as e:
            cases.append(
                (
                    _one(parser, content, error=True),
                    {"error": str(e), "preview": repr(content[:100])},
                )
            )
    texts["invalid_json_preview"] = templatize("invalid_json_preview", cases)
    texts["missing_fields"] = templatize(
        "missing_fields",
        [
            (_one(parser, '{"analysis": "a"}', error=True), {"fields": "plan, commands"}),
            (_one(parser, '{"plan": "p"}', error=True), {"fields": "analysis, commands"}),
        ],
    )
    fixed("commands_not_array", ['{"analysis": "a", "plan": "p", "commands": "ls"}'], error=True)
    with_n("command_not_object", lambda k: json_reply([*ok_commands(k), "ls"]), error=True)
    with_n(
        "command_missing_keystrokes",
        lambda k: json_reply([*ok_commands(k), {"duration": 1}]),
        error=True,
    )
    with_n(
        "command_keystrokes_not_string",
        lambda k: json_reply([*ok_commands(k), {"keystrokes": 5, "duration": 1}]),
        error=True,
    )
    valid = json_reply(ok_commands(1))
    fixed("no_json_object", ["just words"], error=False)
    fixed("extra_before", ["Sure. " + valid], error=False)
    fixed("extra_after", [valid + " Done."], error=False)
    fixed("analysis_not_string", [valid.replace('"analysis": "a"', '"analysis": 5')], error=False)
    fixed("plan_not_string", [valid.replace('"plan": "p"', '"plan": 5')], error=False)
    fixed("task_complete_type", [json_reply(ok_commands(1), task_complete=5)], error=False)
    # The field order warning: learn the list separator first, then the form.
    swapped = '{"plan": "p", "analysis": "a", "commands": []}'
    w = _one(parser, swapped)
    sep = w.split("plan", 1)[1].split("analysis", 1)[0] if "plan" in w else ""
    if not sep:
        raise ProbeError("wrong_order: no list separator found")
    texts["order_separator"] = templatize("order_separator", [(sep, {})])
    texts["wrong_order"] = templatize(
        "wrong_order",
        [
            (
                w,
                {
                    "found": sep.join(["plan", "analysis", "commands"]),
                    "expected": sep.join(["analysis", "plan", "commands"]),
                },
            ),
            (
                _one(parser, '{"analysis": "a", "commands": [], "plan": "p"}'),
                {
                    "found": sep.join(["analysis", "commands", "plan"]),
                    "expected": sep.join(["analysis", "plan", "commands"]),
                },
            ),
        ],
    )
    with_n(
        "invalid_duration",
        lambda k: json_reply([*ok_commands(k), {"keystrokes": "ls\n", "duration": "x"}]),
        error=False,
    )
    with_n(
        "missing_duration",
        lambda k: json_reply([*ok_commands(k), {"keystrokes": "ls\n"}]),
        error=False,
    )
    texts["unknown_fields"] = templatize(
        "unknown_fields",
        [
            (
                _one(
                    parser,
                    json_reply([*ok_commands(k), {"keystrokes": "ls\n", "duration": 1, f: 1}]),
                ),
                {"n": k + 1, "fields": f},
            )
            for k, f in ((6, "zzfield"), (7, "yyfield"))
        ],
    )
    with_n(
        "missing_newline",
        lambda k: json_reply(
            [*ok_commands(k), {"keystrokes": "ls", "duration": 1}, *ok_commands(1)]
        ),
        error=False,
    )
    # Automatic corrections: the wrapper is what both correction warnings share.
    fix_a = _one(parser, valid[:-1])
    fix_b = _one(parser, '"' + valid)
    prefix = os.path.commonprefix([fix_a, fix_b])
    suffix = os.path.commonprefix([fix_a[::-1], fix_b[::-1]])[::-1]
    name_a, name_b = (
        fix_a[len(prefix) : len(fix_a) - len(suffix)],
        fix_b[len(prefix) : len(fix_b) - len(suffix)],
    )
    texts["fix_incomplete_json"] = templatize("fix_incomplete_json", [(name_a, {})])
    texts["fix_mixed_content"] = templatize("fix_mixed_content", [(name_b, {})])
    texts["auto_corrected"] = templatize(
        "auto_corrected", [(fix_a, {"fix": name_a}), (fix_b, {"fix": name_b})]
    )
    return texts


def xml_parser_texts(parser) -> dict[str, str]:
    texts: dict[str, str] = {}
    head = XML_HEAD

    def cmd_case(k: int, bad: str, extra_after: list[str] | None = None) -> str:
        return xml_reply(head + xml_commands([*xml_ok(k), bad, *(extra_after or [])]))

    def fixed(name: str, replies: list[str], *, error: bool = False, index: int | None = None):
        texts[name] = templatize(
            name, [(_one(parser, r, error=error, index=index), {}) for r in replies]
        )

    fixed("no_response", ["just words", "nothing"], error=True)
    fixed("missing_commands", [xml_reply(head)], error=True)
    valid = xml_valid()
    fixed("extra_before", ["Sure. " + valid])
    fixed("extra_after", [valid + " Done."])
    texts["multiple_responses"] = templatize(
        "multiple_responses",
        [(_one(parser, " ".join([valid] * c) + " x", index=-1), {"count": c}) for c in (2, 3)],
    )
    fixed("commands_empty", [xml_reply(head + "<commands></commands>")])
    texts["missing_section"] = templatize(
        "missing_section",
        [
            (
                _one(parser, xml_reply("<plan>p</plan>\n" + xml_commands(xml_ok(1)))),
                {"section": "analysis"},
            ),
            (
                _one(parser, xml_reply("<analysis>a</analysis>\n" + xml_commands(xml_ok(1)))),
                {"section": "plan"},
            ),
        ],
    )
    texts["unknown_tag"] = templatize(
        "unknown_tag",
        [
            (
                _one(parser, xml_reply(head + xml_commands(xml_ok(1)) + f"\n<{t}>1</{t}>")),
                {"tag": t},
            )
            for t in ("zzztag", "yyytag")
        ],
    )
    texts["multiple_commands"] = templatize(
        "multiple_commands",
        [
            (
                _one(parser, xml_reply(head + "\n".join([xml_commands(xml_ok(1))] * c))),
                {"count": c},
            )
            for c in (2, 3)
        ],
    )
    texts["multiple_section"] = templatize(
        "multiple_section",
        [
            (
                _one(parser, xml_reply(head + "<plan>q</plan>\n" + xml_commands(xml_ok(1)))),
                {"section": "plan"},
            ),
            (
                _one(
                    parser,
                    xml_reply(head + "<analysis>q</analysis>\n" + xml_commands(xml_ok(1))),
                ),
                {"section": "analysis"},
            ),
        ],
    )
    swapped = xml_reply("<plan>p</plan>\n<analysis>a</analysis>\n" + xml_commands(xml_ok(1)))
    w = _one(parser, swapped)
    sep = w.split("plan", 1)[1].split("analysis", 1)[0] if "plan" in w else ""
    if not sep:
        raise ProbeError("wrong_order: no list separator found")
    texts["order_separator"] = templatize("order_separator", [(sep, {})])
    other = xml_reply("<analysis>a</analysis>\n" + xml_commands(xml_ok(1)) + "\n<plan>p</plan>")
    texts["wrong_order"] = templatize(
        "wrong_order",
        [
            (
                w,
                {
                    "found": sep.join(["plan", "analysis", "commands"]),
                    "expected": sep.join(["analysis", "plan", "commands"]),
                },
            ),
            (
                _one(parser, other),
                {
                    "found": sep.join(["analysis", "commands", "plan"]),
                    "expected": sep.join(["analysis", "plan", "commands"]),
                },
            ),
        ],
    )
    texts["unquoted_attribute"] = templatize(
        "unquoted_attribute",
        [
            (
                _one(parser, cmd_case(k, f"<keystrokes {name}={v}>ls\n</keystrokes>\n"), index=0),
                {"n": k + 1, "name": name, "value": v},
            )
            for k, name, v in ((6, "zzattr", "vq5"), (7, "yyattr", "vr6"))
        ],
    )
    texts["single_quoted_attribute"] = templatize(
        "single_quoted_attribute",
        [
            (
                _one(parser, cmd_case(k, f"<keystrokes {name}='{v}'>ls\n</keystrokes>\n"), index=0),
                {"n": k + 1, "name": name, "value": v},
            )
            for k, name, v in ((6, "zzattr", "qq"), (7, "yyattr", "rr"))
        ],
    )
    texts["unknown_attribute"] = templatize(
        "unknown_attribute",
        [
            (
                _one(
                    parser, cmd_case(k, f'<keystrokes duration="1" {name}="1">ls\n</keystrokes>\n')
                ),
                {"n": k + 1, "name": name, "known": "duration"},
            )
            for k, name in ((6, "zzattr"), (7, "yyattr"))
        ],
    )
    texts["invalid_duration"] = templatize(
        "invalid_duration",
        [
            (
                _one(parser, cmd_case(k, f'<keystrokes duration="{v}">ls\n</keystrokes>\n')),
                {"n": k + 1, "value": v},
            )
            for k, v in ((6, "abc"), (7, "xyz"))
        ],
    )
    texts["missing_duration"] = templatize(
        "missing_duration",
        [
            (_one(parser, cmd_case(k, "<keystrokes>ls\n</keystrokes>\n")), {"n": k + 1})
            for k in (6, 7)
        ],
    )
    texts["missing_newline"] = templatize(
        "missing_newline",
        [
            (
                _one(parser, cmd_case(k, '<keystrokes duration="1">ls</keystrokes>\n', xml_ok(1))),
                {"n": k + 1},
            )
            for k in (6, 7)
        ],
    )
    texts["entity"] = templatize(
        "entity",
        [
            (
                _one(parser, cmd_case(0, f'<keystrokes duration="1">echo {e}\n</keystrokes>\n')),
                {"entity": e, "char": c},
            )
            for e, c in (("&lt;", "<"), ("&gt;", ">"))
        ],
    )
    fixed("crlf", [cmd_case(0, '<keystrokes duration="1">printf a\\r\\n\n</keystrokes>\n')])
    return texts
