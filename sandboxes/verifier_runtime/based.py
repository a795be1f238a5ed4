"""Objects of the other side's subclasses of builtins, and its enum members (see rpc.py, whose
Endpoint this is a part of).

An object whose class derives from str, bytes, int, float, complex, tuple, frozenset, list,
dict or set (the solution's `class Name(str)`, an IntEnum member, its own named tuple) travels
as a table entry ["S", reference, base, value] (codec.py): a reference to the object and the
value its builtin base holds, taken by the builtin's own code (`codec.BASE_VALUES`: no method
of its class runs). The receiver makes it an instance of the object's mirror class, which
derives from that builtin and holds that value: `isinstance(x, str)`, hashing, `==`, sorting,
`json.dumps`, `str.split` are the builtin's own, on the value, here, as in one process, where
the class does not define them. Every special method and public name that the class (or a
non-builtin base) defines over its builtin's is asked of the real object, as for any proxy;
comparisons, containment and arithmetic through the trusted side's checks (trusted.py
`compare`, `contains`, `arithmetic`), so an override that would lie meets the held-value rule.
A list, dict or set value stays current: the tests' changes through the builtin's mutators
are made to the real object too (`MUTATORS`), and the tested side sends its object again with
the answer to the tests' request that changed it (`resend_changed`, `resends_after`), taken
up at once where a test's own instruction was that change, else at a later read of the tests'
(`READS`), in another statement than the one it came in (`_take_up`).
A mirror of an enum class derives from the enum module's own base (`enum.Enum`, `IntEnum`, ...)
under a metaclass of both (`RemoteEnumMeta`), so its members are `enum.Enum` instances.

Standard library only, Python >= 3.8.
"""

import enum
import operator
import sys

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)


codec = _load("codec")
proxies = _load("proxies")
iterators = _load("iterators")
ProtocolError = codec.ProtocolError
RemoteObject = proxies.RemoteObject
RemoteClassMeta = proxies.RemoteClassMeta
_special = proxies._special

# The special methods whose answer decides what a value is; where the real class does not
# define one over its builtin's, the mirror has the builtin's own (run here, on the value).
_VALUE_DUNDERS = ["__%s__" % n for n in "eq ne lt le gt ge hash str repr format missing".split()]
_DUNDERS = _VALUE_DUNDERS + [n for n in proxies.SPECIALS if n not in _VALUE_DUNDERS]
# A proxy's own protocol: attributes of the real object, copies, pickling (trusted.py), and its
# `__dict__` (the real object's to code other than ours: a class deriving from a builtin too
# would get one of its own from `type`, which holds the proxy's state).
_KEPT = [
    "__%s__" % n for n in "getattr setattr delattr del dir copy deepcopy reduce_ex".split()
] + ["__dict__"]
_NAMES_CAP = 512  # overridden names a class node lists
# The enum module's bases a mirror of an enum class derives from (they hold no members).
_ENUM_BASES = frozenset(("Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"))
_EnumMeta = type(enum.Enum)


class RemoteEnumMeta(RemoteClassMeta, _EnumMeta):
    """Metaclass of the mirror of an enum class: a mirror class (its members, iteration,
    lookups asked of the real class) that is an enum class to `isinstance`."""

    @property
    def __members__(cls):
        return cls._rollouts_ep.request("getattr", cls, "__members__")

    def __reversed__(cls):
        return reversed(list(cls))

    # While the enum machinery makes the class (it walks its members: none), the enum's own.
    def __iter__(cls):
        if "_rollouts_ep" not in cls.__dict__:
            return _EnumMeta.__iter__(cls)
        return RemoteClassMeta.__iter__(cls)

    def __len__(cls):
        if "_rollouts_ep" not in cls.__dict__:
            return _EnumMeta.__len__(cls)
        return RemoteClassMeta.__len__(cls)


