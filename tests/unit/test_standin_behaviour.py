"""The stand-in's scripted agent on tasks the plain script got wrong: an oracle solve.sh too long
for one reply is written in parts over several turns, each reply within the request's budget;
a wrong answer defines the function the instruction asks for, not the first helper."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandboxes.task import Task, TaskConfig
from standin.behaviour import (
    REPLY_SHARE,
    SOLVE_FILE,
    BehaviourSettings,
    ScriptedAgent,
    _asked_function,
)
from standin.chat_template import render
from standin.engine import StubSettings
from standin.server import build_app

SYSTEM = "You are a terminal agent. Reply with one JSON object."
MAX_MODEL_LEN = 32768


def long_source() -> str:
    """~30 KB of Python with helpers before the asked-for function and one 2,500-character
    line (longer than a part, and than a terminal line in canonical mode)."""
    rng = random.Random(7)
    out = ["import math", "", ""]
    i = 0
    while sum(len(x) + 1 for x in out) < 29_000:
        a, b = rng.randrange(1, 99), rng.randrange(1, 99)
        out += [
            f"def _helper_{i}(values: list[int], scale: int = {a}) -> list[int]:",
            f'    """Scale the values by {a} and shift them by {b}."""',
            "    result = []",
            "    for value in values:",
            f"        if value % {b} == 0:",
            f"            result.append(value * scale + {b})",
            "        else:",
            "            result.append(math.gcd(value, scale))",
            "    return result",
            "",
            "",
        ]
        i += 1
    out.append("BLOB = " + repr("".join(rng.choice("abcdefgh ") for _ in range(2500)) + "$`'\\"))
    out += ["", "", "def summarise(values):", "    return sum(_helper_0(values))", ""]
    return "\n".join(out)


LONG_SOURCE = long_source()
LONG_TASK = Task(
    id="long-oracle",
    path="mem://long-oracle",
    instruction="Create /app/solution.py defining `summarise(values)` (see the spec).",
    config=TaskConfig(),
    environment_files={"Dockerfile": b"FROM rollouts-base:bookworm\n"},
    test_files={"test.sh": b"#!/bin/bash\n"},
    solution_files={
        "solve.sh": (
            "#!/bin/bash\ncat > /app/solution.py <<'EOF'\n" + LONG_SOURCE + "EOF\n"
        ).encode()
    },
)


async def tokenize(client: httpx.AsyncClient, **body: Any) -> list[int]:
    r = await client.post("/tokenize", json=body)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


async def run_episode(max_tokens: int, max_turns: int = 80) -> list[dict]:
    """A whole scripted episode against the stand-in server, token-in/token-out like the
    service's episode runner: the replies, each checked to end by itself within its budget."""
    settings = StubSettings(p_malformed=0.0, max_model_len=MAX_MODEL_LEN)
    app = build_app(settings, tasks=[LONG_TASK])
    transport = httpx.ASGITransport(app=app)
    replies: list[dict] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://stub") as client:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": LONG_TASK.instruction},
        ]
        seq = await tokenize(client, messages=messages)
        for turn in range(max_turns):
            budget = min(max_tokens, MAX_MODEL_LEN - len(seq))
            body = {"prompt": seq, "max_tokens": budget, "seed": turn, "return_token_ids": True}
            r = await client.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["finish_reason"] == "stop", f"turn {turn} was cut at {budget} tokens"
            assert len(choice["token_ids"]) <= REPLY_SHARE * budget
            reply = json.loads(choice["text"])
            replies.append(reply)
            if reply["task_complete"] and len(replies) > 1 and replies[-2]["task_complete"]:
                return replies
            note = "Are you sure?" if reply["task_complete"] else "root@sandbox:/app# "
            seq += choice["token_ids"]
            seq += await tokenize(
                client, prompt=f"\n<|im_start|>user\n{note}<|im_end|>\n<|im_start|>assistant\n"
            )
    raise AssertionError(f"no confirmed end within {max_turns} turns")


def keystrokes(reply: dict) -> str:
    return "".join(c["keystrokes"] for c in reply["commands"])


