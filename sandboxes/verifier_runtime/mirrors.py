"""Classes across the boundary: what a class node says of a class, the mirror class made of
one, the other side's classes that are ours by name, and exceptions both ways (see rpc.py,
whose Endpoint this is a part of).

Exceptions of the standard library or of installed packages become instances of our own
class of that name where it is imported here (made from decoded values, never by running
what the other side sent); other exceptions become mirror classes derived from their nearest
such exception or builtin one, so no exception from the tested code can be one that a test
runner treats as a skip, an exit or an interrupt (`_RUNNER_PACKAGES`; `PeerExit` for
SystemExit). What stays a mirror although it is the standard library's or a package's goes
to `fidelity_gap`. An exception that crosses back to the side that made it is that side's own
object again: a mirror by its id, as any proxy, and a copy made of our own class by the id of
the original, which its sender keeps while the copy lives (`Mirrors._copied`).

Standard library only, Python >= 3.8.
"""

import builtins
import os
import sys
import types

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)


codec = _load("codec")
proxies = _load("proxies")
iterators = _load("iterators")
based = _load("based")
ProtocolError = codec.ProtocolError
PeerExit = proxies.PeerExit
RemoteObject = proxies.RemoteObject
RemoteClassMeta = proxies.RemoteClassMeta
_qualified = proxies.qualified

TEXT_CAP = 8 << 10  # an exception's text, a docstring

# Exceptions that may be raised here as themselves when the other side raised them.
SAFE_EXCEPTIONS = {
    name: cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, Exception)
}


