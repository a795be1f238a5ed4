import ast
import subprocess
import sys
from pathlib import Path

import pytest

from service.agent.tokens import InvariantError, TokenLedger, observation_delta


def test_generation_and_observation_alignment():
    ledger = TokenLedger(prompt_ids=[1, 2, 3])
    ledger.add_generation([1, 2, 3], [10, 11, 2], [-0.5, -0.25, -0.125])
    ledger.add_observation([7, 8])
    ledger.add_generation([1, 2, 3, 10, 11, 2, 7, 8], [12], [-1.0])
    ledger.validate()
    assert ledger.response_ids == [10, 11, 2, 7, 8, 12]
    assert ledger.loss_mask == [1, 1, 1, 0, 0, 1]
    assert ledger.logprobs == [-0.5, -0.25, -0.125, 0.0, 0.0, -1.0]


def test_engine_prompt_must_be_the_ledger_sequence():
    ledger = TokenLedger(prompt_ids=[1, 2])
    with pytest.raises(InvariantError):
        ledger.add_generation([1, 2, 99], [5], [-1.0])


def test_trailing_observation_breaks_the_invariant_until_rewound():
    ledger = TokenLedger(prompt_ids=[1])
    ledger.add_generation([1], [5, 6], [-1.0, -2.0])
    ledger.add_observation([7])
    with pytest.raises(InvariantError):
        ledger.validate()
    ledger.rewind_to_last_generation()
    ledger.validate()
    assert ledger.response_ids == [5, 6]


def test_logprob_count_must_match():
    ledger = TokenLedger(prompt_ids=[1])
    with pytest.raises(InvariantError):
        ledger.add_generation([1], [5, 6], [-1.0])


def test_observation_delta_closes_open_turns_only():
    closed = observation_delta("out", turn_closed=True)
    open_ = observation_delta("out", turn_closed=False)
    assert closed == "\n<|im_start|>user\nout<|im_end|>\n<|im_start|>assistant\n"
    assert open_ == "<|im_end|>" + closed


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
        "    ledger.add_generation([2], [5], [-1.0])\n"
        "except InvariantError:\n"
        "    print('raised')\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "raised"
