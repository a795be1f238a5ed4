"""Frames and values between the tests' process and the tested code's (see rpc.py).

A frame is a 4-byte big-endian length and one JSON object. Values inside a message:

- None, bool, float, str, and ints of at most 53 bits are JSON themselves; every JSON list is a
  tagged node, so nothing is ambiguous: ["i", hex] a larger int, ["b", base64] bytes,
  ["c", re, im] a complex, ["v", kind, data] a standard library value (Decimal, datetime,
  UUID, Path, range, ...);
- composites (list, tuple, dict, set, frozenset, bytearray, OrderedDict, Counter, deque,
  defaultdict of a builtin factory) are ["@", n]: entry n of the message's table "t". Their
  items are again leaves or ["@", m], so a value nested ten thousand deep is a flat table,
  and shared and cyclic references come out as they went in. Both directions are loops,
  never recursion;
- ["R", n] (only in a copy-back) is the receiver's own container n of the request;
- ["K", handle] is a list, dict or set both sides share (shares.py): the receiver's own;
- ["T", [items]] is a tuple whose items are leaves, written in place: a call's positional
  arguments and its keyword pairs (`arguments`), tuples the receiver only unpacks, so no
  table entry (nor its building) is needed for the identity nobody can observe;
- an object of a subclass of a builtin value type (str, int, tuple, dict, ...; `BASE_TYPES`)
  is a table entry ["S", reference, base, value]: the object by reference and the value its
  builtin base holds (`BASE_VALUES`, the builtin's own code), items as leaves; the receiver
  makes it its mirror class's instance holding that value (based.py);
- records, when the endpoint describes a value as one (rpc.py: named tuples, dataclasses and
  namespaces of the standard library or installed packages), are table entries too:
  [kind, [module, qualname], fields, values, reference], kind "N" or "D" immutable, "M"
  mutable (built empty first, filled last, and copied back like a list); the receiver
  rebuilds them as its own class of that name from the values alone, or, where it has no
  such class, uses the reference (a proxy);
- everything else is a reference, encoded and decoded by the endpoint (rpc.py).

Decoding builds plain values and asks the endpoint for references; it runs no code the other
side chose (a dict key's __hash__ aside, when the key is a proxy: then the other side is asked).

Standard library only, Python >= 3.8.
"""

import _json
import binascii
import collections
import struct

MAX_FRAME = 64 << 20
_JSON_INT = 1 << 53  # larger ints travel as hex (json's int parsing is capped in digits)


class ProtocolError(RuntimeError):
    """The other side sent something that is not a valid message."""


class PeerGone(RuntimeError):
    """The other process ended, or the channel to it broke: every later call fails."""


# One encoder and decoder for every frame: json's own C coders (what `json.dumps` and `loads`
# run), made here with dumps' defaults but the separators and the check for cycles (a message
# is a tree this module builds; a cycle would end in RecursionError). Not the json module: it
# imports the regular expressions, a tenth of the tested process's start.
def _not_json(o):
    raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)


_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Scanning:  # the settings the C scanner reads (json.JSONDecoder's defaults)
    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int, parse_constant = float, int, _CONSTANTS.__getitem__


_ENCODER = _json.make_encoder(
    None, _not_json, _json.encode_basestring_ascii, None, ":", ",", False, False, True
)
_SCAN = _json.make_scanner(_Scanning)


def _encode(msg):
    return "".join(_ENCODER(msg, 0))


