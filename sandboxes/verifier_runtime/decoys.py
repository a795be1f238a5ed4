"""The decoys a comparison's probe asks beside the real operand (judging.py): values one
character, element or unit apart (`decoys`, drawn around a centre one edit from the operand, the
same ones each time one value is asked), far ones (`far_decoys`), shaped ones (`shaped_decoys`),
a fresh object like a sentinel (`sentinel_like`), and what a value of the tests is (`NONE`,
pytest's approx, a tests' own class) that both need. Drawn from `rng`, which neither the tests'
seeds nor the tested code sway.

Standard library only, Python >= 3.8.
"""

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


NONE = object()  # "no such value" where None is one


def tests_own(t):
    """Whether `t` is a plain class of the tests with an `==` of its own: no class of the
    standard library's or an installed package's (mirrors.py `_installed`), whose attributes
    are their machinery, not a value an honest object would hold (`IPv4Address.version`,
    `pytest.approx` of a sequence, `mock.ANY`)."""
    return t.__eq__ is not object.__eq__ and not rpc.mirrors._installed(
        str(getattr(t, "__module__", ""))
    )


def approx_number(v):
    """Whether `v` is pytest's approx of one plain number (an ApproxScalar)."""
    return type(v).__name__ == "ApproxScalar" and type(approx_expected(v)) in (int, float)


def approx_expected(v):
    """What `v` is pytest's approx of (a number, a Decimal, a list, tuple or dict of them), or
    NONE where it is no approx."""
    t = type(v)
    if not (
        t.__name__.startswith("Approx") and str(getattr(t, "__module__", "")).startswith("_pytest.")
    ):
        return NONE
    return getattr(v, "expected", NONE)


def same_text(a, b):
    return "".join(a.split()).casefold() == "".join(b.split()).casefold()


_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def decoys(v, k):
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
        if centre is NONE or type(centre) is not t:
            return []
        out = []
        for _ in range(k * 4):
            if len(out) == k:
                return out
            d = _decoy(centre, t)
            if d is NONE or type(d) is not t:
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
        if d is NONE or type(d) is not t:
            return out
        try:
            if _same_or_alike(d, v) or d in out:
                continue
        except Exception:  # noqa: BLE001 - values that cannot say
            return out
        out.append(d)
    return out


def _same_or_alike(d, v):
    return (d == v and approx_expected(v) is NONE) or _alike(d, v)


def _alike(d, v):
    """Whether an honest loose equality may take the decoy `d` for `v`: text up to case and
    whitespace, a float within pytest.approx's default tolerance, approx's own tolerance;
    containers and dataclasses item by item (an exact `==` is the caller's)."""
    t = type(v)
    if type(d) is not t:
        return False
    if approx_expected(v) is not NONE:
        return bool(v == d.expected)
    if t is str:
        return same_text(d, v)
    if t is bytes:
        return same_text(d.decode("latin-1"), v.decode("latin-1"))
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
        if inner is NONE:
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
            if inner is not NONE:
                d[k] = inner
                return d
        d[_mutate_text("key", _LETTERS)] = rng.randint(0, 99)
        return d
    if t in (set, frozenset):
        return t(set(v) | {rng.randint(10**6, 10**7)})
    try:
        return _object_decoy(v, t)
    except Exception:  # noqa: BLE001 - an object the tests made that will not be copied
        return NONE


def _object_decoy(v, t):
    """A decoy of an object of the tests whose type is no builtin: one of its own class (so
    nothing in it tells the tested code that it is not the tests' operand), one field apart:
    a named tuple's `_replace`, a copy of a dict, list or set subclass (Counter, OrderedDict)
    changed by the builtin's own methods, a dataclass's copy with a field replaced, pytest's
    approx of a number far beyond its tolerance."""
    if isinstance(v, rpc.RemoteObject) or isinstance(t, enum.EnumMeta) or isinstance(v, type):
        return NONE
    if approx_number(v):
        d = copy.copy(v)
        e = v.expected
        d.expected = e + rng.choice((-1, 1)) * max(
            abs(e) * 0.25 + rng.uniform(1.0, 2.0), 4 * float(v.tolerance)
        )
        return NONE if v == d.expected else d
    expected = approx_expected(v)
    if expected is not NONE:
        # approx of a Decimal, a sequence or a mapping: its own kind of approx, of a value one
        # number apart (a decoy within its tolerance would be no decoy)
        e = (
            near_number(expected)
            if arithmetic.number(expected)
            else _decoy(expected, type(expected))
        )
        if e is NONE or v == e:
            return NONE
        return t(e, rel=v.rel, abs=v.abs, nan_ok=v.nan_ok)
    fields = getattr(t, "_fields", None)
    if isinstance(v, tuple) and isinstance(fields, tuple) and hasattr(v, "_replace"):
        changed = _changed_field(fields, [getattr(v, f) for f in fields])
        return NONE if changed is None else v._replace(**{changed[0]: changed[1]})
    if isinstance(v, (dict, list, set)):
        d = copy.copy(v)
        if type(d) is not t:
            return NONE
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
            return NONE
        d = copy.copy(v)
        object.__setattr__(d, *changed)
        return d
    own = getattr(v, "__dict__", None)
    if type(own) is dict and tests_own(t):
        # A plain object of a tests' class with an `==` of its own: a copy with every public
        # attribute that has a decoy changed (unlike a dataclass's fields, which of them make
        # its value, and which are derived from the others, is the class's own business: an
        # honest `==` of the tested code may compare any of them), which `decoys` keeps only
        # where the class's `==` tells it from `v`.
        d = copy.copy(v)
        if type(d) is not t or type(getattr(d, "__dict__", None)) is not dict:
            return NONE
        changed = 0
        for name, value in list(own.items()):
            inner = _decoy(value, type(value)) if type(name) is str and name[:1] != "_" else NONE
            if inner is not NONE:
                d.__dict__[name] = inner
                changed += 1
        return d if changed else NONE
    return NONE


def _changed_field(names, values):
    """(name, a decoy of its value) for one field, at random, of those that have a decoy."""
    fields = [(name, values[i]) for i, name in enumerate(names)]
    rng.shuffle(fields)
    for name, value in fields:
        inner = _decoy(value, type(value))
        if inner is not NONE:
            return name, inner
    return None


def sentinel_like(other):
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
