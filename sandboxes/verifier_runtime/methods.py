"""`obj.method(args)` of the tests on an object of the tested process in one exchange, not two.

Read as Python reads it, `obj.method(args)` is a getattr (one exchange: the tested process
answers a bound method) and then a call of what it answered (a second). Where the instruction
reading the attribute is a method load whose value is called at once, with nothing but loads
of constants, local, enclosed and global names between (no code of anybody can run there, and
no exchange), the proxy answers a `MethodCall` instead, and the call asks for both in one
request ("callattr"): the tested process reads the attribute as a getattr would, and calls it
where it is a function or a method (which the tests would only have called through it); any
other attribute comes back as a getattr's answer ("g") and is called here, as before. The
getattr then happens when the call does, after the arguments' loads, which is the only
difference (an AttributeError comes from the call's line, as it would). Where the read is a
plain one whose value pytest's assertion rewriting keeps in a temporary and then calls
(`assert obj.method(x) == y`), the same holds: only such temporaries may be stored between.

Standard library only, Python >= 3.8.
"""

import dis
import sys

# What may stand between the attribute's read and its call: loads of constants, local, enclosed
# and global names, and pytest's assertion temporaries ("@py_assert<n>": only its rewriting
# makes such names; it keeps the attribute there for a failure's message). None runs code.
_LOADS = frozenset(("LOAD_CONST", "LOAD_DEREF", "LOAD_SMALL_INT"))
_LOCALS = frozenset(("LOAD_FAST", "LOAD_FAST_CHECK"))
_PLAIN = frozenset(("CACHE", "EXTENDED_ARG", "NOP", "KW_NAMES", "PRECALL", "RESUME"))
# A call's stack: the callable and a "self or NULL" slot (in either order: 3.13 swapped them),
# then its arguments, then (with keywords, 3.13) their names; before 3.11 a plain call
# (CALL_FUNCTION) has no NULL slot.
_CALLS = {"CALL": 0, "CALL_METHOD": 0, "CALL_KW": 1}
_PLAIN_CALLS = {"CALL_FUNCTION": 0, "CALL_FUNCTION_KW": 1}
_TEMPORARY = "@py_assert"
_NEW_ATTR = sys.version_info >= (3, 12)  # LOAD_ATTR with its low bit set loads a method
_NULL_GLOBAL = sys.version_info >= (3, 11)  # LOAD_GLOBAL with its low bit set pushes NULL too
_IT, _OTHER, _NULL = "it", "other", "null"  # what the simulated stack holds
_scanned = {}  # (code, offset) -> None (no), or whether the loads between read globals
_SCANNED_MAX = 4096


def called_at_once(frame, name):
    """Whether the instruction `frame` stands at reads attribute `name` whose value is called
    next, with nothing that can run code between."""
    key = (frame.f_code, frame.f_lasti)
    found = _scanned.get(key, _scanned)
    if found is _scanned:
        try:
            found = _scan(frame.f_code, frame.f_lasti, name)
        except (ValueError, TypeError, IndexError, StopIteration):
            found = None
        if len(_scanned) >= _SCANNED_MAX:
            _scanned.clear()
        _scanned[key] = found
    if found is None:
        return False
    # A global is read from the frame's own dicts, which then run no code of anybody's.
    return not found or (type(frame.f_globals) is dict and type(frame.f_builtins) is dict)