def _decode(text):
    """The value of a whole frame's text; frames hold no white space (ours never do)."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("no JSON value") from None
    if end != len(text):
        raise ValueError("extra data at %d" % end)
    return value


# Bound now, as the coders above: a test may patch `struct.pack` (patches.py), never ours.
_HEADER = struct.Struct(">I")


def send_frame(sock, msg):
    data = _encode(msg).encode()
    if len(data) > MAX_FRAME:
        raise ValueError("a message of %d bytes is over the %d byte limit" % (len(data), MAX_FRAME))
    sock.sendall(_HEADER.pack(len(data)) + data)


_READ = 1 << 16  # what one recv asks for at least: a whole frame of a call, often the next too


class FrameReader:
    """The frames of one socket, read with as few system calls as it takes: one recv takes
    what has arrived (a call's frame and its header together, where two recvs took them
    apart; under gVisor each is a trip through the sentry), and keeps what is past the
    frame for the next. Only the thread that holds the endpoint's lock reads (rpc.py)."""

    def __init__(self, sock):
        self.sock = sock
        self.pending = b""
        self.last = None  # the last frame's message, and whether its text may hold a "/"
        self.slashed = True

    def may_hold_slash(self, msg):
        """Whether a string of `msg` may hold a "/" (False only for the last frame read, whose
        text held none, escaped or not: JSON spells it "/", "\\/" or "\\u002f" in either
        case, and a string decodes from nothing else with one). Most messages hold no path,
        and looking through each of their strings costs more than the rest of an exchange's
        bookkeeping (access.heard_names)."""
        return msg is not self.last or self.slashed

    def frame(self):
        data = self._at_least(4)  # (one recv has the whole frame of a call, mostly)
        size = _HEADER.unpack_from(data)[0]
        if size > MAX_FRAME:
            raise ProtocolError("frame of %d bytes" % size)
        end = 4 + size
        if len(data) < end:
            data = self._at_least(end)
        self.pending = data[end:]
        try:
            # Our frames are ASCII (ensure_ascii); anything not UTF-8 is a protocol error.
            text = data[4:end].decode()
            msg = _decode(text)
        except (ValueError, RecursionError) as e:
            raise ProtocolError("not JSON: %s" % e) from None
        if not isinstance(msg, dict):
            raise ProtocolError("a message must be an object")
        self.last = msg
        self.slashed = "/" in text or "\\u002f" in text or "\\u002F" in text
        return msg

    def _at_least(self, n):
        """What has come and is not read yet, received until it is at least `n` bytes."""
        data = self.pending
        if len(data) < n:
            chunks, have = [data], len(data)
            while have < n:
                chunk = self.sock.recv(min(max(n - have, _READ), 1 << 20))
                if not chunk:
                    raise PeerGone("the other process closed the channel")
                chunks.append(chunk)
                have += len(chunk)
            data = self.pending = b"".join(chunks)
        return data


# ---- standard library values, by (module, class name): kind, to JSON, from JSON ---------------
# Their modules are imported only when such a value is sent or received (the tested process
# starts with the tests waiting for it).


def _b64decode(text):
    import base64  # (here: it imports the regular expressions)

    return base64.b64decode(text, validate=True)


def _dt():
    """The datetime classes as the C module holds them: a test's `mock.patch("datetime.
    datetime")` replaces the `datetime` module's name, and the values this builds must never
    be made by a test's mock (a wrong solution left the call the test asserted on that way)."""
    try:
        import _datetime as module
    except ImportError:  # an interpreter without the C module
        import datetime as module
    return module


def _timezone(v):
    """[days, seconds, microseconds, name or None]: the name only where it was given (a
    timezone made without one says "UTC+02:00", and its repr says it had none)."""
    datetime = _dt()

    offset = v.utcoffset(None)
    name = v.tzname(None)
    named = name != datetime.timezone(offset).tzname(None) or v == datetime.timezone.utc
    return [offset.days, offset.seconds, offset.microseconds, name if named else None]


def _make_timezone(d):
    datetime = _dt()

    offset = datetime.timedelta(int(d[0]), int(d[1]), int(d[2]))
    if d[3] is None:
        return datetime.timezone(offset)
    if offset == datetime.timedelta(0) and d[3] == "UTC":
        return datetime.timezone.utc
    return datetime.timezone(offset, str(d[3]))


def _value_codecs():
    import decimal
    import fractions
    import pathlib
    import uuid

    datetime = _dt()

    def delta(d):
        return datetime.timedelta(int(d[0]), int(d[1]), int(d[2]))

    return {
        decimal.Decimal: ("Decimal", str, decimal.Decimal),
        fractions.Fraction: ("Fraction", str, fractions.Fraction),
        datetime.date: ("date", lambda v: v.isoformat(), datetime.date.fromisoformat),
        datetime.timedelta: ("timedelta", lambda v: [v.days, v.seconds, v.microseconds], delta),
        uuid.UUID: ("UUID", lambda v: v.hex, uuid.UUID),
        datetime.timezone: ("timezone", _timezone, _make_timezone),
        pathlib.PurePosixPath: ("PurePosixPath", str, pathlib.PurePosixPath),
        pathlib.PosixPath: ("PosixPath", str, pathlib.PosixPath),
    }


