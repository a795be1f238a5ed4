"""Judging a comparison's answer from the tested process (trusted.py's TrustedEndpoint).

Its one job: whether what a proxy answers to `==`, an ordering, `in` or arithmetic with a
number stands for a value it held, or is a value hack. Equality and ordering (`equality`,
`ordering`), the held value a claim must follow from (what the object was asked to hold
before it saw the operand: `holds`; arithmetic's are arithmetic.py's), and the decoys asked
beside the real operand (values one character, element or unit apart, far ones, shaped ones),
drawn from `rng`, which neither the tests' seeds nor the tested code sway.

Standard library only, Python >= 3.8.
"""

import collections
import copy
import dataclasses
import enum
import random
import string
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
rpc = _load("rpc")
arithmetic = _load("arithmetic")

rng = random.SystemRandom()  # decoys: neither the tests' seeds nor the tested code sway it


class Judge:
    """The trusted endpoint's comparisons that a value hack would win (trusted.py): each asks
    the tested process in one shuffled probe (`_probe`) and judges the answers with the
    functions below. `twins` (oid -> the decoy's answer) and `via` (id(proxy) -> the mirror
    whose real class answers for it: `judged_via`) are the endpoint's; `value_hack` reports."""

    def compare(self, proxy, op, other):
        if op in ("eq", "ne"):
            return equality(self, proxy, op, other)
        if op in COMPLEMENT and orderable(other):
            return ordering(self, proxy, op, other)
        return outcome(self._probe(proxy, [(op, other)])[0])

    def judged_via(self, proxy, mirror, method, args):
        """A judged special method of a tests' subclass's object reached by `super()` from the
        subclass's own (proxies.py `_or_inherited`): judged as any, the tested side answering
        each question with `mirror`'s real class's method (the object's own would call the
        tests' one again)."""
        self.via[id(proxy)] = mirror
        try:
            return method(proxy, *args)
        finally:
            self.via.pop(id(proxy), None)

    def _probe(self, proxy, asked, one_by_one=False):
        """The answers to [(operator, operand), ...] about `proxy`, asked in one request in an
        order the tested process cannot learn (shuffled here), and answered all at once: for
        a comparison or `in`, a bool reduced there (None: NotImplemented), so no question asked
        later can tell the real operand from the decoys; an exception the operator raised.
        `one_by_one`: a request per question (in that order), where no value the object held
        first judges its claim: asked together, every operand sits in one list the object's
        own code can read (off the stack, or the collector's objects) before it answers the
        first, and pick the real one by the decoys' shape (each one field apart from it)."""
        order = list(range(len(asked)))
        rng.shuffle(order)
        questions = [[asked[i][0], _unchanged(asked[i][1])] for i in order]
        if one_by_one:
            answers = []
            for question in questions:
                answer = self._ask(proxy, [question])
                if not isinstance(answer, list) or len(answer) != 1:
                    raise rpc.ProtocolError("a probe of one question answered otherwise")
                answers += answer
        else:
            answers = self._ask(proxy, questions)
        if not isinstance(answers, list) or len(answers) != len(asked):
            raise rpc.ProtocolError("a probe of %d questions answered otherwise" % len(asked))
        out = [None] * len(asked)
        for at, i in enumerate(order):
            answer = answers[at]
            if asked[i][0] in _TRUTHS and type(answer) is str and answer == rpc.UNSTABLE:
                # (an error, not False: the object claimed both, and the test must not pass)
                self.value_hack(proxy, asked[i][0], "a truth that changed when asked again")
                answer = TypeError("a comparison whose truth changed when asked again")
            elif asked[i][0] in _TRUTHS and not (
                answer is None or type(answer) is bool or isinstance(answer, BaseException)
            ):
                raise rpc.ProtocolError("a comparison answered with a %s" % type(answer).__name__)
            out[i] = answer
        return out

    def _ask(self, proxy, questions):
        via = self.via.get(id(proxy))
        if via is None:
            return self.request("probe", proxy, questions)
        return self.request("probe", proxy, questions, via)

    def arithmetic(self, proxy, op, other, *more):
        """`proxy op x` (or `x op proxy`) for +, -, *, /, //, % and ** with a plain number x,
        and + and - with a date or duration: the answer that makes `pytest.approx`,
        `assertAlmostEqual` and `abs(x / expected - 1) < tol` pass whatever is expected. Asked
        with a decoy that looks like x, and judged by arithmetic.py. Anything else (a proxy, a
        tests' object, `pow`'s modulus) is asked as it is: no request more per call."""
        if more or not arithmetic.judged(op, other):
            via = self.via.get(id(proxy))
            if via is not None:
                return self.request("inherited", via, "__%s__" % op, proxy, (other,) + more, ())
            return self.request("op", op, proxy, other, *more)
        # What it holds, asked before the operand (as in compare()); not with a Decimal or
        # Fraction, whose honest classes often hold no float and round as money does, nor with
        # a date: only the decoy's answer judges those.
        exact = type(other) not in (int, float)
        held = None if exact else self.request("held", proxy, "float")
        decoy = arithmetic.decoy(other)
        real, twin = self._probe(proxy, [(op, other), (op, decoy)])
        if not arithmetic.explained(op, other, decoy, real, twin):
            # (both plain numbers, or dates or durations: the only answers it judges)
            if real == twin:
                self.value_hack(proxy, op, "the same %s for different operands" % op)
            else:
                self.value_hack(proxy, op, "a %s that no one value gives for both operands" % op)
            return NotImplemented
        if _number(real) and not exact and not arithmetic.follows(op, held, other, real):
            self.value_hack(proxy, op, "a %s that its own number does not give" % op)
            return NotImplemented
        if isinstance(real, BaseException):
            raise rpc.leaked_stop(real, "a %s" % op)
        if op in _PAIRED:
            self._pair(real, twin)
        return real

    def _pair(self, real, twin):
        """Remember the decoy's answer beside the real one when both are objects of the tested
        process: a number taken from them later (abs, float, round...) is asked of both at
        once, so a difference that is an object whose abs() is 0 is caught as a plain one."""
        if isinstance(real, rpc.RemoteObject) and isinstance(twin, rpc.RemoteObject):
            if len(self.twins) >= _TWINS_KEPT:
                del self.twins[next(iter(self.twins))]
            self.twins[real.__dict__["_rollouts_oid"]] = twin

    def request(self, op, *args):
        # A number taken from a difference whose decoy's twin is known: asked of both at once.
        if op == "op" and len(args) >= 2 and args[0] in _NUMBER_OPS:
            target = args[1]
            if isinstance(target, rpc.RemoteObject):
                twin = self.twins.get(target.__dict__.get("_rollouts_oid"))
                if twin is not None:
                    return self._number_of_pair(args[0], target, twin, list(args[2:]))
        return super().request(op, *args)

    def _number_of_pair(self, name, real, twin, extra):
        pair = [real, twin]
        order = [0, 1]
        rng.shuffle(order)
        answers = super().request("unary", [[name, pair[i], extra] for i in order])
        if not isinstance(answers, list) or len(answers) != 2:
            raise rpc.ProtocolError("unary probe")
        answer, twin_answer = answers[order.index(0)], answers[order.index(1)]
        if same_number(answer, twin_answer, 1.0):
            self.value_hack(real, name, "the same %s of different differences" % name)
            return float("nan")  # no tolerance holds it
        if isinstance(answer, BaseException):
            raise rpc.leaked_stop(answer, "its %s" % name)
        self._pair(answer, twin_answer)
        return answer

    def contains(self, proxy, item):
        # What the object holds, asked before the item is shown (as compare() asks `held`):
        # a claim to contain the item must agree with it, by the tests' own `==`. Far decoys
        # alone let a `__contains__` say yes to whatever looks like neither decoy.
        held = self.request("held", proxy, "members")
        if held is None:  # past the cap there: a mirror of a builtin container holds it here
            held = local_members(proxy)
        decoys = far_decoys(item, 2)
        if held is None:
            # Nothing it holds to judge by: decoys shaped as the item, as well as far ones
            # (what says yes to all but the far shapes says yes to these).
            decoys += shaped_decoys(item)
        answers = self._probe(proxy, [("contains", x) for x in [item] + decoys], held is None)
        if answers[0] is True and any(a is True for a in answers[1:]):
            self.value_hack(proxy, "contains", "contains values that differ from each other")
            return False
        if answers[0] is True and isinstance(held, (list, str, bytes)) and not holds(held, item):
            self.value_hack(proxy, "contains", "contains a value it did not hold before it saw it")
            return False
        return outcome(answers[0])


