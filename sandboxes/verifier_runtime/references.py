"""Objects by reference across the boundary: our exports by id, and the other side's
objects as proxies (see rpc.py, whose Endpoint this is a part of).

A reference is ["o", oid, class] an object of the sender's, ["C", oid, meta] a class, ["x",
oid] the receiver's own object coming back, ["m"/"g", module, qualname, oid, class] a module
or function the receiver may already have under that name, ["E", ...] an exception
(mirrors.py). Decoding one never runs code the other side chose: it makes a proxy, finds our
own exported object, or, for names of modules and functions already imported here, our own.

Standard library only, Python >= 3.8.
"""

import sys
import types

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)


codec = _load("codec")
proxies = _load("proxies")
mirrors = _load("mirrors")
ProtocolError = codec.ProtocolError
AsReference = proxies.AsReference
RemoteObject = proxies.RemoteObject
RemoteClassMeta = proxies.RemoteClassMeta
_qualified = proxies.qualified
_lookup = mirrors._lookup
_cap = mirrors._cap

_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
)


class References:
    """The references part of an endpoint (rpc.Endpoint): exports, proxies, their codec."""

    # ---- references ----------------------------------------------------------------------

    def export(self, obj, value=True):
        """Our object's id for the other side. `value`: handed over as a value (not only
        described as some object's class)."""
        key = id(obj)
        oid = self.export_ids.get(key)
        if oid is None or self.exports.get(oid) is not obj:
            oid = self.next_oid
            self.next_oid += 1
            self.exports[oid] = obj
            self.export_ids[key] = oid
        self.sent[oid] = self.sent.get(oid, 0) + 1
        return oid

    def _release(self, item):
        if not (isinstance(item, list) and len(item) == 2):
            raise ProtocolError("release")
        oid, count = item
        if type(count) is not int:
            raise ProtocolError("release")
        left = self.sent.get(oid, 0) - count
        if left > 0:
            self.sent[oid] = left
            return
        self.sent.pop(oid, None)
        obj = self.exports.pop(oid, None)
        if obj is not None and self.export_ids.get(id(obj)) == oid:
            del self.export_ids[id(obj)]

    def _released(self, msg):
        """Our objects the other side says it dropped ("rel")."""
        released = msg.get("rel")
        if released is None:
            return
        if not isinstance(released, list):
            raise ProtocolError("release")
        for item in released:
            self._release(item)

    def dropped(self, proxy):
        oid = proxies.own(proxy).get("_rollouts_oid")
        if proxies.own(proxy).get("_rollouts_single"):  # one reference each (based.py)
            left = self.received.pop(oid, 0) - 1
            if left > 0:
                self.received[oid] = left
            self.releases.append([oid, 1])
            return
        if oid is None:
            return
        # (A proxy that dies of its last reference is finalized before its weak references
        # are cleared: the table still gives it back here. One of a cycle the collector
        # found is gone from it, and a newer proxy of the same object may stand there.)
        current = self.proxies.get(oid)
        if current is None or current is proxy:
            count = self.received.pop(oid, 0)
            if count:
                self.releases.append([oid, count])

    def is_own_module(self, module):
        """Modules of ours the other side imports by name from its own copy (see tested.py)."""
        return False

    def module_for(self, name, oid, class_node):
        """The other side's module `name` (see trusted.py); a plain proxy by default."""
        return self._proxy(oid, class_node)

    # ---- encoding ------------------------------------------------------------------------

    def encode(self, v, memo):
        if codec.is_own_node(v) and not memo.pending:  # (most values: no encoder to make)
            return v
        return codec.encode(v, memo, self._reference_encoder(memo))

    def _reference_encoder(self, memo):
        return lambda v: self.encode_reference(v, memo)

    def encode_reference(self, v, memo):
        if type(v) is AsReference:
            return ["o", self.export(v.obj), self.class_node(type(v.obj))]
        if (
            isinstance(v, (RemoteObject, RemoteClassMeta))
            and proxies.own(v).get("_rollouts_ep") is self
        ):
            memo.held.append(v)  # (alive until the message is sent: codec.Memo)
            return ["x", proxies.own(v)["_rollouts_oid"]]  # the other side's own object, back
        if isinstance(v, BaseException):
            return self.encode_exception(v, memo)
        if isinstance(v, types.ModuleType):
            tag = "m" if self.is_own_module(v) else "g"
            return [tag, getattr(v, "__name__", ""), "", self.export(v), self.class_node(type(v))]
        if isinstance(v, type):
            return self.class_node(v, named=True)
        node = None
        if isinstance(v, _FUNCTION_TYPES):
            named = _qualified(v)
            if named and not self._defined_here(v):
                node = ["g", named[0], named[1], self.export(v), self.class_node(type(v))]
        if node is None:
            node = ["o", self.export(v), self.class_node(type(v))]
        if isinstance(v, _ROUTINE_TYPES) and self.tells_routine_names():
            node.append(_routine_names(v, self.allowed_name("__qualname__")))
            node[-1]["p"] = _parameters(v, self.allowed_name("__defaults__"))
        return node

    def tells_routine_names(self):
        """Whether a routine of ours goes with its names and documentation (by value: its
        `__name__`, `__qualname__`, `__module__`, `__doc__`), so a decorator of the other side
        that copies them (`functools.wraps`) copies ours."""
        return self.allowed_name("__name__")

    def _defined_here(self, obj):
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        return module is not None and self.is_own_module(module)

    # ---- decoding ------------------------------------------------------------------------

    def decode(self, node, memo):
        if type(node) is not list and type(node) is not dict:  # a JSON scalar is its value
            return node
        return codec.decode_leaf(node, memo, self._reference_decoder(memo))

    def _reference_decoder(self, memo):
        return lambda node: self.decode_reference(node, memo)

    def decode_reference(self, node, memo):
        tag = node[0]
        try:
            if tag == "o":
                proxy = self._proxy(node[1], node[2])
                if len(node) == 4:
                    _set_routine_names(proxy, node[3])
                    self.heard_text(node[3].get("d"))
                return proxy
            if tag == "C":
                return self.class_value(node)
            if tag == "x":
                return self.exports[node[1]]
            if tag == "m":
                return self.module_for(node[1], node[3], node[4])
            if tag == "g":
                return self._global(node)
            if tag == "E":
                return self.decode_exception(node, memo)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise ProtocolError("bad %r node: %s" % (tag, e)) from None
        raise ProtocolError("unknown tag %r" % (tag,))

    def _count(self, oid):
        self.received[oid] = self.received.get(oid, 0) + 1

    def _proxy(self, oid, class_node):
        if type(oid) is not int:
            raise ProtocolError("object id")
        self._count(oid)
        proxy = self.proxies.get(oid)
        if proxy is not None:
            return proxy
        cls = self.mirror(class_node)
        # (a mirror's __new__ is a local base's: object's, an exception's or tzinfo's; a
        # builtin's or an enum's, for one that stands for no value here: based.py)
        made_by = cls.__dict__.get("_rollouts_base")
        if made_by is not None:
            proxy = made_by.__new__(cls)
        else:
            proxy = object.__new__(cls) if cls.__new__ is object.__new__ else cls.__new__(cls)
        object.__setattr__(proxy, "_rollouts_ep", self)
        object.__setattr__(proxy, "_rollouts_oid", oid)
        if cls.__weakrefoffset__:
            self.proxies[oid] = proxy
        else:  # a mirror of a subclass of int, str or tuple has no weak references (based.py)
            object.__setattr__(proxy, "_rollouts_single", True)
        self._mirrored(class_node[2], "an instance of it arrived as a mirror")
        return proxy

    def _global(self, node):
        """A module or function named by module and qualified name: ours if that module is
        already imported here and the name leads to one, else a proxy."""
        module_name, qualname, oid, class_node = node[1], node[2], node[3], node[4]
        if not isinstance(module_name, str) or not isinstance(qualname, str):
            raise ProtocolError("global name")
        found = _lookup(module_name, qualname)
        if isinstance(found, types.ModuleType) or isinstance(found, _FUNCTION_TYPES):
            self.releases.append([oid, 1])
            return found
        proxy = self._proxy(oid, class_node)
        if len(node) == 6:  # a function's: its names and parameters (`_routine_names`)
            _set_routine_names(proxy, node[5])
            self.heard_text(node[5].get("d"))
        return proxy