class Mirrors:
    """The classes and exceptions part of an endpoint (rpc.Endpoint)."""

    describes_descriptors = False  # (proxies.DESCRIPTOR_METHODS: the tested side's only)

    def class_node(self, cls, named=False):
        """["C", oid, meta] for a class: its names and documentation (where the other side may
        read `__doc__`: the tests' is not the tested code's to read), its non-builtin bases,
        for exception classes the nearest builtin exception it derives from, the special
        methods it has ("s") and those it sets to None ("off"), whether it is hashable ("h"),
        the abstract base classes it is a
        subclass of ("a"), and where it can be imported from ("g": a module and a qualified
        name, when it is no class of the workspace; "i" when that module is of the standard
        library or an installed package), so the receiver may use its own class of that name.
        `named`: the class is sent as a value (not only described as some object's class)."""
        bases = [self.class_node(b) for b in cls.__bases__ if b.__module__ != "builtins"]
        meta = dict(self._class_facts(cls), b=bases)
        return ["C", self.export(cls, value=named), meta]

    def _class_facts(self, cls):
        known = self.facts.get(id(cls))
        if known is not None and known[0] is cls:
            return known[1]
        builtin_exc = None
        if issubclass(cls, BaseException):
            for base in cls.__mro__:
                if base.__module__ == "builtins":
                    builtin_exc = base.__name__
                    break
        doc = cls.__dict__.get("__doc__") if self.allowed_name("__doc__") else None
        facts = {
            "n": cls.__name__,
            "q": getattr(cls, "__qualname__", cls.__name__),
            "m": getattr(cls, "__module__", "?"),
            "d": _cap(doc) if isinstance(doc, str) else None,
            "x": builtin_exc,
            "s": proxies.special_methods(cls, self.describes_descriptors),
            "h": proxies.hashable(cls),
            "a": proxies.abcs_of(cls),
            "f": _dataclass_fields(cls),
        }
        off = proxies.turned_off(cls)
        if off:
            facts["off"] = off
        if iterators.iterates_itself(cls):
            facts["I"] = 1
        inherited = _methods_of(cls) if self.allowed_name("_") else None
        if inherited:  # (the tested side's: the tests' method names are not its to read)
            facts["M"] = inherited
        facts.update(based.facts(cls))
        named = None if self._defined_here(cls) else _qualified(cls)
        if named:
            facts["g"] = named
            if _installed(named[0]):
                facts["i"] = 1
        self.facts[id(cls)] = (cls, facts)
        return facts

    def _mirrored(self, meta, why):
        """Tell `fidelity_gap` (once) of a mirror standing for a class of the standard library
        or an installed package (builtin types aside: their mirrors are all there is)."""
        named = meta.get("g") if isinstance(meta, dict) and meta.get("i") else None
        if not (isinstance(named, list) and len(named) == 2) or named[0] == "builtins":
            return
        key = (str(named[0]), str(named[1]))
        if key not in self.gaps:
            self.gaps.add(key)
            self.fidelity_gap(key[0], key[1], why)

    def fidelity_gap(self, module, qualname, why):
        """A value of the other side's class `module.qualname` (of the standard library or an
        installed package, not the workspace's) arrived as a mirror, which is not what it is
        (`isinstance` with the real class fails): the trusted side records it for the grade's
        calibration. Called once per class."""

    def class_value(self, node):
        """A class sent as a value: our own class of that name where it is imported here
        (so `except ValueError` and `isinstance(x, OrderedDict)` work), else its mirror."""
        meta = node[2] if isinstance(node, list) and len(node) == 3 else None
        named = meta.get("g") if isinstance(meta, dict) else None
        if isinstance(named, list) and len(named) == 2:
            found = _lookup(str(named[0]), str(named[1]))
            if isinstance(found, type) and not isinstance(found, RemoteClassMeta):
                self.releases.append([node[1], 1])
                return found
        return self.mirror(node)

    def mirror(self, node):
        """The local mirror class of a class of the other side (made once per class)."""
        if not (isinstance(node, list) and len(node) == 3 and node[0] == "C"):
            raise ProtocolError("class node")
        oid, meta = node[1], node[2]
        cls = self.mirrors.get(oid)
        if cls is not None:
            return cls
        self.making += 1  # (no class statement: `subclassed` is not told of these)
        try:
            return self._mirror(oid, meta, node)
        finally:
            self.making -= 1

    def _mirror(self, oid, meta, node):
        if type(oid) is not int or not isinstance(meta, dict):
            raise ProtocolError("class node")
        bases = [self._base(b) for b in meta.get("b") or []]
        name, qualname, module = str(meta.get("n")), str(meta.get("q")), str(meta.get("m"))
        doc = meta.get("d")
        self.heard_text(doc)
        names = {
            "__module__": module,
            "__qualname__": qualname,
            "__doc__": doc if isinstance(doc, str) else None,
        }
        cls = based.make(meta, bases, dict(names)) if meta.get("x") is None else None
        if cls is not None:  # a subclass of a builtin value type, or an enum class
            return self._made(cls, oid, meta)
        builtin = self.exception_base(meta.get("x"))
        if builtin is not None and not any(issubclass(b, builtin) for b in bases):
            bases.append(builtin)
        if not any(issubclass(b, RemoteObject) for b in bases):
            # After a base of _DERIVED (whose own __new__ must make the proxy), else first.
            derived = any(_qualified(b) in _DERIVED for b in bases)
            bases.insert(len(bases) if derived else 0, RemoteObject)
        specials = meta.get("s")
        specials = set(specials) if isinstance(specials, list) else set()
        namespace = dict(names)
        off = meta.get("off")
        off = set(off) if isinstance(off, list) else ()
        namespace.update(proxies.mirror_namespace(specials, meta.get("h") is not False, bases, off))
        spec = self.exports.get(meta.get("S")) if self.allowed_name("_") else None
        if isinstance(spec, type):  # a tests' mock spec'd by our class (trusted.py)
            namespace["__class__"] = property(lambda proxy, spec=spec: spec)
        function = (module, qualname) == ("builtins", "function") and meta.get("x") is None
        hidden = _hide_get(namespace, function)
        iterators.adapt(namespace, meta)
        fields = meta.get("f")
        if isinstance(fields, list):
            namespace["__dataclass_fields__"] = proxies.dataclass_fields(fields)
        for base in bases:
            if _qualified(base) in _DERIVED:  # its methods are the real object's, not the base's
                namespace.update(_forwarded(base))
        methods = meta.get("M")
        if isinstance(methods, list):  # (proxies.inherit: for a subclass of the tests')
            namespace["_rollouts_methods"] = [
                (m[0], m[1])
                for m in methods
                if isinstance(m, list) and len(m) == 2 and _inheritable(m[0]) and m[1] in ("m", "p")
            ]
        try:
            cls = (_HiddenGetMeta if hidden else RemoteClassMeta)(name, tuple(bases), namespace)
        except TypeError:  # an MRO the local bases cannot form: keep what matters
            fallback = (RemoteObject,) + ((builtin,) if builtin is not None else ())
            namespace = dict(namespace, **proxies.mirror_namespace(specials, True, fallback, off))
            hidden = _hide_get(namespace, function)
            iterators.adapt(namespace, meta)
            cls = (_HiddenGetMeta if hidden else RemoteClassMeta)(name, fallback, namespace)
        return self._made(cls, oid, meta)

    def subclassed(self, cls, keywords):
        """A class statement of ours derived from mirror class(es) made `cls`: by default an
        ordinary local class (the trusted side makes the tests' ones there too)."""

    def _made(self, cls, oid, meta):
        """Mirror class `cls` of the other side's class `oid`, registered."""
        type.__setattr__(cls, "_rollouts_ep", self)
        type.__setattr__(cls, "_rollouts_oid", oid)
        abcs = meta.get("a")
        if isinstance(abcs, list):
            proxies.register_abcs(cls, abcs)
        self.mirrors[oid] = cls
        return cls

    def _base(self, node):
        """A mirror's base for the other side's class `node`: our own exception class of that
        name where we would rebuild its instances (so `except json.JSONDecodeError` catches
        the workspace's subclass of it too), else its mirror."""
        meta = node[2] if isinstance(node, list) and len(node) == 3 else None
        if isinstance(meta, dict) and meta.get("x") is not None:
            cls = self.importable_class(meta)
            if cls is not None and issubclass(cls, Exception) and not _refused(cls):
                return cls
        enum_base = based.enum_base(meta)  # the enum module's own: an enum's members are Enums
        if enum_base is not None:
            return enum_base
        if isinstance(meta, dict) and tuple(meta.get("g") or ()) in _DERIVED:
            cls = self.importable_class(meta)  # fidelity's (codec.py's value types)
            if cls is not None:
                return cls
        return self.mirror(node)

    def importable_class(self, meta):
        """Our own class named by a class node's "g" when it is one of the standard library or
        an installed package, already imported here (nothing is imported because the other
        side names it) and not the workspace's; else None."""
        named = meta.get("g") if isinstance(meta, dict) else None
        if not (isinstance(named, list) and len(named) == 2):
            return None
        module_name, qualname = named
        if not isinstance(module_name, str) or not isinstance(qualname, str):
            return None
        module = sys.modules.get(module_name)
        if module is None or not _installed(module_name) or self.is_own_module(module):
            return None
        found = _lookup(module_name, qualname)
        if not isinstance(found, type) or isinstance(found, RemoteClassMeta):
            return None
        return found if _qualified(found) == (module_name, qualname) else None

    def encode_exception(self, e, memo):
        if isinstance(e, RemoteObject) and e.__dict__.get("_rollouts_ep") is self:
            # The other side's own exception, raised on through our code (a callback's error
            # the solution let through): back as itself, so `pytest.raises(TheirError)` and
            # `except TheirError` catch it as in one process.
            memo.held.append(e)  # (alive until the message is sent: codec.Memo)
            return ["x", e.__dict__["_rollouts_oid"]]
        origin = self._origin(e)
        if origin is not None and (memo.op is None or self.shares_by_reference(memo.op)):
            # Our copy of an exception of the other side's (rebuilt as our own class): back
            # as the original, so `info.value is err`, `__cause__ is err` and contextlib's
            # `exc is value` hold as in one process. (Not in a probe, whose operands are
            # copies, as its shares are: trusted.py.)
            memo.held.append(e)
            return ["x", origin]
        encoder = self._reference_encoder(memo)
        try:
            args = [codec.leaf(a, memo, encoder) for a in e.args]
        except Exception:
            args = [_cap(repr(a)) for a in e.args]
        try:
            text = _cap(str(e))
        except Exception:
            text = "<unprintable %s>" % type(e).__name__
        # Its traceback stays here: the other side would only show it, and the tests' runner
        # matches `raises(match=...)` against an exception's notes too (pytest >= 8).
        node = self.class_node(type(e))
        attrs = []
        if node[2].get("i") and not _refused(type(e)):
            # The receiver may rebuild it: its attributes go too (those the other side may
            # read), as values or references, never its code.
            try:
                attrs = [
                    [name, codec.leaf(value, memo, encoder)]
                    for name, value in vars(e).items()
                    if self.allowed_name(name) and not name.startswith("__")
                ]
            except Exception:
                attrs = []
        return ["E", node, args, text, self.export(e), attrs, self._chain(e, memo, encoder)]

    def _chain(self, e, memo, encoder):
        """[cause, context, suppress] of exception `e` (`raise ... from`, `from None`, an
        error raised while handling another), one level: the exceptions in it go without
        their own."""
        if self.chaining:
            return None
        cause, context = e.__cause__, e.__context__
        # (`raise KeyError(key) from None`: no cause, the context suppressed, which the tests
        # may read: cachetools' `popitem` of an empty cache)
        if cause is None and context is None and not e.__suppress_context__:
            return None
        self.chaining = True
        try:
            return [
                None if cause is None else codec.leaf(cause, memo, encoder),
                None if context is None else codec.leaf(context, memo, encoder),
                bool(e.__suppress_context__),
            ]
        except Exception:
            return None
        finally:
            self.chaining = False

    def exception_base(self, name):
        """The local base of a mirrored exception class whose nearest builtin is `name`."""
        if name is None:
            return None
        if name == "SystemExit":
            return PeerExit
        return SAFE_EXCEPTIONS.get(name, Exception)

    def decode_exception(self, node, memo):
        if isinstance(node, list) and len(node) == 2 and node[0] == "x":
            return self._raised_back(node[1])
        if not (isinstance(node, list) and len(node) == 7 and node[0] == "E"):
            raise ProtocolError("exception node")
        _, class_node, raw_args, text, oid, raw_attrs, chain = node
        if not (isinstance(raw_args, list) and isinstance(raw_attrs, list) and type(oid) is int):
            raise ProtocolError("exception node")
        known = self.proxies.get(oid)
        if known is not None:
            self._count(oid)
            return known
        args = tuple(self.decode(a, memo) for a in raw_args)
        meta = class_node[2] if isinstance(class_node, list) and len(class_node) == 3 else {}
        if not isinstance(meta, dict):
            raise ProtocolError("exception class")
        builtin_name = meta.get("x")
        rebuilt = None
        if meta.get("m") == "builtins" and builtin_name in SAFE_EXCEPTIONS:
            cls = SAFE_EXCEPTIONS[builtin_name]
            try:
                rebuilt = cls(*args)
            except Exception:
                rebuilt = cls.__new__(cls)
                rebuilt.args = args
        elif meta.get("g") is not None:
            rebuilt = self._rebuilt_exception(meta, args, raw_attrs, memo)
        if rebuilt is not None:
            exc = rebuilt
            self._copied(exc, oid)
        else:
            if meta.get("m") == "builtins" and builtin_name == "SystemExit":
                cls = PeerExit
            else:
                cls = self.mirror(class_node)
                self._mirrored(meta, "an exception of it arrived as a mirror")
            exc = cls.__new__(cls)
            BaseException.__init__(exc, *args)
            object.__setattr__(exc, "_rollouts_text", str(text))
            if issubclass(cls, RemoteObject):
                object.__setattr__(exc, "_rollouts_ep", self)
                object.__setattr__(exc, "_rollouts_oid", oid)
                self._count(oid)
                self.proxies[oid] = exc
            else:
                self.releases.append([oid, 1])
        if chain is not None:
            self._set_chain(exc, chain, memo)
        return exc

    def _copied(self, exc, oid):
        """Remember that `exc` is our copy of the other side's exception `oid`, which the
        other side keeps (we release it once the copy is gone) so the copy can go back as it.
        An exception takes no weak reference: the copy's instance dictionary, which only the
        copy and this table hold, tells when the copy is gone (`sweep_copies`)."""
        copies = self.copies
        stale = copies.pop(id(exc), None)  # (a gone copy's, not swept yet: its id is free)
        if stale is None and len(copies) >= COPIES_KEPT:
            stale = copies.pop(next(iter(copies)))  # (the oldest crosses as a copy from now)
        if stale is not None:
            self.releases.append([stale[1], 1])
        copies[id(exc)] = (exc.__dict__, oid)

    def _origin(self, e):
        """The other side's id of the exception that `e` is our copy of, or None."""
        held = self.copies.get(id(e)) if self.copies else None
        if held is None or getattr(e, "__dict__", None) is not held[0]:
            return None
        return held[1]

    def sweep_copies(self):
        """Release the other side's exceptions whose copies here are gone (before a request:
        a gone copy is in no message from then on)."""
        copies = self.copies
        for key, count in _held_counts(copies):
            if count <= _HELD_BY_TABLE_ALONE:
                self.releases.append([copies.pop(key)[1], 1])

    def _raised_back(self, oid):
        """Our own exception, raised back through the other side's code. A runner's outcome
        (a test's skip, exit) is not: that is the tests' to raise, not the tested code's to
        hold and raise later."""
        exc = self.exports.get(oid) if type(oid) is int else None
        if not isinstance(exc, BaseException):
            raise ProtocolError("an exception raised back that is none of ours")
        if _refused(type(exc)):
            return RuntimeError("the other process raised a runner's %s" % type(exc).__name__)
        return exc

    def _set_chain(self, exc, chain, memo):
        if not (isinstance(chain, list) and len(chain) == 3 and type(chain[2]) is bool):
            raise ProtocolError("exception chain")
        cause, context = (None if x is None else self.decode(x, memo) for x in chain[:2])
        for name, value in (("__cause__", cause), ("__context__", context)):
            if isinstance(value, BaseException) and value is not exc and not _refused(type(value)):
                getattr(BaseException, name).__set__(exc, value)
        BaseException.__suppress_context__.__set__(exc, chain[2])

    def _rebuilt_exception(self, meta, args, raw_attrs, memo):
        """The other side's exception as an instance of our own class of that name, or None.
        Only for a class of the standard library or an installed package that is imported
        here and is no runner's outcome (`_refused`); made by its `__new__` from the decoded
        args, with the decoded attributes set after (its `__init__` never runs)."""
        cls = self.importable_class(meta)
        if cls is None or not issubclass(cls, Exception) or _refused(cls):
            return None
        try:
            exc = cls.__new__(cls, *args)
            exc.args = args
            for item in raw_attrs:
                name, value = item
                if _field_name(name) and not _shadows(cls, name):
                    exc.__dict__[name] = self.decode(value, memo)
        except (TypeError, ValueError, AttributeError):
            return None
        return exc if type(exc) is cls else None


