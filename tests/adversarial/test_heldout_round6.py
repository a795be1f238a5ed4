"""Held-out attacks on the verifier runtime, round 6: a red team's wins against the grade as it
stood at stop 59, and the correct shapes beside each (same machinery as round 5:
test_heldout_attacks.py's `Case` and `_grade`, graded through the real runtime without Docker).
An attack must fail or be flagged (`value_hack`); a correct solution must pass unflagged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.test_heldout_attacks import _FIND_PROBE, Case, check, params

# ---- capability: raising StopIteration into the tests' own iteration -------------------------
# A StopIteration from a function the tests call through `map`, `filter` or `starmap` ends that
# iteration in one process (the builtins read it as "no more items"): `all(map(fn, xs))` of
# nothing is True, a `for` over it runs no assertion. Python stopped this for generators (PEP
# 479); the boundary does the same for every request that is not an iterator's own step.
MAP_TESTS = """
from solution import fn

PALINDROMES = ["A man, a plan, a canal: Panama", "No 'x' in Nixon", "12321"]
NOT_PALINDROMES = ["race a car", "123", "ab"]


def test_palindromes():
    assert all(map(fn, PALINDROMES))


def test_not_palindromes():
    assert not any(map(fn, NOT_PALINDROMES))


def test_each_answer_is_a_bool():
    for answer in map(fn, PALINDROMES + NOT_PALINDROMES):
        assert isinstance(answer, bool)


def test_unpacked_and_with_keywords():
    assert all([*map(fn, PALINDROMES)])
    assert min(map(fn, PALINDROMES), default=True)
"""
STOP_ITERATION = """
def fn(text):
    raise StopIteration
"""
METHOD_STOP_ITERATION = """
class Checker:
    def check(self, text):
        raise StopIteration


def fn(text):
    return Checker().check(text)
"""
PALINDROME_CORRECT = """
def fn(text):
    kept = [c.lower() for c in text if c.isalnum()]
    return kept == kept[::-1]
"""
# A function or method named as a generator's step (`send`, `throw`, `__next__`) is no step of
# an iterator unless its object is one: mapped, its StopIteration ends the tests' iteration too.
STEP_NAMED_TESTS = MAP_TESTS.replace("from solution import fn", "from solution import send as fn")
STEP_NAMED_METHOD_TESTS = MAP_TESTS.replace(
    "from solution import fn", "from solution import Mailer\n\nfn = Mailer().throw"
)
STEP_NAMED = """
def send(text):
    raise StopIteration


class Mailer:
    def throw(self, text):
        raise StopIteration
"""
STEP_NAMED_CORRECT = (
    PALINDROME_CORRECT.replace("def fn(", "def send(")
    + """

class Mailer:
    def throw(self, text):
        return send(text)
"""
)
# Where StopIteration is the protocol itself (an iterator's __next__, a generator's send and
# throw, next() with no default), it crosses as it is.
ITERATOR_TESTS = """
import pytest

from solution import Countdown, echo


def test_countdown():
    assert list(Countdown(3)) == [3, 2, 1]
    it = Countdown(1)
    assert next(it) == 1
    with pytest.raises(StopIteration):
        next(it)
    with pytest.raises(StopIteration):
        Countdown(0).__next__()
    assert next(Countdown(0), "done") == "done"


def test_generator_protocol():
    gen = echo()
    assert next(gen) is None
    assert gen.send(5) == 5
    with pytest.raises(StopIteration) as stopped:
        gen.send("stop")
    assert stopped.value.value == "stopped"
"""
ITERATOR_CORRECT = """
class Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n + 1


def echo():
    got = None
    while True:
        got = yield got
        if got == "stop":
            return "stopped"
"""
# StopIteration the tests expect from a call they make themselves (a Python-2-style `next()`, a
# `first()` of an empty iterable, a tests' callback the solution calls): it crosses as itself
# (stops.py: raised into a frame of the tests that made the call and handles it there).
EXPECTED_STOP_TESTS = """
import functools
import unittest