_VALUE_MODULES = {"decimal", "fractions", "datetime", "uuid", "pathlib"}
# What a slice's parts may be to travel by value (anything else: the slice is a reference).
_SCALARS = (type(None), bool, int, float, str)


# Where pytest's (or the py library's) path class lives: fixed names, never the sender's.
_LOCAL_PATH_MODULES = ("_pytest._py.path", "py._path.local")


def _local_path(path):
    """The receiver's own LocalPath of `path` (its module imported here if it is installed:
    the tested process has no pytest loaded), else a pathlib path (`/`, `open`, `os.fspath`
    work on both)."""
    import importlib
    import sys

    for name in _LOCAL_PATH_MODULES:
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - not installed here, or broken: the next one
                continue
        cls = getattr(module, "LocalPath", None)
        if isinstance(cls, type):
            return cls(path)
    import pathlib

    return pathlib.PosixPath(path)


def _aware(v, memo, reference):
    """A datetime or time, by value, whatever its tzinfo: the naive value, its fold, and its
    tzinfo as a leaf (None, a `timezone` by value, anything else a reference: the receiver's
    mirror of a tzinfo class derives from `datetime.tzinfo`, rpc.py, so the value can hold
    it). Without this, a datetime of the solution's own tzinfo class arrived as a mirror."""
    kind = type(v).__qualname__
    tz = v.tzinfo
    naive = v.replace(tzinfo=None).isoformat()
    return ["v", kind, [naive, v.fold, None if tz is None else leaf(tz, memo, reference)]]


def _decode_aware(node, memo, reference):
    datetime = _dt()

    naive, fold = node[2][0], int(node[2][1])
    tz = decode_leaf(node[2][2], memo, reference) if len(node[2]) > 2 else None
    if tz is not None and not isinstance(tz, datetime.tzinfo):
        raise ValueError("tzinfo")
    cls = datetime.datetime if node[1] == "datetime" else datetime.time
    return cls.fromisoformat(naive).replace(tzinfo=tz, fold=fold)


_loaded = {}


def _values():
    if not _loaded:
        by_type = _value_codecs()
        _loaded["by_type"] = by_type
        _loaded["by_kind"] = {kind: dec for _t, (kind, _enc, dec) in by_type.items()}
    return _loaded


# The builtin value types an object of another class may derive from, and the value it holds
# as one, taken by the builtin's own code whatever its class overrides (a `class Color(str,
# Enum)` member holds "red", though str() of it is "Color.RED").
BASE_TYPES = {
    "str": str, "bytes": bytes, "int": int, "float": float, "complex": complex,
    "tuple": tuple, "frozenset": frozenset, "list": list, "dict": dict, "set": set,
}  # fmt: skip
BASE_VALUES = {
    "str": str.__str__,
    "bytes": lambda v: bytes.__getitem__(v, slice(None)),
    "int": int.__index__,
    "float": float.__float__,
    "complex": lambda v: complex.__add__(v, 0j),
    "list": lambda v: list.__getitem__(v, slice(None)),
    "tuple": lambda v: tuple.__getitem__(v, slice(None)),
    "dict": lambda v: dict(dict.items(v)),  # (dict.copy would ask an overriding keys())
    "set": lambda v: set(set.__iter__(v)),
    "frozenset": lambda v: frozenset(frozenset.__iter__(v)),
}


_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def plain_data(value, limit=10000):
    """Whether `value` is scalars, and lists, tuples, sets, frozensets and dicts of them (of
    these exact types: no object with methods of its own)."""
    stack = [value]
    while stack:
        limit -= 1
        if limit < 0:
            return False
        v = stack.pop()
        t = type(v)
        if t in _PLAIN_SCALARS:
            continue
        if t in (list, tuple, set, frozenset):
            stack.extend(v)
        elif t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            return False
    return True


