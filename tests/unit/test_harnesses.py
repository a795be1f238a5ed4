"""Agent harnesses without Harbor: profiles (loading, checking, hashing, writing), the default
harness (today's texts, unchanged), the terminus-2 harness's behaviour on a synthetic profile
(texts of our own; parity with Harbor itself is tests/e2e/test_harbor_parity.py), the tools
harness's tool-call parsing, and the stand-in answering every harness in its own format through a
whole scripted episode."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from sandboxes.task import Task, TaskConfig
from service.agent import prompt
from service.agent.harnesses import ProfileError, build_harness, load_profile
from service.agent.harnesses.base import Profile, dump_profile
from service.agent.harnesses.terminus2 import required_texts
from service.agent.harnesses.terminus_summary import SUMMARY_TEXTS
from service.agent.harnesses.tools import ToolCallError, parse_tool_calls
from standin.behaviour import BehaviourSettings, ScriptedAgent
from standin.chat_template import parse_transcript, render
from standin.harness_formats import detect_format


def synthetic_terminus_profile(variant: str) -> dict[str, Any]:
    """A terminus-2 profile whose every text is our own: the key and its placeholders."""
    texts: dict[str, Any] = {"parser": {}}
    for key, fields in required_texts(variant).items():
        body = f"<{key}>" + "".join(f"[{f}={{{f}}}]" for f in sorted(fields))
        if key == "first_prompt" and variant == "xml":
            body += " Reply as <response> with <keystrokes duration=...> elements."
        if key == "feedback_error":
            body = "PROBLEM! {error}"
        if key == "feedback_error_warnings":
            body = "PROBLEM! {error}\nNOTE! {warnings}"
        if key == "feedback_warnings":
            body = "NOTE! {warnings}"
        if key == "parser.order_separator":
            body = " > "
        if key.startswith("parser."):
            texts["parser"][key.removeprefix("parser.")] = body
        else:
            texts[key] = body
    texts["summary"] = {
        key.removeprefix("summary."): f"<{key}>" + "".join(f"[{f}={{{f}}}]" for f in sorted(v))
        for key, v in SUMMARY_TEXTS.items()
    }
    return {
        "profile": {"harness": "terminus-2", "variant": variant, "source": "synthetic"},
        "behaviour": {
            "output_cap_bytes": 100,
            "pane_width": 80,
            "pane_height": 3,
            "summarize": True,
            "summarize_below_free_tokens": 8000,
            "unwind_to_free_tokens": 4000,
            "summary_screen_chars": 1000,
        },
        "texts": texts,
    }


def write_profile(tmp_path: Path, data: dict[str, Any], name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(dump_profile(data, "test profile"))
    return path


# ----------------------------------------------------------------------------- profiles


def test_default_profile_keeps_todays_texts() -> None:
    h = build_harness("default")
    system, user = h.first_messages("  Do it.\n")
    assert system == {"role": "system", "content": prompt.SYSTEM_PROMPT}
    assert user["content"] == "Task:\nDo it.\n\nCurrent terminal state:\nroot@sandbox:/app# "
    assert '"task_complete": false' in prompt.SYSTEM_PROMPT and "{{" not in prompt.SYSTEM_PROMPT
    assert prompt.observation_message("out") == "New terminal output:\nout"
    assert prompt.error_message("bad").startswith("Your previous reply could not be used: bad\n")
    assert h.describe() == {"harness": "default", "profile_hash": h.profile.hash}


def test_profile_hash_ignores_layout_and_sees_content(tmp_path: Path) -> None:
    data = synthetic_terminus_profile("json")
    a = load_profile(write_profile(tmp_path, data, "a.toml"))
    path = tmp_path / "b.toml"
    path.write_text("# another comment\n\n" + dump_profile(data).replace(" = ", "   =   "))
    assert load_profile(path).hash == a.hash
    data["texts"]["confirmation"] += " again"
    assert load_profile(write_profile(tmp_path, data, "c.toml")).hash != a.hash


@pytest.mark.parametrize(
    "text",
    ["a\nb'''c", "ends with a quote'", "tab\tand \x7f del", "\r\nwindows", "{x}", "é → ü", ""],
)
def test_profile_writer_keeps_every_text_exact(text: str) -> None:
    data = {"profile": {"harness": "default"}, "texts": {"t": text}}
    dumped = dump_profile(data)
    assert Profile.from_data(__import__("tomllib").loads(dumped)).texts["t"] == text


def test_profiles_are_checked(tmp_path: Path) -> None:
    data = synthetic_terminus_profile("json")
    data["texts"]["confirmation"] = "shows {terminal_output} and {secret}"
    with pytest.raises(ProfileError, match="unknown placeholders.*secret"):
        build_harness("terminus-2", write_profile(tmp_path, data))
    data = synthetic_terminus_profile("xml")
    del data["texts"]["parser"]["crlf"]
    with pytest.raises(ProfileError, match="missing text 'parser.crlf'"):
        build_harness("terminus-2", write_profile(tmp_path, data))
    with pytest.raises(ProfileError, match="needs a profile.*import-harbor"):
        build_harness("terminus-2")
    with pytest.raises(ProfileError, match="not one for 'tools'"):
        build_harness("tools", write_profile(tmp_path, synthetic_terminus_profile("json")))
    with pytest.raises(ProfileError, match="unknown harness"):
        build_harness("nope")
    (tmp_path / "bad.toml").write_text("[profile\n")
    with pytest.raises(ProfileError, match="not a valid TOML"):
        load_profile(tmp_path / "bad.toml")


# ----------------------------------------------------------------------------- terminus-2


class PaneTerminal:
    """A pane whose history grows by what each command prints."""

    def __init__(self, outputs: dict[str, str] | None = None) -> None:
        self.lines = ["$"]
        self.outputs = outputs or {}
        self.typed: list[tuple[str, float]] = []

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        self.typed.append((keystrokes, wait_s))
        out = self.outputs.get(keystrokes, "")
        self.lines[-1] += " " + keystrokes.strip()
        self.lines += [*out.splitlines(), "$"]
        return out

    async def capture(self, *, entire: bool) -> str | None:
        return "\n".join(self.lines if entire else self.lines[-3:]) + "\n"

    async def resize(self, width: int, height: int) -> None:
        pass


def test_terminus_confirmation_feedback_and_caps(tmp_path: Path) -> None:
    h = build_harness("terminus-2", write_profile(tmp_path, synthetic_terminus_profile("json")))
    (first,) = h.first_messages("Task text")
    assert first["role"] == "user"
    assert first["content"].startswith("<first_prompt>[instruction=Task text]")
    term = PaneTerminal({"ls\n": "a.txt\nb.txt", "big\n": "x" * 300})

    async def run() -> list[Any]:
        s = h.session(max_tokens=77)
        await s.start(term)
        ok = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 99}]}
        steps = [
            await s.step(json.dumps(ok), term),
            await s.step("no json", term),
            await s.step("hi " + json.dumps({**ok, "commands": [{"keystrokes": "big\n"}]}), term),
            await s.step(json.dumps({**ok, "task_complete": True}), term),
            await s.step('{"analysis": "cut', term, truncated=True),
            await s.step(json.dumps({**ok, "commands": [], "task_complete": True}), term),
        ]
        return steps

    steps = asyncio.run(run())
    texts = [st.messages[0]["content"] if st.messages else None for st in steps]
    assert term.typed[0] == ("", 0.0)  # start: the session exists before the first look
    assert term.typed[1] == ("ls\n", 60)  # capped as terminus-2 caps it
    assert texts[0].startswith("<new_output>[output=") and "a.txt\nb.txt" in texts[0]
    assert texts[1].startswith("<parse_error>[feedback=PROBLEM! ")  # no keys typed
    assert [k for k, _ in term.typed] == ["", "ls\n", "big\n", "ls\n"]
    assert texts[2].startswith("<warnings>[feedback=NOTE! - ") and "<output_limited>" in texts[2]
    assert texts[3].startswith("<confirmation>[terminal_output=")
    assert texts[4].startswith("<output_length_warnings>[max_tokens=77]")
    assert steps[5].done and steps[5].messages == []


def test_terminus_xml_salvage_ends_the_episode(tmp_path: Path) -> None:
    h = build_harness("terminus-2", write_profile(tmp_path, synthetic_terminus_profile("xml")))
    cut = (
        '<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration="1">'
        "ls\n</keystrokes></commands></response> and then the reply went o"
    )
    step = asyncio.run(h.session(max_tokens=10).step(cut, PaneTerminal(), truncated=True))
    assert step.done and "salvage" in (step.note or "")
    assert h.summarize_below_free_tokens() == 8000


# ----------------------------------------------------------------------------- tools


def test_tool_calls_are_parsed_or_refused() -> None:
    errors = build_harness("tools").errors
    call = '<tool_call>\n{"name": "terminal", "arguments": {"keystrokes": "ls\\n"}}\n</tool_call>'
    (c,) = parse_tool_calls("<think>x</think>\n" + call, errors)
    assert (c.keystrokes, c.duration) == ("ls\n", 1.0)
    as_string = (
        '<tool_call>{"name": "terminal", '
        '"arguments": "{\\"keystrokes\\": \\"x\\", "duration\\": 2}"}</tool_call>'
    )
    assert parse_tool_calls(call + call, errors)[1].keystrokes == "ls\n"
    assert parse_tool_calls("all done", errors) == []
    for bad, needle in [
        ("<tool_call>{oops}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "python", "arguments": {}}</tool_call>', 'no tool named "python"'),
        ('<tool_call>{"name": "terminal", "arguments": {"duration": 1}}</tool_call>', "keystrokes"),
        ("<tool_call>{", "not closed"),
        (as_string, "not valid JSON"),
    ]:
        with pytest.raises(ToolCallError, match=needle):
            parse_tool_calls(bad, errors)


# ----------------------------------------------------------------------------- the stand-in

TASK = Task(
    id="hello",
    path="mem://hello",
    instruction="Create /app/solution.py defining `hello()` that returns 'hi'.",
    config=TaskConfig(),
    environment_files={"Dockerfile": b"FROM rollouts-base:bookworm\n"},
    test_files={"test.sh": b"#!/bin/bash\n"},
    solution_files={
        "solve.sh": b"#!/bin/bash\ncat > /app/solution.py <<'EOF'\n"
        b"def hello():\n    return 'hi'\nEOF\n"
    },
)


@pytest.mark.parametrize("harness", ["default", "tools", "terminus-json", "terminus-xml"])
@pytest.mark.parametrize("p_malformed", [0.0, 0.3])
def test_standin_answers_every_harness_in_its_format(
    harness: str, p_malformed: float, tmp_path: Path
) -> None:
    if harness.startswith("terminus"):
        variant = harness.split("-")[1]
        h = build_harness(
            "terminus-2", write_profile(tmp_path, synthetic_terminus_profile(variant))
        )
    else:
        h = build_harness(harness)
    agent = ScriptedAgent([TASK], BehaviourSettings(p_malformed=p_malformed, seed=3))
    rng = random.Random(5)
    messages = h.first_messages(TASK.instruction)
    term = PaneTerminal()

    async def episode() -> int:
        s = h.session(max_tokens=4096)
        await s.start(term)
        for turn in range(40):
            text = render(messages, add_generation_prompt=True, tools=h.tools())
            if turn == 0:
                expected = {"terminus-json": "terminus-json", "default": "json"}.get(
                    harness, harness
                )
                assert detect_format(parse_transcript(text)) == expected
            reply = agent.reply(text, seed=1, index=0, rng=rng, max_tokens=4096)
            messages.append({"role": "assistant", "content": reply})
            step = await s.step(reply, term)
            if step.done:
                return turn + 1
            messages.extend(step.messages)
        raise AssertionError("the episode did not end")

    turns = asyncio.run(episode())
    typed = "".join(k for k, _ in term.typed)
    assert "def hello():\n    return 'hi'\n" in typed  # the oracle was typed once
    assert typed.count("def hello()") == 1
    assert "import solution" in typed
    # The solution, its check, then the end (a confirmation or the tools' own end call); a
    # malformed reply may cost a turn more.
    assert turns == 3 if p_malformed == 0 else turns >= 3


# ----------------------------------------------------------------------------- requests


def test_a_request_names_its_harness(tmp_path: Path) -> None:
    """`"agent": {"harness": NAME}` in POST /v1/rollouts: a harness the service has is taken
    (and reaches the runner's sample specs); one it lacks is refused, naming the field."""
    from service.agent.harnesses import build_harnesses
    from tests.unit.test_api import GatedRunner, Server, client, make_settings

    runner = GatedRunner()
    runner.harnesses = build_harnesses()  # type: ignore[attr-defined]
    seen: list[str | None] = []
    original = runner.run_group

    async def run_group(task, samples, on_trajectory, on_episode_end=None, on_start=None):  # type: ignore[no-untyped-def]
        seen.extend(s.agent.harness for s in samples)
        await original(task, samples, on_trajectory, on_episode_end, on_start)

    runner.run_group = run_group  # type: ignore[method-assign]
    with Server(make_settings(tmp_path), runner) as server, client(server) as c:
        body = {"tasks": {"path": "bundled", "limit": 1}, "n_samples": 4}
        r = c.post("/v1/rollouts", json={**body, "agent": {"harness": "terminus-2"}})
        assert r.status_code == 422, r.text
        (detail,) = r.json()["detail"]
        assert detail["loc"] == ["body", "agent", "harness"] and "--agent-profile" in detail["msg"]
        r = c.post("/v1/rollouts", json={**body, "agent": {"harness": "Bad Name!"}})
        assert r.status_code == 422
        r = c.post("/v1/rollouts", json={**body, "agent": {"harness": "tools"}})
        assert r.status_code == 202, r.text
        runner.gate.set()
        end = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < end:
            time.sleep(0.05)
    # Sample 1 is masked by the runner, so it may have been run again: still with "tools".
    assert len(seen) >= 4 and set(seen) == {"tools"}