@pytest.mark.parametrize("max_tokens", [4096, 1536])
async def test_long_solution_is_written_in_parts_within_the_budget(
    tmp_path: Path, max_tokens: int
) -> None:
    assert len(LONG_TASK.solution_files["solve.sh"]) > 29_000
    replies = await run_episode(max_tokens)
    parts = [r for r in replies if SOLVE_FILE in keystrokes(r) and "cat " in keystrokes(r)]
    run = [i for i, r in enumerate(replies) if f"bash {SOLVE_FILE}\n" in keystrokes(r)]
    assert len(parts) >= 5 and len(run) == 1
    assert replies[: len(parts)] == parts  # all parts first, then the run
    assert run[0] == len(parts)
    assert [r["task_complete"] for r in replies[run[0] :]] == [False, True, True]
    # What the keystrokes do in bash: the parts rebuild solve.sh, which writes the solution.
    typed = "".join(keystrokes(r) for r in replies[: run[0] + 1])
    typed = typed.replace(SOLVE_FILE, str(tmp_path / "solve.sh"))
    typed = typed.replace("/app/", f"{tmp_path}/app/")
    (tmp_path / "app").mkdir()
    subprocess.run(["bash"], input=typed.encode(), cwd=tmp_path, check=True, capture_output=True)
    solve = LONG_TASK.solution_files["solve.sh"].decode().replace("/app/", f"{tmp_path}/app/")
    assert (tmp_path / "solve.sh").read_text() == solve
    assert (tmp_path / "app" / "solution.py").read_text() == LONG_SOURCE


def test_a_malformed_part_is_written_again() -> None:
    agent = ScriptedAgent([LONG_TASK], BehaviourSettings(p_malformed=0.0))
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": LONG_TASK.instruction},
    ]

    def reply(*extra: dict[str, str]) -> str:
        prompt = render([*messages, *extra], add_generation_prompt=True)
        return agent.reply(prompt, seed=1, index=0, rng=random.Random(0), max_tokens=4096)

    first = reply()
    obs = {"role": "user", "content": "root@sandbox:/app# "}
    second = reply({"role": "assistant", "content": first}, obs)
    assert keystrokes(json.loads(second)) != keystrokes(json.loads(first))
    bad = {"role": "assistant", "content": second[:100]}
    err = {"role": "user", "content": "Your previous reply could not be used"}
    again = reply({"role": "assistant", "content": first}, obs, bad, err)
    assert again == second


SHORT_TASK = Task(
    id="short",
    path="mem://short",
    instruction="Create /app/solution.py defining `double(x)`.",
    config=TaskConfig(),
    environment_files={},
    test_files={"test.sh": b"#!/bin/bash\n"},
    solution_files={"solve.sh": b"cat > /app/solution.py <<'EOF'\ndef double(x):\n"},
)


def test_short_solution_is_still_one_reply() -> None:
    task = SHORT_TASK
    agent = ScriptedAgent([task], BehaviourSettings(p_malformed=0.0))
    prompt = render([{"role": "user", "content": task.instruction}], add_generation_prompt=True)
    text = agent.reply(prompt, seed=1, index=0, rng=random.Random(0), max_tokens=4096)
    assert keystrokes(json.loads(text)).startswith("bash <<'")


def test_length_jitter_makes_samples_differ_in_length_not_in_what_they_type() -> None:
    task = SHORT_TASK
    prompt = render([{"role": "user", "content": task.instruction}], add_generation_prompt=True)

    def replies(jitter: int) -> list[dict]:
        agent = ScriptedAgent([task], BehaviourSettings(p_malformed=0.0, length_jitter=jitter))
        return [
            json.loads(agent.reply(prompt, seed=1, index=i, rng=random.Random(i), max_tokens=4096))
            for i in range(8)
        ]

    plain, jittered = replies(0), replies(200)
    assert len({json.dumps(r) for r in plain}) == 1  # without jitter the samples are alike
    assert len({len(r["analysis"]) for r in jittered}) > 4  # with it their lengths differ
    assert {keystrokes(r) for r in jittered} == {keystrokes(plain[0])}  # and they type the same
    assert jittered == replies(200)  # drawn from the seed: the same again