# The methods that change a list, dict or set: on a mirror of a subclass of one, the real
# object is changed too (the same call, there), so the solution's own methods find it as the
# tests left it.
MUTATORS = {
    list: frozenset("append extend insert remove pop clear sort reverse __setitem__ __delitem__ "
                    "__iadd__ __imul__".split()),
    dict: frozenset("__setitem__ __delitem__ pop popitem clear update setdefault __ior__".split()),
    set: frozenset("add discard remove pop clear update difference_update intersection_update "
                   "symmetric_difference_update __ior__ __iand__ __isub__ __ixor__".split()),
}  # fmt: skip


# The mutators that consume an iterable argument (each positional one; a slice's value).
_CONSUMING = frozenset(
    "extend __iadd__ update difference_update intersection_update symmetric_difference_update"
    .split()
)  # fmt: skip
_BY_VALUE = (list, tuple, dict, set, frozenset, str, bytes, bytearray)  # (sent as they are)


class _Recorder:
    """An iterable argument of a mutator as the copy's call consumes it: what it gave is what
    the real object's call gets (a list), so it runs once, as in one process, and sees the
    copy change as it goes (`t.extend(w for w in ws if w not in t)`); before, the copy's call
    used a one-shot iterator up (toolz's `rv.update(zip(keys, values))` left the tests'
    object empty). A pair a dict's `update` unpacks goes as a tuple where it is an iterator
    (toolz's `itemmap(reversed, d)`)."""

    __slots__ = ("it", "items", "pairs")

    def __init__(self, iterable, pairs):
        self.it, self.items, self.pairs = iter(iterable), [], pairs

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.it)
        if self.pairs and _has(type(item), "__next__"):
            item = tuple(item)
        self.items.append(item)
        return item


def _recorded(base, name, args):
    """`args` for the copy's call, with a _Recorder for each iterable it consumes that is not
    a value sent as it is; not a mapping a dict's `update` reads by its `keys` (asked as
    `update` asks it: a request, for a proxy)."""
    if name in _CONSUMING:
        at = range(len(args))
    elif name == "__setitem__" and len(args) == 2 and type(args[0]) is slice:
        at = (1,)
    else:
        return args
    pairs = base is dict and name == "update"
    out = list(args)
    for i in at:
        t = type(args[i])
        if pairs and t in (list, tuple):  # (a value, but its pairs may be iterators)
            out[i] = _Recorder(args[i], pairs)
        elif t not in _BY_VALUE and not (pairs and hasattr(args[i], "keys")):
            out[i] = _Recorder(args[i], pairs)
    return tuple(out)


def _replayed(args):
    """The copy's call's `args` for the real object's: each _Recorder as what it gave."""
    return tuple(a.items if type(a) is _Recorder else a for a in args)


def _has(cls, name):
    """Whether class `cls` defines `name`, asked of its classes' own namespaces: nothing of an
    object's code (nor a request, for a proxy's class) runs to tell."""
    return any(name in k.__dict__ for k in cls.__mro__)


def _mutator(base, name):
    local = getattr(base, name)
    # A special method is asked as its operator (`d[k] = v` is "setitem", `xs += ys` "iadd"),
    # as a forwarder asks one the class defines: the trusted side answers no getattr of a
    # special method name (the tests' `class TestDict(dict)` filled by the solution).
    op = name[2:-2] if name.startswith("__") else None

    def forward(self, args, kwargs):
        if op is None:
            self._rollouts_ep.request("getattr", self, name)(*args, **kwargs)
        else:
            self._rollouts_ep.request("op", op, self, *args)

    def method(self, *args, **kwargs):
        _take_up(self)
        args = _recorded(base, name, args)
        try:
            answer = local(self, *args, **kwargs)  # (first: what it refuses, the real one would)
        except BaseException:
            # The copy may have changed before it refused (a pair that is no pair, an
            # iterator that raised): the real object gets the same call, and refuses there.
            try:
                forward(self, _replayed(args), kwargs)
            except Exception:  # noqa: BLE001 - as the copy's call did
                pass
            raise
        forward(self, _replayed(args), kwargs)
        return self if name.startswith("__i") else answer

    method.__name__ = method.__qualname__ = name
    return method


