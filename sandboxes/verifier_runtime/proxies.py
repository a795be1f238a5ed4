"""What the other process's objects look like here: mirror classes and their proxies, and the
operators a request may ask the serving side to apply (see rpc.py for the channel).

A proxy (`RemoteObject`, or an instance of a mirror class derived from it) forwards attribute
access, calls and operators to its endpoint; a mirror class (`RemoteClassMeta`) stands for a
class of the other side, so `isinstance` and `type(x) is cls` hold for its proxies. Binary
operators are served one-sided (`OPERATORS`): NotImplemented comes back and the asking side's
interpreter tries the reflected method itself.

Standard library only, Python >= 3.8.
"""

import sys
import types


class PeerExit(SystemExit):
    """A SystemExit raised by the other side. Tests that catch it see its code; an interpreter
    about to exit because of it (no Python frame asks: the exit handler reads `code`) gets 1,
    so code under test cannot end the tests' process with a success status."""

    on_escape = None  # set by the trusted side: records the attempt

    @property
    def code(self):
        try:
            sys._getframe(1)
        except ValueError:
            if PeerExit.on_escape is not None:
                PeerExit.on_escape(self)
            return 1
        return self.args[0] if len(self.args) == 1 else (self.args or None)


class AsReference:
    """An answer that travels as a reference where a name would do (an imported module)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


_GenericAlias = getattr(types, "GenericAlias", None)  # (Python 3.9)


def _of_mirrors(bases):
    """The endpoint of `bases` where they are all mirrors of one endpoint's classes."""
    eps = {b.__dict__.get("_rollouts_ep") for b in bases if isinstance(b, RemoteClassMeta)}
    if len(eps) != 1 or not all(isinstance(b, RemoteClassMeta) for b in bases):
        return None
    return eps.pop()


class RemoteClassMeta(type):
    """Metaclass of mirror classes: attribute access, calls and item access on the class go to
    the real class on the other side."""

    def __new__(mcls, name, bases, namespace, **kwargs):
        # A class statement's keywords (`class Fake(Base, tag="x")`) are for the real class's
        # `__init_subclass__` (subclasses.py), not the mirror's (object's).
        if kwargs and _of_mirrors(bases):
            kwargs = {}
        return super().__new__(mcls, name, bases, namespace, **kwargs)

    def __init__(cls, name, bases, namespace, **kwargs):
        super().__init__(name, bases, namespace)
        # A class statement deriving from mirrors (`class Fake(solution.Base)` in the tests):
        # the endpoint may make it there too (subclasses.py).
        ep = _of_mirrors(bases)
        if ep is not None and not ep.making:
            ep.subclassed(cls, kwargs)

    def __dir__(cls):
        # The real class's names (`mock.Mock(spec=solution.Base)` and `create_autospec` take
        # them from dir(); munch's tests parametrize by `dir(Munch)`), not the mirror's own.
        ep = cls.__dict__.get("_rollouts_ep")
        if ep is not None:
            try:
                return sorted(ep.request("op", "dir", cls))
            except PermissionError:  # a class the tests did not hand over: what is here
                pass
        return sorted(n for n in super().__dir__() if not n.startswith("_rollouts_"))

    def __call__(cls, *args, **kwargs):
        ep = cls.__dict__.get("_rollouts_ep")
        if ep is None:  # a subclass defined locally: an ordinary class
            return super().__call__(*args, **kwargs)
        return ep.request("call", cls, args, tuple(kwargs.items()))

    def __getattr__(cls, name):
        ep = cls.__dict__.get("_rollouts_ep")
        if ep is None or not remote_name(name):
            raise AttributeError(name)
        return ep.request("getattr", cls, name)

    def __setattr__(cls, name, value):
        if (
            "_rollouts_ep" not in cls.__dict__
            or name.startswith("__")
            or name.startswith("_rollouts_")
        ):
            super().__setattr__(name, value)
            return
        if cls.__dict__.get("_rollouts_subclass"):  # the tests' own class: theirs, and there
            super().__setattr__(name, value)
        cls._rollouts_ep.request("setattr", cls, name, value)

    def __delattr__(cls, name):
        if "_rollouts_ep" not in cls.__dict__ or name.startswith("__"):
            super().__delattr__(name)
            return
        if cls.__dict__.get("_rollouts_subclass") and name in cls.__dict__:
            super().__delattr__(name)
        cls._rollouts_ep.request("delattr", cls, name)

    def __bool__(cls):  # a class is true (without this, truth would ask for its len)
        return True

    def __getitem__(cls, key):
        if _GenericAlias is not None and any(
            k.__module__ == "typing" and k.__qualname__ == "Generic" for k in cls.__mro__[1:]
        ):  # `Repo[int]`: a base (its mro entry is the mirror) or an annotation, made here
            return _GenericAlias(cls, key if isinstance(key, tuple) else (key,))
        return cls._rollouts_ep.request("op", "getitem", cls, key)

    def __iter__(cls):
        return cls._rollouts_ep.request("op", "iter", cls)

    def __len__(cls):
        return cls._rollouts_ep.request("op", "len", cls)

    def __contains__(cls, item):
        return cls._rollouts_ep.request("op", "contains", cls, item)

    def __repr__(cls):
        return "<class '%s.%s' (in the other process)>" % (cls.__module__, cls.__qualname__)


