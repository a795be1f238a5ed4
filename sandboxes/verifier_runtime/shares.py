"""Lists, dicts and sets one side handed over and the other kept: one value on both sides.

A container crosses by value (codec.py) and comes back changed when the call it went with
returns (rpc.py, "u"). That is all a call that only uses its argument needs; but an object
that keeps it (`Logger(sink)` appends to `sink` in later calls, `App(config)` reads the
tests' later changes, a generator reads it as it goes) would use a stale copy. So, after
serving a request, the callee looks for the request's containers its code still holds (their
reference counts, less the references the decoding itself made) and shares them: each gets a
handle ("sr": [n, handle] in the answer, n its entry in the request). The tested side does the
same for an answer its code still holds (`registry()` answering a module's list, `stack.items`:
"sk" below, n its entry in the answer), so `registry() is registry()` holds and the tests'
changes to it reach the module. From then on:

- each side sends, in every request and answer, the shares it changed since it last sent
  or heard of them ("sy": [handle, entry], applied in place by the receiver before anything
  else of the message), items compared by identity with a snapshot taken then, never by
  their own `==` (a proxy's would be a request);
- a share sent anywhere travels as ["K", handle] (codec.py), so the receiver gets its own
  container (`logger.sink is sink` holds, and handing it over again hands the same object);
- a list, dict or set first sent inside a share's entry is a share too ("sk": [n, handle]),
  and so is a list a request hands over beside an iterator of the sender's over it
  (`share_iterated`: the callee's changes reach the sender's iterator as it walks);
- a side whose code no longer holds a share (only this registry does) ends it ("sx").

Handles are numbered by the side that made them, with its own sign (`share_sign`), so the
two never collide. The trusted side's containers stay real lists, dicts and sets: their `==`
is the tests' own, and what the tested side changes in them is what a kept reference lets
code change in one process, at the moments that code runs. It never shares, nor sends as a
share, what it asks in a comparison's probe (trusted.py): the tested side cannot tell the
tests' expected value from its decoys by identity.

Standard library only, Python >= 3.8.
"""

import gc
import itertools
import operator
import sys
import types

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
codec = _load("codec")
ProtocolError = codec.ProtocolError

_is, _chain, _islice = operator.is_, itertools.chain, itertools.islice
SHARED = (list, dict, set)  # exactly these types (a subclass's methods would run code)
_WALKED = (list, tuple, dict, set, frozenset)
# Every exchange compares each share with its snapshot (C, ~50 ns an item): past these, in
# all, a container kept is a copy as before (a stale one if it changes), so a test that hands
# a huge input to an object and then queries it pays no more per call than it did.
MAX_SHARES = 256
MAX_SHARED_ITEMS = 1 << 14
# Requests whose arguments the callee's code may keep.
KEEPING_OPS = frozenset(("call", "callattr", "setattr", "op", "mutate"))
# Requests whose answer may be a container the callee's code keeps (Shares.kept_answer).
ANSWERING_OPS = frozenset(("call", "callattr", "getattr", "op"))
_LIST_ITERATORS = (type(iter([])), type(reversed([])))
_CALLS = ("call", "callattr")  # (their arguments: [..., (positional...), ((name, value)...)])


def _iterated(it):
    """The list that list iterator `it` walks (None once it has ended). Runs no code but the
    interpreter's."""
    args = it.__reduce__()[1]
    return args[0] if len(args) == 1 and type(args[0]) is list else None


def _children(v):
    t = type(v)
    if t is dict:
        return list(v.keys()) + list(v.values())
    if t in _WALKED:
        return list(v)
    found = []
    for x in gc.get_referents(v):  # a record's fields (its instance dictionary, or slots)
        if type(x) is dict:
            found.extend(x.values())
        found.append(x)
    return found


def _snapshot(v):
    """Its items as they are (keys, then values, of a dict): held, so no id is reused."""
    return list(v) + list(v.values()) if type(v) is dict else list(v)


def _unchanged(v, snapshot):
    """Whether `v` holds the very objects of `snapshot` (identity, in C: no `==` runs)."""
    if len(snapshot) != (2 * len(v) if type(v) is dict else len(v)):
        return False
    items = _chain(v, v.values()) if type(v) is dict else v
    return all(map(_is, items, snapshot))


def _appended(v, snapshot):
    """Whether list `v` is `snapshot` with items added at its end (a log that grows)."""
    n = len(snapshot)
    return type(v) is list and 0 < n < len(v) and all(map(_is, _islice(v, n), snapshot))


