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

A second group of builtins consumes an iterator whole without a length hint: `set`,
`frozenset`, `sum`, `min`, `max`, `dict` (and `sorted`, `list`, `tuple` again) called on it
alone. Their `next()` comes from the frame and instruction that called `iter()` on the proxy,
and that instruction is a call with one positional argument whose callable is a name the
frame resolves, now, to that very builtin (`_callee`: a backward walk over the argument's
instructions by their stack effects, so `set(map(f, it))` or `min(it, key=f)` never match).
They do process each item as it comes (hash, add, compare), which runs no code for plain
values; so their chunks end after the first item that holds a reference, and the consumer
finds the iterator where it was when it asks that item something. `any`, `all`, `in` and
unpacking stop early: never in chunks.

A call whose value goes straight to one of that second group (`list(solution.gen(x))`, the
commonest line of a test of a generator, and pytest's rewriting of it in an `assert`, which
passes it through a variable) asks for its answer's first chunk with it (`whole_after`; rpc.py
"ck"): no code of the frame can run between the call's answer and the builtin's first `next()`,
so the two exchanges are one. Only an iterator the other side has just made is read so (one it
already held may have items kept on this side).

Items not consumed stay in the proxy's buffer and are the next ones any `next()` gets.
Stated limits: a `list.extend(it)` whose iterator calls back into code that reads that very
list mid-way sees it shorter than it would; `bytes(it)` and `bytearray(it)` (which also ask
for a length hint) convert each item as it comes and stop at the first that is not an int,
with the rest of its chunk already taken (so do `set(it)` or `max(it)` at an item they
reject: unhashable, incomparable); a Python caller of `operator.length_hint` whose
same instruction then calls `next()` from C.

An iterator whose class is one of the interpreter's own (`__iter__` from C in builtins or
itertools: generators, map, zip, chain...) returns itself from `iter()`, so its mirror does
too without asking.