# Attributes answered here, never asked of the other side (the interpreter and exception
# machinery probe or set them).
LOCAL_DUNDERS = frozenset(
    {
        "__notes__",
        "__traceback__",
        "__cause__",
        "__context__",
        "__suppress_context__",
        "__dict__",
        "__class__",
        "__weakref__",
        "__slots__",
        "__orig_bases__",
        "__mro_entries__",
        "__set_name__",
        "__init_subclass__",
        "__class_getitem__",
        "__getstate__",
        "__reduce__",
        "__reduce_ex__",
    }
)


# The only special ("dunder") attributes asked of the other side: plain names and data. Every
# other one is answered here, as absent unless the mirror class has it: the interpreter,
# `inspect`, `functools`, `dataclasses` and test runners decide what an object is by them
# (`__get__` and `__signature__` make a routine with any signature, `__wrapped__` another
# object, `__code__` a function), so the other side must not be the one to say. Only the
# tests' own code reading `__wrapped__` (`assert wrapper.__wrapped__ is fn`) asks it, as it
# would any attribute; `inspect.unwrap` and the runners' lookups do not (`read_by_tests`).
REMOTE_DUNDERS = frozenset({"__name__", "__qualname__", "__doc__", "__members__", "__match_args__"})


def remote_name(name):
    """Whether attribute `name` of a proxy or mirror class is asked of the other side."""
    if name.startswith("_rollouts_"):
        return False
    if name.startswith("__") and name.endswith("__"):
        return name in REMOTE_DUNDERS
    return True


def _copy(self):
    return self._rollouts_ep.request("op", "copy", self)


class _ClassOnly:
    """`RemoteObject.__copy__`: `copy.copy`, which looks it up on the class, copies the object
    on the other side; the proxy itself has none unless its real class has one (a mirror's
    `SPECIALS`). `itertools.tee` copies an iterator that has `__copy__` instead of buffering
    it, and a generator or a map, which have none, cannot be copied that way (a solution's
    tee of the tests' generator raised; of a map, the second copy came out empty)."""

    def __get__(self, obj, cls=None):
        if obj is not None:
            raise AttributeError("__copy__")
        return _copy


class _Signature:
    """A routine proxy's `__signature__`: built here from the parameters its reference told
    (references.py `_parameters`), None for any other proxy and on the class, where `inspect`
    then answers as it did."""

    def __get__(self, obj, owner=None):
        facts = None if obj is None else own(obj).get("_rollouts_parameters")
        if facts is None:
            return None
        import inspect

        empty, untold = inspect.Parameter.empty, _Untold()

        def default(told):
            if not told:
                return untold
            return tuple(told[0]) if len(told) == 2 else told[0]

        parameters = [
            inspect.Parameter(
                x[0], inspect._ParameterKind(x[1]), default=empty if len(x) == 2 else default(x[2])
            )
            for x in facts
        ]
        try:
            return inspect.Signature(parameters)
        except (TypeError, ValueError):
            return None


