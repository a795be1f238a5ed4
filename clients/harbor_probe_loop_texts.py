"""Part of the Harbor probe (harbor_probe.py): the messages of Harbor's terminus-2 agent loop
(first prompt, confirmation, parse-error and warning feedback, timeouts, the output cap and the
output-length errors) and its terminal output forms, learnt from scripted episodes.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from harbor_probe_replies import XML_HEAD, json_reply, ok_commands, xml_reply, xml_valid
from harbor_probe_scripted import ScriptedChat, Truncated, make_agent, make_tmux, run_episode
from harbor_probe_templates import ProbeError, templatize


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
                + json_reply(ok_commands(1))
                + ("" if tag == "a" else " bye"),
                "complete": json_reply(ok_commands(1), complete=True),
                "plain": json_reply(ok_commands(1)),
                "whole": json_reply(ok_commands(1)),
            }[kind]
        return {
            "error": "just words" if tag == "a" else "nothing here",
            "error_warnings": xml_reply(XML_HEAD) if tag == "a" else xml_reply("<plan>p</plan>"),
            "warnings": ("Hi " + xml_valid()) if tag == "a" else (xml_valid() + " bye"),
            "complete": xml_valid(complete=True),
            "plain": xml_valid(),
            # Parses without warnings, yet holds no </commands>: Harbor cannot salvage it.
            "whole": xml_reply(XML_HEAD + "<commands/>\n<task_complete>true</task_complete>"),
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
