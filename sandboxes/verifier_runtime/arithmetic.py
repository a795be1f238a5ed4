"""Judging arithmetic of an object of the tested code with a plain value of the tests
(judging.Judge.arithmetic): `x - 3.3`, `x / math.pi`, `2 ** x`, `divmod(x, 1)`, `d -= 3.3`,
`x - datetime(...)`.

A tolerance check runs on such an answer (`abs(x / pi - 1) < 1e-9`, `abs(t - expected) <
timedelta(seconds=1)`), so an operator that answers what the check wants, whatever the operand,
passes a wrong solution. Each is asked with the real operand and a decoy in one probe, and the
two answers must be what one value gives for both (`explained`), and what the number the object
held before it saw the operand gives (`follows`; `asks_held` says where that number is asked).
An in-place operator (`__isub__`) is judged as its binary one (`binary`), its decoy asked of a
copy of the object: asked of the object itself, it would change it twice.

The decoy looks like the operand (`decoy`): a number has the same type, sign, number of digits,
trailing zeros and exponent (a `Decimal("0.30")` gets `Decimal("0.70")`, an int an int, a float
the same look in its repr), a date or time is moved by whole units of its own precision;
otherwise the operator could tell it by its look (round 7: a difference that answered 0 to a
`Decimal` of few digits and 1000 to the decoy, which had many; round 8: one that took the
operand with trailing zeros for the tests' and claimed to hold it, answering both as that one
value would). Zero has no decoy of its look, so with a zero operand the object's number is
asked whatever the operand's type.

Standard library only, Python >= 3.8.
"""

import datetime
import decimal
import math
import operator
import random
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
proxies = _load("proxies")

rng = random.SystemRandom()  # decoys: neither the tests' seeds nor the tested code sway it

OPERATORS = proxies.JUDGED_ARITHMETIC
_IN_PLACE = frozenset("iadd isub imul itruediv ifloordiv imod ipow".split())
# A sum or difference is judged with a date or duration too; a product or quotient of those
# is rare in tests, and its answers no tolerance check reads.
_SUMS = frozenset(("add", "radd", "sub", "rsub"))
# The numbers judged: the builtins', and the standard library's exact ones, which tests compare
# money and ratios with (`assertAlmostEqual(x, Decimal(...))`). By name: the tests' process
# need not import them; their classes are final in practice.
_EXACT = frozenset((("decimal", "Decimal"), ("fractions", "Fraction")))
_TIMES = frozenset((("datetime", "datetime"), ("datetime", "date"), ("datetime", "timedelta")))
# Whole quotients, remainders and powers: no honest money class rounds these to cents, so with
# a Decimal or Fraction too the answer is what the object's float gives, up to float noise.
_UNROUNDED = frozenset("floordiv rfloordiv mod rmod pow rpow".split())
_DIVMODS = frozenset(("divmod", "rdivmod"))  # (their pairs: the same)


def _named(v, names):
    t = type(v)
    return (getattr(t, "__module__", ""), t.__qualname__) in names


def number(v):
    return type(v) in (int, float) or _named(v, _EXACT)


def plain(v):
    """A plain number, or divmod's pair of them: what `follows` judges."""
    return number(v) or (type(v) is tuple and len(v) == 2 and all(map(number, v)))


def binary(op):
    """The binary operator an in-place one is judged as (`isub`: `sub`)."""
    return op[1:] if op in _IN_PLACE else op


def in_place(op):
    return op in _IN_PLACE


def judged(op, v):
    """Whether `x op v` is judged: `v` a finite number (not NaN), or a date or duration in a
    sum or difference. Anything else (a proxy, the tests' own object) goes as it is."""
    if binary(op) in _SUMS and _named(v, _TIMES):
        return True
    if not number(v):
        return False
    try:
        return math.isfinite(v)
    except (ArithmeticError, ValueError):  # (a Decimal signalling NaN)
        return False


def asks_held(op, other):
    """Whether the object is asked for its float before it sees `other`, for `follows`: with
    an int or float always; with a Decimal or Fraction for //, %, **, divmod, and where it is
    zero (no decoy looks like zero: `decoy`); never with a date. A Decimal's + - * / are judged
    by the decoy alone: honest money classes round those to cents, and hold no float often."""
    if type(other) in (int, float):
        return True
    if not number(other):
        return False
    return binary(op) in _UNROUNDED or op in _DIVMODS or other == 0


def follows_objects(op):
    """Whether an answer that is an object must hold what the object's float gives (judging.py
    `_holds_after`): in place, and for //, % and **, whose honest answers are not rounded (+ -
    * / of money classes are, to cents, into objects of their own)."""
    return op in _IN_PLACE or op in _UNROUNDED