def _unchanged(operand):
    """The operand a probe shows the tested code: a copy of an object of the tests' that the
    code could change. An `__eq__` that sets the tests' expected object's fields to its own
    (`other.user = self.user`), or fills approx's `expected` list with them, and says yes,
    would otherwise pass the check of what it held, which reads the operand after the probe
    (and leave the tests' expected value changed). An honest comparison changes neither."""
    if type(operand) in _IMMUTABLE or isinstance(operand, rpc.RemoteObject):
        return operand
    try:
        return copy.deepcopy(operand)
    except Exception:  # noqa: BLE001 - an object that will not be copied: the tests' own
        return operand


_IMMUTABLE = frozenset((type(None), bool, int, float, complex, str, bytes))
_TRUTHS = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "contains"))
# What turns a difference into the number a tolerance is checked against.
_NUMBER_OPS = frozenset(
    ("abs", "neg", "pos", "float", "int", "index", "round", "trunc", "floor", "ceil")
)
_TWINS_KEPT = 4096
# The operators whose answer's twin is kept: an honest sum's or difference's differs from the
# real answer in any number taken from it, but a product of zero, a `//` or `%` may not.
_PAIRED = frozenset(("add", "radd", "sub", "rsub"))


def equality(ep, proxy, op, other):
    """`proxy == other` (or !=) as the tests get it (TrustedEndpoint.compare)."""
    if other is None:
        # Nothing the tested process holds is None (None travels as itself), and no decoy
        # of None exists: a claim to equal it is one to equal what it is not.
        real = ep._probe(proxy, [(op, None)])[0]
        if _claims(op, real):
            ep.value_hack(proxy, op, "equal to None, which it is not")
            return op == "ne"
        return outcome(real)
    # Asked before the operand is shown: a claim to equal it must be what the object
    # already held (the operand, once sent, is the expected value; an object that checks
    # candidates, or tells the real operand from its decoys, wins otherwise).
    kind = _held_kind(other)
    held = ep.request("held", proxy, kind) if kind else None
    # A dict of names, and an object that is no mapping (`dict(obj)` fails: semver's Version
    # == {"major": 1, ...}): what it holds under those names, asked before it is shown, as
    # for a tests' object's fields.
    keys = _dict_names(other) if kind == "dict" and isinstance(held, Exception) else None
    named = ep.request("held", proxy, ["attributes", keys]) if keys else None
    # An object of the tests' own class (a dataclass, a plain class with its own `==`): what
    # the object holds under the names of the operand's fields, asked before it is shown.
    fields = None if kind else _fields_of(other)
    if fields:
        held = ep.request("held", proxy, ["attributes", fields])
    # No value held to judge its claim by: a request per question (`_probe`), unless the
    # operand is the tested code's own object, which it knows from any of the tests' anyway.
    one_by_one = kind is None and not isinstance(other, rpc.RemoteObject)
    decoys = _decoys(other, 2)
    if decoys:
        asked = [(op, other)] + [(op, d) for d in decoys]
        answers = ep._probe(proxy, asked, one_by_one)
        # (equal to a decoy alone is honest: a decoy one field apart may be its value)
        if _claims(op, answers[0]) and any(_claims(op, a) for a in answers[1:]):
            ep.value_hack(proxy, op, "equal to values that differ from each other")
            return op == "ne"
        real = answers[0]
    else:
        real, fresh = ep._probe(proxy, [(op, other), ("eq", _sentinel_like(other))], one_by_one)
        if _claims(op, real) and fresh is True:
            ep.value_hack(proxy, op, "equal to a fresh object of the tests")
            return op == "ne"
    if keys and _claims(op, real) and not _names_shown(named, other):
        ep.value_hack(proxy, op, "equal to a dict whose items it did not hold")
        return op == "ne"
    if kind and not keys and _claims(op, real) and not _shown(held, other, kind):
        loose = _shows_loosely(held, other, kind)  # (honest or not: a reviewer's call)
        why = "equal only up to case, spacing or rounding to" if loose else "equal to"
        ep.value_hack(proxy, op, why + " a value it did not hold before it saw it")
        return op == "ne"
    if fields and _claims(op, real) and not _fields_shown(held, other):
        ep.value_hack(proxy, op, "equal to a tests' object whose fields it did not hold")
        return op == "ne"
    return outcome(real)


