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

Where the asking side is the tested process and the iterator's state is a few indices over
immutable plain values (a range iterator, and those itertools over tuples, frozensets and
scalars), no item goes at all: the serving side sends a recipe (class, arguments, state) and
the asking side makes its own copy (`rebuild`) and takes from it as many items as its code
asks, until it next sends a message, whose count ("ra") moves the real iterator by as many
(`advance_rebuilt`, checked against the items the iterator has: a count past its end, or an
end claimed early, is a protocol error). So a solution that walks a million permutations of
the tests pays one exchange, and the tests' side a million steps of C. The tests' side never
makes anything from a recipe (it asks for none, and refuses one): a description from the
tested process is not data it may construct from.

The count is the other side's word, checked only against what was read ahead: an asking side
that lies can see up to a chunk ahead and leave the iterator anywhere between where it was
and the end of that chunk (of a recipe: anywhere up to the iterator's end, or keep the tests'
side stepping an endless `count` until the verifier's timeout fails it). Code in this
process could do as much to an iterator it holds with `copy.copy(it)` and `next()` (each
type here is one that `copy` copies, by the same `__reduce__`), so a lie wins nothing that
plain pytest would not grant.

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
_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
codec = _load("codec")
ProtocolError = codec.ProtocolError
PeerGone = codec.PeerGone
iterators = _load("iterators")

CHUNK_MAX = 1024  # items of an iterator in one answer (`serve_chunk`)
CHUNK_TABLE = 4096  # ... or fewer, once their composites fill this many table entries

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
_REBUILT = {cls.__name__: cls for cls in _ITERTOOLS}
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


def _reduced(it):
    """(make, args, state) of iterator `it` where reading it ahead is unobservable (the
    module's docstring), else None. Runs no code but the interpreter's."""
    cls = _type(it)
    if cls not in _BY_INDEX and cls not in _ITERTOOLS:
        return None
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
    return make, args, state


def clone(it):
    """An independent copy of iterator `it` at its current position where reading it ahead is
    unobservable (the module's docstring), else None."""
    try:
        reduced = _reduced(it)
        if reduced is None:
            return None
        make, args, state = reduced
        copy = make(*args)
        if state is not None:
            copy.__setstate__(state)
        return copy
    except Exception:
        return None


def recipe(it):
    """[name, args, state] from which the other side makes its own copy of iterator `it`
    (`rebuild`), where `it` is a range iterator or one of the itertools read ahead over
    immutable plain values (so the copy's items are equal to the real ones, and no state is
    shared), else None. Its state is a few indices, where reading ahead sends the items."""
    try:
        reduced = _reduced(it)
    except Exception:
        return None
    if reduced is None:
        return None
    make, args, state = reduced
    if make in (_iter, _reversed):
        if _type(args[0]) is not range:
            return None
        name = "range"
    else:
        name = make.__name__
    if not frozen(args) or not frozen(state):
        return None
    return [name, args, state]


def rebuild(made):
    """The iterator that `recipe` describes, made here (ValueError if it describes none)."""
    if _type(made) is not list or _len(made) != 3 or _type(made[1]) is not tuple:
        raise ValueError("recipe")
    name, args, state = made
    if name == "range" and _len(args) == 1 and _type(args[0]) is range:
        copy = _iter(args[0])
    elif name in _REBUILT:
        copy = _REBUILT[name](*args)
    else:
        raise ValueError("recipe")
    if state is not None:
        copy.__setstate__(state)
    return copy


def frozen(value, depth=0):
    """Whether `value` is plain immutable data (`pure` without lists): equal copies of it
    behave the same wherever they are."""
    t = _type(value)
    if t in _SCALARS or t is range:
        return True
    if (t is tuple or t is frozenset) and depth < _DEPTH:
        for v in value:
            if not frozen(v, depth + 1):
                return False
        return True
    return False


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


def advance_rebuilt(it, used, ended):
    """The real iterator moved past the `used` items the other side took from the copy it
    rebuilt; whether it had them (and, where the other side says it reached the end, no more)."""
    if used > sys.maxsize:  # (more than islice takes: more than any iterator here has)
        return False
    last = _deque(enumerate(_islice(it, used), 1), maxlen=1)
    if (last[0][0] if last else 0) != used:
        return False
    return not ended or _next(it, _END) is _END


_END = object()


def no_reference(v):
    raise ProtocolError("an item read ahead holds a reference")  # (`pure` excludes it)


class ReadAhead:
    """What an endpoint (rpc.py) serves and keeps of the items of iterators each way: chunks
    and items read ahead of its own iterators, the recipes it sent, the counts it tells and
    the counts it is told. `peeked` and `peeking` are its own."""

    def serve_chunk(self, args, out, reply):
        """Up to n items of an iterator of ours in one answer ("k"), each encoded as it comes
        (as its own answer would carry it: a list yielded twice, changed between, goes twice),
        and the exception that ended it ("z", StopIteration included); with `plain`, ending
        after the first item that holds a reference. The other side asks only while one
        builtin call of its own consumes the iterator whole (iterators.py); to us it is the
        same as n requests for `next` in a row."""
        if len(args) != 4 or type(args[1]) is not int or not 0 < args[1] <= CHUNK_MAX:
            raise ProtocolError("chunk")
        it, plain = args[0], args[2] is True
        self.check_target(it)
        if args[3] is True and self._recipe(it, out, reply):
            return
        nodes = reply["k"] = []
        referenced = [False]
        encoder = self._reference_encoder(out)

        def reference(v):
            referenced[0] = True
            return encoder(v)

        for _ in range(args[1]):
            try:
                item = next(it)
            except (PeerGone, ProtocolError):
                raise
            except BaseException as e:  # the iterator's end, or its own exception
                reply["z"] = self.encode_exception(e, out)
                codec.drain(out, encoder)
                return
            nodes.append(codec.encode(item, out, reference))
            out.ids.clear()  # the next item's composites are its own copies
            out.described.clear()
            if len(out.table) > CHUNK_TABLE or (plain and referenced[0]):
                return

    def serve_peek(self, args, out, reply):
        """The next items of an iterator of ours read ahead of a copy ("k", "p"),
        and StopIteration ("z") where the copy ended; where it may not be read ahead, or its
        next item is not pure, that one item taken for real, as "next" would answer it."""
        if len(args) != 3 or type(args[1]) is not int or not 0 < args[1] <= CHUNK_MAX:
            raise ProtocolError("peek")
        it = args[0]
        self.check_target(it)
        if args[2] is True and self._recipe(it, out, reply):
            return
        oid = self.export_ids.get(id(it))
        copy = clone(it) if oid is not None and oid not in self.peeked else None
        if copy is not None:
            items, ended = take(copy, args[1])
            if items:
                kind = flat(items)
                if kind is not None:
                    reply["k"], reply["f"] = items, kind
                else:
                    nodes = reply["k"] = []
                    for item in items:
                        nodes.append(codec.encode(item, out, no_reference))
                        out.ids.clear()  # each its own copy, as its own answer would carry it
                        out.described.clear()
                reply["p"] = 1
                if ended:
                    reply["z"] = self.encode_exception(StopIteration(), out)
                self.peeked[oid] = [it, len(items), ended]
                return
        try:
            item = next(it)
        except (PeerGone, ProtocolError):
            raise
        except BaseException as e:  # the iterator's end, or its own exception
            reply["k"] = []
            reply["z"] = self.encode_exception(e, out)
            codec.drain(out, self._reference_encoder(out))
            return
        reply["k"] = [codec.encode(item, out, self._reference_encoder(out))]

    def _recipe(self, it, out, reply):
        """Whether a recipe of our iterator `it` went into `reply` ("b") for the
        other side to make its own copy and take as many items of as it likes, then say how
        many ("ra"), as it does of items read ahead."""
        oid = self.export_ids.get(id(it))
        made = recipe(it) if oid is not None and oid not in self.peeked else None
        if made is None:
            return False
        reply["b"] = codec.encode(made, out, no_reference)
        reply["k"], reply["p"] = [], 1
        self.peeked[oid] = [it, None, True]
        return True

    def _tell_used(self, msg):
        """Into an outgoing request or answer: how many of the items read ahead of the other
        side's iterators we used ("ra"), before any code of the other side can run again.
        What we did not use is dropped (it may not hold once that code has run)."""
        if not self.peeking:
            return
        used = []
        for proxy in self.peeking.values():
            iterators.stop_peeking(proxy, used)
        self.peeking = {}
        if used:
            msg["ra"] = used

    def _advance_used(self, used):
        """Our iterators moved past the items the other side used of what we read ahead (and
        forgotten: what we read ahead holds only until the other side's next message)."""
        peeked, self.peeked = self.peeked, {}
        if used is None:
            return
        if not isinstance(used, list):
            raise ProtocolError("ra")
        for entry in used:
            if not isinstance(entry, list) or len(entry) != 3:
                raise ProtocolError("ra")
            oid, n, ended = entry
            if type(oid) is not int or type(n) is not int or type(ended) is not bool:
                raise ProtocolError("ra")
            it, taken, to_end = peeked.pop(oid, None) or (None, -1, False)
            if taken is None:  # a recipe: its copy yields what the iterator has, no more
                if n < 0 or not advance_rebuilt(it, n, ended):
                    raise ProtocolError("ra: more than the iterator had")
                continue
            if not 0 <= n <= taken:
                raise ProtocolError("ra: more than was read ahead")
            if ended and not (to_end and n == taken):
                raise ProtocolError("ra: past the end read ahead")
            advance(it, n, ended)
