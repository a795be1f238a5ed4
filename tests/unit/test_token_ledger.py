import ast
import subprocess
import sys
from pathlib import Path

import pytest

from service.agent.tokens import (
    InvariantError,
    TemplateError,
    TemplateFrame,
    TokenLedger,
    base_renderings,
    observation_messages,
)


def test_generation_and_observation_alignment():
    ledger = TokenLedger(prompt_ids=[1, 2, 3])
    ledger.add_generation([1, 2, 3], [10, 11, 2], [-0.5, -0.25, -0.125], [0, 0, 0])
    ledger.add_observation([7, 8])
    ledger.add_generation([1, 2, 3, 10, 11, 2, 7, 8], [12], [-1.0], [1])
    ledger.validate()
    assert ledger.response_ids == [10, 11, 2, 7, 8, 12]
    assert ledger.loss_mask == [1, 1, 1, 0, 0, 1]
    assert ledger.logprobs == [-0.5, -0.25, -0.125, 0.0, 0.0, -1.0]
    assert ledger.versions == [0, 0, 0, -1, -1, 1]


def test_a_turn_continued_after_an_abort_is_one_turn_of_two_generations():
    """A pause with mode abort cut the turn after 2 tokens (version 3); the rest came from the
    sequence so far under version 4: no observation between, the versions change at the token,
    and prompt + response is still what the engine saw last plus what it generated."""
    ledger = TokenLedger(prompt_ids=[1, 2])
    ledger.add_generation([1, 2], [10, 11], [-0.5, -0.25], [3, 3])
    ledger.add_generation([1, 2, 10, 11], [12, 2], [-0.125, -1.0], [4, 4])
    ledger.validate()
    assert ledger.response_ids == [10, 11, 12, 2] and ledger.loss_mask == [1, 1, 1, 1]
    assert ledger.versions == [3, 3, 4, 4] and ledger.generated == 4


def test_versions_are_one_per_generated_token_and_never_negative():
    ledger = TokenLedger(prompt_ids=[1])
    with pytest.raises(InvariantError):
        ledger.add_generation([1], [5, 6], [-1.0, -2.0], [0])
    with pytest.raises(InvariantError):
        ledger.add_generation([1], [5], [-1.0], [-1])


def test_engine_prompt_must_be_the_ledger_sequence():
    ledger = TokenLedger(prompt_ids=[1, 2])
    with pytest.raises(InvariantError):
        ledger.add_generation([1, 2, 99], [5], [-1.0], [0])


def test_trailing_observation_breaks_the_invariant_until_rewound():
    ledger = TokenLedger(prompt_ids=[1])
    ledger.add_generation([1], [5, 6], [-1.0, -2.0], [0, 0])
    ledger.add_observation([7])
    with pytest.raises(InvariantError):
        ledger.validate()
    ledger.rewind_to_last_generation()
    ledger.validate()
    assert ledger.response_ids == [5, 6] and ledger.versions == [0, 0]


def test_logprob_count_must_match():
    ledger = TokenLedger(prompt_ids=[1])
    with pytest.raises(InvariantError):
        ledger.add_generation([1], [5, 6], [-1.0], [0, 0])


SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2, "<think>": 3, "</think>": 4}


def encode(text: str) -> list[int]:
    """Specials as one token each, every other byte as byte + 10."""
    ids, i = [], 0
    while i < len(text):
        hit = next((s for s in SPECIAL if text.startswith(s, i)), None)
        if hit:
            ids.append(SPECIAL[hit])
            i += len(hit)
        else:
            ids += [b + 10 for b in text[i].encode()]
            i += 1
    return ids


def qwen3_like(messages: list[dict[str, str]], agp: bool, enable_thinking: bool = True) -> str:
    """Qwen3's template, reduced to what matters here: the last assistant turn after the last
    user message gets an empty think block; thinking off adds one to the generation prompt."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    out = ""
    for i, m in enumerate(messages):
        think = "<think>\n\n</think>\n\n" if m["role"] == "assistant" and i > last_user else ""
        out += f"<|im_start|>{m['role']}\n{think}{m['content']}<|im_end|>\n"
    if agp:
        out += "<|im_start|>assistant\n" + ("" if enable_thinking else "<think>\n\n</think>\n\n")
    return out


def frame_of(render) -> TemplateFrame:  # type: ignore[no-untyped-def]
    return TemplateFrame.build(*(encode(render(m, agp)) for m, agp in base_renderings()))


@pytest.mark.parametrize("thinking", [True, False])
def test_template_frame_gives_the_chatml_delta(thinking: bool) -> None:
    def render(m, agp):  # type: ignore[no-untyped-def]
        return qwen3_like(m, agp, enable_thinking=thinking)

    frame = frame_of(render)
    assert frame.close == tuple(encode("<|im_end|>\n"))
    rendered = encode(render(observation_messages("out"), True))
    closed = frame.delta(rendered, turn_closed=True)
    open_ = frame.delta(rendered, turn_closed=False)
    think = "" if thinking else "<think>\n\n</think>\n\n"
    # Thinking on: exactly the hard-coded ChatML delta this replaced.
    assert closed == encode(f"\n<|im_start|>user\nout<|im_end|>\n<|im_start|>assistant\n{think}")
    assert open_ == encode("<|im_end|>") + closed


def test_template_frame_refuses_a_template_that_rewrites_the_base() -> None:
    frame = frame_of(qwen3_like)
    with pytest.raises(TemplateError):  # the base is not a prefix of the rendering
        frame.delta(encode("<|im_start|>system\nX<|im_end|>\n"), turn_closed=True)
    with pytest.raises(TemplateError):  # the replies leave no trace in the rendering
        TemplateFrame.build([1, 2, 3], [9, 9], [9, 9])


def test_invariant_checks_survive_python_dash_o():
    # `python -O` strips assert statements and `AssertionError` handlers would be the wrong net:
    # the invariant is a plain exception raised explicitly, and nothing guards it with assert.
    assert not issubclass(InvariantError, AssertionError)
    root = Path(__file__).resolve().parents[2]
    for name in ("service/agent/tokens.py", "service/episode.py"):
        tree = ast.parse((root / name).read_text())
        asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
        assert not asserts, f"{name}: assert statements on lines {asserts}"


def test_invariant_error_is_raised_under_python_dash_o():
    code = (
        "from service.agent.tokens import InvariantError, TokenLedger\n"
        "ledger = TokenLedger(prompt_ids=[1])\n"
        "try:\n"
        "    ledger.add_generation([2], [5], [-1.0], [0])\n"
        "except InvariantError:\n"
        "    print('raised')\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "raised"
