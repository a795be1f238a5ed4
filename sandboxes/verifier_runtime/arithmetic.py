"""Judging arithmetic of an object of the tested code with a plain value of the tests
(judging.Judge.arithmetic): `x - 3.3`, `x / math.pi`, `2 ** x`, `x - datetime(...)`.

A tolerance check runs on such an answer (`abs(x / pi - 1) < 1e-9`, `abs(t - expected) <
timedelta(seconds=1)`), so an operator that answers what the check wants, whatever the operand,
passes a wrong solution. Each is asked with the real operand and a decoy in one probe, and the
two answers must be what one value gives for both (`explained`), and what the number the object
held before it saw the operand gives (`follows`).

The decoy looks like the operand (`decoy`): a number has the same type, sign, number of digits
and exponent (a `Decimal("0.30")` gets `Decimal("0.74")`, an int an int, a float as many
significant digits), a date or time is moved by whole units of its own precision; otherwise
the operator could tell it by its look (round 7: a difference that answered 0 to a `Decimal`
of few digits and 1000 to the decoy, which had many).

Standard library only, Python >= 3.8.
"""

import datetime
import decimal
import fractions
import math
import operator
import random
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
proxies = _load("proxies")

rng = random.SystemRandom()  # decoys: neither the tests' seeds nor the tested code sway it

OPERATORS = proxies.JUDGED_ARITHMETIC
# A sum or difference is judged with a date or duration too; a product or quotient of those
# is rare in tests, and its answers no tolerance check reads.
_SUMS = frozenset(("add", "radd", "sub", "rsub"))
# The numbers judged: the builtins', and the standard library's exact ones, which tests compare
# money and ratios with (`assertAlmostEqual(x, Decimal(...))`). By name: the tests' process
# need not import them; their classes are final in practice.
_EXACT = frozenset((("decimal", "Decimal"), ("fractions", "Fraction")))
_TIMES = frozenset((("datetime", "datetime"), ("datetime", "date"), ("datetime", "timedelta")))


def _named(v, names):
    t = type(v)
    return (getattr(t, "__module__", ""), t.__qualname__) in names


def number(v):
    return type(v) in (int, float) or _named(v, _EXACT)


def judged(op, v):
    """Whether `x op v` is judged: `v` a finite number (not NaN), or a date or duration in a
    sum or difference. Anything else (a proxy, the tests' own object) goes as it is."""
    if op in _SUMS and _named(v, _TIMES):
        return True
    if not number(v):
        return False
    try:
        return math.isfinite(v)
    except (ArithmeticError, ValueError):  # (a Decimal signalling NaN)
        return False


def decoy(v):
    """A value of `v`'s type that differs from it but shows the same look: a number of the same
    sign, number of digits and exponent (`_digits_decoy`), a Fraction of the same denominator,
    a date or duration moved by whole units of its own precision (`_moved`)."""
    if _named(v, _TIMES):
        return _moved(v)
    if type(v) is int:
        return int(_digits_decoy(decimal.Decimal(v)))
    if type(v) is float:
        return float(_digits_decoy(decimal.Decimal(repr(v))))
    if isinstance(v, decimal.Decimal):
        return _digits_decoy(v)
    return _fraction_decoy(v)


def _digits_decoy(d):
    """A Decimal with `d`'s sign, exponent and number of digits, its coefficient at least a
    tenth of that range away from `d`'s (far enough that rounding to a coarser unit, as money
    rounds to cents, still tells the two answers apart)."""
    sign, digits, exponent = d.as_tuple()
    n = len(digits)
    low, high = (10 ** (n - 1) if n > 1 else 1), 10**n - 1
    coefficient = int("".join(map(str, digits)))
    apart = 10 ** (n - 1) if n > 1 else 1
    while True:
        drawn = rng.randint(low, high)
        if abs(drawn - coefficient) >= apart:
            return decimal.Decimal((sign, tuple(map(int, str(drawn))), exponent))


def _fraction_decoy(f):
    """A Fraction of `f`'s denominator (in lowest terms still: a numerator prime to it) and a
    numerator of as many digits, or, where none is found soon, of any denominator."""
    drawn = _digits_decoy(decimal.Decimal(f.numerator))
    for _ in range(32):
        if math.gcd(int(drawn), f.denominator) == 1:
            break
        drawn = _digits_decoy(decimal.Decimal(f.numerator))
    return fractions.Fraction(int(drawn), f.denominator)