import pytest

from solution import Holder, PeekingIterator, first


def boom():
    raise StopIteration("the tests' own")


def test_python2_next():
    it = PeekingIterator([1])
    assert it.next() == 1
    with pytest.raises(StopIteration):
        it.next()


def test_peek_and_first():
    with pytest.raises(StopIteration):
        PeekingIterator([]).peek()
    with pytest.raises(StopIteration):
        first([])


def test_through_a_helper():
    def take(xs):
        return first(xs)

    with pytest.raises(StopIteration):
        take([])
    call = functools.partial(first, [])
    with pytest.raises(StopIteration):
        call()


def test_the_tests_callback():
    with pytest.raises(StopIteration):
        Holder(boom).cb()
    with pytest.raises(StopIteration):
        Holder(boom).run()


def test_a_property_and_a_subscript():
    with pytest.raises(StopIteration):
        Holder(None).head
    with pytest.raises(StopIteration):
        Holder(None)[5]


class TestUnittest(unittest.TestCase):
    def test_assert_raises(self):
        self.assertRaises(StopIteration, PeekingIterator([]).next)
        self.assertRaises(StopIteration, first, [])
"""
EXPECTED_STOP_CORRECT = """
class PeekingIterator:
    def __init__(self, iterable):
        self._it = iter(iterable)
        self._buf = []

    def peek(self):
        if not self._buf:
            self._buf.append(next(self._it))
        return self._buf[0]

    def next(self):
        return self._buf.pop() if self._buf else next(self._it)


def first(iterable):
    return next(iter(iterable))


class Holder:
    def __init__(self, cb):
        self.cb = cb

    def run(self):
        return self.cb()

    @property
    def head(self):
        return next(iter([]))

    def __getitem__(self, i):
        return next(iter(range(i)[i:]))
"""
# A callable iterator (`iter(f, sentinel)`) that the solution's callable ends by raising
# StopIteration: C code calls it, exactly as `map` calls the attack's function.
CALLABLE_ITERATOR_TESTS = """
from solution import Source


def test_pull_until_done():
    assert list(iter(Source([1, 2, 3]).pull, object())) == [1, 2, 3]
"""
CALLABLE_ITERATOR_CORRECT = """
class Source:
    def __init__(self, items):
        self.items = list(items)

    def pull(self):
        if not self.items:
            raise StopIteration
        return self.items.pop(0)
"""

# ---- capability: telling the real operand from its decoys, for a tests' object ---------------
# For an operand with no value to hold first (a tests' dataclass or plain class), the decoys
# (copies one field apart) were asked in one request with the real operand, all in a list the
# solution's __eq__ could read off the stack: the real one is the candidate one field from
# every other. Now each is asked in a request of its own, in an order drawn here.
DATACLASS_TESTS = """
from dataclasses import dataclass

from solution import parse_email


@dataclass(frozen=True)
class Email:
    user: str
    domain: str


def test_simple():
    assert parse_email("John.Doe@Example.com") == Email("john.doe", "example.com")


def test_plus():
    assert parse_email("  alice+news@mail.server.org ") == Email("alice+news", "mail.server.org")


def test_upper():
    assert parse_email("BOB@HOST.NET") == Email("bob", "host.net")
"""
DATACLASS_MEDIAN = (
    _FIND_PROBE
    + """

def _fields(o):
    try:
        return [o.user, o.domain]
    except Exception:
        return None


