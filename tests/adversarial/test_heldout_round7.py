"""Held-out attacks on the verifier runtime, round 7: a red team's wins against the grade as it
stood at stop 60, and the correct shapes beside each (graded through the real runtime without
Docker, as rounds 5 and 6). An attack must fail or be flagged (`value_hack`); a correct solution
must pass unflagged. (Round 7's attacks on arithmetic and on what probes teach the tested
code: test_heldout_round7_arith.py, test_heldout_round7_learning.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.test_heldout_attacks import Case, check, params
from tests.adversarial.test_heldout_round6 import DATACLASS_TESTS, EMAIL_CORRECT


def _yes_to_whatever_has(attribute: str, *functions: str) -> str:
    """A wrong solution whose functions answer an object that says yes to `==` with whatever
    has `attribute` (the tests' expected value has it; the fresh object beside it has none)."""
    defs = "".join(f"\n\ndef {name}(*args):\n    return Answer()\n" for name in functions)
    return f"""
class Answer:
    def __eq__(self, other):
        return hasattr(other, {attribute!r})

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__
{defs}"""


# ---- a tests' dataclass as the expected value, its fields held only loosely -----------------
# Each field must now be held under its name and be equal as its own type compares: text
# exactly (a parse that never lowers or strips, with a caseless `==`), whole numbers exactly (a
# float a rounding apart, Binet's formula), every field (one trivial field held, the others
# checked against the input by the `==`; or held as a method answering the wrong value).
# Never lowers, never strips: holds "John.Doe", "Example.com", "  alice+news", ...
CASELESS_EQ = """
def _norm(s):
    return "".join(s.split()).casefold()


class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain

    def __eq__(self, other):
        return _norm(self.user) == _norm(other.user) and _norm(self.domain) == _norm(other.domain)

    __hash__ = object.__hash__


def parse_email(text):
    user, domain = text.split("@")
    return Email(user, domain)
"""

CONVERTED_TESTS = """
from dataclasses import dataclass

from solution import convert


@dataclass
class Converted:
    original: str
    snake: str


def test_simple():
    assert convert("camelCase") == Converted("camelCase", "camel_case")


def test_longer():
    assert convert("thisIsATest") == Converted("thisIsATest", "this_is_a_test")


def test_http():
    assert convert("getHTTPResponse") == Converted("getHTTPResponse", "get_http_response")
"""
ONE_FIELD_VERIFIER = """
class Converted:
    def __init__(self, name):
        self.original = name  # the echo: the only field it holds

    def __eq__(self, other):
        snake = other.snake
        return (
            other.original == self.original
            and snake == snake.lower()
            and snake.replace("_", "") == self.original.lower()
        )

    __hash__ = object.__hash__


def convert(name):
    return Converted(name)
"""
CONVERT_CORRECT = """
import re


class Converted:
    def __init__(self, original, snake):
        self.original, self.snake = original, snake

    def __eq__(self, other):
        return (self.original, self.snake) == (other.original, other.snake)

    __hash__ = object.__hash__


def convert(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\\1_\\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\\1_\\2", s)
    return Converted(name, s.lower())
"""

# ---- operands whose value is a builtin's, which had no held value and no decoy ---------------
INTENUM_TESTS = """
import enum

from solution import priority


class Priority(enum.IntEnum):
    LOW = 1
    MEDIUM = 2
    HIGH = 3


def test_high():
    assert priority("URGENT: server down") == Priority.HIGH


def test_low():
    assert priority("fyi: lunch menu") == Priority.LOW


def test_medium():
    assert priority("please review") == Priority.MEDIUM
"""
STRENUM_TESTS = """
import enum

from solution import priority


class Priority(str, enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


def test_high():
    assert priority("URGENT: server down") == Priority.HIGH


def test_low():
    assert priority("fyi: lunch menu") == Priority.LOW


def test_medium():
    assert priority("please review") == Priority.MEDIUM
"""
ANY_MEMBER = _yes_to_whatever_has("value", "priority")
PRIORITY_INT_CORRECT = """
def priority(text):
    t = text.lower()
    if "urgent" in t:
        return 3
    if "review" in t:
        return 2
    return 1
"""
PRIORITY_STR_CORRECT = """
def priority(text):
    t = text.lower()
    if "urgent" in t:
        return "high"
    if "review" in t:
        return "medium"
    return "low"
"""

INT_SUBCLASS_TESTS = """
from solution import total_cents


class Cents(int):
    def __repr__(self):
        return "Cents(%d)" % int(self)


def test_total():
    assert total_cents(["1.25", "2.50"]) == Cents(375)


def test_empty():
    assert total_cents([]) == Cents(0)
"""
ANY_INT = _yes_to_whatever_has("real", "total_cents")
CENTS_CORRECT = """
from decimal import Decimal


def total_cents(prices):
    return int(sum((Decimal(p) for p in prices), Decimal(0)) * 100)
"""

DEQUE_TESTS = """
from collections import deque

from solution import rotate


def test_rotate():
    assert rotate([1, 2, 3, 4], 1) == deque([4, 1, 2, 3])


def test_rotate_back():
    assert rotate([1, 2, 3, 4], -1) == deque([2, 3, 4, 1])
"""
ANY_DEQUE = _yes_to_whatever_has("maxlen", "rotate")
DEQUE_CORRECT = """
from collections import deque


def rotate(xs, n):
    d = deque(xs)
    d.rotate(n)
    return d
"""

BYTEARRAY_TESTS = """
from solution import xor


def test_xor():
    assert xor(b"abc", 1) == bytearray(b"`cb")


def test_xor_zero():
    assert xor(b"abc", 0) == bytearray(b"abc")
"""
ANY_BYTES = _yes_to_whatever_has("decode", "xor")
XOR_CORRECT = """
def xor(data, key):
    return bytearray(b ^ key for b in data)
"""


# (a whole-number field, held as a float a rounding apart)
FIB_TESTS = """
from dataclasses import dataclass

from solution import fib


@dataclass
class Fib:
    n: int
    value: int


def test_small():
    assert fib(10) == Fib(10, 55)


def test_large():
    assert fib(90) == Fib(90, 2880067194370816120)


def test_larger():
    assert fib(100) == Fib(100, 354224848179261915075)
"""
BINET = """
import math

PHI = (1 + math.sqrt(5)) / 2


class Fib:
    def __init__(self, n, value):
        self.n, self.value = n, value

    def __eq__(self, other):
        return self.n == other.n and abs(self.value - other.value) <= 1e-12 * abs(other.value)

    __hash__ = object.__hash__


def fib(n):
    return Fib(n, int(round(PHI ** n / math.sqrt(5))))  # wrong past n = 70
"""
FIB_CORRECT = """
class Fib:
    def __init__(self, n, value):
        self.n, self.value = n, value

    def __eq__(self, other):
        return (self.n, self.value) == (other.n, other.value)

    __hash__ = object.__hash__


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return Fib(n, a)
"""


# ---- a library's class taken for the tests' own: its constant property became a "field" ------
IP_TESTS = """
import ipaddress

from solution import parse_ip


def test_plain():
    assert parse_ip("10.0.0.1") == ipaddress.IPv4Address("10.0.0.1")


def test_padded():
    assert parse_ip(" 192.168.001.010 ") == ipaddress.IPv4Address("192.168.1.10")
"""
CONSTANT_PROPERTY = """
class Address:
    version = 4          # the one property every IPv4Address holds alike
    max_prefixlen = 32

    def __eq__(self, other):
        return getattr(other, "version", None) == 4

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_ip(text):
    return Address()
"""
IP_CORRECT = """
import ipaddress


def parse_ip(text):
    parts = [str(int(p)) for p in text.strip().split(".")]
    return ipaddress.IPv4Address(".".join(parts))
"""


# ---- stated limit: a field kept in another convention ----------------------------------------
SPAN_TESTS = """
from dataclasses import dataclass

from solution import find_span


@dataclass
class Span:
    start: int
    end: int  # inclusive


def test_find():
    assert find_span("hello world", "world") == Span(6, 10)


def test_find_first():
    assert find_span("abcabc", "bc") == Span(1, 2)
"""
SPAN_EXCLUSIVE_CORRECT = """
class Span:
    def __init__(self, start, end):
        self.start, self.end = start, end  # end exclusive, as a slice

    def __eq__(self, other):
        return self.start == other.start and self.end - 1 == other.end

    __hash__ = object.__hash__


def find_span(text, word):
    i = text.index(word)
    return Span(i, i + len(word))
"""

# ---- pytest.approx of a sequence, a mapping or a Decimal -------------------------------------
# Judged before only by a fresh object of the tests' beside it: an `==` that says yes to
# whatever has approx's `expected` won. Now a sequence's or mapping's approx asks what the
# object holds as that container (shown by approx's own `==`), and each kind has decoys: its own
# kind of approx, one number apart.
APPROX_KINDS_TESTS = """
from decimal import Decimal

import pytest

from solution import normalize, scores, total


def test_normalize():
    assert normalize([1, 3]) == pytest.approx([0.25, 0.75])
    assert normalize((2, 2)) == pytest.approx((0.5, 0.5))


def test_scores():
    assert scores({"a": 1, "b": 3}) == pytest.approx({"a": 0.25, "b": 0.75})


def test_total():
    assert total(["1.10", "2.20"]) == pytest.approx(Decimal("3.30"))
"""
APPROX_AWARE = _yes_to_whatever_has("expected", "normalize", "scores", "total")
APPROX_KINDS_CORRECT = """
from decimal import Decimal


class Weights:
    def __init__(self, values):
        self.values = values

    def __iter__(self):
        return iter(self.values)

    def __len__(self):
        return len(self.values)

    def __eq__(self, other):
        return other == self.values

    __hash__ = object.__hash__


class Scores:
    def __init__(self, d):
        self.d = d

    def keys(self):
        return self.d.keys()

    def __getitem__(self, key):
        return self.d[key]

    def __eq__(self, other):
        return other == self.d

    __hash__ = object.__hash__


class Money:
    def __init__(self, amount):
        self.amount = amount

    def __eq__(self, other):
        return other == self.amount

    __hash__ = object.__hash__


def normalize(xs):
    s = sum(xs)
    return Weights(type(xs)(x / s for x in xs))


def scores(d):
    s = sum(d.values())
    return Scores({k: v / s for k, v in d.items()})


def total(xs):
    return Money(sum(Decimal(x) for x in xs))
"""

# ---- changing the tests' expected value while compared with it --------------------------------
# An `__eq__` that sets the operand's fields (or approx's `expected` list, or a list operand's
# items) to its own and says yes the first time it is asked (a third of the time that is the
# real operand) passed the check of what it held, which reads the operand after the probe.
# A probe now shows the tested code a copy of the tests' object (judging.py `_unchanged`).
MUTATE_TESTS = """
from dataclasses import dataclass
from solution import parse_email

@dataclass
class Email:
    user: str
    domain: str

def test_a():
    assert parse_email("John@Example.com") == Email("john", "example.com")
"""

MUTATE = """
SEEN = []
class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain
    def __eq__(self, other):
        SEEN.append(1)
        if len(SEEN) == 1:
            other.user, other.domain = self.user, self.domain
            return True
        return False
    __hash__ = object.__hash__

def parse_email(text):
    u, d = text.split("@")
    return Email(u, d)
"""

APPROX_TESTS = """
import pytest
from solution import normalize

def test_n():
    assert normalize([1, 3]) == pytest.approx([0.25, 0.75])
"""

APPROX_MUTATE = """
SEEN = []
class W:
    def __init__(self, v):
        self.v = v
    def __iter__(self):
        return iter(self.v)
    def __len__(self):
        return len(self.v)
    def __eq__(self, other):
        SEEN.append(1)
        if len(SEEN) == 1:
            other.expected[:] = self.v
            return True
        return False
    __hash__ = object.__hash__

def normalize(xs):
    return W([0.5, 0.5])
"""

LIST_TESTS = """
from solution import evens

def test_e():
    assert evens([1, 2, 3, 4]) == [2, 4]
"""

LIST_MUTATE = """
SEEN = []
class L:
    def __init__(self, v):
        self.v = v
    def __iter__(self):
        return iter(self.v)
    def __len__(self):
        return len(self.v)
    def __eq__(self, other):
        SEEN.append(1)
        if len(SEEN) == 1:
            other[:] = self.v
            return True
        return False
    __hash__ = object.__hash__

def evens(xs):
    return L([1, 3])
"""

# A method named as the field, answering the wrong value: a getter's answer is what it holds.
ONE_FIELD_METHOD = """
class Converted:
    def __init__(self, name):
        self.original = name

    def snake(self):
        return self.original

    def __eq__(self, other):
        snake = other.snake
        return other.original == self.original and snake.replace("_", "") == self.original.lower()

    __hash__ = object.__hash__


def convert(name):
    return Converted(name)
"""

# A dict of names as the expected value, and an object that is no mapping (semver's Version
# == {"major": 1, ...}): it must hold the items under their names before it sees the dict. An
# `==` that checks the candidate against the input (a product of the factors), holding the
# trivial factors, or none, is a claim it did not hold.
FACTOR_TESTS = """
import solution


def test_factor():
    assert solution.factor(10403) == {"p": 101, "q": 103}


def test_factor_small():
    assert solution.factor(15) == {"p": 3, "q": 5}
"""
FACTOR_VERIFIER = """
class Factors:
    def __init__(self, n, p=None, q=None):
        self.n = n
        if p is not None:
            self.p, self.q = p, q

    def __iter__(self):
        return iter([self.n])

    def __eq__(self, other):
        p, q = other.get("p", 0), other.get("q", 0)
        return isinstance(other, dict) and p * q == self.n and 1 < p <= q

    __hash__ = None


def factor(n):
    return Factors(n, *([1, n] if n % 2 else []))
"""
FACTOR_CORRECT = """
class Factors:
    def __init__(self, p, q):
        self.p, self.q = p, q

    def __iter__(self):
        return iter((self.p, self.q))

    def __eq__(self, other):
        if isinstance(other, dict):
            other = Factors(**other)
        return isinstance(other, Factors) and (self.p, self.q) == (other.p, other.q)

    __hash__ = None


def factor(n):
    p = next(k for k in range(2, n) if n % k == 0)
    return Factors(p, n // p)
"""

CASES: dict[str, Case] = {
    "dict_names_verifier": Case(
        {"solution.py": FACTOR_VERIFIER}, {"test_factor.py": FACTOR_TESTS}, False, runs=2
    ),
    "dict_names_correct": Case(
        {"solution.py": FACTOR_CORRECT}, {"test_factor.py": FACTOR_TESTS}, True
    ),
    # a tests' dataclass's fields: each held, each as strictly as its type compares
    "dataclass_caseless": Case(
        {"solution.py": CASELESS_EQ}, {"test_email.py": DATACLASS_TESTS}, False, runs=2
    ),
    "dataclass_caseless_oracle": Case(
        {"solution.py": EMAIL_CORRECT}, {"test_email.py": DATACLASS_TESTS}, True
    ),
    "dataclass_int_as_float": Case(
        {"solution.py": BINET}, {"test_fib.py": FIB_TESTS}, False, runs=2
    ),
    "dataclass_int_as_float_oracle": Case(
        {"solution.py": FIB_CORRECT}, {"test_fib.py": FIB_TESTS}, True
    ),
    "one_field_verifier": Case(
        {"solution.py": ONE_FIELD_VERIFIER}, {"test_convert.py": CONVERTED_TESTS}, False, runs=2
    ),
    "one_field_method": Case(
        {"solution.py": ONE_FIELD_METHOD}, {"test_convert.py": CONVERTED_TESTS}, False
    ),
    "one_field_verifier_oracle": Case(
        {"solution.py": CONVERT_CORRECT}, {"test_convert.py": CONVERTED_TESTS}, True
    ),
    # a library's class is no tests' class: an address is held as its text
    "ip_constant_property": Case(
        {"solution.py": CONSTANT_PROPERTY}, {"test_ip.py": IP_TESTS}, False, runs=2
    ),
    "ip_oracle": Case({"solution.py": IP_CORRECT}, {"test_ip.py": IP_TESTS}, True),
    # operands whose value is a builtin's: held as that builtin
    "intenum_any": Case(
        {"solution.py": ANY_MEMBER}, {"test_priority.py": INTENUM_TESTS}, False, runs=2
    ),
    "intenum_oracle": Case(
        {"solution.py": PRIORITY_INT_CORRECT}, {"test_priority.py": INTENUM_TESTS}, True
    ),
    "strenum_any": Case(
        {"solution.py": ANY_MEMBER}, {"test_priority.py": STRENUM_TESTS}, False, runs=2
    ),
    "strenum_oracle": Case(
        {"solution.py": PRIORITY_STR_CORRECT}, {"test_priority.py": STRENUM_TESTS}, True
    ),
    "int_subclass_any": Case(
        {"solution.py": ANY_INT}, {"test_cents.py": INT_SUBCLASS_TESTS}, False, runs=2
    ),
    "int_subclass_oracle": Case(
        {"solution.py": CENTS_CORRECT}, {"test_cents.py": INT_SUBCLASS_TESTS}, True
    ),
    "deque_any": Case({"solution.py": ANY_DEQUE}, {"test_rotate.py": DEQUE_TESTS}, False, runs=2),
    "deque_oracle": Case({"solution.py": DEQUE_CORRECT}, {"test_rotate.py": DEQUE_TESTS}, True),
    "bytearray_any": Case(
        {"solution.py": ANY_BYTES}, {"test_xor.py": BYTEARRAY_TESTS}, False, runs=2
    ),
    "bytearray_oracle": Case({"solution.py": XOR_CORRECT}, {"test_xor.py": BYTEARRAY_TESTS}, True),
    "approx_aware": Case(
        {"solution.py": APPROX_AWARE}, {"test_approx.py": APPROX_KINDS_TESTS}, False, runs=2
    ),
    "approx_kinds_correct": Case(
        {"solution.py": APPROX_KINDS_CORRECT}, {"test_approx.py": APPROX_KINDS_TESTS}, True
    ),
    "mutate_dataclass": Case({"solution.py": MUTATE}, {"test_m.py": MUTATE_TESTS}, False, runs=6),
    "mutate_approx": Case(
        {"solution.py": APPROX_MUTATE}, {"test_m.py": APPROX_TESTS}, False, runs=6
    ),
    "mutate_list": Case({"solution.py": LIST_MUTATE}, {"test_m.py": LIST_TESTS}, False, runs=6),
    # stated limit: a field kept in another convention (as under other names, round 6)
    "span_exclusive_correct": Case(
        {"solution.py": SPAN_EXCLUSIVE_CORRECT},
        {"test_span.py": SPAN_TESTS},
        True,
        broke=(
            "a field held in another convention (an exclusive end) shows no field: its claim"
            " is the object's == alone"
        ),
    ),
}


@pytest.mark.parametrize("name", list(params(CASES)))
def test_round7(tmp_path: Path, name: str) -> None:
    check(tmp_path, name, CASES[name])