Standard library only, Python >= 3.8.
"""

import bisect
import builtins
import collections
import itertools
import operator
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
codec = _load("codec")
proxies = _load("proxies")

_SELF_ITER_MODULES = ("builtins", "itertools", "_collections", "collections")
CHUNK_FIRST = 16  # items of the first chunk; each next one is four times as large
CHUNK_LARGEST = 1024
IDLE_MESSAGES = 1  # messages items read ahead are set aside through unused (`stop_peeking`)


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


def _where(frame):
    # (the code object is kept, not the frame: a frame would keep the test's locals alive)
    return (id(frame), frame.f_code, frame.f_lasti)


def _self(self):
    object.__setattr__(self, "_rollouts_iter_at", _where(sys._getframe(1)))
    return self


def _length_hint(self):
    object.__setattr__(self, "_rollouts_bulk", _where(sys._getframe(1)))
    return NotImplemented


def _next(self):
    # (asked here, not by `proxies._or_inherited`'s wrapper: this reads its caller's frame)
    cls = type(self)  # (the flag first: this runs for every item a proxy's iterator gives)
    if cls._rollouts_subclass and proxies.overridden(cls, "__next__"):  # a tests' `super()`
        return proxies.run_inherited(self, "__next__", _next, (), {})
    ahead = proxies.own(self).get("_rollouts_ahead")
    if ahead:
        if ahead[0][1] is None:  # (an item, not the end: taken here, once per item of a chunk)
            return ahead.popleft()[0]
        return _next_of_buffer(self, ahead)
    peek = proxies.own(self).get("_rollouts_peeked")
    if peek is not None:
        item = _next_of_peek(peek)
        if item is not _ASK:
            return item
    frame = sys._getframe(1)
    bulk = proxies.own(self).get("_rollouts_bulk")
    if bulk is not None:
        if bulk == _where(frame):
            return _from_chunk(self, False)
        del proxies.own(self)["_rollouts_bulk"]
    at = proxies.own(self).get("_rollouts_iter_at")
    if at is not None:
        if at == _where(frame) and _whole_builtin_call(frame):
            object.__setattr__(self, "_rollouts_bulk", at)
            return _from_chunk(self, True)
        del proxies.own(self)["_rollouts_iter_at"]
    return _from_peek(self)


# Builtins that, called with the iterator as their one argument, consume it whole and run no
# code between two items when those items are plain values (hashing, adding, comparing them).
# Not any() or all() (they stop early), nor anything called with a key or a function.
_WHOLE = ("set", "frozenset", "sum", "min", "max", "sorted", "list", "tuple", "dict")
# A call's instruction -> the stack items beyond its arguments (3.11+, and before; with
# keywords: 3.13, and before 3.11)
_CALLS = {"CALL": 0, "CALL_FUNCTION": 0, "CALL_KW": 1, "CALL_FUNCTION_KW": 1}
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF")
ATTRIBUTE_LOADS = ("LOAD_ATTR", "LOAD_METHOD")
_SKIP = ("CACHE", "NOP", "EXTENDED_ARG")
_callees = {}  # (code, offset) -> `_callee`'s answer


def _whole_builtin_call(frame):
    """Whether the instruction `frame` is at calls one of `_WHOLE` (the builtin itself, as
    the frame resolves the name now) with exactly one positional argument: the call that
    asked for the iterator and now takes its items, from C, with no code of the frame in
    between (any other would have moved the frame's instruction)."""
    return _calls_whole_builtin(frame, None)


def _calls_whole_builtin(frame, offset):
    """Whether the call at `offset` of `frame` (None: where it stands) calls one of `_WHOLE`,
    the builtin itself as the frame resolves the name now, with one positional argument."""
    found = callee(frame, offset)
    if found is None or found[0] == "LOAD_DEREF" or found[2:] != (1, False):
        return False
    if found[1] not in _WHOLE:
        return False
    value = resolved(frame, found)
    return value is not None and value is getattr(builtins, found[1], None)


def callee(frame, offset=None, attributes=False):
    """(load instruction, name, arguments, whether some are keywords) of the callable of the
    call the instruction `frame` is at (or at `offset`), where that callable is a plain name
    (or, with `attributes`, an attribute: its name); else None (`_callee`, kept per
    instruction)."""
    key = (frame.f_code, frame.f_lasti if offset is None else offset, attributes)
    if key not in _callees:
        if len(_callees) >= _CALLEES_KEPT:
            _callees.clear()
        try:
            _callees[key] = _callee(*key)
        except (ValueError, TypeError, IndexError, StopIteration):
            _callees[key] = None
    return _callees[key]


def resolved(frame, found):
    """What the name of `callee`'s answer stands for in `frame` now (None where unknown)."""
    op, name = found[0], found[1]
    if op == "LOAD_FAST":
        return frame.f_locals.get(name)
    if op == "LOAD_DEREF":
        return frame.f_locals.get(name)  # (a cell's value: f_locals has it)
    where = (frame.f_locals,) if op == "LOAD_NAME" else ()
    where += (frame.f_globals, vars(builtins))
    return next((w[name] for w in where if name in w), None)


_CALLEES_KEPT = 4096


def _instructions(code):
    """(the instructions of `code` but `_SKIP`'s, their offsets), disassembled once per code
    object: each call site of a test function is looked at on its own (`callee`,
    `whole_after`), and disassembling the whole function again for each was most of what the
    boundary cost a suite of long tests (parse's: 45,000 instructions for 117 call sites)."""
    found = _instructions_of.get(code)
    if found is None:
        instrs = _decoded(code)
        found = instrs, [i.offset for i in instrs]
        if len(_instructions_of) >= _CODES_KEPT:
            _instructions_of.clear()
        _instructions_of[code] = found
    return found


_instructions_of = {}  # code -> `_instructions`' answer
_CODES_KEPT = 64


class Instruction(tuple):
    """What `_callee` and `_next_call` read of an instruction, as `dis.Instruction` names it:
    argval only of the loads and stores that name a variable, a global or an attribute."""

    __slots__ = ()
    offset = property(operator.itemgetter(0))
    opname = property(operator.itemgetter(1))
    opcode = property(operator.itemgetter(2))
    arg = property(operator.itemgetter(3))
    argval = property(operator.itemgetter(4))
    is_jump_target = property(operator.itemgetter(5))


def _decoded(code):
    """The instructions of `code` but `_SKIP`'s, read off its bytes (methods.py `unpacked`):
    `dis.get_instructions` also builds every instruction's value, text and source position,
    about 4 us an instruction, and a test function rewritten by pytest runs to thousands
    (parse's suite: 15,000, a sixth of what its boundary cost). Where this interpreter lacks
    what the reading needs, `dis` reads them."""
    import dis  # (here: the tested process starts without it)

    names = _namer(code)
    if names is None:
        return [i for i in dis.get_instructions(code) if i.opname not in _SKIP]
    labels = set(dis.findlabels(code.co_code))  # (as `dis` marks them: jumps' targets)
    return [
        Instruction((at, name, op, arg, names(name, arg) if name in _NAMED else None, at in labels))
        for at, name, op, arg in _load("methods").unpacked(code.co_code)
        if name not in _SKIP
    ]


def _namer(code):
    """name(opname, arg) -> the variable, global or attribute that instruction names, where it
    is a load or store `_callee` or `_next_call` reads one of (None: this interpreter cannot
    say without `dis`)."""
    co_names, attribute = code.co_names, _load("methods").attribute_name
    if _NEW_CODE:
        local = getattr(code, "_varname_from_oparg", None)
        if local is None:
            return None
    else:
        cells = code.co_cellvars + code.co_freevars
        local = code.co_varnames.__getitem__

    def name(op, arg):
        if op in ("LOAD_FAST", "STORE_FAST"):
            return local(arg)
        if op == "LOAD_DEREF":
            return local(arg) if _NEW_CODE else cells[arg]
        if op == "LOAD_GLOBAL":
            return co_names[arg >> 1 if _NEW_CODE else arg]
        if op == "LOAD_NAME":
            return co_names[arg]
        return attribute(code, op, arg)  # (of LOAD_ATTR and LOAD_METHOD; None of others)

    return name


# The instructions whose name `_callee` and `_next_call` read (their argval; None of others)
_NAMED = frozenset(_LOADS + ATTRIBUTE_LOADS + ("STORE_FAST",))
_NEW_CODE = sys.version_info >= (3, 11)  # variables by their place among all; global's low bit


def _callee(code, offset, attributes=False):
    """(load instruction, name, arguments, keywords) of the callable of the call at `offset`
    when the callable is a plain name (a backward walk over the arguments' instructions by
    their stack effects; None at anything else: a jump, an attribute)."""
    import dis  # (here: the tested process starts without it)

    instrs, offsets = _instructions(code)
    at = _bisect_left(offsets, offset)
    if at == len(offsets) or offsets[at] != offset:
        return None
    if instrs[at].opname == "PRECALL":
        # 3.11: once the call is specialized (after a few runs), the callee is called by its
        # first half, PRECALL, where the frame then stands
        at += 1
    call = instrs[at]
    if call.opname not in _CALLS or not isinstance(call.arg, int):
        return None
    # (keywords: their names are a tuple on the stack too, or a KW_NAMES before the call)
    keywords = _CALLS[call.opname] > 0
    need, n = call.arg + _CALLS[call.opname], at - 1
    if n >= 0 and instrs[n].opname == "PRECALL":  # 3.11: the call's own first half
        n -= 1
    while need > 0 and n >= 0:
        ins = instrs[n]
        if ins.is_jump_target or "JUMP" in ins.opname:
            return None
        keywords = keywords or ins.opname == "KW_NAMES"
        arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
        need -= dis.stack_effect(ins.opcode, arg, jump=False)
        n -= 1
    if n >= 0 and instrs[n].opname == "PUSH_NULL":  # 3.13: pushed after the callable
        n -= 1
    if need != 0 or n < 0:
        return None
    load = instrs[n]
    if load.opname not in _LOADS and not (attributes and load.opname in ATTRIBUTE_LOADS):
        return None
    return load.opname, load.argval, call.arg, keywords


def _from_chunk(self, plain):
    """The next item, from a chunk asked now. `plain`: the consumer handles plain values
    without running code, so the chunk ends after an item that holds a reference (the
    consumer may ask it something, and must find the iterator where it was then)."""
    size = proxies.own(self).get("_rollouts_chunk", CHUNK_FIRST)
    object.__setattr__(self, "_rollouts_chunk", min(size * 4, CHUNK_LARGEST))
    ep = self._rollouts_ep
    items, end, rebuilt = ep.request("chunk", self, size, plain, ep.rebuilds)
    if rebuilt:  # (a chunk is only ever read ahead as a copy this side made: a recipe)
        return _peeking(self, items, end)
    ahead = proxies.own(self).get("_rollouts_ahead")
    if ahead is None:
        ahead = collections.deque()
        object.__setattr__(self, "_rollouts_ahead", ahead)
    ahead.extend(zip(items, _repeat(None)))  # noqa: B905 - (no `strict` before 3.10)
    if end is not None:
        ahead.append((None, end))
    elif not items:
        raise RuntimeError("an empty chunk without an end")
    return _next_of_buffer(self, ahead)


def first_chunk(proxy, items, end):
    """Keep the first chunk of a call's answer that came with it (rpc.py "ck"), as
    `_from_chunk` keeps a chunk: the next items any `next()` of it gets."""
    if getattr(type(proxy), "__next__", None) is not _next:
        raise codec.ProtocolError("a first chunk of no iterator")
    ahead = collections.deque(zip(items, _repeat(None)))  # noqa: B905 - (no `strict` < 3.10)
    if end is not None:
        ahead.append((None, end))
    elif not items:
        raise codec.ProtocolError("an empty chunk without an end")
    object.__setattr__(proxy, "_rollouts_ahead", ahead)
    object.__setattr__(proxy, "_rollouts_chunk", CHUNK_FIRST * 4)


def whole_after(frame):
    """Whether the value of the call `frame` is at goes straight to a builtin that consumes it
    whole: the next call calls one of `_WHOLE` (the builtin itself, as the frame resolves the
    name now) with that value as its one argument (`list(solution.gen(x))`, or pytest's
    rewriting of it in an `assert`, through a variable that holds None), so no code of the
    frame runs between the call's answer and that builtin's first `next()`."""
    key = (frame.f_code, frame.f_lasti)
    after = _afters.get(key)
    if after is None:
        if len(_afters) >= _CALLEES_KEPT:
            _afters.clear()
        try:
            after = _afters[key] = _next_call(*key)
        except (ValueError, TypeError, IndexError):
            after = _afters[key] = (-1, None)
    offset, through = after
    if offset < 0:
        return False
    # (storing the value there drops what the variable held: a None, or nothing, runs no code)
    if through is not None and frame.f_locals.get(through) is not None:
        return False
    return _calls_whole_builtin(frame, offset)


_afters = {}  # (code, offset) -> `_next_call`'s answer


def _next_call(code, offset):
    """(offset, variable) of the call right after the call at `offset`, where it takes that
    call's value as its one argument: at once, or through a local variable stored and loaded
    again (`variable`; pytest's rewritten `assert` does so); else (-1, None)."""
    instrs, offsets = _instructions(code)
    # (while a function of Python it called runs, 3.11 and 3.12 leave the frame on the call's
    # last inline cache entry, which is no instruction here: the last one at or before it)
    at = _bisect_right(offsets, offset) - 1
    if at < 0:
        return -1, None
    if instrs[at].opname == "PRECALL":  # 3.11: the frame stands at a call's first half
        at += 1
    if not instrs[at].opname.startswith("CALL"):
        return -1, None
    rest = [i for i in instrs[at + 1 : at + 8] if i.opname not in ("PRECALL", "PUSH_NULL")]
    through = None
    if rest and rest[0].opname == "STORE_FAST":
        # [STORE_FAST v, load of the callable, LOAD_FAST v, CALL 1]
        through, rest = rest[0].argval, rest[1:]
        if len(rest) < 3 or rest[0].opname not in _LOADS or rest[1].opname != "LOAD_FAST":
            return -1, None
        if rest[1].argval != through:
            return -1, None
        rest = rest[2:]
    call = rest[0] if rest else None
    if call is None or call.opname not in _CALLS or call.arg != 1:
        return -1, None
    if any(i.is_jump_target for i in instrs[at + 1 : instrs.index(call) + 1]):
        return -1, None
    return call.offset, through


def _next_of_buffer(self, ahead):
    value, end = ahead.popleft()
    if end is not None:
        proxies.own(self).pop("_rollouts_bulk", None)
        proxies.own(self).pop("_rollouts_iter_at", None)
        raise end
    return value


def _from_peek(self):
    """The next item, from items the other side read ahead where it can (readahead.py), else
    the one item it took for real."""
    ep = self._rollouts_ep
    size = proxies.own(self).get("_rollouts_peek_size", CHUNK_FIRST)
    items, end, peeked = ep.request("peek", self, size, ep.rebuilds)
    if not peeked:
        if end is not None:
            raise end
        if len(items) != 1:
            raise RuntimeError("a next() answered with %d items" % len(items))
        return items[0]
    object.__setattr__(self, "_rollouts_peek_size", min(size * 4, CHUNK_LARGEST))
    return _peeking(self, items, end)


def _peeking(self, items, end):
    """The next item of `items` (a list read ahead, or a copy this side made of the other
    side's iterator: readahead.py), which serve the next `next()`s until a message goes."""
    # [their iterator, how many used, the end (None once used or if none), whether it was used,
    # messages since the code last used any (`stop_peeking`)]
    peek = [iter(items), 0, end, False, 0]
    object.__setattr__(self, "_rollouts_peeked", peek)
    self._rollouts_ep.peeking[id(self)] = self
    item = _next_of_peek(peek)
    if item is _ASK:
        raise RuntimeError("nothing read ahead, and no end")
    return item


_ASK = object()  # what `_next_of_peek` gives when the items read ahead are used up
_builtin_next, _length_hint_of = builtins.next, operator.length_hint  # (not a test's patch)
_bisect_left, _bisect_right = bisect.bisect_left, bisect.bisect_right
_islice, _len, _repeat = itertools.islice, builtins.len, itertools.repeat


def _next_of_peek(peek):
    item = _builtin_next(peek[0], _ASK)
    if item is not _ASK:
        peek[1] += 1
        return item
    if peek[2] is None:
        return _ASK
    end, peek[2], peek[3] = peek[2], None, True
    raise end


def stop_peeking(proxy, used):
    """`proxy`'s items read ahead set aside (the endpoint is about to send a message, after
    which they hold only where the other side's next word says so: `resume_peeking`);
    [oid, used, ended] appended to `used` where it used any. What is left of them, where the
    code used some since they came or at the message before (a generator of ours that takes
    one item of the other side's list per `next()`, and calls back into it for each, sends
    two messages between its takes: the callback, then the item); else None: an iterator the
    code has left alone does not keep its items across more messages, nor costs each a check."""
    peek = proxies.own(proxy).pop("_rollouts_peeked", None)
    if peek is None:
        return None
    if peek[1] or peek[3]:
        used.append([proxies.own(proxy)["_rollouts_oid"], peek[1], peek[3]])
    if peek[2] is None and not _length_hint_of(peek[0]):
        return None
    if peek[1]:
        peek[4] = 0
        return peek
    if peek[4] < IDLE_MESSAGES:
        peek[4] += 1
        return peek
    drop_peeking(proxy)
    return None


def resume_peeking(proxy, left, keep, with_end):
    """The other side says the first `keep` items of what was `left` (-1: all of it) still
    hold, and its end where `with_end`: they serve the next `next()`s again."""
    if keep < 0:
        items = left[0]
    else:
        items = list(_islice(left[0], keep + 1))
        if _len(items) > keep:  # (fewer stay than were left: ask for fewer next time)
            drop_peeking(proxy)
        items = iter(items[:keep])
    peek = [items, 0, left[2] if with_end else None, False, left[4]]
    object.__setattr__(proxy, "_rollouts_peeked", peek)
    proxy._rollouts_ep.peeking[id(proxy)] = proxy


def drop_peeking(proxy, used=0):
    """What was left of `proxy`'s items read ahead no longer holds: the next ask starts small,
    at twice the `used` items taken before the drop where some were (an item walked per
    callback, of values that cannot be set aside: two asked each time, not sixteen)."""
    if used > 0:
        object.__setattr__(proxy, "_rollouts_peek_size", min(2 * used, CHUNK_LARGEST))
    else:
        proxies.own(proxy).pop("_rollouts_peek_size", None)