_ROUTINE_TYPES = _FUNCTION_TYPES + (
    types.MethodType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
)


_ROUTINE_NAMES = (("n", "__name__"), ("q", "__qualname__"), ("m", "__module__"), ("d", "__doc__"))


def _routine_names(fn, qualified=True):
    """A routine's names and documentation, as its own (C-level) attributes say; without its
    qualified name where that is not `qualified` (a tests' function: its enclosing test's name
    stays the tests')."""
    names = {}
    for key, attr in _ROUTINE_NAMES:
        value = getattr(fn, attr, None)
        names[key] = (_cap(value) if key == "d" else value) if isinstance(value, str) else None
    if not qualified:
        names["q"] = None
    return names


def _set_routine_names(proxy, names):
    """Answer a routine proxy's names, documentation and parameters here (the class node has
    its class's)."""
    if not isinstance(names, dict):
        raise ProtocolError("routine names")
    for key, attr in _ROUTINE_NAMES:
        value = names.get(key)
        if isinstance(value, str):
            object.__setattr__(proxy, attr, value)
    facts = names.get("p")
    if facts is not None:
        if not (
            isinstance(facts, list)
            and len(facts) == 2
            and isinstance(facts[0], list)
            and type(facts[1]) is bool
            and all(_parameter_fact(x) for x in facts[0])
        ):
            raise ProtocolError("routine parameters")
        object.__setattr__(proxy, "_rollouts_parameters", facts[0])
        if facts[1]:  # (proxies.py `_CoroutineMark`)
            object.__setattr__(proxy, "_rollouts_coroutine", True)


