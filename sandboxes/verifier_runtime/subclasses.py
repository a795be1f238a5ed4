"""The tests' classes derived from the tested code's, and the tests' changes to its classes (see
rpc.py, whose endpoints use these).

A tests' class statement deriving from mirrors of the solution's classes only (`class
Fake(solution.Base)`) is made in the tested process too ("subclass", `make`): derived from the
real classes, each of its functions, static and class methods and properties one that calls
the tests' own (a handed callback), its other attributes their values; the tests' class then
becomes that class's mirror (`Subclassing.subclassed`). `Fake(...)` makes the object there, so
the solution's methods run on it there (its `__init_subclass__`, abstract methods and
`isinstance` as in one process) and the tests' here, each reaching the other's through the
object; the real class's methods reached from it (inherited, or by `super()`) are asked for by
"inherited" (proxies.py `Inherited`, `_or_inherited`; `inherited` here).

The tests' `monkeypatch.setattr(solution.Base, "compute", fake)` sets a function of the class
there (it binds as a method), and their undo puts back what the class held (`class_attribute`).

Standard library only, Python >= 3.8.
"""

import copy
import enum
import sys
import types

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
rpc = _load("rpc")
codec = rpc.codec

# What a class statement puts in a class of its own: not sent to the one made there.
_CLASS_OWN = frozenset(
    ("__module__", "__qualname__", "__dict__", "__weakref__", "__doc__", "__orig_bases__")
)
_SLOTS = (types.MemberDescriptorType, types.GetSetDescriptorType)  # (its `__slots__` go)
_ABSENT = object()


# ---- the tests' side ---------------------------------------------------------------------------


class Subclassing:
    """The trusted endpoint's part (trusted.py)."""

    def subclassed(self, cls, keywords):
        """The tests' class statement made `cls` from mirrors of the tested code's classes:
        made there too, and `cls` becomes the mirror of what was made. Mixed with a base of
        ours, or derived from an exception's or a builtin value's mirror, it stays a local
        class (as before: such a test fails, calibration)."""
        bases = cls.__bases__
        if not all(
            isinstance(b, rpc.RemoteClassMeta)
            and b.__dict__.get("_rollouts_ep") is self
            and "_rollouts_base" not in vars(b)
            and not issubclass(b, BaseException)
            and not isinstance(b, enum.EnumMeta)
            for b in bases
        ):
            return
        entries = []
        for name, value in vars(cls).items():
            if name in _CLASS_OWN or isinstance(value, _SLOTS):
                continue
            if isinstance(value, types.FunctionType):
                entries.append([name, "f", value])
            elif isinstance(value, (staticmethod, classmethod)):
                kind = "s" if isinstance(value, staticmethod) else "c"
                entries.append([name, kind, value.__func__])
            elif isinstance(value, property):
                entries.append([name, "p", value.fget, value.fset, value.fdel])
            else:
                entries.append([name, "v", _copied(value)])
        keywords = {k: _copied(v) for k, v in keywords.items()}
        known = set(self.mirrors)
        made = self.request(
            "subclass", cls.__name__, cls.__qualname__, cls.__module__, list(bases), entries,
            keywords,
        )  # fmt: skip
        # A class made for this: one the tested side had sent before (the base's own, whose
        # objects the tests have) would make its objects ours, judged by our methods.
        oid = made.__dict__.get("_rollouts_oid") if isinstance(made, rpc.RemoteClassMeta) else None
        if (
            oid is None
            or oid in known
            or made.__dict__.get("_rollouts_ep") is not self
            or not all(issubclass(made, b) for b in bases)
            or (made.__name__, made.__qualname__) != (cls.__name__, cls.__qualname__)
        ):
            raise rpc.ProtocolError("a subclass answered with another class")
        self.mirrors[oid] = cls
        for name, value in (("_rollouts_ep", self), ("_rollouts_oid", oid)):
            type.__setattr__(cls, name, value)
        type.__setattr__(cls, "_rollouts_subclass", True)
        rpc.proxies.inherit(cls)