_FIELDS_MAX = 64  # (tested.py `_ATTRIBUTES_MAX`)


def _dict_names(v):
    """The keys of dict `v` (a builtin dict of the tests) where every one is a public name
    (a record of fields: `dict(major=1, minor=2)`), at most _FIELDS_MAX of them; else None."""
    if type(v) is not dict or not v or len(v) > _FIELDS_MAX:
        return None
    names = list(v)
    if not all(type(n) is str and n.isidentifier() and n[:1] != "_" for n in names):
        return None
    return names


def _names_shown(held, other):
    """Whether what the object held under dict `other`'s keys (asked before it saw `other`)
    is `other`'s items: every key held under its name, each value agreeing as a field's
    does (`_field_agrees`)."""
    if not isinstance(held, dict):
        return False
    for name, theirs in other.items():
        if name not in held or not _field_agrees(held[name], theirs):
            return False
    return True


def _fields_of(v):
    """The names of the fields of an object of the tests' own class that its `==` may compare
    (a dataclass's compared fields; for a plain class with an `==` of its own, its public
    attributes, properties and slots), or None."""
    if isinstance(v, rpc.RemoteObject) or isinstance(v, type) or isinstance(type(v), enum.EnumMeta):
        return None
    t = type(v)
    try:
        if dataclasses.is_dataclass(v):
            names = [f.name for f in dataclasses.fields(v) if f.compare]
        elif not _tests_own(t):
            return None
        else:
            own = getattr(v, "__dict__", None)
            names = list(own) if type(own) is dict else []
            for klass in t.__mro__[:-1]:
                for name, member in vars(klass).items():
                    if isinstance(member, property) or name in _slots(klass):
                        names.append(name)
            names = [n for n in dict.fromkeys(names) if type(n) is str and n[:1] != "_"]
    except Exception:  # noqa: BLE001 - an object the tests made that will not say
        return None
    return names[:_FIELDS_MAX] or None


def _tests_own(t):
    """Whether `t` is a plain class of the tests with an `==` of its own: no class of the
    standard library's or an installed package's (mirrors.py `_installed`), whose attributes
    are their machinery, not a value an honest object would hold (`IPv4Address.version`,
    `pytest.approx` of a sequence, `mock.ANY`)."""
    return t.__eq__ is not object.__eq__ and not rpc.mirrors._installed(
        str(getattr(t, "__module__", ""))
    )


def _slots(klass):
    slots = vars(klass).get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _fields_shown(held, other):
    """Whether what the object held under the operand's field names (asked before it saw
    `other`) is `other`'s value there: every field held, and each one equal to `other`'s as
    the field's own type compares (`_field_agrees`). Held under another name, or a field in
    another convention, is not shown: a claim of equality then is the object's `==` alone,
    which is what a lying one has (the stated limit: an honest object that keeps its value
    otherwise, docs/reliability.md)."""
    if not isinstance(held, dict):
        return False
    for name in _fields_of(other) or ():
        if name not in held:
            return False
        try:
            theirs = getattr(other, name)
        except Exception:  # noqa: BLE001 - a field of the tests' that cannot say
            return False
        if not _field_agrees(held[name], theirs):
            return False
    return True


def _field_agrees(mine, theirs):
    """Whether a field the object held (`mine`) is the tests' (`theirs`): in a plain form both
    share, as strictly as the tests' own field type compares (text exactly, whole numbers
    exactly, floats up to their rounding), an enum member by its value or its name; in no
    plain form (a date, a dict, a set, a nested object) by the tests' own `==`."""
    compared = False
    for a in _forms(mine):
        for b in _forms(theirs):
            same = _same_plain(a, b)
            if same:
                return True
            compared = compared or same is False
    if compared:
        return False
    try:
        return bool(theirs == mine)
    except Exception:  # noqa: BLE001 - values that cannot say
        return False


def _forms(v):
    """The plain forms (`_plain`) a field's value may be compared in: an enum member's value
    and its name, another value's own."""
    if isinstance(type(v), enum.EnumMeta):
        return [x for x in (_plain(v.value), v.name) if x is not _NONE]
    plain = _plain(v)
    return [] if plain is _NONE else [plain]


def _same_plain(a, b):
    """True or False for two plain forms of one kind; None where they say nothing."""
    if type(a) in (int, float) and type(b) in (int, float):
        return _same_field_number(a, b)
    if type(a) is not type(b):
        return None
    if type(a) is list:
        if len(a) != len(b):
            return False
        sames = [_same_plain(x, y) for x, y in zip(a, b)]  # noqa: B905 - (3.8)
        return None if None in sames else all(sames)
    return bool(a == b)


def _same_field_number(a, b):
    """Whole numbers exactly; a float up to the rounding of float arithmetic (a rotation's
    6e-17 for 0), but never past what a float can hold (a float held for a whole number
    beyond 2**53 is not that number: Binet's formula for fib(90))."""
    if type(a) is int and type(b) is int:
        return a == b
    if max(abs(a), abs(b)) >= _FLOAT_EXACT:
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


