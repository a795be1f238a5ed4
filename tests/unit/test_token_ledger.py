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