# A default told by value (the solution's plain ones; the tests' are not the tested code's to
# read, so theirs is only that there is one).
_TOLD_DEFAULTS = (type(None), bool, int, float, str)
_CO_VARARGS, _CO_VARKEYWORDS, _CO_COROUTINE = 0x04, 0x08, 0x80


def _parameters(fn, defaults):
    """[[[name, kind, default...], ...], coroutine] of a Python function or bound method, as
    its code object says (no `inspect`: the tested process does not import it for this); kind
    is inspect.Parameter's (0 positional-only ... 4 var-keyword); `default` is [] where there
    is one not told, [value] where `defaults` and it is plain ([items, "tuple"] a tuple of
    plain ones); None for any other routine."""
    bound = isinstance(fn, types.MethodType)
    func = fn.__func__ if bound else fn
    code = getattr(func, "__code__", None) if type(func) is types.FunctionType else None
    if code is None:
        return None
    names = code.co_varnames
    positional = code.co_argcount
    only = getattr(code, "co_posonlyargcount", 0)
    keyword = code.co_kwonlyargcount
    given = func.__defaults__ or ()
    given_kw = func.__kwdefaults__ or {}
    out = []

    def plain(value):
        if type(value) is float:
            return value == value and abs(value) != float("inf")
        return type(value) in _TOLD_DEFAULTS and (type(value) is not str or len(value) <= 256)

    def told(value):
        if not defaults:
            return []
        if type(value) is tuple and len(value) <= 16 and all(map(plain, value)):
            return [list(value), "tuple"]  # (`headers=()`)
        return [value] if plain(value) else []

    first_default = positional - len(given)
    for i in range(positional):
        entry = [names[i], 0 if i < only else 1]
        if i >= first_default:
            entry.append(told(given[i - first_default]))
        out.append(entry)
    at = positional + keyword
    if code.co_flags & _CO_VARARGS:
        out.append([names[at], 2])
    for name in names[positional : positional + keyword]:
        entry = [name, 3]
        if name in given_kw:
            entry.append(told(given_kw[name]))
        out.append(entry)
    if code.co_flags & _CO_VARKEYWORDS:
        out.append([names[at + (1 if code.co_flags & _CO_VARARGS else 0)], 4])
    if bound and out and out[0][1] in (0, 1):
        out = out[1:]
    return [out, bool(code.co_flags & _CO_COROUTINE)]


def _parameter_fact(x):
    return (
        isinstance(x, list)
        and len(x) in (2, 3)
        and isinstance(x[0], str)
        and x[0].isidentifier()
        and type(x[1]) is int
        and 0 <= x[1] <= 4
        and (len(x) == 2 or _told_default(x[2]))
    )


def _told_default(told):
    if not isinstance(told, list):
        return False
    if len(told) == 2 and told[1] == "tuple" and isinstance(told[0], list):
        return all(type(v) in _TOLD_DEFAULTS for v in told[0])
    return len(told) == 0 or (len(told) == 1 and type(told[0]) in _TOLD_DEFAULTS)