class _CoroutineMark:
    """What `asyncio.iscoroutinefunction` (`_is_coroutine`) and, from Python 3.12,
    `inspect.iscoroutinefunction` (`_is_coroutine_marker`) look for: a proxy of a coroutine
    function has it (its reference told), any other proxy has not."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __get__(self, obj, owner=None):
        if obj is None or not own(obj).get("_rollouts_coroutine"):
            raise AttributeError(self.name)
        import importlib

        mark = getattr(importlib.import_module(self.module), self.name, None)
        if mark is None:
            raise AttributeError(self.name)
        return mark


class Inherited:
    """A method the real class defines, on its mirror, for the tests' subclasses of it
    (subclasses.py): reached from an object of one (inherited, or by `super()`), it runs the real
    class's method on the real object there. Where no class of the tests' defines that name
    (so it was not reached by `super()` from their own), it is read on the real object as any
    proxy's attribute, its instance dictionary first: a name the object holds itself hides
    the method, as in one process (one reached by `super()` from a tests' method of another
    name reads it too). On the mirror's own proxies it is absent here, so they ask for the
    attribute as before (`RemoteObject.__getattr__`)."""

    def __init__(self, owner, name, value=False):
        self.owner, self.name, self.value = owner, name, value  # value: a property's

    def __get__(self, obj, owner=None):
        subject = obj if obj is not None else owner  # (`super()` in a classmethod: the class)
        of = type(obj) if obj is not None else owner
        if obj is None and not self.value and not remote_name(self.name):
            # `Base.__init__(self, ...)` in a tests' subclass's own `__init__` (cachetools'
            # `TTLCache.__init__(self, maxsize, ...)`): the class's special name, which no
            # getattr of the other side answers, unbound; what it is called on says whose.
            return self._unbound()
        if not isinstance(of, RemoteClassMeta) or not of._rollouts_subclass:
            raise AttributeError(self.name)
        ep, mirror, name = self.owner._rollouts_ep, self.owner, self.name
        if obj is not None and not self.value and remote_name(name) and not overridden(of, name):
            # Found on the object, no class of the tests' defining it: read there as any
            # proxy's attribute, so what its instance dictionary holds comes first, as in one
            # process (cachetools' `self.getsizeof = getsizeof` over the class's static method).
            call = ep.method_call(obj, name, sys._getframe(1))
            return call if call is not None else ep.request("getattr", obj, name)
        if self.value:
            return ep.request("inherited", mirror, name, subject, None, ())

        def inherited(*args, **kwargs):
            return ep.request("inherited", mirror, name, subject, args, tuple(kwargs.items()))

        inherited.__name__ = inherited.__qualname__ = name
        return inherited

    def _unbound(self):
        ep, mirror, name = self.owner._rollouts_ep, self.owner, self.name

        def unbound(subject, *args, **kwargs):
            # (an object of the real class or of a tests' subclass of it: there, its object)
            if not isinstance(subject, mirror) or "_rollouts_ep" not in type(subject).__dict__:
                raise TypeError(
                    "%s.%s needs an object of its class, not %s"
                    % (mirror.__qualname__, name, type(subject).__name__)
                )
            return ep.request("inherited", mirror, name, subject, args, tuple(kwargs.items()))

        unbound.__name__ = name
        unbound.__qualname__ = "%s.%s" % (mirror.__qualname__, name)
        return unbound


def inherit(cls):
    """Give the mirror classes `cls` derives from their real classes' methods (`Inherited`)."""
    for klass in cls.__mro__[1:]:
        names = vars(klass).get("_rollouts_methods")
        if (
            isinstance(klass, RemoteClassMeta)
            and names
            and not vars(klass).get("_rollouts_inherited")
        ):
            for name, kind in names:
                if name not in vars(klass):
                    type.__setattr__(klass, name, Inherited(klass, name, kind == "p"))
            type.__setattr__(klass, "_rollouts_inherited", True)


class _Untold:
    """The default of a parameter the other side did not tell (the tests' own)."""

    def __repr__(self):
        return "<default>"


class _Instance:
    """(Where a proxy's own instance dictionary comes from: `_own_dictionary`.)"""


_own_dictionary = _Instance.__dict__["__dict__"].__get__


def own(obj):
    """The instance dictionary of `obj`, a proxy's its own `_rollouts_` state (its `__dict__`
    is the real object's to code other than ours, `_InstanceDictionaryOf`, at some cost)."""
    # (by its type: a tests' mock spec'd by a mirror class says it is one, `__class__`)
    return _own_dictionary(obj) if issubclass(type(obj), _Instance) else obj.__dict__


