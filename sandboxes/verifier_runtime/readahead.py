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
make each item from their state alone). The copy never leaves this process and no request
can name it.

What the asking side did not use it sets aside ("ho"), where it used some since they came: a
solution that calls back into the tests for each item of the tests' list would otherwise ask
for the next item again after every callback. It may use them again only if our next request
or answer says they still hold ("hk"), which we say, once our code has run, only where our
iterator stands where the count left it (the same sequence object at the same index; an
itertools copy's equal state) and, over a list or bytearray, the items it will give next are
still the very objects read ahead (`_still_holds`: at most `HOLD_MAX`, all immutable, so an
item changed in place cannot differ from the one sent). Anything else, and anything set
aside that no word came for, is dropped on both sides, and the next item is asked for again.

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
HOLD_MAX = 32  # items read ahead that may stay the other side's across a message

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


def clone(it, shared=()):
    """An independent copy of iterator `it` at its current position where reading it ahead is
    unobservable (the module's docstring), else None. Not of one over a sequence whose id is in
    `shared` (a list both sides keep, shares.py: a change the other side makes to its copy
    comes with its next message, and items read ahead before it would not have it), nor where
    the copy does not stand where `it` does (a reversed iterator past the end of a list that
    shrank: `__setstate__` moves the copy back to the list's last item, where `it` gives none)."""
    try:
        reduced = _reduced(it)
        if reduced is None:
            return None
        make, args, state = reduced
        if (make is _iter or make is _reversed) and id(args[0]) in shared:
            return None
        copy = make(*args)
        if state is not None:
            copy.__setstate__(state)
        if _position(copy)[2] != state:
            return None
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


def _position(it):
    """(make, args, state) of our iterator `it` as it stands now (one `clone` copies)."""
    reduced = it.__reduce__()
    return reduced[0], reduced[1], reduced[2] if _len(reduced) > 2 else None


def _same(a, b):
    """Whether iterator positions `a` and `b` (`_position`) make the same next items: the same
    sequence object at the same index (a range: an equal one, made anew at each reduce), or
    equal plain values (itertools' pools and indices)."""
    if a[0] is not b[0] or _type(a[1]) is not tuple or _type(b[1]) is not tuple:
        return False
    if a[0] is not _iter and a[0] is not _reversed:
        return a == b
    if _len(a[1]) != 1 or _len(b[1]) != 1 or _type(a[2]) is not int:
        return False
    seq, other = a[1][0], b[1][0]
    same = seq is other or (_type(seq) is range and _type(other) is range and seq == other)
    return same and _type(b[2]) is int and a[2] == b[2]


def _hold(entry, used):
    """What to check when we next send (`_still_holds`) of our iterator's entry in `peeked`
    ([it, taken, to_end, items]) where the other side set aside what it did not use past the
    first `used`: [it, the items that may stay (None: a recipe, whose copy is the other side's),
    whether its end may, where the iterator stands now]; None where nothing may stay. At
    most `HOLD_MAX` items, and only immutable ones: a list the items are in is checked item by
    item at each message, and an item changed in place would differ from the one sent."""
    it, taken, to_end, items = entry
    try:
        where = _position(it)
    except Exception:
        return None
    if taken is None:
        return [it, None, to_end, where]
    left = _len(items) - used
    keep, i = [], used
    while i < _len(items) and _len(keep) < HOLD_MAX and frozen(items[i]):
        keep.append(items[i])
        i += 1
    if not keep and not to_end:
        return None
    return [it, keep, to_end and _len(keep) == left, where]


def _still_holds(hold, shared):
    """[how many items, whether the end, our new `peeked` entry] where what the other side set
    aside of our iterator still stands as it was read ahead: the iterator where it was, and the
    items of a list or bytearray still those very objects (its end: still its length); None
    where it does not (it moved, or the items changed: the other side drops them), and where
    its sequence's id is in `shared`, a list both sides now keep (shares.py): the other side
    changes its copy of it without a message, and would then take items of ours from before."""
    it, keep, with_end, was = hold
    try:
        now = _position(it)
    except Exception:
        return None
    if not _same(now, was):
        return None
    if (now[0] is _iter or now[0] is _reversed) and id(now[1][0]) in shared:
        return None
    if keep is None:  # a recipe: the other side's copy goes on from here
        return [-1, True, [it, None, True, None]]
    seq, index, n = now[1][0], now[2], _len(keep)
    if _type(seq) is list or _type(seq) is bytearray:
        step = -1 if now[0] is _reversed else 1
        j = 0
        while j < n:
            at = index + j * step
            if not 0 <= at < _len(seq) or seq[at] is not keep[j]:
                return None
            j += 1
        if with_end and index + n * step != (_len(seq) if step > 0 else -1):
            with_end = False
    return [n, with_end, [it, n, with_end, keep]]


def _triples(value, key):
    """`value`, a list of 3-item lists (a message's "ra" or "hk"), or a protocol error."""
    if not isinstance(value, list) or not all(isinstance(e, list) and len(e) == 3 for e in value):
        raise ProtocolError(key)
    return value


def no_reference(v):
    raise ProtocolError("an item read ahead holds a reference")  # (`pure` excludes it)


class ReadAhead:
    """What an endpoint (rpc.py) serves and keeps of the items of iterators each way: chunks
    and items read ahead of its own iterators, the recipes it sent, the counts it tells and
    the counts it is told, and the chunks it is answered, decoded. `peeked` and `peeking`
    are its own."""

    def decoded_chunk(self, msg, memo):
        """(items, the exception that ended the iterator or None, whether they were read
        ahead) of a "chunk" or "peek" answer."""
        items, end, flat = msg["k"], msg.get("z"), msg.get("f")
        if not isinstance(items, list):
            raise ProtocolError("chunk")
        if "b" in msg:  # a recipe: the iterator to end with, made here (`rebuild`)
            if not self.rebuilds or items or end is not None or msg.get("p") != 1:
                raise ProtocolError("recipe")
            try:
                return rebuild(self.decode(msg["b"], memo)), StopIteration(), True
            except (TypeError, ValueError):
                raise ProtocolError("recipe") from None
        if flat is None:
            if _leaves_only(items):
                values = items  # (JSON scalars: each node is its value; most chunks of numbers)
            else:
                values = [self.decode(node, memo) for node in items]
        elif flat == "t" and all(type(v) is list for v in items):
            values = [tuple(v) for v in items]
        elif flat == "s" and _leaves_only(items):
            values = items
        else:
            raise ProtocolError("chunk")
        end = None if end is None else self.decode_exception(end, memo)
        return values, end, msg.get("p") == 1

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
        self._chunk(it, args[1], plain, out, reply)

    def first_chunk(self, value, out, reply):
        """A call's answer (`reply`: "v" already encoded), and, where it is an iterator of
        ours, its first chunk as a "chunk" request would answer it: the other side asks so
        only where the instruction after its call hands the answer to a builtin that consumes
        it whole (iterators.whole_after), so it is the same as the call and a "chunk" request
        in a row (with `plain`, as for a lone argument of one of those builtins)."""
        node = reply.get("v")
        if not (type(node) is list and node[:1] == ["o"]):
            return  # (by value, or the other side's own object: nothing of ours to read)
        if getattr(type(value), "__next__", None) is None:
            return
        if self.made_classes and any(k in self.made_classes for k in type(value).__mro__):
            return  # (the other side's own class there: its own `__next__` takes the items)
        self._chunk(value, iterators.CHUNK_FIRST, True, out, reply)

    def _chunk(self, it, size, plain, out, reply):
        nodes = reply["k"] = []
        referenced = [False]
        encoder = self._reference_encoder(out)

        def reference(v):
            referenced[0] = True
            return encoder(v)

        for _ in range(size):
            try:
                item = next(it)
            except (PeerGone, ProtocolError):
                raise
            except BaseException as e:  # the iterator's end, or its own exception
                reply["z"] = self.encode_exception(e, out)
                codec.drain(out, encoder)
                return
            if codec.is_own_node(item):  # (most items of a long walk: a number, a text)
                nodes.append(item)
                continue
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
        fresh = oid is not None and oid not in self.peeked
        copy = clone(it, self.share_ids) if fresh else None
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
                self.peeked[oid] = [it, len(items), ended, items]
                # (what the other side set aside of it gives way: these items are from now)
                self.holding.pop(oid, None)
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
        self.peeked[oid] = [it, None, True, None]
        self.holding.pop(oid, None)
        return True

    def _tell_used(self, msg):
        """Into an outgoing request or answer, before any code of the other side can run again:
        as the asking side, how many of the items read ahead of the other side's iterators we
        used ("ra") and which of them we have more of, set aside ("ho"), usable again only if
        the other side's next request or answer says they still hold; as the serving side, which
        of ours the other side set aside still stand as they were read ahead ("hk")."""
        if self.offered:  # (set aside at a message before, and no word came since)
            self._drop_offered()
        if self.peeking:
            used = []
            for proxy in self.peeking.values():
                left = iterators.stop_peeking(proxy, used)
                if left is not None:
                    self.offered[iterators.proxies.own(proxy)["_rollouts_oid"]] = (proxy, left)
            self.peeking = {}
            if used:
                msg["ra"] = used
            if self.offered:
                msg["ho"] = list(self.offered)
        if self.holding:
            kept = []
            for oid, hold in self.holding.items():
                word = _still_holds(hold, self.share_ids)
                if word is not None:
                    kept.append([oid, word[0], word[1]])
                    self.peeked[oid] = word[2]
            self.holding = {}
            if kept:
                msg["hk"] = kept

    def _drop_offered(self):
        offered, self.offered = self.offered, {}
        for proxy, left in offered.values():
            iterators.drop_peeking(proxy, left[1])

    def _advance_used(self, msg):
        """From an incoming request or answer, before any code of ours runs: our iterators moved
        past the items the other side used of what we read ahead ("ra"); the rest of what we
        read ahead is forgotten, but for what the other side set aside ("ho"), which is checked
        when we next send (`_tell_used`); and of our own items read ahead that we set aside, what
        the other side says still holds ("hk") serves our `next()`s again."""
        peeked, self.peeked = self.peeked, {}
        if self.holding:
            self.holding = {}
        used, held, kept = msg.get("ra"), msg.get("ho"), msg.get("hk")
        counts = {}
        if used is not None:
            for oid, n, ended in _triples(used, "ra"):
                if type(oid) is not int or type(n) is not int or type(ended) is not bool:
                    raise ProtocolError("ra")
                if oid in counts:
                    raise ProtocolError("ra: an iterator counted twice")
                it, taken, to_end, _items = peeked.get(oid) or (None, -1, False, None)
                counts[oid] = n
                if taken is None:  # a recipe: its copy yields what the iterator has, no more
                    if n < 0 or not advance_rebuilt(it, n, ended):
                        raise ProtocolError("ra: more than the iterator had")
                    continue
                if not 0 <= n <= taken:
                    raise ProtocolError("ra: more than was read ahead")
                if ended and not (to_end and n == taken):
                    raise ProtocolError("ra: past the end read ahead")
                advance(it, n, ended)
        if held is not None:
            if not isinstance(held, list) or not all(type(oid) is int for oid in held):
                raise ProtocolError("ho")
            for oid in held:
                entry = peeked.get(oid)
                hold = None if entry is None else _hold(entry, counts.get(oid, 0))
                if hold is not None:
                    self.holding[oid] = hold
        if kept is not None or self.offered:
            self._resume_offered(kept)

    def _resume_offered(self, kept):
        offered, self.offered = self.offered, {}
        if kept is not None:
            for oid, keep, with_end in _triples(kept, "hk"):
                if type(keep) is not int or not -1 <= keep <= HOLD_MAX:
                    raise ProtocolError("hk")
                if type(with_end) is not bool:
                    raise ProtocolError("hk")
                found = offered.pop(oid, None) if type(oid) is int else None
                if found is not None:  # (else nothing of it was set aside: no word to heed)
                    iterators.resume_peeking(found[0], found[1], keep, with_end)
        for proxy, left in offered.values():
            iterators.drop_peeking(proxy, left[1])


def _leaves_only(nodes):
    """Whether no node is a list or a JSON object: every one a scalar, its own value."""
    for node in nodes:
        if type(node) is list or type(node) is dict:
            return False
    return True