_FLOAT_EXACT = 2.0**53


def _plain(v):
    """A field's value in a form both sides' honest values share, or _NONE: text and bytes as
    they are, a whole number as an int, another number as a float, a list or tuple as a list
    of such, None as itself; anything else (an object, a method) says nothing."""
    if v is None or type(v) in (str, bytes, bool):
        return v
    if type(v) is int:
        return v
    if type(v) is float or _number(v):
        try:
            f = float(v)
        except (ArithmeticError, ValueError):
            return _NONE
        try:
            whole = v == int(v) and abs(f) >= _FLOAT_EXACT and type(v) is not float
        except (ArithmeticError, ValueError, OverflowError):
            whole = False
        return int(v) if whole else f
    if type(v) in (list, tuple):
        items = [_plain(x) for x in v]
        return _NONE if any(x is _NONE for x in items) else items
    return _NONE


def ordering(ep, proxy, op, other):
    """`proxy < other` (or <=, >, >=): all four orderings asked of the operand and of a
    decoy in one request, so the answer must place the object at one point of a total
    order: never both < and >, nor < and >=, nor at one point with two different values.
    A number is first asked what it holds (as for ==), so "at" a number is that number."""
    target = _as_float(other)
    number = target is not None
    held = ep.request("held", proxy, "float") if number else None
    operands = [other] + _decoys(other, 1 if number else 2)
    asked = [(o, x) for x in operands for o in _ORDERS]
    answers = ep._probe(proxy, asked)
    places = [{o: answers[i + j] for j, o in enumerate(_ORDERS)} for i in range(0, len(asked), 4)]
    if any(_both_ways(place) for place in places):
        ep.value_hack(proxy, op, "ordered both ways against one value")
        return False
    nan = number and type(held) is float and held != held
    if _unordered(places[0]) and not nan:
        ep.value_hack(proxy, op, "unordered against a value it did not hold as NaN")
        return False
    at = [i for i, place in enumerate(places) if _at(place)]
    if len(at) > 1:
        ep.value_hack(proxy, op, "ordered equal to values that differ from each other")
        return False
    if at == [0] and number and not _shows(held, target, "float"):
        ep.value_hack(proxy, op, "ordered equal to a value it did not hold before it saw it")
        return False
    if number and not _follows_held(places[0], held, target):
        ep.value_hack(proxy, op, "ordered against a value not as the number it held")
        return False
    return outcome(places[0][op])


def same_number(a, b, apart):
    """Whether two answers for operands `apart` apart are the same plain number (and not the
    rounding of a huge one)."""
    if not (_number(a) and _number(b)):
        return False
    try:
        return bool(a == b) and float(abs(a)) * 1e-9 < float(apart)
    except (ArithmeticError, ValueError):  # (a Decimal NaN or infinity: no same number)
        return False


def _number(v):
    return arithmetic.number(v)


def _claims(op, answer):
    """Whether a probe's answer to == or != says "equal" (an exception, an ambiguous truth,
    NotImplemented: it claims nothing)."""
    return answer is True if op == "eq" else answer is False


def outcome(answer):
    """What the tests get for a probe's answer about the real operand: the bool, or the
    exception the operator raised there (as they would in one process), or NotImplemented
    (their own operand is asked next, here)."""
    if isinstance(answer, BaseException):
        raise rpc.leaked_stop(answer, "a comparison")
    return NotImplemented if answer is None else answer


# Operand types whose value an object of the tested code must hold, before it is shown one, to
# claim equality: the builtins by their own conversion (or base value), these by their text.
_HELD_KINDS = {
    str: "str", bytes: "bytes", bool: "bool", int: "int", float: "float", complex: "complex",
    list: "list", tuple: "tuple", dict: "dict", set: "set", frozenset: "frozenset",
}  # fmt: skip
_TEXT_VALUES = (
    frozenset(("datetime", name) for name in ("date", "datetime", "time", "timedelta"))
    | {
        ("decimal", "Decimal"),
        ("fractions", "Fraction"),
        ("uuid", "UUID"),
        ("pathlib", "PurePosixPath"),
        ("pathlib", "PosixPath"),
    }
    | {
        ("ipaddress", kind + suffix)
        for kind in ("IPv4", "IPv6")
        for suffix in ("Address", "Network", "Interface")
    }
)  # by name: the tests' process need not import them to compare


def _held_kind(v):
    t = type(v)
    name = (str(getattr(t, "__module__", "")).split(".")[0], getattr(t, "__qualname__", None))
    kind = _HELD_KINDS.get(t) or _HELD_AS.get(t) or ("text" if name in _TEXT_VALUES else None)
    if kind is None and _approx_number(v):
        return "float"
    if kind is None and type(_approx_expected(v)) in (list, tuple, dict):
        # approx of a sequence or mapping: what the object holds is asked as that container,
        # and shown by approx's own `==` (its tolerance)
        return _HELD_KINDS[type(v.expected)]
    if kind is None and not isinstance(v, rpc.RemoteObject) and not isinstance(t, enum.EnumMeta):
        # the tests' Counter, OrderedDict, named tuple: what the object holds is asked as the
        # builtin container they derive from, and shown against their builtin value
        # (only where its `==` is its builtin's, or collections' own: a subclass with looser
        # equality, mock's `call`, is no builtin value to hold)
        base = next((b for b in _CONTAINERS if isinstance(v, b)), None)
        if base is not None and (
            t.__eq__ is base.__eq__ or getattr(t, "__module__", None) == "collections"
        ):
            kind = _HELD_KINDS[base]
    if kind is None and not isinstance(v, rpc.RemoteObject) and t is not bool:
        # the tests' `class Cents(int)`, their IntEnum or `(str, Enum)` member: what the
        # object holds is asked as that builtin, shown against the operand's builtin value
        # (where the class compares as its builtin does)
        base = next((b for b in _SCALARS if isinstance(v, b)), None)
        if base is not None and t.__eq__ is base.__eq__:
            kind = _HELD_KINDS[base]
    return kind