# The builtin's own reads of a list, dict or set, on a mirror of a subclass of one whose class
# does not define them: each marks a read in progress, and, where none was, first takes up the
# values that real objects were sent with since (`_take_up`); iteration (and a dict's views)
# walks a copy. A value that arrives under a read (a `==` in C, whose items' comparisons are
# requests) waits for the next: changed under the read, the builtin's loop could end early and
# answer "equal", as under a `for` over the object, and an inner object of one read (a grid's
# row) would be read as it was at another moment than its neighbours (red team, stop 63).
READS = {
    list: "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __len__ __iter__ __reversed__ __contains__ "
          "__getitem__ __repr__ __add__ __mul__ __rmul__ copy index count".split(),
    dict: "__eq__ __ne__ __len__ __iter__ __reversed__ __contains__ __getitem__ __repr__ __or__ "
          "__ror__ keys values items get copy".split(),
    set: "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __len__ __iter__ __contains__ __repr__ "
         "__or__ __ror__ __and__ __rand__ __sub__ __rsub__ __xor__ __rxor__ copy union "
         "intersection difference symmetric_difference issubset issuperset isdisjoint".split(),
}  # fmt: skip
_WALKS = frozenset(("__iter__", "__reversed__", "keys", "values", "items"))
_reads = [0]  # wrapped reads in progress (in this process: one thread reads at a time here)
_waiting = {}  # id(mirror) -> that mirror, holding a value it was sent with since
_arrived = set()  # where the tests stood when those came (`Based.moment`)


def _reader(base, name):
    own = getattr(base, name)
    copy = codec.BASE_VALUES[base.__name__]

    def read(self, *args, **kwargs):
        _take_up(self)
        if name in _WALKS:
            return own(copy(self), *args, **kwargs)
        _reads[0] += 1
        try:
            return own(self, *args, **kwargs)
        finally:
            _reads[0] -= 1

    read.__name__ = read.__qualname__ = name
    return read


def _take_up(mirror):
    """Every mirror made to hold the value its real object was last sent with, unless a read
    is in progress, or the tests still stand where one of those values came (the same
    statement's evaluation: a `==` of a plain list of mirrors reads each when it reaches it,
    and one that came while it compared the first would be read in the second)."""
    if _reads[0] or not _waiting:
        return
    if _arrived & mirror._rollouts_ep.moment():
        return
    _fill_waiting()


def _fill_waiting():
    waiting = list(_waiting.values())
    _waiting.clear()
    _arrived.clear()
    for obj in waiting:
        try:
            value = object.__getattribute__(obj, "_rollouts_pending")
        except AttributeError:
            continue
        object.__delattr__(obj, "_rollouts_pending")
        _fill(obj, value)


def _fill(obj, value):
    """Make mirror `obj` hold plain list, dict or set `value`, by the builtin's own methods
    (the mirror's may be the real class's)."""
    if isinstance(value, list):
        list.__init__(obj, value)
    else:
        base = dict if isinstance(value, dict) else set
        base.clear(obj)
        base.update(obj, value)


# ---- the sending side: what a class node says of such a class --------------------------------


def facts(cls):
    """What a class node adds for a subclass of a builtin value type or an enum class: "v" its
    builtin base, "o" the special methods and public names a class of its MRO other than the
    builtins defines over what the interpreter would find there (asked of the real object),
    "z" those of them set to None, "t" the fields of a plain named tuple (read here)."""
    base = codec.builtin_base(cls)
    if base is None and not isinstance(cls, _EnumMeta):
        return {}
    out = {}
    if base is not None:
        out["v"] = base
    over, none = [], []
    names = dict.fromkeys(_DUNDERS)  # (the special methods first: a cap never drops one)
    for klass in cls.__mro__:
        if klass.__module__ != "builtins":
            names.update(dict.fromkeys(n for n in vars(klass) if not n.startswith("_")))
    for name in names:
        for klass in cls.__mro__:
            if name in vars(klass):
                if klass.__module__ != "builtins":
                    (none if vars(klass)[name] is None else over).append(name)
                break
        if len(over) + len(none) >= _NAMES_CAP:
            break
    out["o"], out["z"] = over, none
    fields = _plain_named_tuple_fields(cls)
    if fields is not None:
        out["t"] = fields
    return out


