"""Run by `rollouts agent import-harbor` with the interpreter that has Harbor installed (Python >=
3.12): asks the user's own Harbor for terminus-2's message forms and prints them as a profile
(JSON on stdout). It imports nothing of rollouts, only Harbor and the standard library. Its parts
are the harbor_probe_*.py files next to it (this script puts its folder first on sys.path and
imports them by their plain names), each importing only those listed before it: _templates
(message forms as templates), _replies (replies with a known parse), _scripted (Harbor's agent
over a scripted chat and terminal), _parser_texts and _loop_texts (the forms learnt).

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
     "turns": [{"reply": str, "truncated": bool, "context_full": bool}],
     "summarize": {"limit": int, "threshold": int, "sub_replies": [str | None]},
     "sends": [{"keys": str, "timeout": bool, "history": str, "screen": str}]}
where `sends` answers each keystroke sent to the terminal, in order: the pane's whole history
and visible screen afterwards, or a timeout. With `summarize` (optional), Harbor summarizes:
its token count is the characters of the messages' contents, `limit` its context, and the
summarization calls get `sub_replies` in order (None: the engine's context is full); a turn
with `context_full` is refused by the engine. `calls` in the answer: every request's messages.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# Run as a script by another interpreter, where rollouts is not installed: the probe's parts are
# found next to this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harbor_probe_loop_texts import loop_texts  # noqa: E402
from harbor_probe_parser_texts import json_parser_texts, xml_parser_texts  # noqa: E402
from harbor_probe_scripted import (  # noqa: E402
    ContextFull,
    Truncated,
    load_harbor,
    make_agent,
    run_episode,
)
from harbor_probe_summary_texts import summary_numbers, summary_texts  # noqa: E402
from harbor_probe_templates import ProbeError  # noqa: E402


def behaviour() -> dict[str, Any]:
    t2 = load_harbor()[0]
    fields = t2.Terminus2Options.model_fields
    cap = inspect.signature(t2.Terminus2._limit_output_length).parameters["max_bytes"].default
    return {
        "output_cap_bytes": int(cap),
        "pane_width": int(fields["tmux_pane_width"].default),
        "pane_height": int(fields["tmux_pane_height"].default),
        "summarize": bool(fields["enable_summarize"].default),
        "summarize_below_free_tokens": int(fields["proactive_summarization_threshold"].default),
        **summary_numbers(),
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
        "texts": {**loop_texts(variant), "parser": parser_texts, "summary": summary_texts()},
    }


def episode(scenario: dict[str, Any]) -> dict[str, Any]:
    kinds = {"truncated": Truncated, "context_full": ContextFull}
    replies = [
        next((k(t["reply"]) for f, k in kinds.items() if t.get(f)), t["reply"])
        for t in scenario["turns"]
    ]
    summarize = scenario.get("summarize")
    if summarize is not None:
        summarize = {
            **summarize,
            "sub_replies": [ContextFull("") if r is None else r for r in summarize["sub_replies"]],
        }
    calls: list[dict] = []
    prompts, sent, failure = run_episode(
        scenario["variant"],
        scenario["instruction"],
        replies,
        scenario["sends"],
        scenario["initial"],
        output_limit=scenario.get("max_tokens", 4096),
        summarize=summarize,
        calls=calls,
    )
    return {"prompts": prompts, "sent": sent, "failure": failure, "calls": calls}


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