def builtin_base(cls):
    """The name of the builtin value type (`BASE_TYPES`) that class `cls` derives from, None
    for the builtin itself or a class derived from none."""
    if cls.__module__ == "builtins":
        return None
    for name, base in BASE_TYPES.items():
        if issubclass(cls, base):
            return name
    return None


_FACTORIES = {"list": list, "dict": dict, "set": set, "int": int, "str": str}
# Composites whose items may refer back to them: made empty first, filled last.
MUTABLE = (
    list,
    dict,
    set,
    bytearray,
    collections.OrderedDict,
    collections.Counter,
    collections.deque,
    collections.defaultdict,
)
_MUTABLE_TAGS = ("l", "d", "s", "B", "od", "ct", "dq", "dd", "M")


def _is_composite(v, t):
    if t in (
        list,
        tuple,
        dict,
        set,
        frozenset,
        bytearray,
        collections.OrderedDict,
        collections.Counter,
        collections.deque,
    ):
        return True
    return t is collections.defaultdict and (
        v.default_factory is None or v.default_factory in _FACTORIES.values()
    )


class Memo:
    """The composites of one message: the table being written or read, and by whom."""

    def __init__(self, table=None, records=None):
        self.records = records  # describe(v) and rebuild(...) of records (rpc.Endpoint)
        self.described = {}  # id(record) -> what `records.describe` said of it (encoding)
        self.based = {}  # n -> the builtin base of entry n, a subclass's object (encoding)
        self.unfilled = set()  # n of mutable records built empty, to fill (decoding)
        self.ids = {}  # id(composite) -> n (encoding)
        self.objects = {}  # n -> composite: sent (encoding) or built (decoding)
        self.pending = []  # (n, composite) still to encode
        self.table = [] if table is None else table
        self.refs = None  # id(container) -> n: encoded as ["R", n] (a copy-back)
        self.originals = {}  # n -> our own container of the request (decoding a copy-back)
        self.shared = None  # id(container) -> handle: encoded as ["K", handle] (shares.py)
        self.shares = {}  # handle -> our shared container (decoding)
        # What the message names that nothing else may hold by the time it is sent (encoding:
        # a chunk's items are dropped as they are encoded): kept until the memo goes, so a
        # share it names does not end in it ("sx") nor a proxy it names die before it
        # ("rel", which the receiver applies before a request's values: references.py).
        self.held = []
        self.uses = {}  # n -> references to entry n that decoding made (decoding)
        self.op = None  # the request's operation (encoding a request)
        self.first_chunk = 0  # 1: a call that asked for its answer's first chunk (rpc.py)


def is_own_node(v):
    """Whether `v` is its own node (`leaf` gives it back as it is): None, a bool, a float, a
    str, an int of at most 53 bits."""
    t = type(v)
    if t is int:
        return -_JSON_INT < v < _JSON_INT
    return v is None or t is bool or t is str or t is float


def encode(v, memo, reference):
    """The node of `v`; its composites go to memo.table. `reference(v)` encodes the rest."""
    node = leaf(v, memo, reference)
    drain(memo, reference)
    return node