def unexplained(op, held, other, twin_operand, real, twin):
    """Why the answers `real` (to `x op other`) and `twin` (to `x op twin_operand`) are a value
    hack, a text with "%s" for the operator; None where they are not: no one value gives both
    (`explained`), or a plain answer is not what the object's float `held` gives (`follows`,
    where `asks_held`; with an int or float operand, an object that holds no float has none
    to give, as it has none to show; with a Decimal or Fraction, money that holds no float is
    judged by the decoy alone)."""
    op = binary(op)
    if isinstance(twin, BaseException) and not isinstance(real, BaseException):
        # The decoy looks like the operand, so an honest operator raises for both or for
        # neither; an answer beside a decoy that raised (or whose object could not be copied
        # to be asked it, in place) has nothing to be judged by, and would pass as it is.
        return "a %s that raised for an operand that looks like the real one"
    if not explained(op, other, twin_operand, real, twin):
        if real == twin:  # (plain numbers, pairs or dates: `explained` judges no other)
            return "the same %s for different operands"
        return "a %s that no one value gives for both operands"
    if plain(real) and asks_held(op, other) and not follows(op, held, other, real):
        if type(held) is float or type(other) in (int, float):
            return "a %s that its own number does not give"
    return None


def decoy(v):
    """A value of `v`'s type that differs from it but shows the same look: a number of the same
    sign, number of digits, trailing zeros and exponent (`_digits_decoy`; a float's in its
    repr), a Fraction of the same denominator, a date or duration moved by whole units of its
    own precision (`_moved`)."""
    if _named(v, _TIMES):
        return _moved(v)
    if type(v) is int:
        return int(_digits_decoy(decimal.Decimal(v)))
    if type(v) is float:
        return _float_decoy(v)
    if isinstance(v, decimal.Decimal):
        return _digits_decoy(v)
    return _fraction_decoy(v)


def _digits_decoy(d):
    """A Decimal with `d`'s sign, exponent, number of digits and trailing zeros (`3600` gets
    `4700`, `0.30` gets `0.70`), the digits before those zeros at least a tenth of their range
    away from `d`'s (far enough that rounding to a coarser unit, as money rounds to cents,
    still tells the two answers apart). A zero gets one to nine units of its exponent: no
    other value looks like zero (`asks_held`)."""
    sign, digits, exponent = d.as_tuple()
    text = "".join(map(str, digits))
    core = text.rstrip("0") or "0"
    zeros = len(text) - len(core) if core != "0" else 0
    n = len(core)
    low, high = (10 ** (n - 1) if n > 1 else 1), 10**n - 1
    apart = 10 ** (n - 1) if n > 1 else 1
    while True:
        drawn = rng.randint(low, high)
        if drawn % 10 and abs(drawn - int(core)) >= apart:
            drawn = str(drawn) + "0" * zeros
            return decimal.Decimal((sign, tuple(map(int, drawn)), exponent))


def _float_decoy(v):
    """`_digits_decoy` of the float's repr, drawn again (a few times) until the decoy's repr
    has the same look (a float of as many digits may print with fewer) and is a float apart
    from `v` (at the ends of float's range one may round to `v`, or to infinity)."""
    look, found = _look(v), None
    for _ in range(32):
        drawn = float(_digits_decoy(decimal.Decimal(repr(v))))
        if drawn != v and math.isfinite(drawn):
            found = drawn
            if v == 0 or _look(drawn) == look:  # (no decoy looks like zero)
                break
    return found if found is not None else v / 2


def _look(v):
    sign, digits, exponent = decimal.Decimal(repr(v)).as_tuple()
    text = "".join(map(str, digits))
    return sign, len(text), len(text) - len(text.rstrip("0")), exponent


def _fraction_decoy(f):
    """A Fraction of `f`'s denominator (in lowest terms still: a numerator prime to it) and a
    numerator of its look, or, where none is found soon, of any denominator."""
    drawn = _digits_decoy(decimal.Decimal(f.numerator))
    for _ in range(32):
        if math.gcd(int(drawn), f.denominator) == 1:
            break
        drawn = _digits_decoy(decimal.Decimal(f.numerator))
    # (Fraction's own class: only a Fraction operand gets here, so the tests' process need
    # not import fractions, whose module compiles a regular expression at import)
    return type(f)(int(drawn), f.denominator)


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


def _truncated_divmod(a, b):
    """divmod with its quotient rounded toward zero, as a Decimal's is (-7 // 2 is -3 there)."""
    q = float(math.trunc(a / b))
    return q, a - q * b


# op: the answer value h gives for operand a
_APPLY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "divmod": divmod,
}  # fmt: skip
_APPLY.update({"r" + name: _reflected(f) for name, f in _APPLY.items()})
# op: the answer of an honest class that holds a Decimal, where it differs
_TRUNCATED = {
    "floordiv": lambda a, b: _truncated_divmod(a, b)[0],
    "mod": lambda a, b: _truncated_divmod(a, b)[1],
    "divmod": _truncated_divmod,
}
_TRUNCATED.update({"r" + name: _reflected(f) for name, f in _TRUNCATED.items()})


def _answers(op, h, a):
    """The answers value h may give for operand a: Python's, and a Decimal's where it differs."""
    yield _APPLY[op](h, a)
    if op in _TRUNCATED:
        yield _TRUNCATED[op](h, a)