# Types whose value is a builtin's, held as that builtin (their `==` is that builtin's, and
# they equal no other type's objects, so an object claiming equality holds that value).
_HELD_AS = {collections.deque: "list", bytearray: "bytes"}
_CONTAINERS = (dict, list, tuple, set, frozenset)
_SCALARS = (str, bytes, int, float)


def _approx_number(v):
    """Whether `v` is pytest's approx of one plain number (an ApproxScalar)."""
    return type(v).__name__ == "ApproxScalar" and type(_approx_expected(v)) in (int, float)


def _approx_expected(v):
    """What `v` is pytest's approx of (a number, a Decimal, a list, tuple or dict of them), or
    _NONE where it is no approx."""
    t = type(v)
    if not (
        t.__name__.startswith("Approx") and str(getattr(t, "__module__", "")).startswith("_pytest.")
    ):
        return _NONE
    return getattr(v, "expected", _NONE)


def _shown(held, other, kind):
    """`_shows`, for an operand that is the builtin's subclass (by its builtin value) or
    pytest's approx of a number (by approx's own `==` with the held number)."""
    try:
        if _approx_number(other):
            return type(held) is float and bool(other == held)
        if _approx_expected(other) is not _NONE:
            return type(held) is _BUILTINS[kind] and bool(other == held)
        if kind in _HELD_KINDS.values() and type(other) not in _HELD_KINDS:
            # (its builtin value: str() of a `(str, Enum)` member is its name, not its value)
            convert = rpc.codec.BASE_VALUES.get(kind)
            if convert is None or not isinstance(other, rpc.codec.BASE_TYPES[kind]):
                convert = _BUILTINS[kind]  # (a deque as a list, a bytearray as bytes)
            other = convert(other)
    except Exception:  # noqa: BLE001 - an operand that cannot say: not shown
        return False
    return _shows(held, other, kind)


_BUILTINS = {kind: t for t, kind in _HELD_KINDS.items()}


def _as_float(v):
    """The plain number `v` is for ordering (not NaN), or None."""
    if type(v) not in (int, float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if f == f else None


def _shows(held, other, kind):
    """Whether what an object held (asked before it saw `other`) is `other`: the builtin's own
    `==` of the two values, a number up to the rounding noise of float arithmetic (1e-12
    relative: `0.1 + 0.2` for 0.3), a NaN for a NaN. Not up to case, whitespace or a
    tolerance a test can mean: an `==` looser than the value it holds is the same code in an
    honest case-insensitive text and in a camel-to-snake that never lowers (only the test's
    intent tells them apart, and the test asked `==`), so the claim is reported, never a
    silent pass (docs/reliability.md, round 5)."""
    try:
        if kind == "text":
            return type(held) is str and held == str(other)
        if type(held) is not type(other):
            return False
        if kind in ("float", "complex"):
            if held != held or other != other:  # NaN: what it held, though no float equals it
                return held != held and other != other
            return held == other or abs(held - other) <= _NOISE * max(abs(held), abs(other))
        return bool(held == other)
    except Exception:  # noqa: BLE001 - an element that cannot say: not shown
        return False


# Float arithmetic's rounding (a few units in the last place, grown over a computation), not
# a precision any test asks of `==`: round-to-n-places answers differ by far more.
_NOISE = 1e-12


def _shows_loosely(held, other, kind):
    """`_shows` up to the case and whitespace of text and pytest.approx's default tolerance:
    for `in` only, where honest containers are looser than their iteration (a mapping of
    header names iterates them as given and answers `in` whatever their case)."""
    if _shows(held, other, kind):
        return True
    try:
        if kind == "text":
            return type(held) is str and _same_text(held, str(other))
        if type(held) is not type(other):
            return False
        if kind == "str":
            return _same_text(held, other)
        if kind == "bytes":
            return _same_text(held.decode("latin-1"), other.decode("latin-1"))
        if kind in ("float", "complex"):
            return abs(held - other) <= 1e-6 * max(abs(held), abs(other)) + 1e-12
        return False
    except Exception:  # noqa: BLE001 - an element that cannot say: not shown
        return False


def holds(held, item):
    """Whether what an object held for `in` (a text, or its items) has `item`: by the tests'
    `==` (an element of the tested process is compared through its proxy, with its checks),
    or up to what honest loose equalities allow (`_shows_loosely`); a text by substring, up
    to case and whitespace, as is an iteration of single characters."""
    if type(held) in (str, bytes):
        if type(item) is not type(held):
            return False
        if item in held:
            return True
        if type(held) is bytes:
            held, item = held.decode("latin-1"), item.decode("latin-1")
        return "".join(item.split()).casefold() in "".join(held.split()).casefold()
    kind = _held_kind(item)
    for element in held:
        try:
            if element is item or element == item:
                return True
        except Exception:  # noqa: BLE001 - an element that cannot say: not this one
            pass
        if kind and _shows_loosely(element, item, kind):
            return True
    if type(item) is str and held and all(type(e) is str and len(e) == 1 for e in held):
        return holds("".join(held), item)
    return False


def _same_text(a, b):
    return "".join(a.split()).casefold() == "".join(b.split()).casefold()


COMPLEMENT = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}
_ORDERS = ("lt", "le", "gt", "ge")


def _both_ways(place):
    """Whether the four orderings' answers against one value ({op: answer}) place the object
    on both sides of it (an answer that is no bool says nothing)."""
    lt, le, gt, ge = (place[o] for o in _ORDERS)
    return (lt is True and (gt is True or ge is True or le is False)) or (
        gt is True and (le is True or ge is False)
    )


