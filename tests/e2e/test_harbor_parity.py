"""terminus-2 parity: rollouts' terminus-2 harness against Harbor 0.25.0's own terminus-2.

A profile is imported with `rollouts agent import-harbor` from a real Harbor installation
(tests/harbor_env.py builds one); then one scripted episode (commands with output, a parse error,
warnings, a command that times out, output over the byte cap, a pane whose history vanished, a
reply cut at max_tokens, the double confirmation) goes through Harbor's own `Terminus2.run` (a
scripted chat and terminal under it, clients/harbor_probe.py --episode) and through our harness
with the same replies and terminal captures. The messages must be identical, character for
character, and so must the keys sent. A corpus of replies checks the parsers' errors, warnings
and commands the same way, and outputs the byte cap. Context summarization: scripted episodes
that cross the proactive threshold, and ones the engine refuses (unwinding, the full summary,
the short one, the fallback), with Harbor's token count replaced by characters on both sides:
every request, main and summarization call, carries the same messages in the same order.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from service.agent.harnesses import build_harness, load_profile
from service.agent.harnesses.terminus2 import Terminus2Harness
from service.agent.harnesses.terminus_summary import Call, CallFailed, Summarizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harbor_env import ENV  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "clients" / "harbor_probe.py"
PROMPT = "root@sandbox:/app#"
HEIGHT = 40


def _probe(harbor: str, mode: str, request: dict, tmp_path: Path) -> dict:
    req = tmp_path / f"{mode}-request.json"
    req.write_text(json.dumps(request))
    r = subprocess.run(
        [harbor, str(PROBE), f"--{mode}", str(req)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **ENV},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


# ----------------------------------------------------------------------------- a scripted pane


class Pane:
    """A tmux pane as text: its lines so far; `history` is `capture-pane -p -S -` (every line,
    then empty lines down to the pane's height), `screen` the visible last HEIGHT lines."""

    def __init__(self) -> None:
        self.lines = [PROMPT]

    def run(self, command: str, output: str, prompt: bool = True) -> dict[str, str]:
        self.lines[-1] = f"{self.lines[-1]} {command}".rstrip()
        self.lines += output.splitlines()
        if prompt:
            self.lines.append(PROMPT)
        return self.state()

    def state(self) -> dict[str, str]:
        shown = self.lines + [""] * max(0, HEIGHT - len(self.lines))
        return {
            "history": "\n".join(shown) + "\n",
            "screen": "\n".join(shown[-HEIGHT:]) + "\n",
        }


def _json(commands: list[tuple[str, float]], complete: bool = False, **extra: Any) -> str:
    body = {
        "analysis": "The terminal is ready.",
        "plan": "Run the next commands.",
        "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
        **extra,
    }
    if complete:
        body["task_complete"] = True
    return json.dumps(body, indent=2)


def _xml(commands: list[tuple[str, float]], complete: bool = False, extra: str = "") -> str:
    keys = "".join(f'<keystrokes duration="{d}">{k}</keystrokes>\n' for k, d in commands)
    tail = "\n<task_complete>true</task_complete>" if complete else ""
    return (
        f"{extra}<response>\n<analysis>The terminal is ready.</analysis>\n"
        f"<plan>Run the next commands.</plan>\n<commands>\n{keys}</commands>{tail}\n</response>"
    )


def scenario(variant: str, marker: str) -> dict[str, Any]:
    """One episode touching every message form terminus-2 has. `marker`: the words the error
    feedback starts with (the profile's)."""
    reply = _json if variant == "json" else _xml
    pane = Pane()
    initial = pane.state()
    turns: list[dict[str, Any]] = []
    sends: list[dict[str, Any]] = []

    def turn(text: str, *keys: tuple[str, dict[str, Any]], truncated: bool = False) -> None:
        turns.append({"reply": text, "truncated": truncated})
        for k, effect in keys:
            sends.append({"keys": k, **effect})

    # 1. two commands with output
    turn(
        reply([("ls -la\n", 0.1), ("cat /etc/hostname\n", 0.5)]),
        ("ls -la\n", pane.run("ls -la", "total 8\ndrwxr-xr-x 2 root root 4096 .\n")),
        ("cat /etc/hostname\n", pane.run("cat /etc/hostname", "sandbox")),
    )
    # 2. a reply that does not parse: nothing is typed
    if variant == "json":
        bad = (
            'I will list files.\n{"analysis": "x", "plan": "y", '
            '"commands": [{"keystrokes": "ls\\n" "duration": 1}]}'
        )
    else:
        bad = "I will list files, but forgot the response tags."
    turn(bad)
    # 2b. a warning that quotes the model's own words holding the error feedback's marker:
    #     Harbor's loop looks for the marker in the feedback, so nothing is typed either
    if variant == "json":
        quoting = _json([("ls\n", 0.1)]).replace(
            '"duration": 0.1', f'"duration": 0.1, "{marker}": 1'
        )
    else:
        quoting = _xml([("ls\n", 0.1)]).replace(
            "</commands>", f"</commands>\n<{marker}>x</{marker}>"
        )
    turn(quoting)
    # 3. warnings (extra text, a missing duration), a command that times out: the second
    #    command is never sent
    if variant == "json":
        warn = "Sure.\n" + json.dumps(
            {
                "analysis": "a",
                "plan": "p",
                "commands": [
                    {"keystrokes": "python3 -c 'import time; time.sleep(100)'\n"},
                    {"keystrokes": "echo never\n", "duration": 0.1},
                ],
            }
        )
    else:
        warn = (
            "Sure.\n<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>\n"
            "<keystrokes>python3 -c 'import time; time.sleep(100)'\n</keystrokes>\n"
            '<keystrokes duration="0.1">echo never\n</keystrokes>\n</commands>\n</response>'
        )
    turn(
        warn,
        (
            "python3 -c 'import time; time.sleep(100)'\n",
            {"timeout": True, **pane.run("python3 -c 'import time; time.sleep(100)'", "", False)},
        ),
    )
    # 4. interrupt it, then a command whose output is over the 10,000-byte cap (twice capped)
    big = "\n".join(f"line {i} " + "é" * 7 for i in range(1500))
    turn(
        reply([("C-c", 0.1), ("seq-like\n", 2.0)]),
        ("C-c", pane.run("^C", "", True)),
        ("seq-like\n", pane.run("seq-like", big)),
    )
    # 5. the pane's history is gone (cleared): the screen is shown instead
    pane.lines = [PROMPT]
    turn(reply([("clear\n", 0.1)]), ("clear\n", pane.run("clear", "")))
    # 6. waiting with no keys (an empty command)
    turn(reply([("", 1.0)]), ("", pane.state()))
    # 7. task_complete with a command: the confirmation message
    turn(
        reply([("python3 hello.py\n", 0.5)], complete=True),
        ("python3 hello.py\n", pane.run("python3 hello.py", "hello")),
    )
    # 8. a reply cut at max_tokens: the output-length error, nothing typed
    cut = reply([("echo this reply was cut\n", 0.1)])
    turn(cut[: len(cut) // 2], truncated=True)
    # 9. task_complete again: the episode ends
    turn(reply([], complete=True))
    return {
        "variant": variant,
        "instruction": "Write /app/hello.py that prints hello.\nUse Python 3.\n",
        "max_tokens": 4096,
        "initial": initial,
        "turns": turns,
        "sends": sends,
    }


class ScriptedTerminal:
    """Our side of the same script (the harness's Terminal interface)."""

    def __init__(self, sends: list[dict[str, Any]], initial: dict[str, str]) -> None:
        self.sends = list(sends)
        self.state = dict(initial)
        self.sent: list[str] = []
        self.resized: tuple[int, int] | None = None

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        self.sent.append(keystrokes)
        effect = self.sends.pop(0)
        assert effect["keys"] == keystrokes
        self.state.update({k: effect[k] for k in ("history", "screen") if k in effect})
        if effect.get("timeout"):
            raise TimeoutError("the send timed out")
        return ""

    async def capture(self, *, entire: bool) -> str | None:
        return self.state["history" if entire else "screen"]

    async def resize(self, width: int, height: int) -> None:
        self.resized = (width, height)


async def _ours(harness: Terminus2Harness, sc: dict[str, Any]) -> tuple[list[str], list[str]]:
    terminal = ScriptedTerminal(sc["sends"], sc["initial"])
    session = harness.session(max_tokens=sc["max_tokens"])
    state = await session.output.get(terminal)  # the first look: the screen form
    prompts = [harness.first_prompt(sc["instruction"], state)]
    for t in sc["turns"]:
        step = await session.step(t["reply"], terminal, truncated=t["truncated"])
        if step.done:
            break
        prompts += [m["content"] for m in step.messages]
    return prompts, terminal.sent


@pytest.mark.parametrize("variant", ["json", "xml"])
def test_scripted_episode_matches_harbor(
    variant: str, harbor: str, harbor_profiles: dict[str, Path], tmp_path: Path
) -> None:
    harness = build_harness("terminus-2", harbor_profiles[variant])
    sc = scenario(variant, harness.error_marker)
    theirs = _probe(harbor, "episode", sc, tmp_path)
    assert theirs["failure"] is None, theirs["failure"]
    ours, sent = asyncio.run(_ours(harness, sc))
    (tmp_path / "ours.json").write_text(json.dumps(ours, indent=1))
    (tmp_path / "harbor.json").write_text(json.dumps(theirs["prompts"], indent=1))
    assert sent == theirs["sent"]
    assert len(ours) == len(theirs["prompts"]) == 10
    for i, (a, b) in enumerate(zip(ours, theirs["prompts"], strict=True)):
        assert a == b, f"message {i} differs"
    # Every form was exercised: no system message, confirmation, errors, timeout, cap, screen.
    assert ours == theirs["prompts"]


# ----------------------------------------------------------------------------- parsers


def C(rest: str) -> str:  # noqa: N802 - a reply with these commands (and more fields)
    return '{"analysis": "a", "plan": "p", "commands": ' + rest + "}"


def _corpus(variant: str) -> list[str]:
    if variant == "json":
        ok = _json([("ls\n", 0.1)])
        return [
            ok,
            _json([("ls\n", 0.1)], complete=True),
            "text before " + ok + " and after",
            ok[:-1],
            ok[:-10],
            '"' + ok,
            "no json at all",
            "",
            '{"analysis": "a"}',
            '{"analysis": 1, "plan": [], "commands": []}',
            '{"plan": "p", "analysis": "a", "commands": []}',
            '{"commands": [], "plan": "p", "analysis": "a"}',
            C('"ls"'),
            C('["ls"]'),
            C('[{"duration": 1}]'),
            C('[{"keystrokes": 1}]'),
            C('[{"keystrokes": "ls"}, {"keystrokes": "x"}]'),
            C('[{"keystrokes": "ls", "duration": "2"}]'),
            C('[{"keystrokes": "ls", "duration": true}]'),
            C('[{"keystrokes": "ls", "duration": 1, "why": 1}]'),
            # a field named like the error feedback's marker: Harbor's loop then takes the
            # warnings for an error (the marker is the profile's, see the test)
            C('[{"keystrokes": "ls", "duration": 1, "@MARKER@": 1}]'),
            C('[{"duration": 1}], "task_complete": true'),
            C('[], "task_complete": "yes"'),
            C('[], "task_complete": "no"'),
            C('[], "task_complete": 5'),
            C('[], "task_complete": null'),
            '{"analysis": "' + "x" * 300 + '", "plan": oops}',
            '{"analysis": "a\\"}", "plan": "p", "commands": []}',
            "<think>\nLet me think.\n</think>\n\n" + ok,
            "first " + ok + "\nsecond " + ok,
            '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1},',
            '{"a": {"b": 1}} {"analysis": "a", "plan": "p", "commands": []}',
        ]
    ok = _xml([("ls\n", 0.1)])
    head = "<analysis>a</analysis>\n<plan>p</plan>\n"
    r = lambda inner: f"<response>\n{inner}\n</response>"  # noqa: E731
    k = '<keystrokes duration="1">ls\n</keystrokes>\n'
    cmds = f"<commands>\n{k}</commands>"
    return [
        ok,
        _xml([("ls\n", 0.1)], complete=True),
        "before " + ok + " after",
        ok + "\n" + ok,
        ok[:-12],
        "no xml",
        "",
        r(head),
        r(head + "<commands></commands>"),
        r(head + "<commands/>\n<task_complete>true</task_complete>"),
        r(head + "<commands></commands>\n<task_complete>TRUE</task_complete>"),
        r("<plan>p</plan>\n<analysis>a</analysis>\n" + cmds),
        r(head + "<commands>\n<keystrokes duration=1>ls\n</keystrokes>\n</commands>"),
        r(head + "<commands>\n<keystrokes duration='1'>ls\n</keystrokes>\n</commands>"),
        r(head + '<commands>\n<keystrokes duration="x" w="2">ls\n</keystrokes>\n</commands>'),
        r(
            head
            + "<commands>\n<keystrokes>ls</keystrokes>\n<keystrokes>pwd\n</keystrokes>\n</commands>"
        ),
        r(
            head
            + '<commands>\n<keystrokes duration="1">cat a &lt; b &amp;&amp; echo\\r\\n\n'
            + "</keystrokes>\n</commands>"
        ),
        r(head + cmds + "\n<commands></commands>\n<extra/>"),
        r(head + "<plan>again</plan>\n" + cmds),
        r(
            head
            + '<!-- note -->\n<commands>\n<keystrokes duration="0.5">C-c</keystrokes>\n</commands>'
        ),
        "<response>\n"
        + head
        + '<commands>\n<keystrokes duration="1">ls\n</keystrokes>\n</commands>',
        "<think>ok</think>\n" + ok,
    ]


@pytest.mark.parametrize("variant", ["json", "xml"])
def test_parsers_and_output_cap_match_harbor(
    variant: str, harbor: str, harbor_profiles: dict[str, Path], tmp_path: Path
) -> None:
    harness = build_harness("terminus-2", harbor_profiles[variant])
    replies = [r.replace("@MARKER@", harness.error_marker) for r in _corpus(variant)]
    outputs = [
        "short",
        "x" * 10_000,
        "x" * 10_001,
        "é" * 6000,
        "a" + "€" * 4000 + "b" * 20,
        "\n".join(str(i) for i in range(5000)),
    ]
    theirs = _probe(
        harbor, "check", {"variant": variant, "replies": replies, "outputs": outputs}, tmp_path
    )
    for reply, expected in zip(replies, theirs["parsed"], strict=True):
        r = harness.parser.parse_response(reply)
        got = {
            "error": r.error,
            "warning": r.warning,
            "complete": bool(r.is_task_complete),
            "commands": [[c.keystrokes, c.duration] for c in r.commands],
        }
        assert got == expected, reply
        assert harness.feedback(r) is not None
    assert [harness.limit(o) for o in outputs] == theirs["limited"]


def test_import_writes_loadable_profiles(harbor_profiles: dict[str, Path]) -> None:
    for variant, path in harbor_profiles.items():
        profile = load_profile(path)
        assert (profile.harness, profile.variant) == ("terminus-2", variant)
        assert "harbor 0.25.0" in profile.source
        assert profile.behaviour["output_cap_bytes"] == 10_000
        harness = build_harness(None, path)
        assert harness.name == "terminus-2"
        assert harness.summarize_below_free_tokens() == 8000
        # No system message; the first prompt holds the instruction and the initial screen.
        (first,) = harness.first_messages("Do the thing.")
        assert first["role"] == "user" and "Do the thing." in first["content"]
        assert PROMPT + "\n" * HEIGHT in first["content"]
    # The hash covers the content, not the file's layout.
    a, b = (load_profile(p).hash for p in harbor_profiles.values())
    assert a != b


def test_xml_salvage_ends_the_episode_as_in_harbor(
    harbor: str, harbor_profiles: dict[str, Path], tmp_path: Path
) -> None:
    """A cut XML reply that still holds a whole response: Harbor salvages it and its agent then
    fails on the salvaged text; our harness ends the episode there."""
    cut = _xml([("ls\n", 0.1)]) + "\nand the reply went o"
    pane = Pane()
    sc = {
        "variant": "xml",
        "instruction": "Do it.",
        "max_tokens": 64,
        "initial": pane.state(),
        "turns": [{"reply": cut, "truncated": True}, {"reply": _xml([]), "truncated": False}],
        "sends": [],
    }
    theirs = _probe(harbor, "episode", sc, tmp_path)
    assert theirs["failure"] and theirs["failure"].startswith("AttributeError")
    assert len(theirs["prompts"]) == 1 and theirs["sent"] == []
    harness = build_harness("terminus-2", harbor_profiles["xml"])
    ours, sent = asyncio.run(_ours(harness, sc))
    assert ours == theirs["prompts"] and sent == []


# ----------------------------------------------------------------------------- summarization


def _long_reply(i: int, complete: bool = False) -> str:
    body = {
        "analysis": f"Step {i}. " + "The output shows the files are as expected. " * 25,
        "plan": f"Run command {i}.",
        "commands": [] if complete else [{"keystrokes": f"echo step{i}\n", "duration": 0.1}],
    }
    if complete:
        body["task_complete"] = True
    return json.dumps(body, indent=2)


def summarizing_scenario(kinds: list[str], limit: int, threshold: int, subs: list) -> dict:
    """An episode of long replies (`kinds`: "turn", "full" for a turn the engine refuses, or
    "done"), Harbor's token count being the characters of the contents, as in the probe."""
    pane = Pane()
    initial = pane.state()
    turns: list[dict[str, Any]] = []
    sends: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if kind == "full":
            turns.append({"reply": "", "truncated": False, "context_full": True})
            continue
        turns.append({"reply": _long_reply(i, complete=kind == "done"), "truncated": False})
        if kind == "turn":
            sends.append({"keys": f"echo step{i}\n", **pane.run(f"echo step{i}", f"step{i}")})
    return {
        "variant": "json",
        "instruction": "Write /app/hello.py that prints hello.\n",
        "max_tokens": 4096,
        "initial": initial,
        "turns": turns,
        "sends": sends,
        "summarize": {"limit": limit, "threshold": threshold, "sub_replies": subs},
    }


def _chars(messages: list[dict[str, Any]]) -> int:
    return sum(len(m["content"]) for m in messages)


async def _ours_summarizing(harness: Terminus2Harness, sc: dict[str, Any]) -> dict[str, Any]:
    """Our harness over the same script, its summarization run as the agent loop runs it
    (service/episode.py, service/episode_summary.py), at the level of messages."""
    conf = sc["summarize"]
    profile = harness.profile
    summarizer = Summarizer(
        replace(
            profile,
            behaviour={**profile.behaviour, "summarize_below_free_tokens": conf["threshold"]},
        )
    )
    limit, subs, calls = conf["limit"], list(conf["sub_replies"]), []
    terminal = ScriptedTerminal(sc["sends"], sc["initial"])
    session = harness.session(max_tokens=sc["max_tokens"])
    prompt = harness.first_prompt(sc["instruction"], await session.output.get(terminal))
    chat: list[dict[str, Any]] = []

    async def model(call: Call) -> str:
        calls.append({"kind": "sub", "messages": call.messages})
        reply = subs.pop(0)
        if reply is None:
            raise CallFailed("the engine's context is full")
        return reply

    turns = iter(sc["turns"])
    for t in turns:
        if summarizer.proactive_due(limit - _chars(chat)):
            try:
                handoff = await summarizer.full(model, chat, sc["instruction"], terminal)
                chat, prompt = handoff.history, handoff.prompt
            except CallFailed:
                pass
        calls.append({"kind": "main", "messages": [*chat, {"role": "user", "content": prompt}]})
        if t.get("context_full"):
            free = [limit - _chars(chat[:k]) for k in range(len(chat) + 1)]
            kept = summarizer.unwind(len(chat), free.__getitem__)
            handoff = await summarizer.passive(model, chat[:kept], sc["instruction"], terminal)
            chat, prompt = handoff.history, handoff.prompt
            calls.append({"kind": "main", "messages": [*chat, {"role": "user", "content": prompt}]})
            t = next(turns)
        chat += [{"role": "user", "content": prompt}, {"role": "assistant", "content": t["reply"]}]
        step = await session.step(t["reply"], terminal, truncated=t["truncated"])
        if step.done:
            break
        prompt = step.messages[0]["content"]
    return {"calls": calls, "sent": terminal.sent}


@pytest.mark.parametrize(
    "case",
    [
        # Proactive: over the threshold before turn 6; summarized; then the same again with the
        # summary call failing (Harbor goes on with the turn as it was).
        ("proactive", ["turn"] * 7 + ["done", "done"], 12_000, 4_000),
        # Passive: refused turns unwind the history; then the full summary, then the short one
        # (the full one failing), then the fallback (both failing).
        ("passive", ["turn"] * 4 + ["full", "turn", "turn", "full", "turn", "turn", "full",
                                    "done", "done"], 9_000, 0),
    ],
    ids=lambda c: c[0],
)  # fmt: skip
def test_summarization_matches_harbor(
    case: tuple, harbor: str, harbor_profiles: dict[str, Path], tmp_path: Path
) -> None:
    name, kinds, limit, threshold = case
    if name == "proactive":
        subs = ["SUMMARY one.", "QUESTIONS one?", "ANSWERS one."] + [None] * 6
    else:
        subs = ["SUMMARY two.", "QUESTIONS two?", "ANSWERS two.", None, "SHORT three.",
                None, None]  # fmt: skip
    harness = build_harness("terminus-2", harbor_profiles["json"])
    sc = summarizing_scenario(kinds, limit, threshold, subs)
    theirs = _probe(harbor, "episode", sc, tmp_path)
    assert theirs["failure"] is None, theirs["failure"]
    ours = asyncio.run(_ours_summarizing(harness, sc))
    (tmp_path / "ours.json").write_text(json.dumps(ours["calls"], indent=1))
    (tmp_path / "harbor.json").write_text(json.dumps(theirs["calls"], indent=1))
    assert ours["sent"] == theirs["sent"]
    sub_calls = [c for c in theirs["calls"] if c["kind"] == "sub"]
    assert len(sub_calls) >= 3, "the scenario never summarized"
    assert len(ours["calls"]) == len(theirs["calls"])
    for i, (a, b) in enumerate(zip(ours["calls"], theirs["calls"], strict=True)):
        assert a == b, f"call {i} ({b['kind']}) differs"