# Classes of the standard library whose instances its C code type-checks, with no state of
# their own: a mirror of a class derived from one derives from the real one (so a datetime
# takes the solution's tzinfo), each of its public methods asked of the real object.
_DERIVED = frozenset({("datetime", "tzinfo")})


def _hide_get(namespace, function):
    """Whether mirror `namespace` has a `__get__` (a function's binds here, `_bind_as_a_function`;
    any other class's is its real one's, proxies.DESCRIPTOR_METHODS), which only the
    interpreter's lookup and the tests' own code find (proxies.no_get, `_HiddenGetMeta`): to
    `inspect` the proxy is still no routine nor method descriptor (pluggy must not take a
    solution's function or descriptor in a conftest for a hook)."""
    if function:
        namespace["__get__"] = _bind_as_a_function
    if namespace.get("__get__") is None:
        return False
    namespace["__getattribute__"] = proxies.no_get
    return True


def _bind_as_a_function(self, obj, owner=None):
    """`__get__` of the mirror of a Python function: where a class holds it (the other side's
    decorator on a method of ours, `@solution.logged def get(self, x)`, or a function set as
    a class attribute), it binds as a method, here, as a function does in one process: the
    object it is reached on is its first argument."""
    return self if obj is None else types.MethodType(self, obj)