HELPER_FIRST = b"""#!/bin/bash
cat > /app/solution.py <<'EOF'
import re


def _normalise(text):
    return text.strip().lower()


def words(text):
    return re.split(r"[_\\s-]+", _normalise(text))


def to_camel(text, *, upper_first: bool = False):
    head, *rest = words(text)
    head = head.title() if upper_first else head
    return head + "".join(w.title() for w in rest)
EOF
"""
HELPER_TASK = Task(
    id="to-camel",
    path="mem://to-camel",
    instruction=(
        "Create /app/solution.py defining `to_camel(text, *, upper_first=False)`, which joins "
        "the words of `text` in camelCase. Private helpers are allowed."
    ),
    config=TaskConfig(),
    environment_files={},
    test_files={"test.sh": b"#!/bin/bash\n"},
    solution_files={"solve.sh": HELPER_FIRST},
)


async def test_wrong_answer_defines_the_function_the_instruction_names() -> None:
    app = build_app(StubSettings(p_correct=0.0, p_malformed=0.0), tasks=[HELPER_TASK])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://stub") as client:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": HELPER_TASK.instruction},
        ]
        prompt = await tokenize(client, messages=messages)
        body = {"prompt": prompt, "max_tokens": 4096, "seed": 1}
        r = await client.post("/v1/completions", json=body)
    reply = json.loads(r.json()["choices"][0]["text"])
    keys = keystrokes(reply)
    assert "def to_camel(text, *, upper_first: bool = False):\n    return None\n" in keys
    assert "def words" not in keys and "def _normalise" not in keys
    assert "to_camel" in reply["analysis"]


@pytest.mark.parametrize(
    ("solve", "instruction", "expected"),
    [
        # Named by a call beats a helper that is only a word of the text.
        ("def split(s):\n    pass\ndef fn(s):\n    pass\n", "Split words: `fn(s)`.", "fn"),
        # Named in code quotes, without a call.
        ("def _h(x):\n    pass\ndef run(x):\n    pass\n", "Implement `run` in solution.py.", "run"),
        # Not named at all: the last public top-level def (helpers come first).
        (
            "def _h(x):\n    pass\ndef helper(x):\n    pass\ndef main(x):\n    def inner():\n"
            "        pass\n",
            "Make the tests pass.",
            "main",
        ),
        # A method named in the instruction, defined after module-level helpers.
        (
            "def util(a):\n    pass\nclass Box:\n    def area(self, scale=(1, 1)):\n        pass\n",
            "Implement the method `Box.area(self, scale)`.",
            "area",
        ),
        # No def in solve.sh (it patches a file): the call the instruction shows.
        ("sed -i 's/a/b/' /app/x.py\n", "Fix `parse_line(text)` in /app/x.py.", "parse_line"),
        ("echo hi\n", "Do it.", "solve"),
    ],
)
def test_asked_function(solve: str, instruction: str, expected: str) -> None:
    assert _asked_function(solve, instruction)[0] == expected


def test_asked_function_keeps_the_whole_signature() -> None:
    solve = "def fn(\n    a: tuple[int, int] = (1, 2),\n    b=max(3, 4),\n) -> int:\n    pass\n"
    name, args = _asked_function(solve, "Write `fn`.")
    assert name == "fn" and args == "\n    a: tuple[int, int] = (1, 2),\n    b=max(3, 4),\n"


def test_shared_decode_queues_requests_behind_each_other() -> None:
    """With --shared-decode the speed is the engine's total (a GPU serving a batch): a request
    waits for what was queued before it. Without, each request decodes on its own."""
    from standin.engine import StubEngine

    shared = StubEngine(StubSettings(tokens_per_s=100.0, shared_decode=True), tasks=[])
    first = shared._decode_s(longest=50, total=100)  # n=2 choices of 50 tokens
    second = shared._decode_s(longest=50, total=100)
    assert first == pytest.approx(1.0, abs=0.05)
    assert second == pytest.approx(2.0, abs=0.05)  # behind the first one's 100 tokens
    alone = StubEngine(StubSettings(tokens_per_s=100.0), tasks=[])
    assert alone._decode_s(longest=50, total=100) == alone._decode_s(longest=50, total=100) == 0.5