def _pairs(items):
    """[[n, handle], ...] checked for shape."""
    if items is None:
        return []
    if not isinstance(items, list) or not all(
        isinstance(x, list) and len(x) == 2 and type(x[0]) is int and type(x[1]) is int
        for x in items
    ):
        raise ProtocolError("shares")
    return items


class Shares:
    """The shares part of an endpoint (rpc.Endpoint): `shares` handle -> our container,
    `share_ids` id(container) -> handle, `snapshots` handle -> its items when last synced."""

    share_sign = 1
    shares_answers = False  # whether answers our code still holds become shares (kept_answer)

    def _room(self, v):
        """Whether a new share `v` fits in MAX_SHARES and MAX_SHARED_ITEMS."""
        if len(self.shares) >= MAX_SHARES:
            return False
        items = sum(len(x) for x in self.snapshots.values())
        return items + len(v) * (2 if type(v) is dict else 1) <= MAX_SHARED_ITEMS

    def _share(self, v, handle=None):
        if handle is None:
            self.next_share += 1
            handle = self.next_share * self.share_sign
        self.shares[handle] = v
        self.share_ids[id(v)] = handle
        self.snapshots[handle] = _snapshot(v)
        return handle

    def _unshare(self, handle):
        v = self.shares.pop(handle, None)
        self.snapshots.pop(handle, None)
        if v is not None:
            self.share_ids.pop(id(v), None)

    # ---- sending -------------------------------------------------------------------------

    def end_unheld_shares(self, msg):
        """Into an outgoing message, before any value is encoded: the shares nothing holds
        but this registry ("sx"). A share inside another (or inside a snapshot) is held while
        that one is; it ends a message after it, when the outer one is gone. Cycles among
        shares stay. One reference count per share: no walk of their items. One changed
        since it was last sent (`solution.cache("k").append(1)`, the answer dropped after the
        change) ends after send_shares has sent the change: the receiver applies "sy" first."""
        if not self.shares:
            return
        probe = []
        base = sys.getrefcount(probe)  # its name here and the call's argument
        ended = []
        for handle in list(self.shares):
            v = self.shares[handle]
            # the registry, `v` here, the argument: one more than the probe
            if sys.getrefcount(v) - base - 1 <= 0:
                ended.append(handle)
            del v
        for handle in ended:
            if _unchanged(self.shares[handle], self.snapshots[handle]):
                self._unshare(handle)
            else:
                self.ending_shares.append(handle)
        if ended:
            msg["sx"] = ended

    def send_shares(self, msg, memo):
        """Into an outgoing message whose values are encoded (`memo`): the shares we changed
        ("sy"), and the new lists, dicts and sets inside them ("sk")."""
        try:
            self._send_shares(msg, memo)
        finally:
            for handle in self.ending_shares:
                self._unshare(handle)
            del self.ending_shares[:]

    def _send_shares(self, msg, memo):
        if not self.shares:
            return
        memo.shared = self.share_ids
        encoder = self._reference_encoder(memo)
        entries, changed = [], []
        for handle, v in list(self.shares.items()):
            snapshot = self.snapshots[handle]
            if _unchanged(v, snapshot):
                continue
            try:
                if _appended(v, snapshot):  # only what was added: [handle, entry, from]
                    added = v[len(snapshot) :]
                    entry = [handle, codec.entry(added, memo, encoder), len(snapshot)]
                else:
                    added = v
                    entry = [handle, codec.entry(v, memo, encoder)]
                codec.drain(memo, encoder)
            except Exception:  # (a thread of the code changed it meanwhile: the next message)
                continue
            entries.append(entry)
            changed.append(added)
            self.snapshots[handle] = _snapshot(v)
        if not entries:
            return
        msg["sy"] = entries
        new = []
        seen = set()
        while changed:
            for x in _children(changed.pop()):
                n = memo.ids.get(id(x))
                if n is None or id(x) in seen or id(x) in self.share_ids:
                    continue
                seen.add(id(x))
                changed.append(x)
                if type(x) in SHARED and self._room(x):
                    new.append([n, self._share(x)])
        if new:
            msg["sk"] = new

    def share_iterated(self, op, args, memo, msg):
        """Into our request `op` on `args` encoded into `memo`: each list of ours handed over
        beside an iterator of ours over it (`solution.walk(iter(items), items)`) is a share
        from now on ("sk"), so what the callee changes in its copy reaches our list before
        our iterator gives it its next item, as one list would (a copy came back only with
        the answer)."""
        if op not in KEEPING_OPS or not self.shares_by_reference(op):
            return
        values = args
        if op in _CALLS and len(args) >= 2 and type(args[-2]) is tuple:
            values = list(args[-2]) + [pair[1] for pair in args[-1]]
        walked = [_iterated(v) for v in values if type(v) in _LIST_ITERATORS]
        if not walked:
            return
        handed = {id(v) for v in values}
        new = []
        for v in walked:
            if v is None or id(v) not in handed or id(v) in self.share_ids:
                continue
            n = memo.ids.get(id(v))
            if n is not None and self._room(v):
                new.append([n, self._share(v)])
        if new:
            msg.setdefault("sk", []).extend(new)

    def kept_arguments(self, memo):
        """[n, handle] for each list, dict or set of a request we served that our code still
        holds (it is a share from now on)."""
        objects = memo.objects
        if not any(type(v) in SHARED for v in objects.values()):
            return []
        probe = []
        base = sys.getrefcount(probe)
        roots = []
        for n in list(objects):
            v = objects[n]
            # the memo, `v` here, the argument, and where decoding put it: one more than the
            # probe and the uses
            if sys.getrefcount(v) - base - 1 - memo.uses.get(n, 0) > 0:
                roots.append(v)
            del v
        numbers = {id(v): n for n, v in objects.items()}
        kept, seen = [], set()
        while roots:
            v = roots.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if type(v) in SHARED and id(v) not in self.share_ids and self._room(v):
                kept.append([numbers[id(v)], self._share(v)])
            roots.extend(x for x in _children(v) if id(x) in numbers)
        return kept

    def kept_answer(self, op, args, value, memo):
        """[[n, handle]] when `value`, our answer to `op` on `args` encoded into `memo`, is a
        list, dict or set our code still holds (a module's registry, an object's own list): a
        share from now on, so the other side gets the same object each time and its changes
        reach ours. Only the side that `shares_answers` does this; a module's own containers
        the other side reads are pushed to (trusted.py's _push_shared), not shared here."""
        if (
            not self.shares_answers
            or op not in ANSWERING_OPS
            or isinstance(args[0], types.ModuleType)
            or type(value) not in SHARED
            or id(value) in self.share_ids
        ):
            return []
        n = memo.ids.get(id(value))
        if n is None or not self._room(value):
            return []
        probe = []
        base = sys.getrefcount(probe)
        # the memo, `value` in the caller and here, the argument: two more than the probe
        if sys.getrefcount(value) - base - 2 <= 0:
            return []
        return [[n, self._share(value)]]

    # ---- receiving -----------------------------------------------------------------------

    def heard_shares(self, msg, memo, fresh, sent):
        """Apply an incoming message's shares: `fresh` the "sy" entries built, `sent` the memo
        of our request when the message is its answer."""
        if not ("sy" in msg or "sk" in msg or "sr" in msg or "sx" in msg):
            return  # (most messages)
        for i, entry in enumerate(msg.get("sy") or []):
            new, handle = fresh[i], entry[0]
            v = self.shares.get(handle) if type(handle) is int else None
            start = entry[2] if len(entry) == 3 else 0
            if (
                v is None
                or type(v) is not type(new)
                or len(entry) not in (2, 3)
                or type(start) is not int
                or not 0 <= start <= (len(v) if type(v) is list and len(entry) == 3 else 0)
            ):
                raise ProtocolError("share %r" % (handle,))
            if type(v) is list:
                v[start:] = new
            else:
                v.clear()
                v.update(new)
            self.snapshots[handle] = _snapshot(v)
        for n, handle in _pairs(msg.get("sk")):
            self._heard_share(memo.objects.get(n), handle, n <= len(memo.table))
        if "sr" in msg:
            if sent is None or sent.op not in KEEPING_OPS or not self.shares_by_reference(sent.op):
                raise ProtocolError("a share of what was not handed over")
            for n, handle in _pairs(msg["sr"]):
                self._heard_share(sent.objects.get(n), handle, n <= len(sent.table))
        ended = msg.get("sx") or []
        if not isinstance(ended, list) or not all(type(h) is int for h in ended):
            raise ProtocolError("shares")
        for handle in ended:
            self._unshare(handle)

    def _heard_share(self, v, handle, ours):
        if not (
            ours
            and type(v) in SHARED
            and type(handle) is int
            and handle * self.share_sign < 0
            and handle not in self.shares
            and id(v) not in self.share_ids
        ):
            raise ProtocolError("share %r" % (handle,))
        self._share(v, handle)

    def shares_by_reference(self, op):
        """Whether a request `op` of ours sends shares as themselves (and may make new ones)."""
        return True
