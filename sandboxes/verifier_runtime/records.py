"""Records by value across the boundary: named tuples, dataclasses and namespaces of the
standard library or of installed packages, rebuilt as the receiver's own class of that name
(codec.py asks; see rpc.py, whose Endpoint this is a part of).

Standard library only, Python >= 3.8.
"""

import sys
import types

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)


proxies = _load("proxies")
mirrors = _load("mirrors")
AsReference = proxies.AsReference
RemoteObject = proxies.RemoteObject
# What only ever travels as a reference: proxies (our copy of the other side's objects),
# classes, objects the tests hand over as handles.
REFERENCES = (RemoteObject, type, AsReference)
_field_name = mirrors._field_name
_shadows = mirrors._shadows


class Records:
    """The records part of an endpoint (rpc.Endpoint)."""

    def describe(self, v):
        """(kind, [module, qualname], field names, values) when `v` travels by value as a
        record (`_record_kind`: a named tuple, dataclass or namespace of the standard library
        or an installed package), its state all in its fields; else None."""
        cls = type(v)
        if issubclass(cls, REFERENCES):
            return None
        facts = self._class_facts(cls)
        record = _record_kind(cls) if facts.get("i") else None
        if record is None:
            return None
        kind, fields = record
        state = getattr(v, "__dict__", None) or {}
        if fields is None:  # a namespace: its attributes are its fields
            fields = list(state)
            if not all(_field_name(name) for name in fields):
                return None
        elif (state and kind == "N") or not set(state) <= set(fields):
            return None  # state beyond its fields: it is no plain record
        try:
            values = list(v) if kind == "N" else [getattr(v, name) for name in fields]
        except AttributeError:  # a field never set
            return None
        return kind, list(facts["g"]), list(fields), values

    def rebuild(self, kind, named, fields, values, ref):
        """A record of the other side as an instance of our own class of that name, made
        without running its code (`tuple.__new__`, or `object.__new__` and its fields set;
        a mutable one is filled later, `fill`), or None when there is none here or its fields
        differ (then `ref` stands for it)."""
        cls = self.importable_class({"g": named})
        known = _record_kind(cls) if cls is not None else None
        if known is None or known[0] != kind:
            return None
        if known[1] is None:
            if not all(_field_name(name) and not _shadows(cls, name) for name in fields):
                return None
        elif known[1] != fields:
            return None
        if kind == "N":
            obj = tuple.__new__(cls, values)
        elif cls.__new__ is object.__new__:
            obj = object.__new__(cls)
            if values is not None:
                self.fill(obj, fields, values)
        elif cls is types.SimpleNamespace:
            obj = types.SimpleNamespace()
        else:
            return None
        if len(ref) > 1 and type(ref[1]) is int:
            self.releases.append([ref[1], 1])
        return obj

    def fill(self, obj, fields, values):
        """Set a rebuilt record's fields (checked by `rebuild`) to their decoded values."""
        for i, name in enumerate(fields):  # (zip's strict= is 3.10's: this runs on 3.8)
            object.__setattr__(obj, name, values[i])


_JUDGED = ("eq", "ne", "lt", "le", "gt", "ge", "hash", "contains", "len", "iter", "getitem", "bool")


def _plain_semantics(cls):
    """Whether `cls` compares, hashes, measures and iterates its instances as their data: each
    of those methods is tuple's or object's, or one that dataclasses generated (its code comes
    from no file, in a class decorated as a dataclass). A rebuilt record is judged by its own
    class's methods, not the trusted side's probes: the other side must not pick a class
    whose equality is loose."""
    for name in _JUDGED:
        dunder = "__%s__" % name
        for klass in cls.__mro__:
            attrs = getattr(klass, "__dict__", {})
            if dunder not in attrs:
                continue
            method = attrs[dunder]
            code = getattr(method, "__code__", None)
            generated = (  # by dataclasses, for the dataclass that holds it
                code is not None
                and code.co_filename == "<string>"
                and "__dataclass_fields__" in attrs
            )
            if not (klass in (tuple, object) or method is None or generated):
                return False
            break
    return True


def _record_kind(cls):
    """`_record_kind_of(cls)`, once per class."""
    known = _record_kinds.get(id(cls))
    if known is None or known[0] is not cls:
        known = (cls, _record_kind_of(cls))
        _record_kinds[id(cls)] = known
    return known[1]


_record_kinds = {}  # id(class) -> (class, its `_record_kind_of`)


def _record_kind_of(cls):
    """What class `cls`'s instances are when they are their fields and nothing else: ("N",
    fields) a named tuple, ("D", fields) a frozen dataclass, ("M", fields) a mutable one,
    ("M", None) a namespace (`argparse.Namespace`, `types.SimpleNamespace`: its fields are
    its instance's); else None."""
    if issubclass(cls, BaseException):
        return None
    if cls is types.SimpleNamespace or cls is getattr(sys.modules.get("argparse"), "Namespace", 0):
        return ("M", None)  # (their comparisons are those of their attributes)
    if not _plain_semantics(cls):
        return None
    if issubclass(cls, tuple):
        fields = getattr(cls, "_fields", None)
        if isinstance(fields, tuple) and all(type(f) is str for f in fields):
            return ("N", list(fields))
        return None
    if not any("__dataclass_fields__" in getattr(k, "__dict__", ()) for k in cls.__mro__):
        return None
    import dataclasses

    try:
        fields = [f.name for f in dataclasses.fields(cls)]
    except TypeError:
        return None
    frozen = getattr(getattr(cls, "__dataclass_params__", None), "frozen", False) is True
    return ("D" if frozen else "M", fields)