class InstanceDictionary(dict):
    """A proxy's `__dict__` and `vars()` as code other than ours reads them: a copy of the real
    object's instance dictionary, asked of the other side at each read (`vars(p) == {"x": 1}`
    of the solution's object), whose changes go there to that dictionary itself, as no
    descriptor sees them (a solution's `cached_property` keeping `obj.__dict__[name] = value`
    on the tests' object, a `Typed.__set__` its checked value). What the tested side reads and
    changes of the tests' object is what it may of its attributes (trusted.py
    `instance_dictionary`, `_dictionary_writable`)."""

    __slots__ = ("_owner",)

    def __init__(self, owner, items):
        dict.__init__(self, items)
        self._owner = owner

    def __setitem__(self, name, value):
        self._owner._rollouts_ep.request("op", "dictset", self._owner, name, value)
        dict.__setitem__(self, name, value)

    def __delitem__(self, name):
        self._owner._rollouts_ep.request("op", "dictdel", self._owner, name)
        dict.__delitem__(self, name)

    def update(self, *args, **kwargs):
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name, default=None):
        if name not in self:
            self[name] = default
        return dict.__getitem__(self, name)

    def pop(self, name, *default):
        if name not in self:
            return dict.pop(self, name, *default)
        value = dict.__getitem__(self, name)
        del self[name]
        return value

    def popitem(self):
        name, value = dict.popitem(self)
        dict.__setitem__(self, name, value)
        del self[name]
        return name, value

    def clear(self):
        for name in list(self):
            del self[name]

    def __ior__(self, other):
        self.update(other)
        return self


class _InstanceDictionaryOf:
    """`RemoteObject.__dict__`: `InstanceDictionary` for code other than ours (the runtime's
    modules, "_rollouts_*", keep their state in the proxy's own)."""

    def __get__(self, obj, owner=None):
        own = _own_dictionary(obj)
        ep = own.get("_rollouts_ep")
        if ep is None or _ours(sys._getframe(1)):  # (a getter always has a caller)
            return own
        return InstanceDictionary(obj, ep.request("op", "vars", obj))

    def __set__(self, obj, value):
        raise AttributeError("__dict__ of an object of the other process")


def _ours(frame):
    if frame is not None and frame.f_code is no_get.__code__:  # (its caller is the reader)
        frame = frame.f_back
    return frame is not None and str(frame.f_globals.get("__name__")).startswith("_rollouts_")


def no_get(self, name):
    """`__getattribute__` of a mirror with a `__get__` (mirrors.py `_hide_get`): there for the
    tests' own code (`hasattr(d, "__get__")`, `d.__get__(obj, Owner)` in a descriptor's test),
    absent for any other (`inspect`, pluggy)."""
    if name == "__get__" and not tests_read(self, sys._getframe(1)):
        raise AttributeError(name)
    return object.__getattribute__(self, name)


def tests_read(proxy_or_mirror, frame):
    """Whether `frame`, reading an attribute of a proxy or mirror class, is the tests' own."""
    if isinstance(proxy_or_mirror, type):
        ep = type.__getattribute__(proxy_or_mirror, "__dict__").get("_rollouts_ep")
    else:
        ep = _own_dictionary(proxy_or_mirror).get("_rollouts_ep")
    return ep is not None and ep.read_by_tests(frame)


