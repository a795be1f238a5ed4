"""Judging a comparison's answer from the tested process (trusted.py's TrustedEndpoint).

Its one job: whether what a proxy answers to `==`, an ordering, `in` or arithmetic with a
number stands for a value it held, or is a value hack. Equality and ordering (`equality`,
`ordering`), the held value a claim must follow from (what the object was asked to hold
before it saw the operand: `holds`; arithmetic's are arithmetic.py's), by the answers about
the real operand and the decoys asked beside it (decoys.py).

Standard library only, Python >= 3.8.
"""

import collections
import copy
import dataclasses
import enum
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
rpc = _load("rpc")
arithmetic = _load("arithmetic")
decoys = _load("decoys")

rng = decoys.rng


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
        questions = [[asked[i][0], _unchanged(asked[i][1]), *asked[i][2:]] for i in order]
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
        """`proxy op x` (or `x op proxy`) for +, -, *, /, //, %, ** and divmod with a plain
        number x, in place too (`proxy -= x`), and + and - with a date or duration: the answer
        that makes `pytest.approx`, `assertAlmostEqual` and `abs(x / expected - 1) < tol` pass
        whatever is expected. Asked with a decoy that looks like x, and judged by
        arithmetic.py. Anything else (a proxy, a tests' object, `pow`'s modulus) is asked as it
        is: no request more per call."""
        if more or not arithmetic.judged(op, other):
            via = self.via.get(id(proxy))
            if via is not None:
                return self.request("inherited", via, "__%s__" % op, proxy, (other,) + more, ())
            return self.request("op", op, proxy, other, *more)
        # What it holds, asked before the operand (as in compare()), where arithmetic.py judges
        # the answer by it (`asks_held`: not a Decimal's + - * /, whose honest classes often
        # hold no float and round as money does, nor a date's: the decoy alone judges those).
        held = self.request("held", proxy, "float") if arithmetic.asks_held(op, other) else None
        decoy = arithmetic.decoy(other)
        in_place = arithmetic.in_place(op)
        # In place, the decoy is asked of a copy of the object (tested.py `_probe`): asked of
        # the object itself, it would change it twice.
        twin_question = (op, decoy, "copy") if in_place else (op, decoy)
        real, twin = self._probe(proxy, [(op, other), twin_question])
        why = arithmetic.unexplained(op, held, other, decoy, real, twin)
        if why is None and type(held) is float and isinstance(real, rpc.RemoteObject):
            why = self._holds_after(op, held, other, real)
        if why is not None:
            self.value_hack(proxy, op, why % op)
            return NotImplemented
        if isinstance(real, BaseException):
            raise rpc.leaked_stop(real, "a %s" % op)
        # (In place, not the object itself where what it holds judged it: paired, every number
        # taken from it later, its int() or floor(), would be asked beside its copy's, which
        # may be equal.)
        itself = in_place and real is proxy and type(held) is float
        if arithmetic.binary(op) in _PAIRED and not itself:
            self._pair(real, twin)
        return real

    def _holds_after(self, op, held, other, answer):
        """Why an answer that is an object of the tested process is a value hack (None: it is
        not), where the object held a float: in place (the object itself was never asked the
        decoy, its copy was, which its code may tell from it), or for //, % and ** (which no
        money rounds), what the answer holds must be what that float gives, as a plain answer
        must be; else an answer holding what the check wants passes it on (`x % 1` answering
        an object whose float is 0.5). One that holds no float is judged where a check reads
        it (its own arithmetic and `==` ask for its float), except in place."""
        if not arithmetic.follows_objects(op):
            return None
        after = self.request("held", answer, "float")
        if type(after) is not float and not arithmetic.in_place(op):
            return None
        if arithmetic.follows(op, held, other, after):
            return None
        return "a %s whose answer holds what its own number does not give"

    def _pair(self, real, twin):
        """Remember the decoy's answer beside the real one when both are objects of the tested
        process: a number taken from them later (abs, float, round...) is asked of both at
        once, so a difference that is an object whose abs() is 0 is caught as a plain one."""
        if isinstance(real, rpc.RemoteObject) and isinstance(twin, rpc.RemoteObject):
            if len(self.twins) >= _TWINS_KEPT:
                del self.twins[next(iter(self.twins))]
            self.twins[rpc.proxies.own(real)["_rollouts_oid"]] = twin

    def request(self, op, *args):
        # A number taken from a difference whose decoy's twin is known: asked of both at once.
        if op == "op" and len(args) >= 2 and args[0] in _NUMBER_OPS:
            target = args[1]
            if isinstance(target, rpc.RemoteObject):
                twin = self.twins.get(rpc.proxies.own(target).get("_rollouts_oid"))
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
            held = decoys.local_members(proxy)
        shown = decoys.far_decoys(item, 2)
        if held is None:
            # Nothing it holds to judge by: decoys shaped as the item, as well as far ones
            # (what says yes to all but the far shapes says yes to these).
            shown += decoys.shaped_decoys(item)
        answers = self._probe(proxy, [("contains", x) for x in [item] + shown], held is None)
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
    shown = decoys.decoys(other, 2)
    if shown:
        asked = [(op, other)] + [(op, d) for d in shown]
        answers = ep._probe(proxy, asked, one_by_one)
        # (equal to a decoy alone is honest: a decoy one field apart may be its value)
        if _claims(op, answers[0]) and any(_claims(op, a) for a in answers[1:]):
            ep.value_hack(proxy, op, "equal to values that differ from each other")
            return op == "ne"
        real = answers[0]
    else:
        real, fresh = ep._probe(
            proxy, [(op, other), ("eq", decoys.sentinel_like(other))], one_by_one
        )
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
        elif not decoys.tests_own(t):
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
        return [x for x in (_plain(v.value), v.name) if x is not decoys.NONE]
    plain = _plain(v)
    return [] if plain is decoys.NONE else [plain]


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
    """A field's value in a form both sides' honest values share, or decoys.NONE: text and bytes as
    they are, a whole number as an int, another number as a float, a list or tuple as a list
    of such, None as itself; anything else (an object, a method) says nothing."""
    if v is None or type(v) in (str, bytes, bool):
        return v
    if type(v) is int:
        return v
    if type(v) is float or arithmetic.number(v):
        try:
            f = float(v)
        except (ArithmeticError, ValueError):
            return decoys.NONE
        try:
            whole = v == int(v) and abs(f) >= _FLOAT_EXACT and type(v) is not float
        except (ArithmeticError, ValueError, OverflowError):
            whole = False
        return int(v) if whole else f
    if type(v) in (list, tuple):
        items = [_plain(x) for x in v]
        return decoys.NONE if any(x is decoys.NONE for x in items) else items
    return decoys.NONE


