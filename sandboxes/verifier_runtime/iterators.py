"""Iterators of the other process consumed in chunks where nobody can tell (see rpc.py).

Each `next()` of a proxy is a round trip, and a test that walks twenty thousand items of a
generator through the boundary pays twenty thousand. Reading ahead is not free to do: a
generator runs code, and a test can observe when (a counter of the solution read between
two `next()`s, a callback, a log line, a file). So items are read ahead only while no code
of the consuming side can run between two `next()`s, which is so exactly while one builtin
call consumes the iterator whole: `list(it)`, `tuple(it)`, `sorted(it)`, `str.join`, `f(*it)`,
`list.extend`. Those, and no Python-level loop, first ask the iterator for its length hint
(`__length_hint__`, by type, from C); a mirror of an iterator has one that answers "unknown"
and notes which frame asked, at which instruction. A `next()` from that same frame and
instruction comes from that same builtin call (any other code of that frame would have moved
its instruction), so it asks for a chunk: up to n items, taken one after another on the
other side, each encoded as it came, and the exception that ended them. On the serving side
that is n `next()` requests in a row, so a chunk gives the asking side nothing a request
could not; and everything the iterator's code does meanwhile (callbacks into the asking
process, output, state a callback reads) happens in the same order, within the same builtin
call, as without chunks.

Items not consumed stay in the proxy's buffer and are the next ones any `next()` gets.
Stated limits: a `list.extend(it)` whose iterator calls back into code that reads that very
list mid-way sees it shorter than it would; `bytes(it)` and `bytearray(it)` (which also ask
for a length hint) convert each item as it comes and stop at the first that is not an int,
with the rest of its chunk already taken; a Python caller of `operator.length_hint` whose
same instruction then calls `next()` from C.

An iterator whose class is one of the interpreter's own (`__iter__` from C in builtins or
itertools: generators, map, zip, chain...) returns itself from `iter()`, so its mirror does
too without asking.

Standard library only, Python >= 3.8.
"""

import collections
import sys

_SELF_ITER_MODULES = ("builtins", "itertools", "_collections", "collections")
CHUNK_FIRST = 16  # items of the first chunk; each next one is four times as large
CHUNK_LARGEST = 1024


def iterates_itself(cls):
    """Whether `iter()` of an instance of `cls` is the instance itself by the interpreter's
    own code (an iterator class of builtins or itertools whose `__iter__` is C's)."""
    module = getattr(cls, "__module__", None)
    if module not in _SELF_ITER_MODULES:
        return False
    attrs = [k.__dict__ for k in cls.__mro__ if "__iter__" in k.__dict__]
    has_next = any("__next__" in k.__dict__ for k in cls.__mro__)
    return has_next and bool(attrs) and type(attrs[0]["__iter__"]).__name__ == "wrapper_descriptor"


def adapt(namespace, meta):
    """A mirror class's namespace (proxies.mirror_namespace) with the iterator methods of
    this module where its real class is an iterator."""
    if namespace.get("__next__") is None:
        return
    namespace["__next__"] = _next
    namespace["__length_hint__"] = _length_hint
    if meta.get("I") and namespace.get("__iter__") is not None:
        namespace["__iter__"] = _self


def _self(self):
    return self


def _length_hint(self):
    frame = sys._getframe(1)
    # (the code object is kept, not the frame: a frame would keep the test's locals alive)
    object.__setattr__(self, "_rollouts_bulk", (id(frame), frame.f_code, frame.f_lasti))
    return NotImplemented


def _next(self):
    ahead = self.__dict__.get("_rollouts_ahead")
    if ahead:
        value, end = ahead.popleft()
        if end is not None:
            self.__dict__.pop("_rollouts_bulk", None)
            raise end
        return value
    bulk = self.__dict__.get("_rollouts_bulk")
    if bulk is not None:
        frame = sys._getframe(1)
        if bulk == (id(frame), frame.f_code, frame.f_lasti):
            return _from_chunk(self)
        del self.__dict__["_rollouts_bulk"]
    return self._rollouts_ep.request("op", "next", self)


def _from_chunk(self):
    size = self.__dict__.get("_rollouts_chunk", CHUNK_FIRST)
    object.__setattr__(self, "_rollouts_chunk", min(size * 4, CHUNK_LARGEST))
    items, end = self._rollouts_ep.request("chunk", self, size)
    ahead = self.__dict__.get("_rollouts_ahead")
    if ahead is None:
        ahead = collections.deque()
        object.__setattr__(self, "_rollouts_ahead", ahead)
    ahead.extend((item, None) for item in items)
    if end is not None:
        ahead.append((None, end))
    elif not items:
        raise RuntimeError("an empty chunk without an end")
    return _next_of_buffer(self, ahead)


def _next_of_buffer(self, ahead):
    value, end = ahead.popleft()
    if end is not None:
        self.__dict__.pop("_rollouts_bulk", None)
        raise end
    return value