def _moved(v):
    """`v` moved by one to nine whole units of its own precision, either way: a day for a date
    or a midnight, else the coarsest of hour, minute, second that divides its time (a second
    at the finest: its microseconds stay as they were), so no field it leaves at zero changes
    and an honest class that rounds to that unit still answers apart."""
    if type(v) is datetime.date:
        unit = datetime.timedelta(days=1)
    else:
        since = v if type(v) is datetime.timedelta else v - v.replace(hour=0, minute=0, second=0)
        whole = since - datetime.timedelta(microseconds=since.microseconds)
        unit = next((u for u in _UNITS if whole % u == datetime.timedelta(0)), _UNITS[-1])
    try:
        return v + rng.choice((-1, 1)) * rng.randint(1, 9) * unit
    except OverflowError:  # at the calendar's end: the other way
        return v - rng.randint(1, 9) * unit


_UNITS = tuple(datetime.timedelta(seconds=s) for s in (86400, 3600, 60, 1))


def _reflected(f):
    return lambda h, a: f(a, h)


# op: the answer value h gives for operand a
_APPLY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
}  # fmt: skip
_APPLY.update({"r" + name: _reflected(f) for name, f in _APPLY.items()})


# op: the value x whose `x op a` is r (the operators that give it back; not //, %, **)
_SUBJECT = {
    "add": lambda a, r: r - a,
    "sub": lambda a, r: r + a,
    "rsub": lambda a, r: a - r,
    "mul": lambda a, r: r / a,
    "truediv": lambda a, r: r * a,
    "rtruediv": lambda a, r: a / r,
}
_SUBJECT.update(radd=_SUBJECT["add"], rmul=_SUBJECT["mul"])


def explained(op, other, twin_operand, real, twin):
    """Whether the answers `real` (to `x op other`) and `twin` (to `x op twin_operand`) are what
    one value x gives for both: x solved from the real answer, the decoy's answer must lie
    nearer what that x gives for the decoy than the real answer does (half the honest gap,
    so rounding to a coarser unit passes). Answers that are no plain number, date or duration,
    an operator whose answer does not give back its subject (//, %, **), or values out of
    float's range say nothing. Answering the same to both where an honest x would not fails."""
    subject = _SUBJECT.get(op)
    if subject is None:
        return True
    values = [other, twin_operand, real, twin]
    if all(number(v) for v in values):
        try:
            values = [float(v) for v in values]
        except (ArithmeticError, ValueError):
            return True
    elif not all(_named(v, _TIMES) for v in values):
        return True
    a, d, r, t = values
    try:
        expected = _APPLY[op](subject(a, r), d)
        off, gap = abs(t - expected), abs(expected - r)
        if type(off) is float:
            if not all(math.isfinite(v) for v in (expected, off, gap, r, t)):
                return True
            return off <= gap / 2 + _NOISE * max(abs(r), abs(t), abs(expected))
        return off <= gap / 2
    except (ArithmeticError, TypeError, ValueError):  # (a date's sum with a date, a zero)
        return True


# Float arithmetic's rounding grown over a computation: far less than any test's tolerance.
_NOISE = 1e-9


def follows(op, held, other, answer):
    """Whether a plain-number answer to `x op other` is what x's own number `held` (asked
    before it saw `other`) gives, in float arithmetic (an exact answer as a float), up to
    float noise in `held` itself: a `//` or `%` at a step of its staircase may land on either
    side (a Decimal's 0.3 // 0.1 is 3, its float's 2). No held float: no number to give it."""
    if type(held) is not float or not number(answer):
        return False
    try:
        answer = float(answer)
        for h in (held, held * (1 - _NOISE), held * (1 + _NOISE)):
            expected = _APPLY[op](h, other)
            if type(expected) is complex:  # (a negative number's fractional power)
                return False
            if expected != expected or answer != answer:  # NaN: only a NaN gives a NaN
                if expected != expected and answer != answer:
                    return True
            elif abs(answer - expected) <= _NOISE * max(1.0, abs(expected), abs(h), abs(other)):
                return True
    except (ArithmeticError, ValueError):  # (0 ** -1, an overflow: no number to give)
        return False
    return False