class _HiddenGetMeta(RemoteClassMeta):
    """Metaclass of a mirror with a `__get__` (`_hide_get`): hidden from attribute lookups."""

    def __getattribute__(cls, name):
        if name == "__get__" and not proxies.tests_read(cls, sys._getframe(1)):
            raise AttributeError(name)
        return type.__getattribute__(cls, name)


def _forwarded(base):
    def forward(name):
        def method(self, *args, **kwargs):
            ep = self._rollouts_ep
            call = ep.method_call(self, name)  # (called at once: this is its call)
            return (call or ep.request("getattr", self, name))(*args, **kwargs)

        method.__name__ = method.__qualname__ = name
        return method

    return {name: forward(name) for name in vars(base) if not name.startswith("_")}


def _install_roots():
    """Folders of the standard library and of installed packages (not the tests', not the
    workspace's), resolved."""
    if "roots" not in _memo:
        import site
        import sysconfig

        paths = sysconfig.get_paths()
        roots = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        if hasattr(site, "getsitepackages"):
            roots += site.getsitepackages()
        _memo["roots"] = tuple(
            os.path.realpath(r) + os.sep for r in roots if isinstance(r, str) and r
        )
    return _memo["roots"]


_memo = {}


def _installed(module_name):
    """Whether imported module `module_name` is of the standard library or an installed
    package: built into the interpreter, or loaded from beneath `_install_roots`."""
    if module_name in sys.builtin_module_names:
        return True
    module = sys.modules.get(module_name)
    known = _installed_modules.get(module_name)
    if known is not None and known[0] is module:
        return known[1]
    path = getattr(module, "__file__", None)
    found = isinstance(path, str) and os.path.realpath(path).startswith(_install_roots())
    _installed_modules[module_name] = (module, found)
    return found