def _follows_held(place, held, target):
    """Whether a strict order the answers claim against `target` is that of the number the
    object held (asked first); a held value that is no plain number, or too near to tell
    after rounding, says nothing."""
    if type(held) is not float or held != held or abs(held) == float("inf"):
        return True
    if abs(held - target) <= 1e-9 * max(1.0, abs(held), abs(target)):
        return True
    below = held < target
    return not (
        (place["lt"] is True and not below)
        or (place["gt"] is True and below)
        or (place["le"] is True and not below)
        or (place["ge"] is True and below)
    )


def _unordered(place):
    """Neither <= nor >= the value: only NaN is so, among numbers."""
    return place["le"] is False and place["ge"] is False


def _at(place):
    """Whether the answers place the object at the value itself (ordered equal to it)."""
    if place["le"] is True and place["ge"] is True:
        return True
    return place["lt"] is False and place["gt"] is False and not _unordered(place)


def orderable(v):
    return type(v) in (int, float, str, bytes, tuple, list)


_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def _decoys(v, k):
    """`k` values of v's type and shape that differ from v (empty: no decoy for this type), all
    alike: each one edit (`_decoy`) from a centre that is itself one edit from v, so v is one
    of k + 1 values two edits apart and none is the others' centre (decoys one edit from v
    made v their centre: round 6's stateful `==`, round 7's learner). The same decoys each
    time v is asked (`_SHOWN`): the tested process sees one set of candidates for a value
    however many of its objects are compared with it (`x in results`, `results.count(x)`),
    never two sets whose only common member is the real one. None is alike v by an honest
    loose equality (`_alike`): one edit of the centre may undo, up to case, the centre's own."""
    key = _shown_key(v)
    kept = _SHOWN.get(key) if key is not None else None
    try:
        if kept is not None and (kept[0] is v or key[0] == "value" and type(kept[0]) is type(v)):
            if kept[2] == key[-1] and not any(_same_or_alike(d, v) for d in kept[1]):
                return list(kept[1])
    except Exception:  # noqa: BLE001 - values that cannot say: fresh ones
        pass
    out = _centred_decoys(v, k)
    if len(out) < k:
        out = _near_decoys(v, k, out)
    if key is not None and out:
        if len(_SHOWN) >= _SHOWN_KEPT:
            del _SHOWN[next(iter(_SHOWN))]
        _SHOWN[key] = (v, list(out), key[-1])
    return out


def _centred_decoys(v, k):
    t = type(v)
    for _ in range(3):
        centre = _decoy(v, t)
        if centre is _NONE or type(centre) is not t:
            return []
        out = []
        for _ in range(k * 4):
            if len(out) == k:
                return out
            d = _decoy(centre, t)
            if d is _NONE or type(d) is not t:
                return []
            try:
                if _same_or_alike(d, v) or d in out:
                    continue
            except Exception:  # noqa: BLE001 - values that cannot say
                return []
            if any(_edits(d, x) not in (2, None) for x in [v] + out):
                continue  # (an edit of the centre's own place: one edit from v, its centre)
            out.append(d)
        if len(out) == k:
            return out
    return []


def _edits(a, b):
    """How many characters (of text at one place of a value) a and b differ by, where their
    text is all that differs (None: they differ otherwise, or cannot say)."""
    if type(a) is not type(b):
        return None
    if type(a) in (str, bytes):
        return sum(x != y for x, y in zip(a, b)) if len(a) == len(b) else None  # noqa: B905
    if isinstance(a, (list, tuple)) and len(a) == len(b):
        parts = [_edits(x, y) for x, y in zip(a, b)]  # noqa: B905 - (3.8)
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        parts = [_edits(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)]
    else:
        try:
            return 0 if a == b else None
        except Exception:  # noqa: BLE001 - cannot say
            return None
    return None if None in parts else sum(parts)


def _near_decoys(v, k, out):
    """Decoys one edit from v itself (where too few values two edits apart exist: a bool)."""
    t = type(v)
    out = list(out)
    for _ in range(k * 4):
        if len(out) == k:
            break
        d = _decoy(v, t)
        if d is _NONE or type(d) is not t:
            return out
        try:
            if _same_or_alike(d, v) or d in out:
                continue
        except Exception:  # noqa: BLE001 - values that cannot say
            return out
        out.append(d)
    return out


def _same_or_alike(d, v):
    return (d == v and _approx_expected(v) is _NONE) or _alike(d, v)


def _alike(d, v):
    """Whether an honest loose equality may take the decoy `d` for `v`: text up to case and
    whitespace, a float within pytest.approx's default tolerance, approx's own tolerance;
    containers and dataclasses item by item (an exact `==` is the caller's)."""
    t = type(v)
    if type(d) is not t:
        return False
    if _approx_expected(v) is not _NONE:
        return bool(v == d.expected)
    if t is str:
        return _same_text(d, v)
    if t is bytes:
        return _same_text(d.decode("latin-1"), v.decode("latin-1"))
    if t is float:
        return v == v and abs(d - v) <= 1e-6 * max(abs(d), abs(v)) + 1e-12
    if isinstance(v, (list, tuple)):
        return len(d) == len(v) and all(
            x == y or _alike(x, y)
            for x, y in zip(d, v)  # noqa: B905 - (3.8)
        )
    if isinstance(v, dict):
        return dict.keys(d) == dict.keys(v) and all(
            dict.__getitem__(d, x) == dict.__getitem__(v, x)
            or _alike(dict.__getitem__(d, x), dict.__getitem__(v, x))
            for x in dict.keys(v)
        )
    if dataclasses.is_dataclass(v):
        names = [f.name for f in dataclasses.fields(v)]
        return all(
            getattr(d, n) == getattr(v, n) or _alike(getattr(d, n), getattr(v, n)) for n in names
        )
    return False


def _shown_key(v):
    """What `_SHOWN` knows v by: its value where that is plain (text, numbers, tuples and
    frozensets of them: a literal the tests write again), else the object itself with its
    text as it is now (a list the tests change between comparisons gets fresh decoys); None
    for an object that holds one of the tested process's (its text would be asked there)."""
    if _plain_key(v):
        try:
            hash(v)
        except TypeError:
            return None
        return ("value", type(v), v, None)
    if _holds_remote(v, 4):
        return None
    try:
        return ("object", id(v), repr(v))
    except Exception:  # noqa: BLE001 - no text: no decoys kept
        return None


