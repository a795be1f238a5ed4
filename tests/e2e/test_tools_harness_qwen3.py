"""The tools harness against the real Qwen3 chat template (../shared/qwen3-tokenizer, rendered by
transformers in the vLLM venv of tests/e2e/real_vllm.py).

What the agent loop builds by appending (the first prompt rendered with the tool definitions,
then the model's generated tool calls, then each observation as a delta of the template's own
rendering: service/agent/tokens.py) must be exactly what the template renders for the whole
conversation, where the assistant turn carries those tool calls and the tool results are `tool`
messages. Checked on text, with the same TemplateFrame the service uses on token ids.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from service.agent.harnesses import build_harness
from service.agent.harnesses.tools import parse_tool_calls
from service.agent.tokens import TemplateFrame, base_renderings, observation_messages
from tests.ci import unavailable
from tests.e2e.real_vllm import TOKENIZER as QWEN3  # honours ROLLOUTS_QWEN3_TOKENIZER
from tests.e2e.real_vllm import vllm_python

RENDER = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = []
for case in json.load(sys.stdin):
    out.append(tok.apply_chat_template(
        case["messages"], tools=case["tools"], add_generation_prompt=case["gen"],
        tokenize=False, **case["kwargs"]))
print(json.dumps(out))
"""


def render_all(cases: list[dict[str, Any]]) -> list[str]:
    if not (QWEN3 / "tokenizer_config.json").exists():
        unavailable(f"no Qwen3 tokenizer files at {QWEN3} (ROLLOUTS_QWEN3_TOKENIZER)")
    python = vllm_python()
    r = subprocess.run(
        [str(python), "-c", RENDER, str(QWEN3)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


class Terminal:
    def __init__(self, outputs: list[str]) -> None:
        self.outputs = list(outputs)

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        return self.outputs.pop(0)

    async def capture(self, *, entire: bool) -> str | None:
        return None

    async def resize(self, width: int, height: int) -> None:
        pass


@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}])
def test_appended_tool_messages_equal_the_qwen3_rendering(kwargs: dict[str, Any]) -> None:
    h = build_harness("tools")
    tools = h.tools()
    first = h.first_messages("Create /app/hello.py.")
    calls = [
        {"keystrokes": "ls -la\n", "duration": 0.5},
        {"keystrokes": "cat > hello.py <<'EOF'\nprint(\"héllo\")\nEOF\n", "duration": 1.0},
    ]
    # What Qwen3 generates for two calls (no think block: the turn after the generation prompt).
    reply = "\n".join(
        "<tool_call>\n"
        + json.dumps({"name": "terminal", "arguments": a}, ensure_ascii=False)
        + "\n</tool_call>"
        for a in calls
    )
    assert [c.keystrokes for c in parse_tool_calls(reply, h.errors)] == [
        a["keystrokes"] for a in calls
    ]
    step = asyncio.run(
        h.session(max_tokens=4096).step(
            reply,
            Terminal(["total 0\n$ ", "$ \n$ "]),  # type: ignore[arg-type]
        )
    )
    assert [m["role"] for m in step.messages] == ["tool", "tool"]
    think = "<think>\n\n</think>\n\n" if kwargs.get("enable_thinking") is False else ""
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "terminal", "arguments": a}} for a in calls
        ],
    }
    cases = [
        {"messages": first, "tools": tools, "gen": True, "kwargs": kwargs},
        *(
            {"messages": m, "tools": tools, "gen": g, "kwargs": kwargs}
            for m, g in base_renderings()
        ),
        {
            "messages": observation_messages(step.messages),
            "tools": tools,
            "gen": True,
            "kwargs": kwargs,
        },
        {
            "messages": [*first, assistant, *step.messages],
            "tools": tools,
            "gen": True,
            "kwargs": kwargs,
        },
    ]
    prompt, base, reply_a, reply_b, observed, whole = render_all(cases)
    assert "<tools>" in prompt and '"name": "terminal"' in prompt
    frame = TemplateFrame.build(list(base), list(reply_a), list(reply_b))
    delta = "".join(frame.delta(list(observed), turn_closed=False))
    # The prompt ends with the generation prompt; then come the generated calls and the delta.
    assert prompt.endswith("<|im_start|>assistant\n" + think)
    assert whole.endswith(reply + delta)
    assert delta.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\ntotal 0\n$ \n")
    if not think:
        assert prompt + reply + delta == whole
    else:
        # Qwen3 drops the empty think block of earlier turns when it re-renders them: exactly
        # why the loop appends deltas instead of re-rendering. Everything else is the same.
        assert prompt.removesuffix(think) + reply + delta == whole
