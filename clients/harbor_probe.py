"""Run by `rollouts agent import-harbor` with the interpreter that has Harbor installed (Python >=
3.12): asks the user's own Harbor for terminus-2's message forms and prints them as a profile
(JSON on stdout). It imports nothing of rollouts, only Harbor and the standard library.

How a form is learnt: Harbor is made to produce the message twice, with different sentinel
arguments (made-up terminal outputs, replies that trigger one parser warning, and so on); the
arguments are replaced by `{placeholders}` and both results must give the same template, which
must reproduce Harbor's message exactly. Loop-level messages (confirmation, parse errors,
warnings, timeouts, the output-length error) come from Harbor's real agent loop
(`Terminus2._run_agent_loop`) driven by a scripted chat and terminal; parser messages from
Harbor's parsers; terminal forms from Harbor's tmux session over a scripted pane.

    python harbor_probe.py --variant json           # the profile, as JSON
    python harbor_probe.py --episode SCENARIO.json  # Harbor's prompts for a scripted episode
    python harbor_probe.py --check REQUEST.json     # Harbor's parses and output caps

The second form drives one scripted episode through Harbor's own `Terminus2.run` (the parity
test compares it with rollouts' terminus-2 harness). A scenario is
    {"variant": "json", "instruction": str, "max_tokens": int,
     "initial": {"history": str, "screen": str},
     "turns": [{"reply": str, "truncated": bool}],
     "sends": [{"keys": str, "timeout": bool, "history": str, "screen": str}]}
where `sends` answers each keystroke sent to the terminal, in order: the pane's whole history
and visible screen afterwards, or a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ProbeError(RuntimeError):
    pass


# ------------------------------------------------------------------------- templates


def _template(text: str, values: dict[str, Any]) -> str:
    """`text` with every occurrence of each value replaced by its {name}, the rest escaped."""
    taken = [False] * len(text)
    spans = []
    for name, value in sorted(values.items(), key=lambda kv: -len(str(kv[1]))):
        v = str(value)
        if not v:
            raise ProbeError(f"empty sentinel for {name}")
        start = 0
        while (i := text.find(v, start)) != -1:
            if any(taken[i : i + len(v)]):
                start = i + 1
                continue
            spans.append((i, i + len(v), name))
            for j in range(i, i + len(v)):
                taken[j] = True
            start = i + len(v)
    out, pos = [], 0
    for start, end, name in sorted(spans):
        out.append(text[pos:start].replace("{", "{{").replace("}", "}}"))
        out.append("{" + name + "}")
        pos = end
    out.append(text[pos:].replace("{", "{{").replace("}", "}}"))
    return "".join(out)


def templatize(what: str, cases: list[tuple[str, dict[str, Any]]]) -> str:
    """The one template that every (text, values) case is an instance of."""
    templates = {_template(text, values) for text, values in cases}
    if len(templates) != 1:
        raise ProbeError(f"{what}: Harbor's message form is not what this probe expects")
    template = templates.pop()
    for text, values in cases:
        if template.format(**values) != text:
            raise ProbeError(f"{what}: the template does not reproduce Harbor's message")
    return template


# ------------------------------------------------------------------------- Harbor pieces


def _harbor():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import harbor.agents.terminus_2.terminus_2 as t2
    from harbor.agents.terminus_2.tmux_session import TmuxSession
    from harbor.llms.base import LLMResponse, OutputLengthExceededError
    from harbor.models.agent.context import AgentContext

    return t2, TmuxSession, LLMResponse, OutputLengthExceededError, AgentContext


def make_agent(variant: str, logs_dir: Path):
    t2 = _harbor()[0]
    return t2.Terminus2(
        logs_dir=logs_dir,
        model_name="hosted_vllm/probe",
        parser_name=variant,
        enable_summarize=False,
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
    TmuxSession = _harbor()[1]
    tmux = TmuxSession.__new__(TmuxSession)
    tmux._previous_buffer = None
    tmux._session_name = "terminus-2"
    tmux._user = None
    tmux.environment = _Env(state)
    return tmux


class Truncated(str):
    """A reply that hit max_tokens."""


class _Stop(Exception):
    pass


class ScriptedChat:
    """Harbor's Chat, answered from a script; records every prompt the agent sends."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []
        self.messages: list[dict] = []
        self.rollout_details: list = []
        self.total_input_tokens = self.total_output_tokens = self.total_cache_tokens = 0
        self.total_cost = 0.0
        self._exhausted = False

    def reset_response_chain(self) -> None:
        pass

    async def chat(self, prompt: str, **_: Any):
        _, _, LLMResponse, OutputLengthExceededError, _ = _harbor()
        if not self.replies:
            if not self._exhausted:
                self.prompts.append(prompt)
                self._exhausted = True
            raise _Stop()
        self.prompts.append(prompt)
        reply = self.replies.pop(0)
        if isinstance(reply, Truncated):
            raise OutputLengthExceededError("cut", truncated_response=str(reply))
        self.messages += [
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
) -> tuple[list[str], list[str], str | None]:
    """Harbor's Terminus2.run over a scripted chat and terminal: (prompts, keys sent, the
    exception the agent failed with, if any)."""
    t2, _, _, _, AgentContext = _harbor()
    with tempfile.TemporaryDirectory() as logs:
        agent = make_agent(variant, Path(logs))
        agent._llm.get_model_output_limit = lambda: output_limit
        chat = ScriptedChat(replies)
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
        return chat.prompts, session.sent, failure


