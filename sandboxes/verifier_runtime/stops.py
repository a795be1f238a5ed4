"""Where a StopIteration of the tested code's may reach the tests as itself (trusted.py).

Raised from a function or method of the tested code into C code of the tests' that iterates
(`all(map(fn, xs))`, a `for` over `filter(fn, xs)`, `list(map(...))`), it ends that iteration:
the builtins read it as "no more items", and a function that only raises it passes every
assertion such a loop holds. Raised into the tests' own code it is an exception like any
other, which they may expect (`pytest.raises(StopIteration)` around a Python-2-style
`it.next()`, a `first([])`, a property, a subscript). So one of a call, an attribute or a
subscript crosses as itself only where the frame of the tests it is raised into made that
request itself and handles exceptions where it stands (a `with` or `try` around it), or
leaves it to a caller that called it itself and does. Anywhere else, and from any other
request (a comparison, `len`, `bool`), it reaches the tests as RuntimeError, as Python makes
of one that leaves a generator (PEP 479). Where the frames cannot be read (no exception table
before Python 3.11), it crosses as itself.

Standard library only, Python >= 3.8.
"""

import functools
import os
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
iterators = _load("iterators")

_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_DEPTH = 16  # callers followed up from the tests' frame; past it, it crosses as itself
_handlers = {}  # code -> [(start, end)] of its exception table, or None where unknown
_HANDLERS_KEPT = 4096


def crosses(op, args):
    """Whether the StopIteration the other process answered request `op` with crosses as
    itself (see above): one of a call, of an attribute's read (a property) or of a subscript
    (`__getitem__`), raised into the tests' own code; never one of anything else."""
    if op in ("call", "callattr", "inherited"):
        return not _into_iteration(args[0] if op == "call" else None, _CALL_INSTRUCTIONS)
    if op == "getattr":
        return not _into_iteration(None, _ATTRIBUTE_INSTRUCTIONS)
    if op == "op" and args and args[0] == "getitem":
        return not _into_iteration(None, _SUBSCRIPT_INSTRUCTIONS)
    return False


def _into_iteration(target, instructions):
    """Whether it would reach C code that iterates before any frame of the tests that handles
    it. `target`: the proxy called, or None where the frame's own instruction is the request
    (a method called by name where it was read: methods.py; an attribute; a subscript);
    `instructions`: those the tests' frame stands at when it makes such a request itself."""
    frame = outside(sys._getframe(2))
    for _ in range(_DEPTH):
        if frame is None:
            return False
        if not _made_here(frame, target, instructions):
            return True
        if _handled(frame):
            return False
        target, frame, instructions = frame.f_code, frame.f_back, _CALL_INSTRUCTIONS
    return False


def outside(frame):
    """The first of `frame` and its callers that is none of the runtime's own (the tests').
    Told by the file of the module the frame runs in, not of its code: a read of `f_code` is
    an audit event, a call of every hook there is, and a call through a proxy passes six or
    seven of our frames."""
    while frame is not None and _ours(frame.f_globals.get("__file__")):
        frame = frame.f_back
    return frame


def makes(frame, op, target, name):
    """Whether `frame`'s own instruction makes request `op` (statements.py
    `called_by_a_test`): a call of `target` itself by a plain name that stands for it, a
    method `name` called where it is read (`s.push(2)`: never a routine's own `__name__`,
    which the tested code sets), an item's read, assignment or deletion, an attribute's
    assignment or deletion, or an operator in place; not C code that it called and that calls
    or reads the object (`sorted(got, key=solution.rank)`, `frozenset(expected) == got`)."""
    at = _where(frame)
    standing = _opname(frame.f_code, at)
    if op in ("call", "callattr"):
        if standing not in _CALL_INSTRUCTIONS:
            return False
        found = iterators.callee(frame, at, attributes=True)
        if found is None:
            return False
        if found[0] in iterators.ATTRIBUTE_LOADS:  # (a method, by its name in the tests)
            return op == "callattr" and found[1] == name
        value = iterators.resolved(frame, found)
        if op == "callattr":  # (pytest's assertion rewriting keeps `b.contains` in a name)
            return _load("methods").is_method_call(value, target, name)
        return value is target
    if op in ("setattr", "delattr"):
        return standing in ("STORE_ATTR", "DELETE_ATTR")
    # (an operator: `target` is its name; a `with` calls its `__exit__` where it ends; a
    # subscript's read may change the object too: a cache that fills itself on a miss)
    return op == "op" and (
        standing in _CHANGE_INSTRUCTIONS
        or (target == "exit" and standing in _CALL_INSTRUCTIONS)
        or (target == "getitem" and standing in _SUBSCRIPT_INSTRUCTIONS)
    )