# What collections.namedtuple (and typing.NamedTuple) put in a class: a class with nothing
# else is plain data (its fields are its items).
_GENERATED = frozenset(
    "__doc__ __getnewargs__ __match_args__ __module__ __new__ __repr__ __slots__ _asdict "
    "_field_defaults _fields _make _replace __annotations__ __orig_bases__".split()
)


# What typing.Generic adds to a class (`class CaptureResult(NamedTuple, Generic[AnyStr])`).
_GENERIC = frozenset(("__class_getitem__", "__parameters__", "__final__"))


def plain_named_tuple(cls, generic=False):
    """Whether `cls` is a named tuple class with nothing but what collections made; `generic`:
    or what typing.Generic adds."""
    fields = cls.__dict__.get("_fields")
    bases, extra = (tuple,), set()
    if generic and cls.__bases__[1:] and cls.__bases__[-1].__module__ == "typing":
        bases, extra = (tuple, cls.__bases__[-1]), _GENERIC
    return (
        cls.__bases__ == bases
        and isinstance(fields, tuple)
        and all(isinstance(f, str) and f.isidentifier() for f in fields)
        and set(cls.__dict__) <= _GENERATED | extra | set(fields)
    )


def _plain_named_tuple_fields(cls):
    return list(cls._fields) if issubclass(cls, tuple) and plain_named_tuple(cls) else None


# ---- the receiving side: the mirror class --------------------------------------------------


def enum_base(meta):
    """The enum module's own class a class node names (`enum.IntEnum`), else None."""
    named = meta.get("g") if isinstance(meta, dict) else None
    if isinstance(named, list) and len(named) == 2 and named[0] == "enum":
        if named[1] in _ENUM_BASES:
            found = getattr(enum, named[1], None)
            return found if isinstance(found, _EnumMeta) else None
    return None


def _names(meta, key):
    value = meta.get(key)
    if value is None:
        return set()
    if not (isinstance(value, list) and all(isinstance(n, str) for n in value)):
        raise ProtocolError("class node %r" % key)
    return set(value)


def make(meta, bases, namespace):
    """The mirror class of a class node whose class derives from a builtin value type or is
    an enum class, or None for any other (`Mirrors.mirror` makes those). `bases`: the local
    bases made of the node's; `namespace`: names and documentation."""
    tag = meta.get("v")
    value_base = codec.BASE_TYPES.get(tag) if isinstance(tag, str) else None
    enums = [b for b in bases if isinstance(b, _EnumMeta)]
    if value_base is None and not enums:
        return None
    local = value_base or object
    over, none = _names(meta, "o"), _names(meta, "z")
    fields = meta.get("t")
    for name in _KEPT:
        namespace[name] = RemoteObject.__dict__[name]
    for name in _DUNDERS:
        if name in none or (name == "__hash__" and meta.get("h") is False):
            namespace[name] = None
        elif name in over:
            namespace[name] = _forwarder(name)
        else:
            own = _special(local, name)
            if own is not None:
                namespace[name] = own
    for name in READS.get(value_base, ()):
        if name not in over and name not in none and hasattr(value_base, name):
            namespace[name] = _reader(value_base, name)
    for name in MUTATORS.get(value_base, ()):
        if name not in over and name not in none and hasattr(value_base, name):
            namespace[name] = _mutator(value_base, name)  # (dict's |= is 3.9's)
    public = [n for n in over if not n.startswith("_")]
    for name in public:
        if any(hasattr(b, name) for b in [local] + enums):
            namespace[name] = _remote_attribute(name)  # it shadows what is here
    if (
        value_base is tuple
        and not enums
        and isinstance(fields, list)
        and all(isinstance(f, str) and f.isidentifier() for f in fields)
    ):
        for i, field in enumerate(fields):
            namespace[field] = property(operator.itemgetter(i))
        namespace["_fields"] = tuple(fields)
        namespace["_asdict"] = _asdict
    iterators.adapt(namespace, meta)
    bases = list(bases)
    if value_base is not None and not any(issubclass(b, value_base) for b in bases):
        bases.insert(0, value_base)
    if not any(issubclass(b, RemoteObject) for b in bases):
        # before the enum module's bases (an enum class's last base must be an enum)
        at = next((i for i, b in enumerate(bases) if isinstance(b, _EnumMeta)), len(bases))
        bases.insert(at, RemoteObject)
    name = namespace["__qualname__"].rpartition(".")[2]
    try:
        if any(isinstance(b, _EnumMeta) for b in bases):
            prepared = RemoteEnumMeta.__prepare__(name, tuple(bases))
            prepared.update(namespace)
            cls = RemoteEnumMeta(name, tuple(bases), prepared)
        else:
            cls = RemoteClassMeta(name, tuple(bases), namespace)
    except Exception:  # noqa: BLE001 - bases the local ones (this Python's enum) cannot form
        return None
    type.__setattr__(cls, "_rollouts_base", local)
    return cls