def _scan(code, offset, name):
    """The instructions after the read at `offset`, run on a stack of what they push, up to
    the first call: None unless that call calls what the read gave."""
    instrs = _forward(code, offset)
    op, arg = next(instrs)
    if attribute_name(code, op, arg) != name:
        return None
    if op == "LOAD_METHOD" or (_NEW_ATTR and op == "LOAD_ATTR" and arg & 1):
        stack = [_NULL, _IT]  # a method load: the callable and its "self" slot
    elif op == "LOAD_ATTR":
        stack = [_IT]
    else:
        return None
    temporaries, globals_read = {}, False
    names = code.co_varnames
    for op, arg in instrs:
        if op in _PLAIN:
            continue
        if op in _LOADS:
            stack.append(_OTHER)
        elif op in _LOCALS:
            stack.append(temporaries.get(names[arg], _OTHER))
        elif op == "LOAD_FAST_LOAD_FAST":  # 3.13: two loads in one
            stack.append(temporaries.get(names[arg >> 4], _OTHER))
            stack.append(temporaries.get(names[arg & 15], _OTHER))
        elif op == "LOAD_GLOBAL":
            globals_read = True
            if _NULL_GLOBAL and arg & 1:
                stack.append(_NULL)
            stack.append(_OTHER)
        elif op == "PUSH_NULL":
            stack.append(_NULL)
        elif op == "STORE_FAST" and names[arg].startswith(_TEMPORARY):
            temporaries[names[arg]] = stack.pop()
        elif op == "STORE_FAST_LOAD_FAST" and names[arg >> 4].startswith(_TEMPORARY):  # 3.13
            temporaries[names[arg >> 4]] = stack.pop()
            stack.append(temporaries.get(names[arg & 15], _OTHER))
        elif op in _CALLS:
            top = len(stack) - arg - _CALLS[op]
            below = stack[top - 2 : top] if top >= 2 else []
            return globals_read if sorted(below) == [_IT, _NULL] else None
        elif op in _PLAIN_CALLS:
            top = len(stack) - arg - _PLAIN_CALLS[op]
            return globals_read if top >= 1 and stack[top - 1] is _IT else None
        else:
            return None
    return None


def _forward(code, offset):
    """(name, argument) of each instruction from `offset` on (`unpacked`)."""
    for _at, name, _op, arg in unpacked(code.co_code, offset):
        yield name, arg


def unpacked(raw, offset=0):
    """(offset, name, opcode, argument) of each instruction of bytecode `raw` from `offset`
    on, as the interpreter reads them: the bytes themselves, where `dis` would also build each
    instruction's value, text and source position (disassembling a whole test function costs
    more than the calls it saves). EXTENDED_ARG is folded into the argument of the instruction
    it extends, inline caches are skipped, and an instruction that takes no argument has None
    (as `dis` says)."""
    extended, opnames = 0, dis.opname
    for at in range(offset, len(raw), 2):
        op = raw[at]
        arg = raw[at + 1] | extended if op in _HAS_ARGUMENT else None
        if op == _EXTENDED_ARG:
            extended = arg << 8
            continue
        extended = 0
        name = opnames[op]
        if name != "CACHE":
            yield at, name, op, arg


# (which take an argument: those from HAVE_ARGUMENT on, before 3.13's own list of them)
_HAS_ARGUMENT = frozenset(getattr(dis, "hasarg", range(dis.HAVE_ARGUMENT, 256)))
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]


def attribute_name(code, op, arg):
    """The attribute name an attribute or method load reads."""
    if op == "LOAD_ATTR" and _NEW_ATTR:
        arg >>= 1
    return code.co_names[arg] if op in ("LOAD_ATTR", "LOAD_METHOD") else None


def is_method_call(value, proxy, name):
    """Whether `value` is `proxy.name` read to be called at once (stops.py `makes`)."""
    return type(value) is MethodCall and value._proxy is proxy and value._name == name


class MethodCall:
    """`proxy.name`, called at once (see above). Kept past its call only in pytest's assertion
    temporaries, for a failure's message: anything else asked of it then asks for the
    attribute."""

    __slots__ = ("_ep", "_proxy", "_name", "_epoch")

    def __init__(self, ep, proxy, name):
        self._ep, self._proxy, self._name = ep, proxy, name
        self._epoch = ep.next_q + ep.served  # (the exchanges so far)

    def __call__(self, *args, **kwargs):
        ep = self._ep
        if ep.next_q + ep.served != self._epoch:  # (after an exchange: read it again)
            return self._attribute()(*args, **kwargs)
        return ep.request("callattr", self._proxy, self._name, args, tuple(kwargs.items()))

    def _attribute(self):
        return self._ep.request("getattr", self._proxy, self._name)

    def __getattr__(self, name):
        return getattr(self._attribute(), name)

    def __repr__(self):
        return repr(self._attribute())
