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

    def dropped(self, proxy):
        oid = proxy.__dict__.get("_rollouts_oid")
        if proxy.__dict__.get("_rollouts_single"):  # one reference each (based.py)
            left = self.received.pop(oid, 0) - 1
            if left > 0:
                self.received[oid] = left
            self.releases.append([oid, 1])
            return
        if oid is not None and self.proxies.get(oid) is None:
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
        return codec.encode(v, memo, self._reference_encoder(memo))

    def _reference_encoder(self, memo):
        return lambda v: self.encode_reference(v, memo)

    def encode_reference(self, v, memo):
        if type(v) is AsReference:
            return ["o", self.export(v.obj), self.class_node(type(v.obj))]
        if (
            isinstance(v, (RemoteObject, RemoteClassMeta))
            and v.__dict__.get("_rollouts_ep") is self
        ):
            return ["x", v.__dict__["_rollouts_oid"]]  # the other side's own object, back
        if isinstance(v, BaseException):
            return self.encode_exception(v, memo)
        if isinstance(v, types.ModuleType):
            tag = "m" if self.is_own_module(v) else "g"
            return [tag, getattr(v, "__name__", ""), "", self.export(v), self.class_node(type(v))]
        if isinstance(v, type):
            return self.class_node(v, named=True)
        if isinstance(v, _FUNCTION_TYPES):
            named = _qualified(v)
            if named and not self._defined_here(v):
                return ["g", named[0], named[1], self.export(v), self.class_node(type(v))]
        node = ["o", self.export(v), self.class_node(type(v))]
        if isinstance(v, _ROUTINE_TYPES) and self.tells_routine_names():
            node.append(_routine_names(v, self.allowed_name("__qualname__")))
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
        return self._proxy(oid, class_node)


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
    """Answer a routine proxy's names and documentation here (the class node has its class's)."""
    if not isinstance(names, dict):
        raise ProtocolError("routine names")
    for key, attr in _ROUTINE_NAMES:
        value = names.get(key)
        if isinstance(value, str):
            object.__setattr__(proxy, attr, value)