def _roots(a, r):
    """The x whose `x ** a` is r: r's real root, and its negation for a power that may be even
    (x ** 0 is 1 for every x: no x)."""
    if a == 0:
        raise ValueError("no subject")
    root = abs(r) ** (1 / a)
    return [-root] if r < 0 else [root, -root]


def _exponent(a, r):
    """The x whose `a ** x` is r (a positive base other than 1)."""
    return [math.log(r) / math.log(a)]


# op: the values x whose `x op a` is r (the operators that give it back: not //, %, whose
# answers many values give; divmod's pair: `_divmod_explained`)
_SUBJECT = {
    "add": lambda a, r: [r - a],
    "sub": lambda a, r: [r + a],
    "rsub": lambda a, r: [a - r],
    "mul": lambda a, r: [r / a],
    "truediv": lambda a, r: [r * a],
    "rtruediv": lambda a, r: [a / r],
    "pow": _roots,
    "rpow": _exponent,
}
_SUBJECT.update(radd=_SUBJECT["add"], rmul=_SUBJECT["mul"])


def explained(op, other, twin_operand, real, twin):
    """Whether the answers `real` (to `x op other`) and `twin` (to `x op twin_operand`) are what
    one value x gives for both: x solved from the real answer, the decoy's answer must lie
    nearer what that x gives for the decoy than the real answer does (half the honest gap,
    so rounding to a coarser unit passes). Answers that are no plain number, date or duration,
    an operator whose answer does not give back its subject (//, %), or values out of float's
    range say nothing. Answering the same to both where an honest x would not fails."""
    op = binary(op)
    if op in _DIVMODS:
        return _divmod_explained(op, other, twin_operand, real, twin)
    solve = _SUBJECT.get(op)
    if solve is None:
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
        for x in solve(a, r):
            expected = _APPLY[op](x, d)
            off, gap = abs(t - expected), abs(expected - r)
            if type(off) is float:
                if not all(math.isfinite(v) for v in (expected, off, gap, r, t)):
                    return True
                if off <= gap / 2 + _NOISE * max(abs(r), abs(t), abs(expected)):
                    return True
            elif off <= gap / 2:
                return True
    except (ArithmeticError, TypeError, ValueError):  # (a date's sum with a date, a zero)
        return True
    return False


def _divmod_explained(op, other, twin_operand, real, twin):
    """divmod's pairs: x solved from the real one (q * a + r; reflected, (a - r) / q), the
    decoy's pair must be what that x gives, up to float noise (either side of a step of the
    staircase; a quotient rounded toward zero, as a Decimal's is)."""
    if not (number(other) and number(twin_operand) and plain(real) and plain(twin)):
        return True
    if type(real) is not tuple or type(twin) is not tuple:
        return True
    try:
        a, d = float(other), float(twin_operand)
        q, r = map(float, real)
        got = tuple(map(float, twin))
        x = q * a + r if op == "divmod" else (a - r) / q
        if not all(math.isfinite(v) for v in (a, d, q, r, x) + got):
            return True
        for y in (x, x * (1 - _NOISE), x * (1 + _NOISE)):
            for expected in _answers(op, y, d):
                if _close(got, expected, max(1.0, abs(y), abs(d))):
                    return True
    except (ArithmeticError, TypeError, ValueError):  # (q of 0: no x to solve for)
        return True
    return False


# Float arithmetic's rounding grown over a computation: far less than any test's tolerance.
_NOISE = 1e-9


def follows(op, held, other, answer):
    """Whether a plain answer to `x op other` (a number, or divmod's pair) is what x's own
    number `held` (asked before it saw `other`) gives, in float arithmetic (an exact answer
    as a float), up to float noise in `held` itself: a `//` or `%` at a step of its staircase
    may land on either side (a Decimal's 0.3 // 0.1 is 3, its float's 2); a quotient may be
    rounded toward zero, as a Decimal's is. No held float: no number to give it."""
    op = binary(op)
    if type(held) is not float or not plain(answer):
        return False
    try:
        got = tuple(map(float, answer)) if type(answer) is tuple else (float(answer),)
        other = float(other)
        for h in (held, held * (1 - _NOISE), held * (1 + _NOISE)):
            for expected in _answers(op, h, other):
                if _close(got, expected, max(1.0, abs(h), abs(other))):
                    return True
    except (ArithmeticError, ValueError):  # (0 ** -1, an overflow: no number to give)
        return False
    return False


def _close(got, expected, scale):
    """Whether the floats `got` are `expected` (a number or a pair) up to float noise of
    `scale` (NaN: only a NaN gives a NaN; a complex power: no plain answer gives it)."""
    expected = expected if type(expected) is tuple else (expected,)
    if len(expected) != len(got) or any(type(e) is complex for e in expected):
        return False
    for g, e in zip(got, map(float, expected)):  # noqa: B905 - (3.8; lengths checked)
        if e != e or g != g:
            if not (e != e and g != g):
                return False
        elif abs(g - e) > _NOISE * max(scale, abs(e)):
            return False
    return True