class RemoteObject(_Instance):
    """Base of every mirror class: a proxy of an object in the other process. It defines only
    what every object has (attributes, text, comparisons, hashing, copies); the mirror class
    adds the special methods its real class has (`SPECIALS`), and no others, so `len()`,
    `iter()`, `callable()` and the abstract base classes of `collections.abc` answer for a
    proxy as for the object itself."""

    _rollouts_subclass = False  # (True on a tests' class made there too: subclasses.py)
    __dict__ = _InstanceDictionaryOf()
    __signature__ = _Signature()
    _is_coroutine = _CoroutineMark("asyncio.coroutines", "_is_coroutine")
    _is_coroutine_marker = _CoroutineMark("inspect", "_is_coroutine_mark")

    def __getattr__(self, name):
        if not remote_name(name):
            if name != "__wrapped__" or not self._rollouts_ep.read_by_tests(sys._getframe(1)):
                raise AttributeError(name)
            return self._rollouts_ep.request("getattr", self, name)
        ep = self._rollouts_ep
        call = ep.method_call(self, name, sys._getframe(1))
        return call if call is not None else ep.request("getattr", self, name)

    def __setattr__(self, name, value):
        if name.startswith("__") or name.startswith("_rollouts_"):
            object.__setattr__(self, name, value)
        else:
            self._rollouts_ep.request("setattr", self, name, value)

    def __delattr__(self, name):
        if name.startswith("__") or name.startswith("_rollouts_"):
            object.__delattr__(self, name)
        else:
            self._rollouts_ep.request("delattr", self, name)

    def __del__(self):
        try:
            self._rollouts_ep.dropped(self)
        except Exception:
            pass

    def __str__(self):
        text = own(self).get("_rollouts_text")
        if text is not None:
            return text
        return self._rollouts_ep.request("op", "str", self)

    def __repr__(self):
        text = own(self).get("_rollouts_repr")
        if text is not None:
            return text
        return self._rollouts_ep.request("op", "repr", self)

    def __eq__(self, other):
        return self._rollouts_ep.compare(self, "eq", other)

    def __ne__(self, other):
        return self._rollouts_ep.compare(self, "ne", other)

    def __lt__(self, other):
        return self._rollouts_ep.compare(self, "lt", other)

    def __le__(self, other):
        return self._rollouts_ep.compare(self, "le", other)

    def __gt__(self, other):
        return self._rollouts_ep.compare(self, "gt", other)

    def __ge__(self, other):
        return self._rollouts_ep.compare(self, "ge", other)

    def __hash__(self):
        return self._rollouts_ep.request("op", "hash", self)

    def __reduce_ex__(self, protocol):
        return self._rollouts_ep.pickled(self, protocol)

    __copy__ = _ClassOnly()

    def __deepcopy__(self, memo):
        return self._rollouts_ep.request("op", "deepcopy", self)

    def __dir__(self):
        return self._rollouts_ep.request("op", "dir", self)

    def __format__(self, spec):
        return self._rollouts_ep.request("op", "format", self, spec)


# The arithmetic whose answers the trusted side judges with a plain number (arithmetic.py):
# both ways round, `divmod` (whose pair a check reads: `q, r = divmod(x, 1)`), and in place
# (`d -= expected`: an `__isub__` answers as freely as a `__sub__`; where a class has none,
# Python asks the binary operator, judged all the same).
JUDGED_ARITHMETIC = tuple(
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
    "divmod rdivmod iadd isub imul itruediv ifloordiv imod ipow".split()
)
# The special methods whose answers the trusted side judges (judging.py: comparisons, `in`,
# arithmetic): reached by `super()`, they are judged all the same.
JUDGED_SPECIALS = frozenset(
    ["__%s__" % n for n in "eq ne lt le gt ge contains".split()]
    + ["__%s__" % n for n in JUDGED_ARITHMETIC]
)


def overridden(cls, name):
    """Whether `cls` is a tests' class made there too whose own classes define special method
    `name`: a mirror's `name` reached on one of its objects was then reached by `super()` (or
    by the mirror's name) from the tests' own `name`."""
    return getattr(cls, "_rollouts_subclass", False) and any(
        vars(k).get("_rollouts_subclass") and name in vars(k) for k in cls.__mro__
    )


def run_inherited(proxy, name, method, args, kwargs):
    """The real class's special method `name` run on the real object of `proxy` (an object of
    a tests' class that `overridden` it), where `method` is the mirror's own."""
    mirror = next(
        k
        for k in type(proxy).__mro__
        if "_rollouts_ep" in vars(k) and not vars(k).get("_rollouts_subclass")
    )
    if name in JUDGED_SPECIALS:  # judged as ever, the real class's method answering
        return proxy._rollouts_ep.judged_via(proxy, mirror, method, args)
    return proxy._rollouts_ep.request("inherited", mirror, name, proxy, args, tuple(kwargs.items()))


def _or_inherited(name, method):
    """Special method `name` of a mirror (`method`), which, on an object of a tests' class made
    there too, reached by `super()` from that class's own `name` (`def __str__(self): return
    "q-" + super().__str__()`), runs the real class's `name` on the real object: the object's
    own would call the tests' one again, for ever."""

    def special(self, *args, **kwargs):
        cls = type(self)
        if cls._rollouts_subclass and overridden(cls, name):  # (the flag first: every call)
            return run_inherited(self, name, method, args, kwargs)
        return method(self, *args, **kwargs)

    special.__name__ = special.__qualname__ = name
    return special