def _ours(path):
    return type(path) is str and path.startswith(_OURS)


def _made_here(frame, target, instructions):
    """Whether `frame`'s own instruction made the request, of `target` where it is a call (a
    proxy, or a function's code), as far as it can be read: only such an instruction does (at
    any other, a `for`'s step, a `[*it]`, C code made it); a call of a plain name must be of
    that very target (through `functools.partial`, which only forwards); a call of anything
    else (an attribute, an expression's value) is taken as the frame's own."""
    at = _where(frame)
    if _opname(frame.f_code, at) not in instructions:
        return False
    if target is None:
        return True
    found = iterators.callee(frame, at)
    if found is None:
        return True
    value = iterators.resolved(frame, found)
    while isinstance(value, functools.partial):
        value = value.func
    if value is target:
        return True
    func = getattr(value, "__func__", value)
    return getattr(func, "__code__", None) is target


# Where a frame stands while a function it calls runs, an attribute it reads is looked up, or
# a subscript it takes is served (3.8 to 3.13).
_CALL_INSTRUCTIONS = frozenset(
    (
        "CALL", "CALL_KW", "CALL_FUNCTION_EX", "PRECALL", "CALL_FUNCTION", "CALL_FUNCTION_KW",
        "CALL_METHOD",
    )
)  # fmt: skip
_ATTRIBUTE_INSTRUCTIONS = frozenset(("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR"))
_SUBSCRIPT_INSTRUCTIONS = frozenset(("BINARY_SUBSCR",))
_CHANGE_INSTRUCTIONS = {
    "STORE_SUBSCR", "DELETE_SUBSCR", "STORE_ATTR", "DELETE_ATTR", "BINARY_OP", "INPLACE_ADD",
    "INPLACE_SUBTRACT", "INPLACE_MULTIPLY", "INPLACE_MATRIX_MULTIPLY", "INPLACE_TRUE_DIVIDE",
    "INPLACE_FLOOR_DIVIDE", "INPLACE_MODULO", "INPLACE_POWER", "INPLACE_LSHIFT",
    "INPLACE_RSHIFT", "INPLACE_AND", "INPLACE_XOR", "INPLACE_OR", "BEFORE_WITH", "SETUP_WITH",
    "WITH_EXCEPT_START", "WITH_CLEANUP_START",
}  # fmt: skip


def _where(frame):
    """The offset of the instruction `frame` stands at: while a function of Python it called
    runs, 3.11 and 3.12 leave `f_lasti` on the call's last inline cache entry."""
    at, code = frame.f_lasti, frame.f_code
    while at > 0 and _opname(code, at) == "CACHE":
        at -= 2
    return at


def _opname(code, at):
    if not _OPNAMES:
        import dis  # (on first use: most sessions never get here)

        _OPNAMES.update((op, name) for name, op in dis.opmap.items())
    try:
        return _OPNAMES.get(code.co_code[at])
    except (IndexError, TypeError):
        return None


_OPNAMES = {}  # opcode -> name


def _handled(frame):
    """Whether an exception raised at `frame`'s instruction goes to a handler of that frame
    (a `try` or `with` around it; unknown where there is no exception table: taken as so)."""
    spans = _handlers.get(frame.f_code, _handlers)
    if spans is _handlers:
        spans = _spans(frame.f_code)
        if len(_handlers) >= _HANDLERS_KEPT:
            _handlers.clear()
        _handlers[frame.f_code] = spans
    if spans is None:
        return True
    at = _where(frame)
    return any(start <= at < end for start, end in spans)


def _spans(code):
    import dis

    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None or not hasattr(code, "co_exceptiontable"):
        return None
    try:
        return [(entry.start, entry.end) for entry in parse(code)]
    except Exception:  # noqa: BLE001 - a table this version reads otherwise: unknown
        return None