def _plain_key(v):
    t = type(v)
    if t in (str, bytes, int, float, bool, complex):
        return True
    return t in (tuple, frozenset) and all(_plain_key(x) for x in v)


def _holds_remote(v, depth, budget=None):
    """Whether v is, or may hold (within `depth` levels of containers and attributes, and a
    few hundred values in all), an object of the tested process."""
    budget = [_HOLDS_LOOKED] if budget is None else budget
    budget[0] -= 1
    if isinstance(v, rpc.RemoteObject):
        return True
    if type(v) in (str, bytes, int, float, bool, complex) or v is None:
        return False
    if depth == 0 or budget[0] < 0:
        return True
    if isinstance(v, dict):
        items = list(dict.keys(v)) + list(dict.values(v))
    elif isinstance(v, (list, tuple, set, frozenset)):
        items = list(v)
    elif dataclasses.is_dataclass(v):
        items = [getattr(v, f.name, None) for f in dataclasses.fields(v)]
    else:
        own = getattr(v, "__dict__", None)
        if type(own) is not dict:
            return True  # (slots: cannot say)
        items = list(own.values())
    if len(items) > budget[0]:
        return True
    return any(_holds_remote(x, depth - 1, budget) for x in items)


_HOLDS_LOOKED = 512


_SHOWN = {}  # _shown_key(v) -> (v, its decoys): v kept, so no other object gets its id
_SHOWN_KEPT = 4096


_NONE = object()


def near_number(x):
    """A float a quarter of abs(x) plus one to two units away from float `x`, on either side:
    its decoy for `==` and orderings (arithmetic's decoys are arithmetic.py's)."""
    return x + rng.choice((-1, 1)) * (abs(x) * 0.25 + rng.uniform(1.0, 2.0))


def _digits_of(x, v):
    """x rounded to as many decimals as v's shortest text has (a decoy of 2.5 is no longer
    text than 2.5, so the length of a value does not tell the real one among them)."""
    text = repr(v)
    if "e" in text or "n" in text or "." not in text:
        return x
    return round(x, len(text.partition(".")[2]))