def _forwarder(name):
    """The mirror's `name` where the real class defines it: asked of the real object (a
    comparison, containment, arithmetic through the trusted side's checks)."""
    if name in proxies.SPECIALS:
        return proxies.SPECIALS[name]
    if name in RemoteObject.__dict__:
        return RemoteObject.__dict__[name]

    def missing(self, key):  # a dict subclass's __missing__: the real lookup, there
        return self._rollouts_ep.request("op", "getitem", self, key)

    missing.__name__ = missing.__qualname__ = name
    return missing


def _remote_attribute(name):
    def get(self):
        return self._rollouts_ep.request("getattr", self, name)

    get.__name__ = get.__qualname__ = name
    return property(get)


def _asdict(self):
    return {f: tuple.__getitem__(self, i) for i, f in enumerate(type(self)._fields)}


# ---- the receiving side: the object ----------------------------------------------------------

_MUTABLE = ("list", "dict", "set")
_WALKED = (list, tuple, dict, set, frozenset)  # (`_items`)
# An answer to a call compares every object tracked with its value as sent, items nested in
# its plain containers too (~50 ns an item): past these, an object sent is not tracked, and the
# other side's value of it is what it was sent as until it is sent again (the cost per call
# stays bounded, as shares.py bounds its own).
_TRACKED = 256
_TRACKED_ITEMS = 1 << 14
# (`resends_after`) Requests that change an object as a statement of the tests' does: a call,
# an item's or attribute's assignment or deletion, an operator in place, a `with`; and an
# item's read where the class defines it (boltons' `LRI` fills itself on a miss, an LRU moves
# what was read to its end).
_RESENDING = frozenset(("call", "callattr", "inherited", "setattr", "delattr"))
_RESENDING_OPERATORS = frozenset(
    "setitem delitem iadd isub imul imatmul itruediv ifloordiv imod ipow ilshift irshift iand "
    "ixor ior enter exit getitem".split()
)


def _items(value):
    """The objects list, dict or set `value` holds, through the plain lists, tuples, dicts and
    sets inside it (a matrix's rows, changed in place), held, so no id is reused while they
    are; and the sizes of those containers. Compared by identity (`_same_items`)."""
    held, sizes, seen, todo = [], [], set(), [value]
    while todo:
        v = todo.pop()
        items = list(v) + list(v.values()) if type(v) is dict else list(v)
        sizes.append(len(items))
        for x in items:
            held.append(x)
            if type(x) in _WALKED and id(x) not in seen:
                seen.add(id(x))
                todo.append(x)
    return held, sizes