def leaf(v, memo, reference):
    t = type(v)
    if v is None or t is bool or t is str or t is float:
        return v
    if t is int:
        return v if -_JSON_INT < v < _JSON_INT else ["i", format(v, "x")]
    if _is_composite(v, t):
        key = id(v)
        if memo.refs is not None and key in memo.refs:
            return ["R", memo.refs[key]]
        if memo.shared is not None and key in memo.shared:
            memo.held.append(v)
            return ["K", memo.shared[key]]
        n = memo.ids.get(key)
        return ["@", n] if n is not None else _entry(memo, key, v)
    if t is bytes:
        return ["b", binascii.b2a_base64(v, newline=False).decode()]
    if t is complex:
        return ["c", v.real, v.imag]
    if t is range:
        return ["v", "range", [v.start, v.stop, v.step]]
    if t is slice and all(type(x) in _SCALARS for x in (v.start, v.stop, v.step)):
        # By value: `obj[1:3]` in the other process must see a slice (`isinstance(item, slice)`)
        return ["v", "slice", [leaf(v.start, memo, reference), leaf(v.stop, memo, reference),
                               leaf(v.step, memo, reference)]]  # fmt: skip
    if v is NotImplemented:  # a one-sided operator's "ask the other operand" (rpc.py)
        return ["v", "NotImplemented", 0]
    if v is Ellipsis:
        return ["v", "Ellipsis", 0]
    if t.__name__ == "LocalPath" and t.__module__ in _LOCAL_PATH_MODULES:
        # pytest's `tmpdir`: a runner's object, never a target of the other side; its path
        # is what the tests hand over (the receiver's own LocalPath of it, access.py grants
        # the folder as for `str(tmpdir)`)
        return ["v", "LocalPath", str(v)]
    if t.__module__ in _VALUE_MODULES:
        value = _values()["by_type"].get(t)
        if value is not None:
            return ["v", value[0], value[1](v)]
        if t.__module__ == "datetime" and t.__qualname__ in ("datetime", "time"):
            return _aware(v, memo, reference)
    key = id(v)
    if memo.refs is not None and key in memo.refs:
        return ["R", memo.refs[key]]
    if key in memo.ids:
        return ["@", memo.ids[key]]
    record = memo.records.describe(v) if memo.records is not None else None
    if record is not None:
        memo.described[key] = record
        return _entry(memo, key, v)
    base = memo.records.based(v) if memo.records is not None else None
    if base is not None:
        return _entry(memo, key, v, base)
    return reference(v)


def _entry(memo, key, v, base=None):
    """A new entry of the message's table for composite `v` (filled when the memo drains)."""
    memo.table.append(None)
    n = len(memo.table)
    if base is not None:
        memo.based[n] = base
    memo.ids[key] = n
    memo.objects[n] = v
    memo.pending.append((n, v))
    return ["@", n]


def arguments(pos, kw, memo, reference):
    """The nodes of a call's positional arguments and keyword pairs (tuples made for the call:
    the callee sees only their items), each an ["T", ...] node."""
    pairs = [["T", [leaf(k, memo, reference), leaf(x, memo, reference)]] for k, x in kw]
    node = ["T", [leaf(x, memo, reference) for x in pos]], ["T", pairs]
    drain(memo, reference)
    return node


def drain(memo, reference):
    while memo.pending:
        n, v = memo.pending.pop()
        memo.table[n - 1] = composite(v, memo, reference, memo.based.get(n))


def entry(v, memo, reference):
    """The table entry of composite or record `v` (a copy-back's), or None if it is neither."""
    if id(v) not in memo.described and not _is_composite(v, type(v)):
        record = memo.records.describe(v) if memo.records is not None else None
        if record is None:
            return None
        memo.described[id(v)] = record
    return composite(v, memo, reference)


def composite(v, memo, reference, base=None):
    """The table entry of composite `v` (its items as leaves); `base`: `v` is an object of a
    subclass of that builtin."""
    t = type(v)

    def one(x):
        return leaf(x, memo, reference)

    def pairs():
        return [[one(k), one(x)] for k, x in v.items()]

    if base is not None:
        value = BASE_VALUES[base](v)
        if base == "dict":
            data = [[one(k), one(x)] for k, x in value.items()]
        elif base in ("tuple", "frozenset", "list", "set"):
            data = [one(x) for x in value]
        else:
            data = one(value)
        return ["S", reference(v), base, data]

    record = memo.described.get(id(v))
    if record is not None:
        kind, named, fields, values = record
        return [kind, named, fields, [one(x) for x in values], reference(v)]
    if t is list:
        return ["l", [one(x) for x in v]]
    if t is tuple:
        return ["t", [one(x) for x in v]]
    if t is dict:
        return ["d", pairs()]
    if t is set:
        return ["s", [one(x) for x in v]]
    if t is frozenset:
        return ["F", [one(x) for x in v]]
    if t is bytearray:
        return ["B", binascii.b2a_base64(v, newline=False).decode()]
    if t is collections.OrderedDict:
        return ["od", pairs()]
    if t is collections.Counter:
        return ["ct", pairs()]
    if t is collections.deque:
        return ["dq", [one(x) for x in v], v.maxlen]
    factory = getattr(v.default_factory, "__name__", None)
    return ["dd", pairs(), factory]