_installed_modules = {}  # module name -> (module, whether installed)


# Packages whose exceptions a runner or test framework treats as an outcome (skip, xfail, fail,
# exit, a debugger's quit, hypothesis's rejected example, a hook's error): the other side's
# never become ours, and stay mirrors derived from their nearest builtin exception.
_RUNNER_PACKAGES = frozenset(
    {
        "_pytest",
        "pytest",
        "pluggy",
        "unittest",
        "doctest",
        "bdb",
        "pdb",
        "nose",
        "nose2",
        "hypothesis",
        "twisted",
        "py",
    }
)


# Copies of the other side's exceptions whose originals it keeps for them (`_copied`): past
# this many, the oldest copy's original is released (and the copy crosses as a copy again).
COPIES_KEPT = 64


def _held_counts(copies):
    """[(key, references to the copy's dictionary)] of `copies` (`Mirrors.sweep_copies`)."""
    return [(key, sys.getrefcount(held[0])) for key, held in list(copies.items())]


# What `_held_counts` counts of a dictionary that only the table holds (measured, not assumed:
# the count includes the interpreter's own references, which differ by version).
_HELD_BY_TABLE_ALONE = _held_counts({0: ({}, 0)})[0][1]


def _refused(cls):
    return any(
        str(getattr(k, "__module__", "")).partition(".")[0] in _RUNNER_PACKAGES for k in cls.__mro__
    )