_OWN_SPECIALS = "__str__ __repr__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __format__"
for _name in _OWN_SPECIALS.split():
    type.__setattr__(RemoteObject, _name, _or_inherited(_name, RemoteObject.__dict__[_name]))


def _forwarder(op):
    def method(self, *args):
        return self._rollouts_ep.request("op", op, self, *args)

    return method


def _descriptor(op):
    def method(self, *args):
        return self._rollouts_ep.descriptor(self, op, args)

    return method


def _arithmetic(op):
    def method(self, other, *more):  # (more: `pow(x, y, modulus)`'s modulus)
        return self._rollouts_ep.arithmetic(self, op, other, *more)

    return method


def _call(self, *args, **kwargs):
    return self._rollouts_ep.request("call", self, args, tuple(kwargs.items()))


def _contains(self, item):
    return self._rollouts_ep.contains(self, item)


def _exit(self, *exc):
    return self._rollouts_ep.request("op", "exit", self, *exc)


def _await(self):
    """`await` of the other side's coroutine (a tests' async callback awaited by the solution):
    driven step by step there by its own `send` and `throw`, each step's yield passed up to
    this side's event loop. (A step that needs an event loop there has none: it raises.)"""
    step, value = self.send, None
    while True:
        try:
            yielded = step(value)
        except StopIteration as e:
            return e.value
        step = self.send
        try:
            value = yield yielded
        except BaseException as e:  # thrown in by the loop (a cancellation): on to it there
            step, value = self.throw, e


# The special methods a mirror class has when its real class has them (`special_methods`),
# by name without underscores: protocols, item access, conversions, `@`, shifts and bitwise
# operators (both ways round and in place) go to the other side as they are (`OPERATORS`
# below is what the serving side does for each); arithmetic with a plain number is checked by
# the trusted side (`arithmetic`: JUDGED_ARITHMETIC), containment too (`contains`).
_FORWARDED = (
    "len bool iter next reversed getitem setitem delitem enter bytes index int float "
    "aiter anext aenter aexit complex round trunc floor ceil neg pos abs invert fspath "
    "matmul rmatmul imatmul lshift rlshift ilshift rshift rrshift irshift and rand iand "
    "xor rxor ixor or ror ior"
).split()
SPECIALS = {"__%s__" % op: _forwarder(op) for op in _FORWARDED}
SPECIALS.update({"__%s__" % op: _arithmetic(op) for op in JUDGED_ARITHMETIC})
SPECIALS.update(__call__=_call, __contains__=_contains, __exit__=_exit, __copy__=_copy)
SPECIALS.update(__await__=_await)
# A descriptor's protocol: the solution's `cached_property`, `classproperty` or checked
# attribute that a class of the tests' holds (`@solution.cached_property def area(self)`, `size
# = solution.Typed(int)`), run on the real object where it lives. Only the tested side's
# classes are described with them and only it serves them (`describes_descriptors`): a tests'
# property's `__set__` would let the tested code run their setter on an object of its choosing.
DESCRIPTOR_METHODS = {
    "__get__": "get", "__set__": "set", "__delete__": "delete", "__set_name__": "set_name"
}  # fmt: skip
SPECIALS.update({_name: _descriptor(_op) for _name, _op in DESCRIPTOR_METHODS.items()})
SPECIALS = {_name: _or_inherited(_name, _method) for _name, _method in SPECIALS.items()}


def _special(cls, name):
    """Class `cls`'s special method `name` as the interpreter looks it up for its instances:
    in the first class of its MRO that names it (not in its metaclass), None if none does."""
    for klass in getattr(cls, "__mro__", ()):
        attrs = getattr(klass, "__dict__", {})
        if name in attrs:
            return attrs[name]
    return None


def forwards_descriptor(cls):
    """Whether mirror class `cls` runs the descriptor protocol on its real class's objects
    (`DESCRIPTOR_METHODS`; a function's mirror binds here instead)."""
    return any(_special(cls, n) is SPECIALS[n] for n in ("__get__", "__set__", "__delete__"))


def special_methods(cls, descriptors):
    """The names of `SPECIALS` that instances of `cls` have (None means "not supported"), those
    of the descriptor protocol only where `descriptors` (`DESCRIPTOR_METHODS`)."""
    return [
        name
        for name in SPECIALS
        if _special(cls, name) is not None and (descriptors or name not in DESCRIPTOR_METHODS)
    ]