def decode_leaf(node, memo, reference):
    """The value of a leaf node; composites must be built already (`build`)."""
    if not isinstance(node, list):
        if isinstance(node, dict):
            raise ProtocolError("bare JSON object")
        return node
    if not node or not isinstance(node[0], str):
        raise ProtocolError("untagged list")
    tag = node[0]
    try:
        if tag == "@":
            found = memo.objects[node[1]]
            memo.uses[node[1]] = memo.uses.get(node[1], 0) + 1
            return found
        if tag == "K":
            return memo.shares[node[1]]
        if tag == "T":  # (its items are leaves: nested, they are a call's keyword pairs)
            if len(node) != 2 or type(node[1]) is not list:
                raise ValueError('an in-place tuple is ["T", [items]]')
            return tuple([decode_leaf(x, memo, reference) for x in node[1]])
        if tag == "R":
            return memo.originals[node[1]]
        if tag == "b":
            return _b64decode(node[1])
        if tag == "i":
            return int(node[1], 16)
        if tag == "c":
            return complex(float(node[1]), float(node[2]))
        if tag == "v":
            if node[1] == "NotImplemented":
                return NotImplemented
            if node[1] == "Ellipsis":
                return Ellipsis
            if node[1] == "range":
                return range(int(node[2][0]), int(node[2][1]), int(node[2][2]))
            if node[1] == "slice":
                parts = [decode_leaf(x, memo, reference) for x in node[2]]
                if not all(type(x) in _SCALARS for x in parts) or len(parts) != 3:
                    raise ValueError("slice part")
                return slice(*parts)
            if node[1] in ("datetime", "time"):
                return _decode_aware(node, memo, reference)
            if node[1] == "LocalPath":
                return _local_path(str(node[2]))
            return _values()["by_kind"][node[1]](node[2])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ProtocolError("bad %r node: %s" % (tag, e)) from None
    return reference(node)


def build(memo, reference, extra=()):
    """Build every composite of memo.table (and the `extra` raw entries, numbered after it):
    mutable ones empty first, then immutable ones children first, then fill the mutable
    ones. No recursion, whatever the nesting."""
    raw = list(memo.table) + list(extra)
    for i, node in enumerate(raw, 1):
        if not (isinstance(node, list) and node and isinstance(node[0], str)):
            raise ProtocolError("table entry %d" % i)
        if node[0] == "M":
            memo.objects[i] = _empty_record(i, node, memo, reference)
        elif node[0] == "S" and len(node) == 4 and node[2] in _MUTABLE_BASES:
            memo.objects[i] = _based(memo).based_object(node, None)
        elif node[0] in _MUTABLE_TAGS:
            memo.objects[i] = _empty(node)
    for i in range(1, len(raw) + 1):
        if i not in memo.objects:
            _build_immutable(i, raw, memo, reference)
    for i, node in enumerate(raw, 1):
        if node[0] == "M":
            if i in memo.unfilled:
                values = [decode_leaf(x, memo, reference) for x in node[3]]
                memo.records.fill(memo.objects[i], node[2], values)
        elif node[0] == "S":
            if node[2] in _MUTABLE_BASES:
                items = [
                    [decode_leaf(x, memo, reference) for x in pair] if node[2] == "dict"
                    else decode_leaf(pair, memo, reference)
                    for pair in node[3]
                ]  # fmt: skip
                memo.records.based_fill(memo.objects[i], node[2], items)
        elif node[0] in _MUTABLE_TAGS:
            _fill(memo.objects[i], node, memo, reference)
    return [memo.objects[i] for i in range(len(memo.table) + 1, len(raw) + 1)]


def _empty(node):
    tag = node[0]
    try:
        if tag == "l":
            return []
        if tag == "d":
            return {}
        if tag == "s":
            return set()
        if tag == "B":
            return bytearray(_b64decode(node[1]))
        if tag == "od":
            return collections.OrderedDict()
        if tag == "ct":
            return collections.Counter()
        if tag == "dq":
            maxlen = node[2]
            if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
                raise ValueError("maxlen")
            return collections.deque(maxlen=maxlen)
        return collections.defaultdict(None if node[2] is None else _FACTORIES[node[2]])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise ProtocolError("bad %r entry: %s" % (tag, e)) from None