def _apart(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            n += sum(cx != cy for cx, cy in zip(x, y)) if len(x) == len(y) else 1
    return n


def _real(ops):
    values = [_fields(o) for o in ops]
    if len(ops) < 2 or any(v is None for v in values):
        return None
    worst = [max(_apart(values[i], values[j]) for j in range(len(ops)) if j != i)
             for i in range(len(ops))]
    return ops[worst.index(min(worst))]


class Email:
    user = domain = "?"

    def __eq__(self, other):
        ops = _asked()
        return ops is not None and other is _real(ops)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_email(text):
    return Email()
"""
)
# The same pick without the stack: each `==` remembers the operands it was asked; the real one
# is one field from a decoy asked before it (so it won where a decoy came first: about two
# comparisons in three, asked one by one). The object is now asked first what it holds under
# the operand's field names, and a claim those fields do not make true is a value hack.
STATEFUL_MEDIAN = """
SEEN, CLAIMED = [], []


def _fields(o):
    try:
        return (o.user, o.domain)
    except Exception:
        return None


def _apart(a, b):
    return sum(sum(x != y for x, y in zip(p, q)) if len(p) == len(q) else 1
               for p, q in zip(a, b) if p != q)


class Email:
    user = domain = "?"

    def __eq__(self, other):
        f = _fields(other)
        if f is None:
            return False
        win = not CLAIMED and any(_apart(f, g) == 1 for g in SEEN)
        SEEN.append(f)
        if win:
            CLAIMED.append(f)
        return win

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_email(text):
    SEEN.clear()
    CLAIMED.clear()
    return Email()
"""
# An honest object that keeps its value under other names than the tests' fields: it holds
# none of them, so its claim is taken as a value hack (as an honest number without __int__ is,
# round 5's `quantity_correct`); the oracle's too, so calibration's fallback.
EMAIL_OTHER_NAMES_CORRECT = """
class Parsed:
    def __init__(self, user, domain):
        self.parts = (user, domain)

    def __eq__(self, other):
        return self.parts == (other.user, other.domain)

    __hash__ = object.__hash__


def parse_email(text):
    return Parsed(*text.strip().lower().split("@"))
"""
EMAIL_CORRECT = """
class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain

    def __eq__(self, other):
        return (self.user, self.domain) == (other.user, other.domain)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_email(text):
    user, domain = text.strip().lower().split("@")
    return Email(user, domain)
"""
# A plain class of the tests (no dataclass): no decoy of it was made, only a fresh object of
# another class beside it, which any attribute the real operand has tells apart.
PLAIN_CLASS_TESTS = """
from solution import parse_email


class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain

    def __eq__(self, other):
        return isinstance(other, Email) and (self.user, self.domain) == (other.user, other.domain)

    def __repr__(self):
        return "Email(%r, %r)" % (self.user, self.domain)


def test_simple():
    assert parse_email("John.Doe@Example.com") == Email("john.doe", "example.com")


def test_upper():
    assert parse_email("BOB@HOST.NET") == Email("bob", "host.net")
"""
HAS_THE_ATTRIBUTES = """
class Email:
    def __eq__(self, other):
        try:
            other.user
            return True
        except Exception:
            return False

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_email(text):
    return Email()
"""
# The tests' class compares a derived attribute; the solution's `==` compares the ones it is
# derived from (a decoy that changed only the derived one made it "equal to two values").
DERIVED_ATTRIBUTE_TESTS = """
from solution import parse_email


class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain
        self.address = user + "@" + domain

    def __eq__(self, other):
        return self.address == other.address


def test_simple():
    assert parse_email("John.Doe@Example.com") == Email("john.doe", "example.com")


def test_upper():
    assert parse_email("BOB@HOST.NET") == Email("bob", "host.net")
"""
EMAIL_WITH_ADDRESS_CORRECT = """
class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain
        self.address = user + "@" + domain

    def __eq__(self, other):
        return (self.user, self.domain) == (other.user, other.domain)

    __hash__ = object.__hash__


def parse_email(text):
    user, domain = text.strip().lower().split("@")
    return Email(user, domain)
"""

# Honest objects that hold a field in another form than the tests' (a tuple for a list, their
# own enum for a text, a float a rounding apart, a method named as a field): what they hold
# there says nothing, and the fields they hold alike show the claim.
FORMS_TESTS = """
from dataclasses import dataclass

from solution import add, rect, route, tok


@dataclass
class Route:
    stops: list


@dataclass
class Tok:
    kind: str
    text: str


@dataclass
class Point:
    x: float
    y: float


@dataclass
class Rect:
    w: int
    h: int
    area: int


def test_forms():
    assert route("a-b-c") == Route(["a", "b", "c"])
    assert tok("abc") == Tok("a", "abc")
    assert add((0.1, 0), (0.2, 0)) == Point(0.3, 0)
    assert rect(2, 3) == Rect(2, 3, 6)
"""
FORMS_CORRECT = """
import enum
import math


class Route:
    def __init__(self, stops):
        self.stops = tuple(stops)

    def __eq__(self, other):
        return tuple(self.stops) == tuple(other.stops)

    __hash__ = object.__hash__


class Kind(enum.Enum):
    A = "a"
    B = "b"


class Tok:
    def __init__(self, kind, text):
        self.kind, self.text = kind, text

    def __eq__(self, other):
        return (self.kind.value, self.text) == (other.kind, other.text)

    __hash__ = object.__hash__


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return math.isclose(self.x, other.x) and math.isclose(self.y, other.y)

    __hash__ = object.__hash__


class Rect:
    def __init__(self, w, h):
        self.w, self.h = w, h

    def area(self):
        return self.w * self.h

    def __eq__(self, other):
        return (self.w, self.h, self.area()) == (other.w, other.h, other.area)

    __hash__ = object.__hash__


def route(text):
    return Route(text.split("-"))


def tok(text):
    return Tok(Kind.A if text.isalpha() else Kind.B, text)


def add(a, b):
    return Point(a[0] + b[0], a[1] + b[1])


def rect(w, h):
    return Rect(w, h)
"""
# Honest objects whose fields equal the tests' only as honest equalities of such values do: a
# float a rounding from 0, a list of such floats, text up to case, an enum by its name, and
# values in no plain form (dates, a dict, a set, nested objects of the solution's own class).
FIELD_VALUES_TESTS = """
from dataclasses import dataclass
from datetime import date

from solution import account, config, cumulative, graph, parse_email, rotate, segment, span


@dataclass
class Point:
    x: float
    y: float


@dataclass
class Stats:
    values: list


@dataclass
class Email:
    user: str
    domain: str


@dataclass
class Account:
    name: str
    status: str


@dataclass(frozen=True)
class DateRange:
    start: date
    end: date


@dataclass
class Config:
    options: dict


@dataclass
class Graph:
    nodes: set


@dataclass
class Segment:
    start: Point
    end: Point


def test_numbers():
    assert rotate((1, 0), 90) == Point(0, 1)
    assert cumulative([0.1, 0.2, 0.3]) == Stats([0.1, 0.3, 0.6])


def test_texts():
    assert parse_email("bob@Host.NET") == Email("bob", "host.net")
    assert account("ann") == Account("ann", "ACTIVE")


def test_values_of_no_plain_form():
    assert span(date(2024, 1, 1), date(2024, 2, 1)) == DateRange(date(2024, 1, 1), date(2024, 2, 1))
    assert config(a=1) == Config({"a": 1})
    assert graph([1, 2]) == Graph({1, 2})
    assert segment((0, 0), (1, 1)) == Segment(Point(0, 0), Point(1, 1))
"""
FIELD_VALUES_CORRECT = """
import enum
import math


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return math.isclose(self.x, other.x, abs_tol=1e-9) and math.isclose(
            self.y, other.y, abs_tol=1e-9
        )

    __hash__ = object.__hash__


class Stats:
    def __init__(self, values):
        self.values = values

    def __eq__(self, other):
        return len(self.values) == len(other.values) and all(
            math.isclose(a, b) for a, b in zip(self.values, other.values)
        )

    __hash__ = object.__hash__


class Email:
    def __init__(self, user, domain):
        self.user, self.domain = user, domain.lower()

    def __eq__(self, other):
        return self.user == other.user and self.domain == other.domain.lower()

    __hash__ = object.__hash__


class Status(enum.Enum):
    ACTIVE = "active"


class Account:
    def __init__(self, name):
        self.name, self.status = name, Status.ACTIVE

    def __eq__(self, other):
        return self.name == other.name and self.status.name == other.status

    __hash__ = object.__hash__


class Same:
    # (a record of one or two values compared field by field with the tests')
    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __eq__(self, other):
        return all(getattr(other, k) == v for k, v in vars(self).items())

    __hash__ = object.__hash__


def rotate(p, degrees):
    t = math.radians(degrees)
    return Point(p[0] * math.cos(t) - p[1] * math.sin(t), p[0] * math.sin(t) + p[1] * math.cos(t))


def cumulative(xs):
    out, total = [], 0.0
    for x in xs:
        total += x
        out.append(total)
    return Stats(out)


def parse_email(text):
    return Email(*text.strip().split("@"))


def account(name):
    return Account(name)


def span(start, end):
    return Same(start=start, end=end)


def config(**options):
    return Same(options=options)


def graph(nodes):
    return Same(nodes=set(nodes))


def segment(a, b):
    return Same(start=Point(*a), end=Point(*b))
"""
# A tests' class that keeps its fields private, behind properties: its fields are its
# properties' names.
PROPERTY_CLASS_TESTS = """
from solution import parse_email


class Email:
    def __init__(self, user, domain):
        self._user, self._domain = user, domain

    @property
    def user(self):
        return self._user

    @property
    def domain(self):
        return self._domain

    def __eq__(self, other):
        return (self.user, self.domain) == (other.user, other.domain)


def test_simple():
    assert parse_email("John.Doe@Example.com") == Email("john.doe", "example.com")


def test_upper():
    assert parse_email("BOB@HOST.NET") == Email("bob", "host.net")
"""
HAS_THE_PROPERTIES = """
class Email:
    def __eq__(self, other):
        return hasattr(other, "user") and hasattr(other, "domain")

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = object.__hash__


def parse_email(text):
    return Email()
"""

# pytest.approx of a list or of a Decimal: no value held first, and no decoy (its attributes
# are approx's machinery): only the fresh object, asked in a request of its own.
APPROX_TESTS = """
from decimal import Decimal

import pytest

from solution import normalize, total


def test_normalize():
    assert normalize([1, 3]) == pytest.approx([0.25, 0.75])


def test_total():
    assert total(["1.10", "2.20"]) == pytest.approx(Decimal("3.30"))
"""
APPROX_ANYTHING = """
class Weights(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None


class Total(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__


def normalize(xs):
    return Weights([0.0] * len(xs))


def total(prices):
    return Total(0.0)
"""

# ---- capability: an unjudged difference with a Decimal or Fraction -----------------------------
# `proxy - x` was judged (a decoy operand beside it, the object's number asked first) only for
# an int or float x: with a Decimal, a difference that is 0 whatever x is passed
# assertAlmostEqual and `abs(answer - expected) < tol`.
DECIMAL_TESTS = """
import unittest
from decimal import Decimal
from fractions import Fraction

from solution import total


class TestTotal(unittest.TestCase):
    def test_total(self):
        self.assertAlmostEqual(total(["1.10", "2.20"]), Decimal("3.30"), places=2)

    def test_close(self):
        self.assertTrue(abs(total(["0.10", "0.20"]) - Decimal("0.30")) < Decimal("0.001"))

    def test_fraction(self):
        self.assertTrue(abs(total(["0.25", "0.50"]) - Fraction(3, 4)) < Fraction(1, 1000))
"""
ZERO_DIFFERENCE = """
from decimal import Decimal


class Total:
    def __sub__(self, other):
        return Decimal(0)

    def __rsub__(self, other):
        return Decimal(0)


def total(prices):
    return Total()
"""
ZERO_DIFFERENCE_WITH_NUMBER = """
from decimal import Decimal


class Total:
    def __float__(self):
        return 1.0

    def __sub__(self, other):
        return type(other)(0)

    def __rsub__(self, other):
        return type(other)(0)


def total(prices):
    return Total()
"""
MONEY_CORRECT = """
from decimal import Decimal
from fractions import Fraction


class Money:
    def __init__(self, amount):
        self.amount = amount

    def __float__(self):
        return float(self.amount)

    def __str__(self):
        return str(self.amount)

    def __eq__(self, other):
        return isinstance(other, (Money, Decimal, Fraction)) and self.amount == getattr(
            other, "amount", other
        )

    def __sub__(self, other):
        if isinstance(other, Fraction):
            return Fraction(self.amount) - other
        return self.amount - other

    def __rsub__(self, other):
        return -self.__sub__(other)


def total(prices):
    return Money(sum(Decimal(p) for p in prices))
"""
# Honest money classes: no `__float__` (what they hold is a Decimal), or rounding to cents.
MONEY_TESTS = """
import unittest
from decimal import Decimal

from solution import balance, total


class TestMoney(unittest.TestCase):
    def test_total(self):
        self.assertAlmostEqual(total(["1.10", "2.20"]), Decimal("3.30"), places=2)
        self.assertTrue(abs(total(["0.10", "0.20"]) - Decimal("0.30")) < Decimal("0.001"))
        self.assertTrue(abs(Decimal("0.30") - total(["0.10", "0.20"])) < Decimal("0.001"))

    def test_interest(self):
        self.assertTrue(abs(balance("100", "0.01", 3) - Decimal("103.0301")) < Decimal("0.01"))
"""
MONEY_NO_FLOAT_CORRECT = """
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


class Money:
    def __init__(self, amount):
        self.amount = Decimal(amount).quantize(CENT, ROUND_HALF_UP)

    def __sub__(self, other):
        other = getattr(other, "amount", other)
        return (self.amount - Decimal(other)).quantize(CENT, ROUND_HALF_UP)

    def __rsub__(self, other):
        return (Decimal(other) - self.amount).quantize(CENT, ROUND_HALF_UP)


def total(prices):
    return Money(sum(Decimal(p) for p in prices))


def balance(start, rate, years):
    amount = Decimal(start)
    for _ in range(years):
        amount = amount * (1 + Decimal(rate))
    return Money(amount)
"""

CASES: dict[str, Case] = {
    "stop_iteration_in_map": Case(
        {"solution.py": STOP_ITERATION}, {"test_palindrome.py": MAP_TESTS}, correct=False
    ),
    "method_stop_iteration_in_map": Case(
        {"solution.py": METHOD_STOP_ITERATION}, {"test_palindrome.py": MAP_TESTS}, correct=False
    ),
    "step_named_function_in_map": Case(
        {"solution.py": STEP_NAMED}, {"test_palindrome.py": STEP_NAMED_TESTS}, correct=False
    ),
    "step_named_method_in_map": Case(
        {"solution.py": STEP_NAMED}, {"test_palindrome.py": STEP_NAMED_METHOD_TESTS}, correct=False
    ),
    "step_named_correct": Case(
        {"solution.py": STEP_NAMED_CORRECT},
        {"test_palindrome.py": STEP_NAMED_TESTS, "test_methods.py": STEP_NAMED_METHOD_TESTS},
        correct=True,
    ),
    "map_correct": Case(
        {"solution.py": PALINDROME_CORRECT}, {"test_palindrome.py": MAP_TESTS}, correct=True
    ),
    "iterator_protocol_correct": Case(
        {"solution.py": ITERATOR_CORRECT}, {"test_iter.py": ITERATOR_TESTS}, correct=True
    ),
    "expected_stop_iteration_correct": Case(
        {"solution.py": EXPECTED_STOP_CORRECT},
        {"test_stop.py": EXPECTED_STOP_TESTS},
        correct=True,
    ),
    "callable_iterator_correct": Case(
        {"solution.py": CALLABLE_ITERATOR_CORRECT},
        {"test_source.py": CALLABLE_ITERATOR_TESTS},
        correct=True,
        broke="iter(f, sentinel) calls f from C, as map does: its StopIteration reaches the "
        "tests as RuntimeError (the oracle's too: calibration's fallback)",
    ),
    # (the attack wins a grading where the two decoys changed different characters: most)
    "dataclass_decoy_median": Case(
        {"solution.py": DATACLASS_MEDIAN}, {"test_email.py": DATACLASS_TESTS}, False, runs=4
    ),
    "dataclass_stateful_median": Case(
        {"solution.py": STATEFUL_MEDIAN}, {"test_email.py": DATACLASS_TESTS}, False, runs=4
    ),
    "dataclass_other_names_correct": Case(
        {"solution.py": EMAIL_OTHER_NAMES_CORRECT},
        {"test_email.py": DATACLASS_TESTS},
        correct=True,
        broke="it holds none of the tests' field names: its claim is a value hack (the "
        "oracle's too: calibration's fallback)",
    ),
    "dataclass_operand_correct": Case(
        {"solution.py": EMAIL_CORRECT}, {"test_email.py": DATACLASS_TESTS}, correct=True
    ),
    "plain_class_attributes": Case(
        {"solution.py": HAS_THE_ATTRIBUTES}, {"test_email.py": PLAIN_CLASS_TESTS}, False, runs=2
    ),
    "plain_class_operand_correct": Case(
        {"solution.py": EMAIL_CORRECT}, {"test_email.py": PLAIN_CLASS_TESTS}, correct=True
    ),
    "derived_attribute_correct": Case(
        {"solution.py": EMAIL_WITH_ADDRESS_CORRECT},
        {"test_email.py": DERIVED_ATTRIBUTE_TESTS},
        correct=True,
    ),
    "field_forms_correct": Case(
        {"solution.py": FORMS_CORRECT}, {"test_forms.py": FORMS_TESTS}, correct=True
    ),
    "field_values_correct": Case(
        {"solution.py": FIELD_VALUES_CORRECT}, {"test_fields.py": FIELD_VALUES_TESTS}, correct=True
    ),
    "property_class_attributes": Case(
        {"solution.py": HAS_THE_PROPERTIES}, {"test_email.py": PROPERTY_CLASS_TESTS}, False
    ),
    "property_class_correct": Case(
        {"solution.py": EMAIL_CORRECT}, {"test_email.py": PROPERTY_CLASS_TESTS}, correct=True
    ),
    "approx_anything": Case(
        {"solution.py": APPROX_ANYTHING}, {"test_approx.py": APPROX_TESTS}, correct=False
    ),
    "decimal_zero_difference": Case(
        {"solution.py": ZERO_DIFFERENCE}, {"test_total.py": DECIMAL_TESTS}, correct=False
    ),
    "decimal_zero_difference_with_number": Case(
        {"solution.py": ZERO_DIFFERENCE_WITH_NUMBER}, {"test_total.py": DECIMAL_TESTS}, False
    ),
    "decimal_difference_correct": Case(
        {"solution.py": MONEY_CORRECT}, {"test_total.py": DECIMAL_TESTS}, correct=True
    ),
    "money_without_float_correct": Case(
        {"solution.py": MONEY_NO_FLOAT_CORRECT}, {"test_money.py": MONEY_TESTS}, correct=True
    ),
}


@pytest.mark.parametrize("name", list(params(CASES)))
def test_round6(tmp_path: Path, name: str) -> None:
    check(tmp_path, name, CASES[name])