def _methods_of(cls):
    """The methods class `cls` itself defines that a subclass of the tests may inherit or reach
    by `super()` (`__init__`, public and private ones; not the special methods, mirrored on
    their own), for its mirror's `proxies.Inherited` descriptors."""
    out = []
    for name, value in vars(cls).items():
        if not _inheritable(name):
            continue
        if isinstance(value, (types.FunctionType, classmethod, staticmethod)):
            out.append([name, "m"])
        elif isinstance(value, property):
            out.append([name, "p"])  # (`super().label`: its value)
    return out


def _inheritable(name):
    return (
        isinstance(name, str)
        and name.isidentifier()
        and (name in ("__init__", "__post_init__") or not name.startswith("__"))
        and not name.startswith("_rollouts")
    )


def _dataclass_fields(cls):
    """[[name, init], ...] of a dataclass's fields (its mirror answers `dataclasses.fields`,
    `asdict` and `replace` with them), else None."""
    if not any("__dataclass_fields__" in getattr(k, "__dict__", ()) for k in cls.__mro__):
        return None
    import dataclasses

    try:
        return [[f.name, bool(f.init)] for f in dataclasses.fields(cls)]
    except TypeError:
        return None


def _field_name(name):
    """An attribute name that may be set on a rebuilt exception or namespace: no special one."""
    return isinstance(name, str) and name.isidentifier() and not name.startswith("__")


def _shadows(cls, name):
    """Whether an instance attribute `name` would hide a method of `cls` (which the runner or
    the tests would then call: the other side's object, run on its side)."""
    return callable(getattr(cls, name, None))


def _lookup(module_name, qualname):
    """The object `qualname` of the already imported module `module_name`, or None."""
    found = sys.modules.get(module_name)
    for part in qualname.split(".") if qualname else ():
        if found is None or part.startswith("__"):
            return None
        found = getattr(found, part, None)
    return found


def _cap(text):
    return (
        text
        if len(text) <= TEXT_CAP
        else text[: TEXT_CAP // 2] + "\n[...]\n" + text[-TEXT_CAP // 2 :]
    )
