"""The grading rules of sandboxes/reward.py, one case each: every way to a reward other than
passing tests ends at 0, and nothing the tested code can do ends without a reward."""

from __future__ import annotations

import json

import pytest

from sandboxes import reward as r
from sandboxes.reward import Evidence, grade


def _guard(*records: dict) -> bytes:
    return b"".join(json.dumps(rec).encode() + b"\n" for rec in records)


START = {"event": "start"}
# The tested process, started under another user id (trusted.py).
ISOLATED = {"event": "isolated", "mode": "import", "uid": 64000, "landlock": 7}
ALL_PASS = {"event": "finish", "exitstatus": 0, "tampered": [], "passed": 4, "failed": 0}
ONE_FAIL = {"event": "finish", "exitstatus": 1, "tampered": [], "passed": 3, "failed": 1}


def _ev(reward: bytes | None = b"1\n", guard: bytes = b"", **kw) -> Evidence:
    files = {} if reward is None else {"reward.txt": reward}
    defaults = dict(tests_exit=0, verifier_dir_mode=0o755, pytest_task=True)
    return Evidence(files=files, guard_report=guard, **{**defaults, **kw})


def test_passing_session_keeps_its_reward():
    g = grade(_ev(guard=_guard(START, ISOLATED, ALL_PASS)))
    assert (g.reward, g.flags) == (1.0, [])


def test_reward_json_is_preferred():
    ev = _ev(guard=_guard(START, ISOLATED, ALL_PASS))
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
        (_ev(guard=_guard(START, ISOLATED, {"event": "value_hack"}, ALL_PASS)), r.VALUE_HACK),
        (_ev(pytest_task=False, guard=_guard(ISOLATED, {"event": "value_hack"})), r.VALUE_HACK),
        (
            _ev(pytest_task=False, guard=_guard(ISOLATED, {"event": "solution_exit"})),
            r.SOLUTION_EXIT,
        ),
    ],
)
def test_every_unearned_route_is_zero_and_flagged(evidence, flag):
    g = grade(evidence)
    assert g.reward == 0.0
    assert flag in g.flags
    assert g.note.startswith("graded 0")


def test_partial_reward_with_failures_stands():
    g = grade(_ev(reward=b"0.75", guard=_guard(START, ISOLATED, ONE_FAIL)))
    assert (g.reward, g.flags) == (0.75, [])


def test_negative_and_zero_rewards_stand():
    assert grade(_ev(reward=b"-1.5", guard=_guard(START, ISOLATED, ONE_FAIL))).reward == -1.5
    assert grade(_ev(reward=b"0", guard=_guard(START, ISOLATED, ONE_FAIL))).reward == 0.0


def test_garbage_lines_in_the_report_gain_nothing():
    forged = b'not json\n{"event": "finish", "passed": "many"}\n'
    g = grade(_ev(guard=_guard(START, ISOLATED) + forged))
    # The forged line counts as a finish but reports no passed test: still 0.
    assert g.reward == 0.0 and r.REWARD_CONTRADICTS_TESTS in g.flags


@pytest.mark.parametrize(
    "report",
    [
        _guard(START, ALL_PASS),  # the tests never imported the workspace through the guard
        _guard(START, {**ISOLATED, "uid": None, "landlock": "landlock unavailable"}, ALL_PASS),
        _guard({"event": "view", "python": False}, START, ISOLATED, ALL_PASS),  # no Python
        # the tests read a workspace module's file: the stub, not the agent's text
        _guard(
            START, ISOLATED, {"event": "stub_read", "path": "/app/s.py", "how": "opened"}, ALL_PASS
        ),
        # the tests' process was refused a file through a link the tested code made
        _guard(START, ISOLATED, {"event": "open_refused", "why": "read through /tmp/x"}, ALL_PASS),
    ],
)
def test_a_verdict_not_out_of_the_agents_reach_stands_but_is_flagged(report):
    g = grade(_ev(guard=report))
    assert (g.reward, g.flags) == (1.0, [r.UNGUARDED])
    assert g.note.startswith("unguarded")


def test_either_separation_layer_guards():
    landlock_only = {**ISOLATED, "uid": None, "landlock": 6}
    uid_only = {**ISOLATED, "landlock": "landlock unavailable: Function not implemented"}
    for isolated in (landlock_only, uid_only):
        assert grade(_ev(guard=_guard(START, isolated, ALL_PASS))).flags == []


def test_non_pytest_task_needs_no_session():
    g = grade(_ev(pytest_task=False, guard=_guard(ISOLATED)))
    assert (g.reward, g.flags) == (1.0, [])


def test_suspected_hack_flags():
    assert grade(_ev(guard=_guard(START))).suspected_hack
    assert grade(
        _ev(guard=_guard(START, ISOLATED, {"event": "value_hack"}, ALL_PASS))
    ).suspected_hack
    assert not grade(_ev(reward=None, guard=_guard(START, ALL_PASS))).suspected_hack
    assert not grade(_ev(guard=_guard(START, ALL_PASS))).suspected_hack  # unguarded only


def test_the_script_says_the_tests_began_with_this_verifications_nonce():
    from sandboxes.verifier import split_began

    assert split_began(b"rollouts-began abc\nrollouts-verdict abc 0 755 0\n", "abc") == (
        True,
        b"rollouts-verdict abc 0 755 0\n",
    )
    assert split_began(b"rollouts-began abc\n", "abc") == (True, b"")
    for other in (b"", b"rollouts-began zzz\n", b"rollouts-verdict abc 91 - 0\n", b"x"):
        assert split_began(other, "abc") == (False, other)


def test_the_verdict_header_needs_this_verifications_nonce():
    from sandboxes.verifier import ForgedVerdict, parse_header

    header, rest = parse_header(b"rollouts-verdict abc 0 755 0\nTAR", "abc")
    assert (header.code, header.mode, header.timed_out, rest) == (0, 0o755, False, b"TAR")
    assert parse_header(b"", "abc") == (None, b"")  # nothing at all: the script never ended
    for forged in (
        b"rollouts-verdict zzz 0 755 0\n",  # another nonce
        b"rollouts-verdict abc 0 9 0\n\x00",  # fine: a mode that is not octal is 'missing'
        b"rollouts-verdict 0 755 0\n",  # the old header, without a nonce
        b"garbage\nrollouts-verdict abc 0 755 0\n",
        b"rollouts-verdict abc \xff 755 0\n",
    ):
        if forged.startswith(b"rollouts-verdict abc 0 9"):
            assert parse_header(forged, "abc")[0].mode is None
            continue
        with pytest.raises(ForgedVerdict):
            parse_header(forged, "abc")