def _same_items(value, items):
    """Whether `value` holds the very objects of `items` (identity, in C: no `==` runs)."""
    held, sizes = _items(value)
    return (
        sizes == items[1] and len(held) == len(items[0]) and all(map(operator.is_, held, items[0]))
    )


def check(node):
    """The parts of an ["S", reference, base, value] entry, checked for shape."""
    if not (isinstance(node, list) and len(node) == 4):
        raise ProtocolError("bad 'S' entry")
    _tag, ref, base, value = node
    if not (
        isinstance(ref, list)
        and len(ref) == 3
        and ref[0] == "o"
        and type(ref[1]) is int
        and base in codec.BASE_TYPES
    ):
        raise ProtocolError("bad 'S' entry")
    if base == "dict":
        if not (
            isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value)
        ):
            raise ProtocolError("bad 'S' entry")
    elif base in ("list", "set", "tuple", "frozenset") and not isinstance(value, list):
        raise ProtocolError("bad 'S' entry")
    return ref, base, value


class Based:
    """The builtin subclasses part of an endpoint (rpc.Endpoint)."""

    # Whether our objects' changes are sent after they crossed (`resend_changed`): the tested
    # side's only. The trusted side's would tell the tested code what the tests' own object
    # holds now, and the tests' objects it was shown in a comparison's probe are its expected
    # values (trusted.py); what it may change of theirs comes back to them as it changes.
    resends_based = False

    def based(self, v):
        """The builtin base (codec.BASE_TYPES) `v` travels with, or None: a reference only."""
        cls = type(v)
        if issubclass(cls, (RemoteObject, type, proxies.AsReference, BaseException)):
            return None
        base = codec.builtin_base(cls)
        if base in _MUTABLE and self.resends_based:  # (its value as sent: `resend_changed`)
            self._track_sent(v, base)
        return base

    def _track_sent(self, v, base):
        sent = self.based_sent
        items = _items(codec.BASE_VALUES[base](v))
        old = sent.pop(id(v), None)
        if old is not None:
            self.based_items -= len(old[2][0])
        if len(sent) < _TRACKED and self.based_items + len(items[0]) <= _TRACKED_ITEMS:
            sent[id(v)] = (v, base, items)
            self.based_items += len(items[0])

    def resends_after(self, op, args):
        """Whether the answer to request `op` (of arguments `args`, the first two) carries our
        changed objects (`resend_changed`): only one that changes an object as a statement of
        the tests' does (`s.push(2)`, `solution.fill(s)`, `d[k]`, `d[k] = v` and `d.key = v`
        where its class defines them, `s |= t`), not one nested in the serving of a request of
        ours. Never a comparison's, a hash's, a probe's: those the tests' checks make, and an
        object changed in the middle of one (by an item's honest `__eq__`) would be read at two
        moments by C code that reads its storage itself (`expected.__eq__(d)`, `dict(d)`,
        `set.difference`): as in one process, a loop that ends early or finds each expected
        item once (red team, stop 63). A check then reads the value of the last change."""
        if op == "op":
            op = args[0] if args else None
            if op not in _RESENDING_OPERATORS:
                return False
        elif op not in _RESENDING:
            return False
        return self.serving == 1

    def resend_changed(self, memo, op, args):
        """Our objects of list, dict and set subclasses that the other side holds, whose value
        changed since they were last sent (a `push` of the solution's `class Stack(list)`),
        sent again in the message of `memo`: their entries refill the other side's proxies
        (`based_object`), whose builtin's methods (`==`, `len`, `[i]`) read that value there.
        After request `op` of `args` (`resends_after`) that read an item, only the object read:
        a loop of `m[i, j]` would compare every object tracked at each read."""
        sent = self.based_sent
        if op == "op" and args[0] == "getitem":
            read = sent.get(id(args[1])) if len(args) > 1 else None
            tracked = [(id(args[1]), read)] if read is not None else []
        else:
            tracked = list(sent.items())
        for key, (v, base, items) in tracked:
            oid = self.export_ids.get(key)
            if oid is None or self.exports.get(oid) is not v:  # (released: no proxy holds it)
                del sent[key]
                self.based_items -= len(items[0])
            elif not _same_items(codec.BASE_VALUES[base](v), items):
                codec.leaf(v, memo, self._reference_encoder(memo))
        codec.drain(memo, self._reference_encoder(memo))

    def based_object(self, node, values):
        """The object of an "S" entry: our proxy of it, an instance of its mirror class holding
        the base value (`values`: the decoded items, or the one scalar; None for a mutable
        base, made empty and filled by `based_fill`). A proxy we hold already is the same
        object (a mutable one refilled: the real one may have changed)."""
        ref, base, _value = check(node)
        value_base = codec.BASE_TYPES[base]
        oid = ref[1]
        cls = self.mirror(ref[2])
        if not issubclass(cls, value_base):  # bases the local ones could not form
            return self._proxy(oid, ref[2])
        self._count(oid)
        members = self.__dict__.setdefault("members", {})
        known = members.get(oid) or self.proxies.get(oid)
        if known is not None and type(known) is cls:
            return known
        if values is None:
            obj = value_base.__new__(cls)
        else:
            if base not in ("tuple", "frozenset"):
                values = values[0] if len(values) == 1 else None
                if type(values) is not value_base:
                    raise ProtocolError("bad 'S' value")
            try:
                obj = value_base.__new__(cls, values)
            except TypeError as e:
                raise ProtocolError("bad 'S' value: %s" % e) from None
        object.__setattr__(obj, "_rollouts_ep", self)
        object.__setattr__(obj, "_rollouts_oid", oid)
        if isinstance(cls, RemoteEnumMeta):
            members[oid] = obj  # a member is one object (`is`), and its class holds it anyway
        elif cls.__weakrefoffset__:
            self.proxies[oid] = obj
        else:  # (a str, int or tuple subclass has no weak references) its own reference
            object.__setattr__(obj, "_rollouts_single", True)
        self._mirrored(ref[2][2] if isinstance(ref[2], list) and len(ref[2]) == 3 else None,
                       "an instance of it arrived as a mirror")  # fmt: skip
        return obj

    def based_fill(self, obj, base, items):
        """Make mutable `obj` hold `items` ([key, value] pairs for a dict), by the builtin's
        own methods (the mirror's may be the real class's)."""
        if not isinstance(obj, codec.BASE_TYPES[base]):  # a plain proxy (`based_object`)
            return
        try:
            value = list(items) if base == "list" else set(items) if base == "set" else dict(items)
        except (TypeError, ValueError) as e:
            raise ProtocolError("bad 'S' items: %s" % e) from None
        try:
            object.__getattribute__(obj, "_rollouts_filled")
        except AttributeError:  # (just made: filled now)
            object.__setattr__(obj, "_rollouts_filled", True)
            _fill(obj, value)
            return
        # Sent again (it crossed again, or changed: `resend_changed`): taken up at its next
        # read of those wrapped here (`READS`), and at once only where the tests' own
        # statement made this call (`s.push(2)`): any other answer may have come in the middle
        # of C code that reads its storage itself, not by those (`frozenset(...) == obj`,
        # `expected.issubset(obj)`, `OrderedDict(...) == obj`, whose items' `__eq__` may be
        # the tests' own and call the solution: red team, stop 63).
        object.__setattr__(obj, "_rollouts_pending", value)
        _waiting[id(obj)] = obj
        if self.called_by_a_test():
            _fill_waiting()
        else:
            _arrived.update(self.moment())

    def moment(self):
        """Where the tests stand: (id, instruction) of each of their frames (trusted.py)."""
        return frozenset()

    def called_by_a_test(self):
        """Whether the request being answered is a call that a test's own statement made (no
        C code between them, nor code of the tests that C code called): the trusted side
        reads its frames (trusted.py)."""
        return False