def turned_off(cls):
    """The names of `SPECIALS` (but `__hash__`, see `hashable`) that `cls` or a base sets to
    None: `__iter__ = None` beside `__getitem__` says its instances are not iterable."""
    return [
        name
        for name in SPECIALS
        if name != "__hash__"
        and _special(cls, name) is None
        and any(name in getattr(k, "__dict__", {}) for k in getattr(cls, "__mro__", ()))
    ]


def hashable(cls):
    """Whether instances of `cls` have a hash (`__hash__ = None` says they have not)."""
    return _special(cls, "__hash__") is not None


def mirror_namespace(specials, is_hashable, bases, off=()):
    """The special methods of a mirror class whose real class has `specials`: those, None for
    one a mirrored base has and the real class turned off (not `RemoteObject`'s class-only
    `__copy__`, which every base has) and for those it set to None (`off`), and `__hash__ =
    None` for an unhashable class."""
    namespace = {}
    for name, method in SPECIALS.items():
        if name in specials:
            namespace[name] = method
        elif name in off or any(
            _special(b, name) not in (None, RemoteObject.__dict__.get(name)) for b in bases
        ):
            namespace[name] = None
    if not is_hashable:
        namespace["__hash__"] = None
    return namespace


def dataclass_fields(fields):
    """A mirror's own `__dataclass_fields__` for its real class's fields ([name, init] each),
    so `dataclasses.fields`, `asdict`, `astuple` and `replace` work on its proxies (reading
    each field's value from the other side) without asking the other side what a field is.
    The field objects are made as dataclasses makes them; `_FIELD` marks a plain field."""
    import dataclasses

    made = {}
    for item in fields:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            continue
        field = dataclasses.field(init=item[1] is not False)
        field.name = item[0]
        field.type = object
        field._field_type = dataclasses._FIELD
        made[item[0]] = field
    return made


_loaded = {}


def _abcs():
    """The abstract base classes whose answer for a mirror must be its real class's, by name.
    Those checked by methods (Sized, Iterable, Callable...) follow from the mirror's special
    methods; those checked by registration or inheritance (Sequence, Mapping, numbers.Real,
    Generator, which also asks for `send`) need the mirror registered."""
    if "abcs" not in _loaded:
        import collections.abc
        import contextlib
        import numbers
        import os

        found = {}
        for module in (collections.abc, numbers):
            for name in getattr(module, "__all__", ()):
                if name == "ByteString":  # deprecated: even looking it up warns (3.12)
                    continue
                abc = getattr(module, name, None)
                if isinstance(abc, type) and hasattr(abc, "register"):
                    found["%s.%s" % (module.__name__, name)] = abc
        found["os.PathLike"] = os.PathLike
        found["contextlib.AbstractContextManager"] = contextlib.AbstractContextManager
        _loaded["abcs"] = found
    return _loaded["abcs"]


def abcs_of(cls):
    """The names of the abstract base classes (`_abcs`) that `cls` is a subclass of."""
    out = []
    for name, abc in _abcs().items():
        try:
            if issubclass(cls, abc):
                out.append(name)
        except Exception:  # a class whose subclass checks fail is a subclass of none
            continue
    return out


def register_abcs(cls, names):
    """Register mirror class `cls` with the abstract base classes `names` (of `_abcs`) that it
    is not a subclass of already."""
    table = _abcs()
    for name in names:
        abc = table.get(name) if isinstance(name, str) else None
        if abc is not None and not issubclass(cls, abc):
            abc.register(cls)


def _one_sided(name):
    """`a.__name__(b)` alone. Binary operators are served one-sided: when the left operand
    cannot answer, NotImplemented goes back and the caller's interpreter tries the reflected
    method on its own side. (Served two-sided, `x == proxy` would bounce between the
    processes for ever: each side's reflected method asks the other.)"""
    dunder = "__%s__" % name

    def apply(a, b):
        method = getattr(type(a), dunder, None)
        return NotImplemented if method is None else method(a, b)

    return apply


def _serve_exit(obj, *exc):
    return type(obj).__exit__(obj, *_no_traceback(exc))


def _serve_aexit(obj, *exc):
    return type(obj).__aexit__(obj, *_no_traceback(exc))