def _decoy(v, t):
    if t is bool:
        return not v
    if t is int:
        return v + rng.choice((-1, 1)) * rng.randint(1, max(3, abs(v) // 8))
    if t is float:
        if v != v:  # NaN: equal to nothing, so any number is a decoy
            return rng.uniform(-1e6, 1e6)
        return _digits_of(near_number(v), v)
    if t is str:
        return _mutate_text(v, _LETTERS)
    if t is bytes:
        return _mutate_text(v.decode("latin-1"), _LETTERS).encode("latin-1")
    if t in (list, tuple):
        if not v:
            return t([rng.randint(0, 99)])
        i = rng.randrange(len(v))
        inner = _decoy(v[i], type(v[i]))
        items = list(v)
        if inner is _NONE:
            items.insert(i, rng.randint(0, 99))
        else:
            items[i] = inner
        return t(items)
    if t is dict:
        d = dict(v)
        keys = list(d)
        if keys:
            k = rng.choice(keys)
            inner = _decoy(d[k], type(d[k]))
            if inner is not _NONE:
                d[k] = inner
                return d
        d[_mutate_text("key", _LETTERS)] = rng.randint(0, 99)
        return d
    if t in (set, frozenset):
        return t(set(v) | {rng.randint(10**6, 10**7)})
    try:
        return _object_decoy(v, t)
    except Exception:  # noqa: BLE001 - an object the tests made that will not be copied
        return _NONE


def _object_decoy(v, t):
    """A decoy of an object of the tests whose type is no builtin: one of its own class (so
    nothing in it tells the tested code that it is not the tests' operand), one field apart:
    a named tuple's `_replace`, a copy of a dict, list or set subclass (Counter, OrderedDict)
    changed by the builtin's own methods, a dataclass's copy with a field replaced, pytest's
    approx of a number far beyond its tolerance."""
    if isinstance(v, rpc.RemoteObject) or isinstance(t, enum.EnumMeta) or isinstance(v, type):
        return _NONE
    if _approx_number(v):
        d = copy.copy(v)
        e = v.expected
        d.expected = e + rng.choice((-1, 1)) * max(
            abs(e) * 0.25 + rng.uniform(1.0, 2.0), 4 * float(v.tolerance)
        )
        return _NONE if v == d.expected else d
    expected = _approx_expected(v)
    if expected is not _NONE:
        # approx of a Decimal, a sequence or a mapping: its own kind of approx, of a value one
        # number apart (a decoy within its tolerance would be no decoy)
        e = near_number(expected) if _number(expected) else _decoy(expected, type(expected))
        if e is _NONE or v == e:
            return _NONE
        return t(e, rel=v.rel, abs=v.abs, nan_ok=v.nan_ok)
    fields = getattr(t, "_fields", None)
    if isinstance(v, tuple) and isinstance(fields, tuple) and hasattr(v, "_replace"):
        changed = _changed_field(fields, [getattr(v, f) for f in fields])
        return _NONE if changed is None else v._replace(**{changed[0]: changed[1]})
    if isinstance(v, (dict, list, set)):
        d = copy.copy(v)
        if type(d) is not t:
            return _NONE
        if isinstance(v, dict):
            keys = list(dict.keys(v))
            changed = _changed_field(keys, [dict.__getitem__(v, k) for k in keys])
            if changed is None:
                changed = (_mutate_text("key", _LETTERS), rng.randint(0, 99))
            dict.__setitem__(d, *changed)
        elif isinstance(v, list):
            changed = _changed_field(range(len(v)), list(v))
            if changed is None:
                list.append(d, rng.randint(0, 99))
            else:
                list.__setitem__(d, *changed)
        else:
            set.add(d, rng.randint(10**6, 10**7))
        return d
    if dataclasses.is_dataclass(v):
        names = [f.name for f in dataclasses.fields(v)]
        changed = _changed_field(names, [getattr(v, name) for name in names])
        if changed is None:
            return _NONE
        d = copy.copy(v)
        object.__setattr__(d, *changed)
        return d
    own = getattr(v, "__dict__", None)
    if type(own) is dict and _tests_own(t):
        # A plain object of a tests' class with an `==` of its own: a copy with every public
        # attribute that has a decoy changed (unlike a dataclass's fields, which of them make
        # its value, and which are derived from the others, is the class's own business: an
        # honest `==` of the tested code may compare any of them), which `_decoys` keeps only
        # where the class's `==` tells it from `v`.
        d = copy.copy(v)
        if type(d) is not t or type(getattr(d, "__dict__", None)) is not dict:
            return _NONE
        changed = 0
        for name, value in list(own.items()):
            inner = _decoy(value, type(value)) if type(name) is str and name[:1] != "_" else _NONE
            if inner is not _NONE:
                d.__dict__[name] = inner
                changed += 1
        return d if changed else _NONE
    return _NONE


def _changed_field(names, values):
    """(name, a decoy of its value) for one field, at random, of those that have a decoy."""
    fields = [(name, values[i]) for i, name in enumerate(names)]
    rng.shuffle(fields)
    for name, value in fields:
        inner = _decoy(value, type(value))
        if inner is not _NONE:
            return name, inner
    return None


def _sentinel_like(other):
    """A fresh object of the tests, of a fresh class named as `other`'s (module, name,
    qualified name, documentation): nothing of the tested code's can rightly equal it, and
    its name does not tell it from the operand it stands beside."""
    t = type(other)
    cls = _SENTINELS.get(t)
    if cls is None:
        if len(_SENTINELS) >= _SENTINELS_KEPT:
            _SENTINELS.clear()
        doc = t.__dict__.get("__doc__")
        cls = type(
            str(t.__name__),
            (),
            {
                "__slots__": ("__weakref__",),
                "__module__": str(getattr(t, "__module__", "builtins")),
                "__qualname__": str(getattr(t, "__qualname__", t.__name__)),
                "__doc__": doc if isinstance(doc, str) else None,
            },
        )
        _SENTINELS[t] = cls
    return cls()


_SENTINELS = {}
_SENTINELS_KEPT = 256


def far_decoys(v, k):
    """`k` values of v's type that no honest container in a test would hold (a container may
    well hold v's neighbours): long random text, twelve-digit numbers."""
    t = type(v)
    if t is str:
        return ["".join(rng.choice(_LETTERS) for _ in range(16)) for _ in range(k)]
    if t is bytes:
        return [bytes(rng.randrange(256) for _ in range(16)) for _ in range(k)]
    if t is int:
        return [rng.randrange(10**11, 10**12) * rng.choice((-1, 1)) for _ in range(k)]
    if t is float:
        return [rng.uniform(1e11, 1e12) * rng.choice((-1, 1)) for _ in range(k)]
    return []


def shaped_decoys(v):
    """Decoys of `in` for an object that cannot say what it holds: for a text of three or more
    characters, one a character apart and one of random characters of the same kinds (case,
    digit) and length; for a small number, one of the same sign a million times larger or
    more (an honest range that holds a number rarely holds one so far beyond it)."""
    t = type(v)
    if t in (str, bytes) and len(v) >= 3:
        text = v if t is str else v.decode("latin-1")
        shaped = "".join(_shape_of(c) for c in text)
        out = [_mutate_text(text, _LETTERS)] + ([shaped] if shaped != text else [])
        out = [x for x in out if x != text]
        return out if t is str else [x.encode("latin-1") for x in out]
    if t in (int, float) and v == v and abs(v) < 10**4:
        far = max(1.0, abs(v)) * 10 ** rng.uniform(6.0, 6.5)
        sign = -1 if v < 0 else 1
        return [sign * (int(far) if t is int else far)]
    return []


def _shape_of(c):
    for kind in (string.ascii_lowercase, string.ascii_uppercase, string.digits):
        if c in kind:
            return rng.choice(kind)
    return c


def local_members(proxy):
    """What a mirror of a builtin container holds here for `in` (its builtin value, as
    tested.py `_members` takes it there), or None for any other object."""
    if not isinstance(proxy, rpc.RemoteObject):
        return None
    try:
        if isinstance(proxy, str):
            return str.__str__(proxy)
        if isinstance(proxy, bytes):
            return bytes.__getitem__(proxy, slice(None))
        for base in (dict, list, tuple, set, frozenset):
            if isinstance(proxy, base):
                return list(base.__iter__(proxy))
    except Exception:  # noqa: BLE001 - cannot say
        return None
    return None


def _mutate_text(s, letters):
    """s with one letter or digit replaced by another of its kind (lowercase, uppercase,
    digit), one s holds elsewhere where it holds three such, so the decoys' characters are
    those of the real text; never a case variant or whitespace, which an honest case- or
    space-insensitive equality would ignore. A text with no letter or digit gets one of
    `letters` in place of a character; "" gets one character."""
    if not s:
        return rng.choice(letters)
    places = [i for i, c in enumerate(s) if _kind_of(c)]
    if not places:
        i = rng.randrange(len(s))
        taboo = {s[i].lower(), s[i].upper()}
        c = rng.choice([x for x in letters if x not in taboo])
        return s[:i] + c + s[i + 1 :]
    i = rng.choice(places)
    kind = _kind_of(s[i])
    own = sorted({c for c in s if c in kind and c != s[i]})
    c = rng.choice(own if len(own) >= 3 else [x for x in kind if x != s[i]])
    return s[:i] + c + s[i + 1 :]


def _kind_of(c):
    for kind in (string.ascii_lowercase, string.ascii_uppercase, string.digits):
        if c in kind:
            return kind
    return ""