# ------------------------------------------------------------------------- replies


def _json_reply(commands: list[dict], complete: bool = False, **extra: Any) -> str:
    body = {"analysis": "a", "plan": "p", "commands": commands, **extra}
    if complete:
        body["task_complete"] = True
    return json.dumps(body)


def _ok_commands(k: int) -> list[dict]:
    return [{"keystrokes": f"echo {i}\n", "duration": 0.1} for i in range(k)]


def _xml_reply(inner: str) -> str:
    return f"<response>\n{inner}\n</response>"


_XML_HEAD = "<analysis>a</analysis>\n<plan>p</plan>\n"


def _xml_commands(items: list[str]) -> str:
    return "<commands>\n" + "".join(items) + "</commands>"


def _xml_ok(k: int) -> list[str]:
    return [f'<keystrokes duration="0.1">echo {i}\n</keystrokes>\n' for i in range(k)]


def _xml_valid(complete: bool = False, k: int = 1) -> str:
    tail = "\n<task_complete>true</task_complete>" if complete else ""
    return _xml_reply(_XML_HEAD + _xml_commands(_xml_ok(k)) + tail)


# ------------------------------------------------------------------------- parser texts


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
    with_n("command_not_object", lambda k: _json_reply([*_ok_commands(k), "ls"]), error=True)
    with_n(
        "command_missing_keystrokes",
        lambda k: _json_reply([*_ok_commands(k), {"duration": 1}]),
        error=True,
    )
    with_n(
        "command_keystrokes_not_string",
        lambda k: _json_reply([*_ok_commands(k), {"keystrokes": 5, "duration": 1}]),
        error=True,
    )
    valid = _json_reply(_ok_commands(1))
    fixed("no_json_object", ["just words"], error=False)
    fixed("extra_before", ["Sure. " + valid], error=False)
    fixed("extra_after", [valid + " Done."], error=False)
    fixed("analysis_not_string", [valid.replace('"analysis": "a"', '"analysis": 5')], error=False)
    fixed("plan_not_string", [valid.replace('"plan": "p"', '"plan": 5')], error=False)
    fixed("task_complete_type", [_json_reply(_ok_commands(1), task_complete=5)], error=False)
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
        lambda k: _json_reply([*_ok_commands(k), {"keystrokes": "ls\n", "duration": "x"}]),
        error=False,
    )
    with_n(
        "missing_duration",
        lambda k: _json_reply([*_ok_commands(k), {"keystrokes": "ls\n"}]),
        error=False,
    )
    texts["unknown_fields"] = templatize(
        "unknown_fields",
        [
            (
                _one(
                    parser,
                    _json_reply([*_ok_commands(k), {"keystrokes": "ls\n", "duration": 1, f: 1}]),
                ),
                {"n": k + 1, "fields": f},
            )
            for k, f in ((6, "zzfield"), (7, "yyfield"))
        ],
    )
    with_n(
        "missing_newline",
        lambda k: _json_reply(
            [*_ok_commands(k), {"keystrokes": "ls", "duration": 1}, *_ok_commands(1)]
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
    head = _XML_HEAD

    def cmd_case(k: int, bad: str, extra_after: list[str] | None = None) -> str:
        return _xml_reply(head + _xml_commands([*_xml_ok(k), bad, *(extra_after or [])]))

    def fixed(name: str, replies: list[str], *, error: bool = False, index: int | None = None):
        texts[name] = templatize(
            name, [(_one(parser, r, error=error, index=index), {}) for r in replies]
        )

    fixed("no_response", ["just words", "nothing"], error=True)
    fixed("missing_commands", [_xml_reply(head)], error=True)
    valid = _xml_valid()
    fixed("extra_before", ["Sure. " + valid])
    fixed("extra_after", [valid + " Done."])
    texts["multiple_responses"] = templatize(
        "multiple_responses",
        [(_one(parser, " ".join([valid] * c) + " x", index=-1), {"count": c}) for c in (2, 3)],
    )
    fixed("commands_empty", [_xml_reply(head + "<commands></commands>")])
    texts["missing_section"] = templatize(
        "missing_section",
        [
            (
                _one(parser, _xml_reply("<plan>p</plan>\n" + _xml_commands(_xml_ok(1)))),
                {"section": "analysis"},
            ),
            (
                _one(parser, _xml_reply("<analysis>a</analysis>\n" + _xml_commands(_xml_ok(1)))),
                {"section": "plan"},
            ),
        ],
    )
    texts["unknown_tag"] = templatize(
        "unknown_tag",
        [
            (
                _one(parser, _xml_reply(head + _xml_commands(_xml_ok(1)) + f"\n<{t}>1</{t}>")),
                {"tag": t},
            )
            for t in ("zzztag", "yyytag")
        ],
    )
    texts["multiple_commands"] = templatize(
        "multiple_commands",
        [
            (
                _one(parser, _xml_reply(head + "\n".join([_xml_commands(_xml_ok(1))] * c))),
                {"count": c},
            )
            for c in (2, 3)
        ],
    )
    texts["multiple_section"] = templatize(
        "multiple_section",
        [
            (
                _one(parser, _xml_reply(head + "<plan>q</plan>\n" + _xml_commands(_xml_ok(1)))),
                {"section": "plan"},
            ),
            (
                _one(
                    parser,
                    _xml_reply(head + "<analysis>q</analysis>\n" + _xml_commands(_xml_ok(1))),
                ),
                {"section": "analysis"},
            ),
        ],
    )
    swapped = _xml_reply("<plan>p</plan>\n<analysis>a</analysis>\n" + _xml_commands(_xml_ok(1)))
    w = _one(parser, swapped)
    sep = w.split("plan", 1)[1].split("analysis", 1)[0] if "plan" in w else ""
    if not sep:
        raise ProbeError("wrong_order: no list separator found")
    texts["order_separator"] = templatize("order_separator", [(sep, {})])
    other = _xml_reply("<analysis>a</analysis>\n" + _xml_commands(_xml_ok(1)) + "\n<plan>p</plan>")
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
                _one(parser, cmd_case(k, '<keystrokes duration="1">ls</keystrokes>\n', _xml_ok(1))),
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


# ------------------------------------------------------------------------- loop texts


def loop_texts(variant: str) -> dict[str, str]:
    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as logs:
        agent = make_agent(variant, Path(logs))
        parser = agent._parser
        texts["first_prompt"] = agent._prompt_template
        texts["timeout"] = agent._timeout_template
        # The output cap, with a cap of our choosing so that the numbers are ours.
        cases = []
        for cap, size in ((4242, 3000), (5252, 4000)):
            text = "H" * size + "T" * size
            half = cap // 2
            cases.append(
                (
                    agent._limit_output_length(text, max_bytes=cap),
                    {
                        "head": "H" * half,
                        "tail": "T" * half,
                        "max_bytes": cap,
                        "omitted_bytes": 2 * size - 2 * half,
                    },
                )
            )
        texts["output_limited"] = templatize("output_limited", cases)

    def reply_for(kind: str, tag: str) -> str:
        """Replies with a known parse result; `tag` varies them between the two cases."""
        if variant == "json":
            return {
                "error": '{"analysis": "a"}' if tag == "a" else '{"plan": "p"}',
                "error_warnings": "Hi " + '{"analysis": "a"}'
                if tag == "a"
                else '{"plan": "p"} bye',
                "warnings": ("Hi " if tag == "a" else "")
                + _json_reply(_ok_commands(1))
                + ("" if tag == "a" else " bye"),
                "complete": _json_reply(_ok_commands(1), complete=True),
                "plain": _json_reply(_ok_commands(1)),
                "whole": _json_reply(_ok_commands(1)),
            }[kind]
        return {
            "error": "just words" if tag == "a" else "nothing here",
            "error_warnings": _xml_reply(_XML_HEAD) if tag == "a" else _xml_reply("<plan>p</plan>"),
            "warnings": ("Hi " + _xml_valid()) if tag == "a" else (_xml_valid() + " bye"),
            "complete": _xml_valid(complete=True),
            "plain": _xml_valid(),
            # Parses without warnings, yet holds no </commands>: Harbor cannot salvage it.
            "whole": _xml_reply(_XML_HEAD + "<commands/>\n<task_complete>true</task_complete>"),
        }[kind]

    def prompts(replies: list[str], outputs: list[str], limit: int = 4096) -> list[str]:
        queue = list(outputs)
        got, _, failure = run_episode(
            variant,
            "INSTRUCTION-SENTINEL",
            replies,
            [],
            {"history": "", "screen": ""},
            output_limit=limit,
            output=lambda _s: queue.pop(0) if queue else "",
        )
        if failure:
            raise ProbeError(f"Harbor's agent failed in a scripted episode: {failure}")
        return got

    def handle(reply: str) -> str:
        """The feedback Harbor builds from one reply's parse result."""
        got = asyncio.run(agent._handle_llm_interaction(ScriptedChat([reply]), "probe"))
        return got[2]

    loop: dict[str, list[tuple[str, Any]]] = {"parse_error": [], "warnings": [], "confirmation": []}
    length: dict[str, list[tuple[str, dict]]] = {"output_length": [], "output_length_warnings": []}
    for tag in ("a", "b"):
        out = f"@@OUTPUT-{tag}@@"
        r_err, r_errw, r_warn = (reply_for(k, tag) for k in ("error", "error_warnings", "warnings"))
        res = {
            k: parser.parse_response(r) for k, r in (("e", r_err), ("ew", r_errw), ("w", r_warn))
        }
        if res["e"].warning or not res["e"].error:
            raise ProbeError("the error-only reply does not give an error alone")
        # [initial, after error, after error+warnings, after warnings, after complete]
        got = prompts(
            [r_err, r_errw, r_warn, reply_for("complete", tag)], ["@@INITIAL@@", out, out]
        )
        if len(got) != 5:
            raise ProbeError(f"the scripted episode sent {len(got)} prompts, not 5")
        # The loop's parse-error message wraps the feedback; the feedback wraps error/warnings.
        loop["parse_error"].append((got[1], r_err))
        loop["parse_error"].append((got[2], r_errw))
        loop["warnings"].append((got[3], {"reply": r_warn, "terminal_output": out}))
        loop["confirmation"].append((got[4], {"terminal_output": out}))
        # Output length: a whole reply cut exactly at its end (no warnings), and a cut one.
        limit = 987654 if tag == "a" else 876543
        cut = reply_for("plain", tag)[: len(reply_for("plain", tag)) // 2]
        got = prompts(
            [Truncated(reply_for("whole", tag)), Truncated(cut), reply_for("plain", tag)],
            ["@@INITIAL@@"],
            limit,
        )
        cut_warnings = parser.parse_response(cut).warning
        length["output_length"].append((got[1], {"max_tokens": limit}))
        length["output_length_warnings"].append(
            (got[2], {"max_tokens": limit, "warnings": cut_warnings})
        )
        if not cut_warnings:
            raise ProbeError("a cut reply gave no parser warnings")

    # Feedback forms, straight from Harbor's reply handling; then the messages that carry them.
    for kind, fields in (
        ("error", lambda r: {"error": r.error}),
        ("error_warnings", lambda r: {"error": r.error, "warnings": r.warning}),
        ("warnings", lambda r: {"warnings": r.warning}),
    ):
        cases = []
        for tag in ("a", "b"):
            reply = reply_for(kind, tag)
            fb = handle(reply)
            cases.append((fb, fields(parser.parse_response(reply))))
        texts[f"feedback_{kind}"] = templatize(f"feedback_{kind}", cases)
    texts["parse_error"] = templatize(
        "parse_error", [(m, {"feedback": handle(r)}) for m, r in loop["parse_error"]]
    )
    texts["warnings"] = templatize(
        "warnings",
        [
            (m, {"feedback": handle(v["reply"]), "terminal_output": v["terminal_output"]})
            for m, v in loop["warnings"]
        ],
    )
    texts["confirmation"] = templatize("confirmation", loop["confirmation"])
    texts["output_length"] = templatize("output_length", length["output_length"])
    texts["output_length_warnings"] = templatize(
        "output_length_warnings", length["output_length_warnings"]
    )
    # Terminal output forms, from Harbor's tmux session over a scripted pane.
    screen_cases, new_cases = [], []
    for tag in ("a", "b"):
        state = {"history": f"@@HIST-{tag}@@", "screen": f"@@SCREEN-{tag}@@"}
        tmux = make_tmux(state)
        screen_cases.append(
            (asyncio.run(tmux.get_incremental_output()), {"screen": state["screen"]})
        )
        state["history"] = f"@@HIST-{tag}@@\n@@NEW-{tag}@@"
        new_cases.append((asyncio.run(tmux.get_incremental_output()), {"output": state["history"]}))
    texts["screen"] = templatize("screen", screen_cases)
    texts["new_output"] = templatize("new_output", new_cases)
    return texts


def behaviour() -> dict[str, Any]:
    t2 = _harbor()[0]
    fields = t2.Terminus2Options.model_fields
    cap = inspect.signature(t2.Terminus2._limit_output_length).parameters["max_bytes"].default
    return {
        "output_cap_bytes": int(cap),
        "pane_width": int(fields["tmux_pane_width"].default),
        "pane_height": int(fields["tmux_pane_height"].default),
        "summarize": bool(fields["enable_summarize"].default),
        "summarize_below_free_tokens": int(fields["proactive_summarization_threshold"].default),
    }


def profile(variant: str) -> dict[str, Any]:
    from importlib.metadata import version

    with tempfile.TemporaryDirectory() as logs:
        parser = make_agent(variant, Path(logs))._parser
    parser_texts = json_parser_texts(parser) if variant == "json" else xml_parser_texts(parser)
    return {
        "profile": {
            "harness": "terminus-2",
            "variant": variant,
            "source": f"harbor {version('harbor')} terminus-2 ({variant}) by rollouts agent "
            "import-harbor",
        },
        "behaviour": behaviour(),
        "texts": {**loop_texts(variant), "parser": parser_texts},
    }


def episode(scenario: dict[str, Any]) -> dict[str, Any]:
    replies = [
        Truncated(t["reply"]) if t.get("truncated") else t["reply"] for t in scenario["turns"]
    ]
    prompts, sent, failure = run_episode(
        scenario["variant"],
        scenario["instruction"],
        replies,
        scenario["sends"],
        scenario["initial"],
        output_limit=scenario.get("max_tokens", 4096),
    )
    return {"prompts": prompts, "sent": sent, "failure": failure}


def check(request: dict[str, Any]) -> dict[str, Any]:
    """Harbor's parse results for replies and its output cap for outputs (parity tests)."""
    with tempfile.TemporaryDirectory() as logs:
        agent = make_agent(request["variant"], Path(logs))
    parsed = []
    for reply in request.get("replies", []):
        r = agent._parser.parse_response(reply)
        parsed.append(
            {
                "error": r.error,
                "warning": r.warning,
                "complete": bool(r.is_task_complete),
                "commands": [[c.keystrokes, c.duration] for c in r.commands],
            }
        )
    limited = [agent._limit_output_length(o) for o in request.get("outputs", [])]
    return {"parsed": parsed, "limited": limited}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["json", "xml"], default="json")
    ap.add_argument("--episode", help="a scenario file: print Harbor's prompts for it")
    ap.add_argument("--check", help="replies and outputs: print Harbor's parses and caps")
    args = ap.parse_args()
    import logging

    logging.disable(logging.CRITICAL)
    try:
        if args.episode:
            result = episode(json.loads(Path(args.episode).read_text()))
        elif args.check:
            result = check(json.loads(Path(args.check).read_text()))
        else:
            result = profile(args.variant)
    except ProbeError as e:
        print(f"harbor probe: {e}", file=sys.stderr)
        sys.exit(2)
    json.dump(result, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
