"""Which of our iterators the other side may read ahead of its `next()`s (see iterators.py).

A `for` loop or a `next()` of a proxy asks for one item per round trip, and a solution that
walks a million permutations the tests handed it pays a million. Reading ahead is safe only
where nobody can tell when an item was made. So the serving side reads ahead of no iterator
of its own: it reads a copy of it (`clone`), made from C state alone, and only for iterators
the interpreter iterates by itself without running any Python code, over values that run
none either (`pure`):

- iterators by index over a list, tuple, str, bytes, bytearray or range (exactly those
  types: a subclass's `__iter__` or `__getitem__` would run code), forward and reversed;
- before Python 3.12 (where their copies are not deprecated yet), itertools' `permutations`,
  `combinations`, `combinations_with_replacement`, `product`, `count` and `repeat` over pure
  values (their state is their own: pools copied at construction, a counter).

Items go ahead only while each is pure (plain scalars, and tuples, lists and frozensets of
them: encoding one runs no code and no reference leaves this process); the chunk ends before
the first that is not. Generators, map, filter, zip, dict and set views, anything holding a
callable or another iterator, and every class of the other code: never read ahead (one real
`next()` per request, as before).

The real iterator does not move when the copy is read. The asking side counts the items it
used and says so ("ra") in the next request or answer it sends, before anything else, so
before any code of ours can run again: we then advance the real iterator by that many, which
yields exactly those items (nothing else could have moved it meanwhile, and these iterators
make each item from their state alone). What it did not use is dropped on its side. The
copy never leaves this process and no request can name it.

The count is the other side's word, checked only against what was read ahead: an asking side
that lies can see up to a chunk ahead and leave the iterator anywhere between where it was
and the end of that chunk. Code in this process could do as much to an iterator it holds with
`copy.copy(it)` and `next()` (each type here is one that `copy` copies, by the same
`__reduce__`), so a lie wins nothing that plain pytest would not grant.

Standard library only, Python >= 3.8.
"""

import builtins
import collections
import itertools
import sys

# The interpreter's own, as they were when the runtime loaded: a test may patch the builtins,
# and nothing here may call a test's function.
_iter, _reversed, _next, _type, _len = (
    builtins.iter,
    builtins.reversed,
    builtins.next,
    builtins.type,
    builtins.len,
)
_islice, _deque = itertools.islice, collections.deque

_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_CONTAINERS = (tuple, list, frozenset)
_SEQUENCES = (list, tuple, str, bytes, bytearray, range)
_BY_INDEX = frozenset(
    type(it)
    for it in (
        iter([]),
        reversed([]),
        iter(()),
        reversed(()),
        iter(""),
        iter("\u00e9"),
        iter(b""),
        iter(bytearray()),
        iter(range(0)),
        iter(range(1 << 70)),
    )
)
# Their pickling (what a copy is made from) is deprecated from 3.12 and gone in 3.14; a
# deprecation warning in the tests' process would be something a test can see.
_ITERTOOLS = frozenset(
    (
        itertools.permutations,
        itertools.combinations,
        itertools.combinations_with_replacement,
        itertools.product,
        itertools.count,
        itertools.repeat,
    )
    if sys.version_info < (3, 12)
    else ()
)
_DEPTH = 8
_JSON_INT = 1 << 53  # (codec.py: larger ints travel as hex)


def pure(value, depth=0):
    """Whether `value` is plain data whose encoding runs no code and holds no reference."""
    t = _type(value)
    if t in _SCALARS:
        return True
    if t in _CONTAINERS and depth < _DEPTH:
        for v in value:
            if not pure(v, depth + 1):
                return False
        return True
    return False


def clone(it):
    """An independent copy of iterator `it` at its current position where reading it ahead is
    unobservable (the module's docstring), else None. Runs no code but the interpreter's."""
    cls = _type(it)
    if cls not in _BY_INDEX and cls not in _ITERTOOLS:
        return None
    try:
        reduced = it.__reduce__()
        make, args = reduced[0], reduced[1]
        state = reduced[2] if _len(reduced) > 2 else None
        if cls in _BY_INDEX:
            if make not in (_iter, _reversed) or _len(args) != 1:
                return None
            if _type(args[0]) not in _SEQUENCES:
                return None
        elif make is not cls or not pure(args) or () in args:
            # () in args: an exhausted combinatoric iterator reduces to one over an empty pool,
            # which would yield one empty tuple
            return None
        copy = make(*args)
        if state is not None:
            copy.__setstate__(state)
        return copy
    except Exception:
        return None


def take(copy, n):
    """(up to n pure items of `copy`, whether it ended after them)."""
    items = []
    while _len(items) < n:
        try:
            item = _next(copy)
        except StopIteration:
            return items, True
        except Exception:
            break
        if not pure(item):
            break
        items.append(item)
    return items, False


def flat(items):
    """ "s" where every item is a scalar that JSON carries as itself (str, bool, None, an int
    of at most 53 bits), "t" where every one is a tuple of those, else None: such a chunk goes
    as JSON as it is, not through the codec's tables (the bulk of the cost of a million)."""
    tuples = bool(items) and _type(items[0]) is tuple
    for item in items:
        if not tuples:
            if not _json_scalar(item):
                return None
            continue
        if _type(item) is not tuple:
            return None
        for v in item:
            if not _json_scalar(v):
                return None
    return "t" if tuples else "s"


def _json_scalar(v):
    t = _type(v)
    return t is str or t is bool or v is None or (t is int and -_JSON_INT < v < _JSON_INT)


def advance(it, used, ended):
    """The real iterator moved past the `used` items the other side took from a copy (and past
    its end, if the other side reached it)."""
    _deque(_islice(it, used), maxlen=0)
    if ended:
        _next(it, None)
