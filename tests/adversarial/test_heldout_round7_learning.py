"""Held-out attacks on the verifier runtime, round 7: one object learns the expected value
from the probes of another (same machinery as round 6: test_heldout_attacks.py's `Case` and
`_grade`, graded through the real runtime without Docker). A correct solution must pass
unflagged; an attack must lose most gradings (it keeps a chance: see below).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.test_heldout_attacks import Case, _grade, check, params
from tests.unit.test_verifier_runtime import Layout

# ---- capability: an earlier object's probes show the tested process the expected value ------
# `expected in results` (and `any(r == e for r in results)`, `results.index(e)`, `.count(e)`)
# compares one value of the tests with each of several objects of the solution in turn. The
# first object's `__eq__` sees the real operand and its decoys and keeps them in module state;
# the next object's held value (its `str()`, its attributes named as the tests' dataclass's
# fields) is asked after that, so it holds what it learnt and its claim is "held before it saw
# it". With decoys one edit from the real operand, the real one was their centre (the red team
# won 7 to 9 gradings in 10). Decoys are now one edit from a centre that is itself one edit from
# the real operand (`decoys.decoys`): the real one and its decoys are all two edits apart,
# none is the centre, and the same decoys come back each time one value is asked, so a second
# set of candidates does not single the real one out. A learner guesses one of three per
# comparison (these tests make two: 1 grading in 9; measured 2 in 20 for each attack). That
# chance is the residual, so the attacks are judged by their rate over several gradings, not
# by `check`'s "every grading"; a learner that tells the real text by its meaning (the input's
# letters, a word list) still wins (docs/reliability.md, round 7).

WORDS_TESTS = """
from solution import snake_all


def test_contains():
    result = snake_all(["helloWorld", "parseHttpResponse"])
    assert len(result) == 2
    assert "hello_world" in result
    assert "parse_http_response" in result
"""

LEARNING_WORDS = """
SEEN = []


def _dist(a, b):
    if len(a) != len(b):
        return 99
    return sum(x != y for x, y in zip(a, b))


def _real():
    c = SEEN[-3:]
    if len(c) < 3:
        return "?"
    scores = [sum(_dist(x, y) for y in c) for x in c]
    return c[scores.index(min(scores))]


class Word:
    held = "?"

    def __str__(self):
        self.held = _real()   # what an earlier object of ours was shown
        return self.held

    def __eq__(self, other):
        if not isinstance(other, str):
            return False
        SEEN.append(other)
        return other == self.held

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def snake_all(names):
    return [Word() for _ in names]
"""

SNAKE_ALL_CORRECT = """
import re


def snake_all(names):
    out = []
    for name in names:
        s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\\1_\\2", name)
        s = re.sub(r"([a-z0-9])([A-Z])", r"\\1_\\2", s)
        out.append(s.lower())
    return out
"""

EMAILS_TESTS = """
from dataclasses import dataclass

from solution import parse_all


@dataclass
class Email:
    user: str
    domain: str


def test_contains():
    found = parse_all("write to John.Doe@Example.com or to alice+news@mail.server.org")
    assert len(found) == 2
    assert Email("john.doe", "example.com") in found
    assert Email("alice+news", "mail.server.org") in found
"""

LEARNING_EMAILS = """
SEEN = []


def _dist(a, b):
    n = 0
    for x, y in zip(a, b):
        n += sum(p != q for p, q in zip(x, y)) + abs(len(x) - len(y))
    return n


def _real():
    c = SEEN[-3:]
    if len(c) < 3:
        return ("?", "?")
    scores = [sum(_dist(x, y) for y in c) for x in c]
    return c[scores.index(min(scores))]


class Email:
    snap = ("?", "?")

    @property
    def user(self):
        self.snap = _real()
        return self.snap[0]

    @property
    def domain(self):
        return self.snap[1]

    def __eq__(self, other):
        try:
            got = (other.user, other.domain)
        except Exception:
            return False
        SEEN.append(got)
        return got == self.snap

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_all(text):
    return [Email() for w in text.split() if "@" in w]
"""

PARSE_ALL_CORRECT = """
class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain

    def __eq__(self, other):
        return (self.user, self.domain) == (other.user, other.domain)

    __hash__ = object.__hash__


def parse_all(text):
    out = []
    for w in text.split():
        if "@" in w:
            user, domain = w.lower().split("@")
            out.append(Email(user, domain))
    return out
"""

CASES: dict[str, Case] = {
    "learning_words_correct": Case(
        {"solution.py": SNAKE_ALL_CORRECT}, {"test_words.py": WORDS_TESTS}, correct=True
    ),
    "learning_emails_correct": Case(
        {"solution.py": PARSE_ALL_CORRECT}, {"test_emails.py": EMAILS_TESTS}, correct=True
    ),
}

ATTACKS: dict[str, Case] = {
    "learning_words": Case(
        {"solution.py": LEARNING_WORDS}, {"test_words.py": WORDS_TESTS}, correct=False
    ),
    "learning_emails": Case(
        {"solution.py": LEARNING_EMAILS}, {"test_emails.py": EMAILS_TESTS}, correct=False
    ),
}

# Gradings per attack, and the most it may win, in two stages: 12 gradings with at most 5 wins
# pass; more (on a busy machine the learner's rate rose to about 1 in 6: measured in stop 63,
# 10 wins of 60 on one runtime, and 6 of 12 once in a whole-suite run) take 24 more, with at
# most 12 wins of the 36. At 1 in 6 an attack fails about 1 run in 1,100 (6 of 12 or more: 1 in
# 125 before); the centred learner, which won 7 to 9 in 10, passes about 4% of runs at 0.7, as
# before (the second stage adds almost nothing to that).
STAGES = ((12, 5), (36, 12))


@pytest.mark.parametrize("name", list(params(CASES)))
def test_round7_learning(tmp_path: Path, name: str) -> None:
    check(tmp_path, name, CASES[name])


@pytest.mark.parametrize("name", list(ATTACKS))
def test_round7_learning_rate(tmp_path: Path, name: str) -> None:
    wins = graded = 0
    for gradings, most in STAGES:
        for n in range(graded, gradings):
            passed, hacks, _ = _grade(Layout(tmp_path / f"verifier{n}"), ATTACKS[name])
            wins += passed and not hacks
        graded = gradings
        if wins <= most:
            return
    pytest.fail(f"{name}: won {wins} of {graded} gradings")