# A generator's, coroutine's or async generator's own `throw` (`athrow`), bound to it.
_THROWS = frozenset(("throw", "athrow"))
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


def thrown(fn, pos):
    """The positional arguments `pos` that a call of `fn` is served with: a generator's own
    `throw(typ, value, tb)` gets None for the other side's traceback, as an `__exit__` does
    (`_no_traceback`). The tests' `contextlib.contextmanager(solution.gen)` throws the
    with-body's exception in by that form (Python 3.11), and the real `throw` raised TypeError
    on the handle, in place of that exception."""
    if (
        type(fn) is types.BuiltinMethodType
        and fn.__name__ in _THROWS
        and isinstance(fn.__self__, _GENERATORS)
    ):
        return _no_traceback(pos)
    return pos


def _no_traceback(exc):
    # The other side's traceback never crosses (an opaque handle at most): a context manager
    # here gets None for it, as `gen.throw` of `contextlib.contextmanager` accepts (it raised
    # TypeError on the handle, in place of the body's exception).
    if len(exc) == 3 and type(exc[2]) is not _TRACEBACK:
        return (exc[0], exc[1], None)
    return exc


try:
    raise TypeError
except TypeError as _e:
    _TRACEBACK = type(_e.__traceback__)
    del _e


_BINARY = (
    "eq ne lt le gt ge add radd iadd sub rsub isub mul rmul imul matmul rmatmul imatmul "
    "truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod rmod imod divmod rdivmod "
    "pow rpow ipow lshift rlshift ilshift rshift rrshift irshift and rand iand xor rxor ixor "
    "or ror ior"
).split()
OPERATORS = {
    "len": len,
    "bool": bool,
    "iter": iter,
    "next": next,
    "reversed": reversed,
    "getitem": lambda a, k: a[k],
    "setitem": lambda a, k, v: a.__setitem__(k, v),
    "delitem": lambda a, k: a.__delitem__(k),
    "contains": lambda a, b: b in a,
    "enter": lambda a: type(a).__enter__(a),
    "exit": _serve_exit,
    "format": format,
    "bytes": bytes,
    "index": lambda a: __import__("operator").index(a),
    "int": int,
    "float": float,
    "complex": complex,
    "round": round,
    "trunc": lambda a: __import__("math").trunc(a),
    "floor": lambda a: __import__("math").floor(a),
    "ceil": lambda a: __import__("math").ceil(a),
    "neg": lambda a: -a,
    "pos": lambda a: +a,
    "abs": abs,
    "invert": lambda a: ~a,
    "fspath": lambda a: type(a).__fspath__(a),
    "aenter": lambda a: type(a).__aenter__(a),
    "aexit": _serve_aexit,
    "aiter": lambda a: type(a).__aiter__(a),
    "anext": lambda a: type(a).__anext__(a),
    "str": str,
    "repr": repr,
    "hash": hash,
    "dir": lambda a: sorted(dir(a)),
    "copy": lambda a: __import__("copy").copy(a),
    "vars": lambda a: dict(_instance_dictionary(a)),  # (the trusted side's: trusted.py)
    "dictset": lambda a, name, value: _instance_dictionary(a).__setitem__(name, value),
    "dictdel": lambda a, name: _instance_dictionary(a).__delitem__(name),
    "deepcopy": lambda a: __import__("copy").deepcopy(a),
}
for _name in _BINARY:
    OPERATORS[_name] = _one_sided(_name)
DESCRIPTOR_OPERATORS = {  # (`DESCRIPTOR_METHODS`: served by the tested side only)
    "get": lambda a, obj, owner=None: type(a).__get__(a, obj, owner),
    "set": lambda a, obj, value: type(a).__set__(a, obj, value),
    "delete": lambda a, obj: type(a).__delete__(a, obj),
    "set_name": lambda a, owner, name: type(a).__set_name__(a, owner, name),
}


def _instance_dictionary(obj):
    namespace = object.__getattribute__(obj, "__dict__")  # (AttributeError: as `obj.__dict__`)
    if not isinstance(namespace, dict):  # (a class's mapping proxy: its mirror has its own)
        raise AttributeError("__dict__")
    return namespace


def qualified(obj):
    """(module, qualname) when `obj` can be found by that name in an imported module."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return (module, qualname) if found is obj else None