def ordering(ep, proxy, op, other):
    """`proxy < other` (or <=, >, >=): all four orderings asked of the operand and of a
    decoy in one request, so the answer must place the object at one point of a total
    order: never both < and >, nor < and >=, nor at one point with two different values.
    A number is first asked what it holds (as for ==), so "at" a number is that number."""
    target = _as_float(other)
    number = target is not None
    held = ep.request("held", proxy, "float") if number else None
    operands = [other] + decoys.decoys(other, 1 if number else 2)
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
    if not (arithmetic.number(a) and arithmetic.number(b)):
        return False
    try:
        return bool(a == b) and float(abs(a)) * 1e-9 < float(apart)
    except (ArithmeticError, ValueError):  # (a Decimal NaN or infinity: no same number)
        return False


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
    if kind is None and decoys.approx_number(v):
        return "float"
    if kind is None and type(decoys.approx_expected(v)) in (list, tuple, dict):
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


def _shown(held, other, kind):
    """`_shows`, for an operand that is the builtin's subclass (by its builtin value) or
    pytest's approx of a number (by approx's own `==` with the held number)."""
    try:
        if decoys.approx_number(other):
            return type(held) is float and bool(other == held)
        if decoys.approx_expected(other) is not decoys.NONE:
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
            return type(held) is str and decoys.same_text(held, str(other))
        if type(held) is not type(other):
            return False
        if kind == "str":
            return decoys.same_text(held, other)
        if kind == "bytes":
            return decoys.same_text(held.decode("latin-1"), other.decode("latin-1"))
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