def _copied(value):
    """A class statement's value as sent: a container a copy (with its plain items, copies
    too), so what the tested side's code does to it (`__init_subclass__`) comes back to the
    copy, not to the tests' class body, which may hold their expected values."""
    if type(value) in (list, dict, set):
        return copy.deepcopy(value) if codec.plain_data(value) else copy.copy(value)
    return value


# ---- the tested side ---------------------------------------------------------------------------


def make(name, qualname, module, bases, entries, keywords):
    """The tests' class `name` made here, derived from our classes `bases` ("subclass")."""
    if not (
        isinstance(name, str)
        and isinstance(qualname, str)
        and isinstance(module, str)
        and bases
        and all(isinstance(b, type) and not isinstance(b, rpc.RemoteClassMeta) for b in bases)
        and all(isinstance(e, list) and len(e) >= 3 and isinstance(e[0], str) for e in entries)
        and isinstance(keywords, dict)
        and all(isinstance(k, str) for k in keywords)
    ):
        raise rpc.ProtocolError("subclass")
    namespace = {"__module__": module, "__qualname__": qualname}
    for entry in entries:
        key, kind = entry[0], entry[1]
        if kind == "f":
            namespace[key] = calling(entry[2])
        elif kind == "s":
            namespace[key] = staticmethod(calling(entry[2]))
        elif kind == "c":
            namespace[key] = classmethod(calling(entry[2]))
        elif kind == "p" and len(entry) == 5:
            namespace[key] = property(*(None if f is None else calling(f) for f in entry[2:]))
        elif kind == "v":
            namespace[key] = entry[2]
        else:
            raise rpc.ProtocolError("subclass entry")
    return types.new_class(
        name, tuple(bases), kwds=keywords, exec_body=lambda ns: ns.update(namespace)
    )


def inherited(cls, name, subject, pos, kw):
    """Our class `cls`'s attribute `name` as found from it (its MRO), bound to `subject` (an
    object of a tests' subclass, or the subclass itself: `super()` in a classmethod), called
    with `pos` and `kw`, or its value where `pos` is None (a property)."""
    of_class = isinstance(subject, type)
    if not (
        isinstance(cls, type)
        and isinstance(name, str)
        and (issubclass(subject, cls) if of_class else isinstance(subject, cls))
    ):
        raise rpc.ProtocolError("inherited")
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            break
    else:
        raise AttributeError(name)
    if hasattr(type(found), "__get__"):
        found = found.__get__(None, subject) if of_class else found.__get__(subject, type(subject))
    return found if pos is None else found(*pos, **dict(kw))


def class_attribute(originals, op, cls, name, value=None):
    """The tests set or delete attribute `name` of our class `cls` (`monkeypatch.setattr(Base,
    "compute", fake)`, `mock.patch.object`): their function set there is a function of the
    class, so it binds as a method (a proxy would not); where they delete a name, what the
    class held before they first set it comes back (monkeypatch's undo deletes a name our
    mirror's own dictionary lacks, which would take the method away for good). `originals`:
    (id(class), name) -> (class, what it held)."""
    key = (id(cls), name)
    if key not in originals:
        originals[key] = (cls, cls.__dict__.get(name, _ABSENT))
    original = originals[key][1]
    if op == "setattr":
        if isinstance(value, rpc.RemoteObject) and _plain_function(value):
            value = calling(value)
        setattr(cls, name, value)
        return None
    del originals[key]
    if original is _ABSENT:
        delattr(cls, name)
    else:
        setattr(cls, name, original)
    return None


def _plain_function(proxy):
    """Whether `proxy` stands for a plain Python function of the tests (its class `function`,
    its parameters told): one that binds as a method where a class holds it."""
    cls = type(proxy)
    return (
        cls.__qualname__ == "function"
        and cls.__module__ == "builtins"
        and "_rollouts_parameters" in proxy.__dict__
    )


def calling(fn):
    """A function of a class made here that calls the tests' `fn` (a proxy) with its arguments."""

    def method(*args, **kwargs):
        return fn(*args, **kwargs)

    for attr in ("__name__", "__qualname__", "__doc__"):
        value = fn.__dict__.get(attr)
        if isinstance(value, str):
            setattr(method, attr, value)
    method.__signature__ = getattr(fn, "__signature__", None)  # (theirs, as its reference told)
    return method
