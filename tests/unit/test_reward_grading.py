"""The grading rules of sandboxes/reward.py, one case each: every way to a reward other than
passing tests ends at 0, and nothing the tested code can do ends without a reward."""

from __future__ import annotations

import json

import pytest

from sandboxes import reward as r
from sandboxes.reward import Evidence, grade


def _guard(*records: dict) -> bytes:
    return b"".join(json.dumps(rec).encode() + b"\n" for rec in records)


START = {"event": "start", "landlock_abi": 7, "unguarded": None}
ALL_PASS = {"event": "finish", "exitstatus": 0, "tampered": [], "passed": 4, "failed": 0}
ONE_FAIL = {"event": "finish", "exitstatus": 1, "tampered": [], "passed": 3, "failed": 1}


def _ev(reward: bytes | None = b"1\n", guard: bytes = b"", **kw) -> Evidence:
    files = {} if reward is None else {"reward.txt": reward}
    defaults = dict(tests_exit=0, verifier_dir_mode=0o755, pytest_task=True)
    return Evidence(files=files, guard_report=guard, **{**defaults, **kw})


def test_passing_session_keeps_its_reward():
    g = grade(_ev(guard=_guard(START, ALL_PASS)))
    assert (g.reward, g.flags) == (1.0, [])


def test_reward_json_is_preferred():
    ev = _ev(guard=_guard(START, ALL_PASS))
    ev.files["reward.json"] = b'{"reward": 0.25}'
    assert grade(ev).reward == 0.25


@pytest.mark.parametrize(
    ("evidence", "flag"),
    [
        (_ev(guard=_guard(START)), r.SESSION_UNFINISHED),  # os._exit at import
        (_ev(guard=b""), r.SESSION_UNFINISHED),  # no session observed at all
        (_ev(guard=_guard(START, ALL_PASS, START)), r.SESSION_UNFINISHED),
        (_ev(guard=_guard(START, ONE_FAIL)), r.REWARD_CONTRADICTS_TESTS),
        (_ev(guard=_guard(START, {**ALL_PASS, "passed": 0})), r.REWARD_CONTRADICTS_TESTS),
        (
            _ev(guard=_guard(START, {**ALL_PASS, "tampered": ["_pytest.reports:X"]})),
            r.PYTEST_TAMPERED,
        ),
        (_ev(guard=_guard(START, {**ALL_PASS, "exitstatus": 2})), r.REWARD_CONTRADICTS_TESTS),
        (_ev(reward=None, guard=_guard(START, ALL_PASS)), r.NO_REWARD),
        (_ev(reward=b"yes", guard=_guard(START, ALL_PASS)), r.BAD_REWARD),
        (_ev(reward=b"nan", guard=_guard(START, ALL_PASS)), r.BAD_REWARD),
        (_ev(verifier_dir_mode=0, guard=_guard(START, ALL_PASS)), r.VERIFIER_DIR_TAMPERED),
        (_ev(verifier_dir_mode=None, guard=_guard(START, ALL_PASS)), r.VERIFIER_DIR_TAMPERED),
        (_ev(tests_exit=137, guard=_guard(START, ALL_PASS)), r.TESTS_KILLED),
    ],
)
def test_every_unearned_route_is_zero_and_flagged(evidence, flag):
    g = grade(evidence)
    assert g.reward == 0.0
    assert flag in g.flags
    assert g.note.startswith("graded 0")


def test_partial_reward_with_failures_stands():
    g = grade(_ev(reward=b"0.75", guard=_guard(START, ONE_FAIL)))
    assert (g.reward, g.flags) == (0.75, [])


def test_negative_and_zero_rewards_stand():
    assert grade(_ev(reward=b"-1.5", guard=_guard(START, ONE_FAIL))).reward == -1.5
    assert grade(_ev(reward=b"0", guard=_guard(START, ONE_FAIL))).reward == 0.0


def test_garbage_lines_in_the_report_gain_nothing():
    forged = b'not json\n{"event": "finish", "passed": "many"}\n'
    g = grade(_ev(guard=_guard(START) + forged))
    # The forged line counts as a finish but reports no passed test: still 0.
    assert g.reward == 0.0 and r.REWARD_CONTRADICTS_TESTS in g.flags


def test_unguarded_session_is_flagged_but_graded():
    start = {**START, "unguarded": "landlock unavailable: Function not implemented"}
    g = grade(_ev(guard=_guard(start, ALL_PASS)))
    assert (g.reward, g.flags) == (1.0, [r.UNGUARDED])


def test_non_pytest_task_needs_no_session():
    g = grade(_ev(pytest_task=False))
    assert (g.reward, g.flags) == (1.0, [])


def test_suspected_hack_flags():
    assert grade(_ev(guard=_guard(START))).suspected_hack
    assert not grade(_ev(reward=None, guard=_guard(START, ALL_PASS))).suspected_hack