def _build_immutable(start, raw, memo, reference):
    stack = [start]
    visiting = set()
    while stack:
        i = stack[-1]
        if i in memo.objects:
            stack.pop()
            continue
        node = raw[i - 1]
        items = _immutable_items(node)
        missing = [
            x[1]
            for x in items
            if isinstance(x, list) and len(x) == 2 and x[0] == "@" and x[1] not in memo.objects
        ]
        if missing:
            if i in visiting:
                raise ProtocolError("a cycle through immutable values")
            visiting.add(i)
            for n in missing:
                if not (type(n) is int and 1 <= n <= len(raw)):
                    raise ProtocolError("reference to entry %r" % (n,))
            stack.extend(missing)
            continue
        values = [decode_leaf(x, memo, reference) for x in items]
        if node[0] in ("N", "D"):
            memo.objects[i] = _record(node, values, memo, reference)
        elif node[0] == "S":
            memo.objects[i] = _based(memo).based_object(node, values)
        else:
            try:
                memo.objects[i] = tuple(values) if node[0] == "t" else frozenset(values)
            except TypeError as e:
                raise ProtocolError("frozenset item: %s" % e) from None
        stack.pop()


def _empty_record(i, node, memo, reference):
    """A mutable record entry's object before its fields: the receiver's own class's, to be
    filled (`memo.unfilled`), or else the sender's object by reference."""
    _record_items(node)
    kind, named, fields, _values, ref = node
    if memo.records is not None:
        found = memo.records.rebuild(kind, named, fields, None, ref)
        if found is not None:
            memo.unfilled.add(i)
            return found
    return reference(ref)


def _immutable_items(node):
    """The item nodes of an immutable table entry (a tuple, a frozenset or a record)."""
    if node[0] in ("t", "F") and len(node) == 2 and isinstance(node[1], list):
        return node[1]
    if node[0] in ("N", "D"):
        return _record_items(node)
    if node[0] == "S" and len(node) == 4 and node[2] in BASE_TYPES:
        if node[2] in ("tuple", "frozenset"):
            if isinstance(node[3], list):
                return node[3]
        elif node[2] not in _MUTABLE_BASES:
            return [node[3]]
    raise ProtocolError("bad table entry %r" % (node[0],))


_MUTABLE_BASES = ("list", "dict", "set")


def _based(memo):
    if memo.records is None:
        raise ProtocolError("an 'S' entry where none is expected")
    return memo.records


def _record_items(node):
    """The value nodes of a record entry, checked for shape."""
    if len(node) == 5:
        _kind, named, fields, values, ref = node
        if (
            isinstance(named, list)
            and len(named) == 2
            and all(isinstance(x, str) for x in named)
            and isinstance(fields, list)
            and all(isinstance(x, str) for x in fields)
            and isinstance(values, list)
            and isinstance(ref, list)
            and ref[:1] == ["o"]
            and len(values) == len(fields)
        ):
            return values
    raise ProtocolError("bad %r record" % (node[0],))


def _record(node, values, memo, reference):
    """A record entry's value: the receiver's own class rebuilt from `values`, or else the
    sender's object by reference."""
    kind, named, fields, _values_nodes, ref = node
    if memo.records is not None:
        found = memo.records.rebuild(kind, named, fields, values, ref)
        if found is not None:
            return found
    return reference(ref)


def _fill(target, node, memo, reference):
    tag = node[0]
    try:
        if tag == "B":
            return
        if tag in ("l", "s", "dq"):
            items = [decode_leaf(x, memo, reference) for x in node[1]]
            if tag == "s":
                target.update(items)
            else:
                target.extend(items)
            return
        for k, x in node[1]:
            target[decode_leaf(k, memo, reference)] = decode_leaf(x, memo, reference)
    except (TypeError, ValueError) as e:
        raise ProtocolError("bad %r entry: %s" % (tag, e)) from None
