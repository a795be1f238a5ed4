"""The tests' side of the process boundary: workspace modules as proxies, and the checks.

In the verifier container /app holds no code of the agent: each of its Python modules is a
stub (view.py writes them) that calls `attach` below. The first stub imported in a process
starts the tested process (tested.py) under another user id, with no capabilities and a
Landlock ruleset of its own, and every use of the module from then on goes to it over a
socket (rpc.py). Whatever the agent's code does, it does in that process: it cannot write the
reward, the tests, their report or this process's memory, cannot signal or trace the tests,
and cannot see the hooks of whatever runs them (pytest, unittest, a script). Its only way to
the verdict is the values it answers with, which the tests judge here.

What the tested process can use of this one is a capability, not a name (TrustedEndpoint):
the objects the tests handed it (arguments, what their callbacks answer, what their iterators
yield), through the protocol of their type (call, iterate, the container and number
protocols, their own public attributes); never frames, code, tracebacks, modules, loaders or
the runner's objects, however reached; attributes it sets only as data of the tests' plain
objects. The names it sends resolve here only to an allow-list of pure functions, to modules
and classes that are not the runner's; anything else stays its own, a proxy. Nothing of the
runner's state reaches it: its environment is the tests' without the runner's variables.

What answers cannot do either: stand for a value they are not. A proxy compared with a plain
value (`fn(x) == "abc"`) is first asked what it holds as a value of that kind (its builtin
base value, or its conversion), before any operand reaches its process; then about the real
value and about decoys that differ from it (one character, one element, one unit), all in one
request in random order, answered with bools only, taken there (an answer whose truth is told
later could tell the test's from the decoys'). An object that claims to equal a decoy (the
always-equal return value), or to equal a value it did not hold before it saw it (an `__eq__`
that recognises the expected value among the operands), is a value hack: the comparison is
False and the attempt is written to the guard's report, where the grade finds it. The same
for ordering (both `a < b` and `a >= b`), for `in`, for equality with a fresh object of ours,
and for arithmetic with a number (a sum or difference with a date too). TrustedEndpoint asks;
judging.py judges the answers (equality, ordering, the held value a claim must follow from, the
decoys), arithmetic.py arithmetic's.

Standard library only: this runs under the task image's Python.
"""

from __future__ import annotations

import atexit
import collections.abc
import ctypes
import enum
import gc
import importlib
import json
import logging
import os
import random
import resource
import socket
import subprocess
import sys
import time
import types
import warnings
import weakref

_HERE = os.path.dirname(os.path.abspath(__file__))


def _loader():
    """The runtime's loader.py (the runtime is never on sys.path: by its path, once)."""
    module = sys.modules.get("_rollouts_loader")
    if module is None:
        path = os.path.join(_HERE, "loader.py")
        spec = importlib.util.spec_from_file_location("_rollouts_loader", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["_rollouts_loader"] = module
        spec.loader.exec_module(module)
    return module


import importlib.util  # noqa: E402  (used by _loader at import time of the stubs)

# Bound once: a test may patch os (mock.patch, patches.py), and the runtime's own checks of
# which process it is and where it runs must not see the patch.
_getpid, _getcwd = os.getpid, os.getcwd

_load = _loader().load
rpc = _load("rpc")
codec = rpc.codec
access = _load("access")
sources = _load("sources")
judging = _load("judging")
subclasses = _load("subclasses")
carried = _load("carried")
patches = _load("patches")
methods = _load("methods")
records = _load("records")
stops = _load("stops")
statements = _load("statements")
iterators = _load("iterators")
datafiles = _load("datafiles")

VIEW_MANIFEST = os.environ.get("ROLLOUTS_VIEW_MANIFEST", "/rollouts/view.json")
# The tested process's user and group: owns nothing the tests rely on. One per verification
# (PID 1 sets it from what the service sent): the kernel counts a user's tasks across every
# container of the host, so a shared one would let one sample's tested code starve another's.
TESTED_UID = int(os.environ.get("ROLLOUTS_TESTED_UID") or 64000)
# The tasks (processes and threads) the tested user may hold, well below the container's pids
# limit (256): the tests, their killer of the tested user and PID 1 can always fork.
TESTED_NPROC = 128
OUTPUT_CAP = 16 << 20  # the tested code's forwarded output, per process
_WARNING_TEXT = 8 << 10
_PR_SET_DUMPABLE = 4


def _manifest():
    with open(VIEW_MANIFEST) as f:
        return json.load(f)


# ---- capabilities ------------------------------------------------------------------------------

# Packages of test runners and of the import system, and this runtime: their objects hold the
# verdict's machinery (config, hooks, reports, outcomes) or reach every module (loaders).
_RUNNER_PACKAGES = frozenset(
    {
        "_pytest", "pytest", "pluggy", "py", "_py", "xdist", "execnet", "unittest", "nose",
        "nose2", "doctest", "importlib", "_frozen_importlib", "_frozen_importlib_external",
        "zipimport", "pkgutil", "runpy",
    }
)  # fmt: skip
_NOT_RUNNER = ("unittest.mock",)  # mocks the tests hand over are theirs to hand
# What no path through the tests' objects may yield: execution state and namespaces.
_NEVER_TARGETS = (
    types.ModuleType,
    types.FrameType,
    types.CodeType,
    types.TracebackType,
    types.CellType,
)
_ROUTINES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
)


def _runner_module(name):
    """Whether module `name` is a runner's, the import system's or this runtime's."""
    if not isinstance(name, str) or name.startswith("_rollouts_"):
        return True
    if any(name == n or name.startswith(n + ".") for n in _NOT_RUNNER):
        return False
    return name.partition(".")[0] in _RUNNER_PACKAGES


def _forbidden(obj):
    """Whether `obj` may never be a target of the tested process: a frame, code, traceback,
    cell or module; a class of a runner (see _RUNNER_PACKAGES) or derived from one (a
    unittest.TestCase of the tests: its methods skip, fail, report), a routine of a runner, a
    method bound to one of those classes or their objects, or an instance of one. A member
    of a runner's enum whose value is plain data (`pytest.ExitCode.TESTS_FAILED`, 1) is that
    data: the tested process reads it as it would its own enum member's."""
    if isinstance(obj, _NEVER_TARGETS):
        return True
    if isinstance(obj, type):
        return _runner_class(obj)
    if isinstance(obj, _ROUTINES):
        if _runner_module(getattr(obj, "__module__", None) or type(obj).__module__):
            return True
        owner = getattr(obj, "__self__", None)  # a bound method: its object's class counts
        if owner is None or isinstance(owner, types.ModuleType):
            return False
        if _tests_own_method(obj):
            return False
        return _runner_class(owner if isinstance(owner, type) else type(owner))
    if isinstance(obj, enum.Enum) and type(getattr(obj, "__dict__", {}).get("_value_")) in (
        int, str, float, bool, bytes,
    ):  # fmt: skip
        return False
    if _an_approx(obj):
        return False
    return _runner_class(type(obj))


def _tests_own_method(obj):
    """Whether `obj` is a function of the tests' own files bound to an object (a callback
    `self.func` of a unittest.TestCase's). Called, it runs the tests' own code, as any
    callback they hand over; its object stays out of reach (a private name, and a forbidden
    object wherever it is sent): no skip, fail or report of the runner's can be reached."""
    if type(obj) is not types.MethodType or type(obj.__func__) is not types.FunctionType:
        return False
    return _tests_code(obj.__func__.__module__)


def _tests_code(module):
    """Whether module `module` (a name) is of the tests' own files: imported, and no runner's,
    this runtime's, the standard library's or an installed package's."""
    return (
        isinstance(module, str)
        and module in sys.modules
        and not _runner_module(module)
        and not rpc.mirrors._installed(module)
    )


def _an_approx(obj):
    """Whether `obj` is `pytest.approx(...)`: a value the tests compare with, whose methods
    only compare it (an honest `__eq__` of the solution's that answers `other == self.values`
    asks it, as in one process)."""
    t = type(obj)
    return t.__module__ == "_pytest.python_api" and t.__name__.startswith("Approx")


def _runner_class(cls):
    return any(
        _runner_module(getattr(k, "__module__", None)) or _a_patcher_class(k) for k in cls.__mro__
    )


def _a_patcher_class(klass):
    """Whether `klass` is unittest.mock's patcher (what `mock.patch` makes, and a function it
    decorates holds in `patchings`): its `start` would change the tests' own namespaces, and
    leave them changed, for the tested code. The mocks themselves are the tests' to hand."""
    return getattr(klass, "__module__", None) == "unittest.mock" and klass.__name__ in _PATCHERS


_PATCHERS = ("_patch", "_patch_dict")


def _tests_own_class(obj):
    """Whether `obj` is a class the tests' own files define (no runner's, standard library's
    or installed package's): the class of an object they hand over is then a target too, as
    in one process (`type(x)(...)`, `x.__class__`, `dataclasses.replace(x)`, a classmethod):
    calling it runs the tests' code, as calling a method of the object does. A class of a
    library stays a description: its constructor could reach what no handed object does (a
    file object's class opens any path)."""
    if not isinstance(obj, type) or isinstance(obj, rpc.RemoteClassMeta):
        return False
    known = _own_classes.get(id(obj))  # (asked at each description of an object of it)
    if known is None or known[0] is not obj:
        known = (obj, not _runner_class(obj) and all(map(_tests_module, obj.__mro__)))
        _own_classes[id(obj)] = known
    return known[1]


def _tests_module(klass):
    # (a tests' `class Log(io.FileIO)` is FileIO's to construct)
    module = getattr(klass, "__module__", None)
    return module in _PLAIN_BASES_MODULES or (
        isinstance(module, str) and module in sys.modules and not rpc.mirrors._installed(module)
    )


_own_classes = {}  # id(class) -> (class, _tests_own_class)


# Modules whose classes a tests' class may derive from and stay the tests' to construct: the
# builtins (object, int, Exception...) and the abstract, generic and enumeration bases.
_PLAIN_BASES_MODULES = frozenset(
    ("builtins", "abc", "typing", "enum", "collections.abc", "_collections_abc")
)


def _mock_own(obj, name):
    """Whether `name` is a mock's own interface rather than what it stands for: the record of
    its calls and what resets, configures or checks it (`reset_mock()` would erase the calls
    the tests then assert on). The tested code calls a mock's stood-for methods, nothing else."""
    mock = sys.modules.get("unittest.mock")
    if mock is None:
        return False
    if _autospec_function(obj, mock):
        return True  # a function stands for nothing with attributes: all it has is the mock's
    if not isinstance(obj, mock.NonCallableMock):
        return False
    spec = obj.__dict__.get("_spec_class")
    if spec is not None and hasattr(spec, name):
        return False  # the stood-for class has it: its own method of that name
    return any(name in vars(k) for k in type(obj).__mro__ if k.__module__ == mock.__name__)


def _a_spy(obj):
    """Whether `obj` is a tests' mock whose calls could run a real routine of this process."""
    mock = sys.modules.get("unittest.mock")
    return (
        mock is not None
        and (isinstance(obj, mock.NonCallableMock) or _autospec_function(obj, mock))
        and not patches.calls_only_the_tests(obj)
    )


def _autospec_function(obj, mock):
    return patches.autospec_mock(obj, mock) is not None


def _mock_settable(obj, name, value, delete):
    """Whether the tested code may set (or delete) attribute `name` of `obj` to `value`, where
    `obj` is a tests' mock (None: `obj` is no mock). A mock is the tests' record of what was
    called: an object of the tested code set as its child would answer the tests' own
    `client.send.assert_called_once_with(...)` (a no-op that passes), and data set over its
    record (`method_calls`) would be what `==` then checks. So only plain data, under a name
    that is none of the mock's own (a Mock used as a bag of attributes the solution fills in:
    `obj.status = "done"`); never a deletion."""
    mock = sys.modules.get("unittest.mock")
    if mock is None:
        return None
    if _autospec_function(obj, mock):
        return False
    if not isinstance(obj, mock.NonCallableMock):
        return None
    if delete or _mock_own(obj, name) or name in patches.mock_own_names(mock):
        return False
    return codec.plain_data(value)


def _module_globals(value):
    """Whether `value` is a module's namespace (a function's or frame's globals)."""
    return type(value) is dict and any(
        isinstance(m, types.ModuleType) and _own(m) is value for m in list(sys.modules.values())
    )


def _writable(obj, name, delete):
    """setattr/delattr by the tested process: data in the instance dictionary of a plain
    object of the tests (a record they pass to be filled), or a name its class defines as a
    data descriptor (a property with a setter, a slot: setting it runs what the class says,
    as a method call does); never a class, routine, module or runner's object, nor a name its
    class defines as a method (an instance attribute would change what the tests' own calls
    of it do)."""
    if isinstance(obj, type) or isinstance(obj, _ROUTINES) or _forbidden(obj):
        return False
    if _runner_class(type(obj)):  # a runner's enum member: data to read, its own to keep
        return False
    for klass in type(obj).__mro__:
        if name in klass.__dict__:
            kind = type(klass.__dict__[name])
            if hasattr(kind, "__set__" if not delete else "__delete__"):
                return True  # a property's setter, a slot: the class's own code decides
            if hasattr(kind, "__get__"):
                return False  # a method: an instance attribute would hide it from the tests
            break
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return False
    if not isinstance(namespace, dict):
        return False
    if delete:
        return name in namespace
    return True


def _descriptors_reach(cls):
    """Whether the tested code's descriptor that the tests' class `cls` holds is handed its
    objects and the class itself (proxies.DESCRIPTOR_METHODS: `@solution.cached_property` on a
    method of theirs, `size = solution.Typed(int)`), as the tests hand an object they pass to
    a call: a class of the tests' own files that holds no tests. A class of tests (`class
    TestCalc: calc = solution.Calc()`, one pytest collects by its ini's `python_classes` or
    `python_functions` or by `__test__ = True`, a `unittest.TestCase`) holds the solution's
    objects as values, as if their class had no descriptor protocol (`_as_a_value`): no test
    chose one there, its objects hold the expected values, and the solution decides whether its
    class has a `__get__` (red team, stop 65)."""
    if not _tests_own_class(cls):
        return False
    for klass in cls.__mro__:
        if klass is object:
            continue
        names = vars(klass)
        if names.get("__test__") is True or _collected_as("python_classes", klass.__name__):
            return False
        for name, value in list(names.items()):
            if _collected_as("python_functions", name) or (
                type(value) is types.FunctionType and value.__dict__.get("__test__") is True
            ):
                return False
    return True


# What pytest collects as tests: its ini's `python_classes` and `python_functions` (prefixes or
# globs), told by the pytest guard (`collected_as`); its defaults until then.
_COLLECTED = {"python_classes": ("Test",), "python_functions": ("test",)}


def collected_as(classes, functions):
    """The pytest guard's word (pytest_guard.py `pytest_configure`) on what pytest collects."""
    _COLLECTED["python_classes"] = tuple(p for p in classes if isinstance(p, str))
    _COLLECTED["python_functions"] = tuple(p for p in functions if isinstance(p, str))


def _collected_as(option, name):
    import fnmatch

    return isinstance(name, str) and any(
        name.startswith(p) or (any(c in p for c in "*?[") and fnmatch.fnmatch(name, p))
        for p in _COLLECTED[option]
    )


def _as_a_value(descriptor, op, cls, args):
    """Descriptor protocol `op` of the tested code's object that class `cls` of tests holds
    (`_descriptors_reach`), done as if its class had none: it is the attribute's value, and an
    object's own value of that name comes first."""
    if op == "set_name" or (op == "get" and args[0] is None):
        return None if op == "set_name" else descriptor
    obj = args[0]
    name = next((n for k in cls.__mro__ for n, v in list(vars(k).items()) if v is descriptor), None)
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        namespace = None
    if name is None or not isinstance(namespace, dict):
        if op == "get":
            return descriptor
        raise AttributeError("%s object has no instance dictionary" % type(obj).__name__)
    if op == "get":
        return namespace.get(name, descriptor)
    if op == "set":
        namespace[name] = args[1]
        return None
    try:
        del namespace[name]
    except KeyError:
        raise AttributeError(name) from None
    return None


def _kept_by_a_descriptor(obj, name):
    """Whether `name` is an underscored (not special) name that the tested code may keep data
    under in the instance dictionary of `obj`, an object of the tests' whose class holds a
    descriptor of the tested code's that reaches it (`_descriptors_reach`) under the same name
    but for its underscores (`Typed.__set__` of `size` keeps `obj._size`), as far as the name
    goes (TrustedEndpoint.kept_name: only a name the tested code made there). Anything else
    underscored is not the tested code's to read or write (`allowed_name`): not a name of the
    tests' own that they make later (`self._area`, red team, stop 65)."""
    if not (isinstance(name, str) and name.startswith("_")) or (
        name.startswith("__") and name.endswith("__")
    ):
        return False
    if isinstance(obj, type):
        return False
    stem = name.lstrip("_")
    held = any(  # (asked first: the cheap answer for the objects of most classes)
        (held.lstrip("_") == stem or name.endswith("__" + held))
        and isinstance(value, rpc.RemoteObject)
        and rpc.proxies.forwards_descriptor(type(value))
        for klass in type(obj).__mro__
        for held, value in list(vars(klass).items())
    )
    if not held or _forbidden(obj) or not _descriptors_reach(type(obj)):
        return False
    try:
        object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return False
    return True


def _dictionary_writable(obj, name, delete):
    """Whether the tested code may set or delete `name` in the instance dictionary of the
    tests' object `obj` itself (`obj.__dict__[name] = value`, which no descriptor of its class
    sees): where its class holds no attribute of that name but plain data, or the tested
    code's own object there (its `cached_property` keeps the value under its own name), and
    `_writable` would let it set the attribute; never past a `__setattr__` or `__delattr__`
    of the tests' (a frozen dataclass keeps its expected value: red team, stop 65)."""
    kind = type(obj)
    if (kind.__delattr__ if delete else kind.__setattr__) is not (
        object.__delattr__ if delete else object.__setattr__
    ):
        return False
    for klass in type(obj).__mro__:
        if name in klass.__dict__:
            value = klass.__dict__[name]
            if isinstance(value, rpc.RemoteObject):
                break
            kind = type(value)
            if hasattr(kind, "__get__") or hasattr(kind, "__set__"):
                return False
            break
    return _writable(obj, name, delete)


# A named tuple's own protocol, underscored only so that no field name can clash with it:
# `row._fields`, `row._asdict()` of a named tuple the tests define (tabulate's headers="keys").
_NAMED_TUPLE_NAMES = frozenset(("_fields", "_field_defaults", "_asdict", "_replace", "_make"))


# A named tuple class with nothing but what collections.namedtuple (or typing.NamedTuple) puts
# in it is plain data: its instances travel by value (TrustedEndpoint.describe).
_plain_named_tuple = rpc.based.plain_named_tuple
_BASED_FACTS = ("v", "o", "z", "t")  # what based.facts adds to a class node
_HOLDERS_MAX = 8  # a call's first arguments asked whether they hold its answer (kept_answer)


def _named_tuple_name(obj, name):
    cls = obj if isinstance(obj, type) else type(obj)
    return (
        name in _NAMED_TUPLE_NAMES
        and issubclass(cls, tuple)
        and isinstance(cls.__dict__.get("_fields"), tuple)
    )


# Functions the tested process may name and the tests then use as their own: pure ones, whose
# only effect is their answer (calling them here or there is the same, and `is` holds).
_PURE_BUILTINS = frozenset(
    (
        "abs all any ascii bin callable chr divmod format hash hex isinstance issubclass iter len "
        "max min next oct ord pow repr round sorted sum"
    ).split()
)
_PURE_MODULES = frozenset(("math", "cmath", "operator", "_operator"))


def _resolvable(module_name, qualname):
    """Whether a module or function the tested process names (module, qualified name) is
    used as the tests' own: a module that is not a runner's (the tests' own copy is the one
    the tested code cannot have changed), a pure function; anything else stays its proxy."""
    if not qualname:  # the tests' own __main__ is not the tested code's
        return module_name != "__main__" and not _runner_module(module_name)
    if module_name == "builtins":
        return qualname in _PURE_BUILTINS
    return module_name in _PURE_MODULES and "." not in qualname


class TestsAttributes:
    """What the tested code reads and changes of the tests' objects' attributes (a part of
    TrustedEndpoint): public names (`allowed_name`), the names its own descriptor keeps
    (`kept_name`), their instance dictionaries (`instance_dictionary`, `_change`), and its
    descriptors' protocol where their class lets them reach its objects (`descriptor`)."""

    def _get(self, obj, name):
        """The tested code's getattr of `name` on the tests' object `obj`."""
        kept = self.kept_name(obj, name)
        if not (self.allowed_name(name) or _named_tuple_name(obj, name) or kept):
            raise AttributeError("attribute %r is not available to the other process" % (name,))
        self.check_target(obj)
        if kept and name not in object.__getattribute__(obj, "__dict__"):
            raise AttributeError(name)  # (its own data only: no method or class attribute)
        if _mock_own(obj, name):
            raise AttributeError(
                "%r is the mock's own interface, the tests' record of what was called" % name
            )
        value = getattr(obj, name)
        if self._withheld(value):
            raise AttributeError(
                "attribute %r of %s is not available to the other process"
                % (name, type(obj).__name__)
            )
        return value

    def attribute_allowed(self, obj, name, creating=False):
        return self.allowed_name(name) or self.kept_name(obj, name, creating)

    def kept_name(self, obj, name, creating=False):
        """Whether underscored `name` is the tested code's data in the instance dictionary of
        the tests' object `obj` (`_kept_by_a_descriptor`): one it made there itself, or
        (`creating`) one the object does not hold yet. The tests' own underscored data (a
        counter their class keeps as `self._hits`) stays out of its reach."""
        if not _kept_by_a_descriptor(obj, name):
            return False
        made = self.made_names.get(id(obj))
        if made is not None and made[0]() is obj and name in made[1]:
            return True
        return creating and name not in object.__getattribute__(obj, "__dict__")

    def _made_name(self, obj, name):
        made = self.made_names.get(id(obj))
        if made is None or made[0]() is not obj:
            key = id(obj)

            def gone(ref):
                if self.made_names.get(key, (None,))[0] is ref:
                    del self.made_names[key]

            try:
                made = self.made_names[key] = (weakref.ref(obj, gone), set())
            except TypeError:  # (no weak reference: nothing it made is kept)
                return
        made[1].add(name)

    def descriptor(self, proxy, op, args):
        if op == "get":
            cls = args[1] if len(args) > 1 and args[1] is not None else type(args[0])
        else:
            cls = args[0] if op == "set_name" else type(args[0])
        if isinstance(cls, type) and _descriptors_reach(cls):
            return super().descriptor(proxy, op, args)
        return _as_a_value(proxy, op, cls, args)

    def instance_dictionary(self, obj):
        """`vars(obj)` of a tests' object, as the tested code sees it (proxies.py
        `InstanceDictionary`): the attributes it may read, as `getattr` gives them."""
        if isinstance(obj, (type, types.ModuleType)) or _forbidden(obj):
            raise AttributeError("__dict__")
        namespace = object.__getattribute__(obj, "__dict__")
        if not isinstance(namespace, dict):
            raise AttributeError("__dict__")
        return {
            name: value
            for name, value in list(namespace.items())
            if self.attribute_allowed(obj, name)
            and not _mock_own(obj, name)
            and not self._withheld(value)
        }

    def _withheld(self, value):
        """Whether an attribute's value stays out of the tested code's reach (a module's
        namespace, a runner's object: `_forbidden`): never its own object, a proxy here, which
        goes back as itself (a tests' object holding what the solution made: a cached value)."""
        own = rpc.proxies.own(value) if isinstance(value, rpc.RemoteObject) else {}
        if own.get("_rollouts_ep") is self:
            return False
        return _forbidden(value) or _module_globals(value)

    def _change(self, delete, direct, obj, name, value=None):
        """The tested code's setattr or delattr of `name` on the tests' object `obj`; `direct`:
        in its instance dictionary itself, which no descriptor of its class sees."""
        if not self.attribute_allowed(obj, name, creating=not delete):
            raise AttributeError("attribute %r is not available to the other process" % (name,))
        self.check_target(obj)
        settable = _mock_settable(obj, name, value, delete)
        writable = (_dictionary_writable if direct else _writable)(obj, name, delete)
        if settable is False or not writable:
            raise PermissionError(
                "the tested code may not change %r of %s" % (name, type(obj).__name__)
            )
        if direct:
            namespace = object.__getattribute__(obj, "__dict__")
            if delete:
                del namespace[name]
            else:
                namespace[name] = value
        elif delete:
            delattr(obj, name)
        else:
            setattr(obj, name, value)
        if not delete and not self.allowed_name(name):
            self._made_name(obj, name)
        return None


class TrustedEndpoint(
    TestsAttributes,
    carried.Carried,
    judging.Judge,
    subclasses.Subclassing,
    statements.Statements,
    rpc.Endpoint,
):
    share_sign = -1  # (shares.py: the tested side's handles are positive)
    tests_code = staticmethod(_tests_code)  # (statements.py)
    environ_handed = False  # the tests handed their os.environ over: no path of it is handed
    env_at_start = None  # the environment the tested process started with

    def __init__(self, sock, manifest):
        super().__init__(sock)
        self.manifest = manifest
        self.asking = []  # (request, arguments) being asked, innermost last
        self.values = set()  # oids the other side may use: handed over, and never forbidden
        self.output_left = OUTPUT_CAP
        self.made_names = {}  # id(a tests' object) -> (weak reference, underscored names the
        # tested code made in its instance dictionary: `kept_name`)
        self.warning_registries = {}  # the tested code's modules' __warningregistry__, here
        # oid of a proxy that answered `proxy - x` (or + x) -> its answer for the decoy of x
        self.twins = {}
        self.via = {}  # id(proxy) -> mirror class whose real one answers its probes (judging.py)
        self.runner_modules = {}  # oid of a proxy of the tested process's runner module -> name
        # (id(module proxy), name) -> (module proxy, name, the tests' latest copy, snapshot)
        self.shared = {}
        self.pushing = False
        self.patches = patches.Patches()  # the tests' patches of modules, made there too
        # A list, dict or set in a handed object's own attributes (`o.items`) is one object
        # on both sides, as in one process (shares.py, `kept_answer` below): the tested code
        # may change it as it may set `o.items` itself (`_writable`).
        self.shares_answers = True

    # ---- what the tested process may do with our objects -----------------------------------
    # A target is an object the tests handed over: an argument of their call, what their
    # callback or iterator answered, a public attribute of a target. Whatever the path, what
    # _forbidden names is never one (sent, it stays an opaque handle the tested process can
    # only give back): that is how a generator's frame, the module globals and loader behind
    # it, and the runner's config, hooks and reports stay out of reach.

    def export(self, obj, value=True):
        if obj is os.environ or obj is getattr(os.environ, "_data", None):
            self.environ_handed = True  # (its values are the tested code's to set from now)
        oid = super().export(obj)
        if (value or _tests_own_class(obj)) and not _forbidden(obj):
            self.values.add(oid)
        return oid

    def check_target(self, obj):
        oid = self.export_ids.get(id(obj))
        if oid is None or oid not in self.values or self.exports.get(oid) is not obj:
            raise PermissionError("the tests did not hand this object to the tested code")
        if _a_spy(obj):  # (at each use: the tests may make a mock the tested code kept a spy)
            raise PermissionError("this mock would run a real function of the tests' process")

    def shares_by_reference(self, op):
        # A probe's operands are copies: the tested side must not tell the tests' expected
        # value from its decoys by identity (shares.py). So are a class statement's values
        # (subclasses.py): a class's containers are not the tested code's to change
        # (`kept_answer`), and a class body may hold the tests' expected values.
        return op not in _PROBES and op != "subclass"

    def pickled(self, proxy, protocol):
        # The object is pickled where it lives; its bytes, which the tested code chose (its
        # __reduce__), are only ever unpickled there: our pickle holds them as data, and
        # loading it asks the tested process for the object (`_unpickle`), which arrives as
        # any answer does.
        if type(protocol) is not int:
            raise TypeError("pickle protocol")
        data = self.request("pickle", proxy, protocol)
        if type(data) is not bytes:
            raise rpc.ProtocolError("a pickle answered with a %s" % type(data).__name__)
        return _unpickle, (data,)

    def whole_after_call(self):
        frame = stops.outside(sys._getframe(1))
        return frame is not None and iterators.whole_after(frame)

    def method_call(self, proxy, name, frame=None):
        # (the tested process serves "callattr")
        if frame is None or methods.called_at_once(frame, name):
            return methods.MethodCall(self, proxy, name)
        return None

    def allowed_name(self, name):
        # Public names only: no path from a handed-over callable to its globals or builtins.
        return isinstance(name, str) and not name.startswith("_")

    def tells_routine_names(self):
        return True  # (strings: `functools.wraps` in the solution copies a tests' function's)

    def dispatch(self, op, args):
        if op == "getattr":
            return self._get(*args)
        if op == "op" and len(args) == 2 and args[0] == "vars":
            self.check_target(args[1])
            return self.instance_dictionary(args[1])
        if op == "op" and len(args) == 2 and args[0] in ("copy", "deepcopy"):
            owner = getattr(args[1], "__self__", None)
            if type(args[1]) is types.MethodType and _forbidden(owner):
                raise TypeError("a method of %s is not copied" % type(owner).__name__)
        direct = op == "op" and bool(args) and args[0] in ("dictset", "dictdel")
        if op in ("setattr", "delattr") or direct:
            if direct:  # (`obj.__dict__[name] = value`: proxies.py `InstanceDictionary`)
                op, args = ("setattr" if args[0] == "dictset" else "delattr"), args[1:]
            if len(args) != (3 if op == "setattr" else 2):
                raise rpc.ProtocolError("%s arguments" % op)
            return self._change(op == "delattr", direct, *args)
        return super().dispatch(op, args)

    def dispatch_other(self, op, args):
        if op == "random" and not args:
            return self.random_state()
        if op == "warn" and len(args) == 5:
            return self.warn(*args)
        raise rpc.ProtocolError("the tested process asked for %r" % op)

    def warn(self, text, category, filename, lineno, module):
        """A warning of the tested code, put through our filters as if it were raised here
        (tested.py `_forward_warnings`): an error raises (and is raised there). True: the
        filters would show it again, so ask again next time."""
        if not (isinstance(category, type) and issubclass(category, Warning)):
            raise rpc.ProtocolError("warn: not a warning category")
        if not (type(lineno) is int and all(type(v) is str for v in (text, filename, module))):
            raise rpc.ProtocolError("warn")
        text = text[:_WARNING_TEXT]
        registry = self.warning_registries.setdefault(module, {})
        warnings.warn_explicit(text, category, filename, lineno, module, registry)
        return (text, category, lineno) not in registry and (text, category, 0) not in registry

    def describe(self, v):
        # A runner's object (pytest's ParameterSet is a named tuple of a test's inputs and
        # marks) stays an opaque handle: never a record, as never a based value below. A
        # runner's named tuple of nothing but its fields is an answer of plain data
        # (capsys.readouterr()'s CaptureResult, doctest's TestResults): it travels as one.
        # (A reference first: the most common argument, and no record whatever its class.)
        if issubclass(type(v), records.REFERENCES) or (
            _forbidden(v) and not _plain_named_tuple(type(v), generic=True)
        ):
            return None
        # A named tuple the tests made (collections.namedtuple, nothing added) is data: it
        # travels by value, and the tested process makes it an instance of a named tuple class
        # of the same name and fields (tested.py), so `isinstance(row, tuple)` holds there.
        record = super().describe(v)
        cls = type(v)
        if record is None and issubclass(cls, tuple) and _plain_named_tuple(cls):
            return "N", [str(cls.__module__), cls.__qualname__], list(cls._fields), list(v)
        return record

    def kept_answer(self, op, args, value, memo):
        # Only what an object of ours holds in its own instance dictionary: a class's or a
        # module's containers, a callback's answer, stay copies (the tested code may not set
        # those: `_writable`), so the tests' expected values held there cannot be changed.
        # A callback's (or method's) answer that is such a container of an object the call
        # was handed, or of the method's object, is the share a getattr of it gives
        # (cachetools' `cachedmethod(lambda self: self.cache)`: the solution fills the cache).
        if type(value) not in rpc.shares.SHARED:
            return []
        if op == "getattr":
            held = self._holds(args[0], value, args[1])
        elif op == "call" and type(args[1]) is tuple:
            held = any(self._holds(a, value) for a in args[1][:_HOLDERS_MAX])
        elif op == "callattr":
            held = self._holds(args[0], value)
        else:
            held = False
        return super().kept_answer(op, args, value, memo) if held else []

    def _holds(self, obj, value, name=None):
        """Whether `obj`, an object of ours the tested code may act on, holds `value` in its
        own instance dictionary (under `name`, or any public name)."""
        if isinstance(obj, (type, rpc.RemoteObject)):
            return False
        try:
            namespace = object.__getattribute__(obj, "__dict__")
        except AttributeError:
            return False
        if type(namespace) is not dict:
            return False
        if name is not None:
            return namespace.get(name, _NOTHING) is value
        if not any(v is value for v in namespace.values()):
            return False
        try:
            self.check_target(obj)
        except PermissionError:
            return False
        return any(v is value and self.allowed_name(k) for k, v in namespace.items())

    def encode_reference(self, v, memo):
        # A mock the tests spec'd by a class of the tested code (`MagicMock(spec=Plugin)`,
        # `create_autospec(Plugin, instance=True)`) is one of that class to its `isinstance`
        # there, as in one process (mock's `__class__` is its spec): its class node says so.
        node = super().encode_reference(v, memo)
        mock = sys.modules.get("unittest.mock")
        if mock is not None and node[0] == "o" and isinstance(v, mock.NonCallableMock):
            spec = v.__dict__.get("_spec_class")
            if isinstance(spec, rpc.RemoteClassMeta) and spec.__dict__.get("_rollouts_ep") is self:
                node[2][2]["S"] = spec.__dict__["_rollouts_oid"]
        return node

    def rebuild(self, kind, named, fields, values, ref):
        # A named tuple the tested process made of one of ours it was sent (`row._replace`):
        # an instance of our own class of that name, when it is a plain named tuple of the
        # tests' with those fields (made by tuple.__new__: no code of it runs).
        found = super().rebuild(kind, named, fields, values, ref)
        if found is not None or kind != "N" or values is None:
            return found
        cls = rpc.mirrors._lookup(str(named[0]), str(named[1]))
        if (
            not isinstance(cls, type)
            or not _tests_own_class(cls)
            or not issubclass(cls, tuple)
            or not _plain_named_tuple(cls)
            or list(cls._fields) != fields
            or (cls.__module__, cls.__qualname__) != (named[0], named[1])
        ):
            return None
        if len(ref) > 1 and type(ref[1]) is int:
            self.releases.append([ref[1], 1])
        return tuple.__new__(cls, values)

    def based(self, v):
        # A runner's object (pytest's ParameterSet is a tuple of a test's inputs) stays an
        # opaque handle: never its value.
        if issubclass(type(v), records.REFERENCES) or _forbidden(v):
            return None
        return super().based(v)

    def _class_facts(self, cls):
        # ... and its class is described without its builtin base (an enum's members aside:
        # they are data, see _forbidden): the tested process's mirror of it then holds no
        # value of its own, where one of a tuple's made there was empty (`len(p)` answered 0
        # for a handle that stands for three items) and one of an int's was 0.
        facts = super()._class_facts(cls)
        if "v" in facts and not isinstance(cls, enum.EnumMeta) and _runner_class(cls):
            facts = {k: v for k, v in facts.items() if k not in _BASED_FACTS}
        return facts

    # ---- names the tested process sends ------------------------------------------------------
    # It may name a function or module it holds; only where that name means the same pure
    # thing here (see _resolvable) is the tests' own object used, else the tests get a proxy of
    # its own, which runs there: `from _pytest.outcomes import skip as fn` cannot make the
    # tests skip themselves, nor `fn = os._exit` end their process with status 0.

    def _global(self, node):
        module_name, qualname = node[1], node[2]
        if not isinstance(module_name, str) or not isinstance(qualname, str):
            raise rpc.ProtocolError("global name")
        if _resolvable(module_name, qualname):
            return super()._global(node)
        proxy = self._proxy(node[3], node[4])
        if not qualname:
            self.runner_modules[node[3]] = module_name
        return proxy

    def own_module(self, value, name):
        """A workspace module's attribute `name`: the tests' own runner module where the
        tested code's is bound under that module's own name (`import pytest` read by a star
        import: the tests keep their own pytest), else `value` as it came."""
        if isinstance(value, rpc.RemoteObject):
            module_name = self.runner_modules.get(rpc.proxies.own(value).get("_rollouts_oid"))
            if module_name is not None and name in (module_name, module_name.rpartition(".")[2]):
                own = sys.modules.get(module_name)
                if own is not None:
                    return own
        return value

    def class_value(self, node):
        meta = node[2] if isinstance(node, list) and len(node) == 3 else None
        named = meta.get("g") if isinstance(meta, dict) else None
        if isinstance(named, list) and len(named) == 2 and _runner_module(str(named[0])):
            return self.mirror(node)
        return super().class_value(node)

    # ---- what a request carries (carried.py) and what the tested process hands over ---------

    def before_request(self, msg):
        _push_shared(self)
        super().before_request(msg)
        self.carry(msg)
        self.datafiles.before_request()
        _grant_handed(self, msg)  # (the environment carried too)

    def tested_folder(self, path):
        """Our working folder for the tested process (carried.py): a temporary folder is
        handed over as a program's working folder is (access.py)."""
        path = _tested_path(self.manifest, path)
        uid = getattr(self, "tested_uid", None)
        roots = access.temporary_roots()
        if uid is not None and path not in self.granted and not _near_loaded_code(path, roots):
            self.granted.add(path)
            access.grant(path, uid, roots, self.made_after)
        return path

    def after_answer(self, msg):
        self.datafiles.heard(msg)
        self.heard_text(msg.get("v"))
        if self.frames.may_hold_slash(msg):
            access.heard_names(msg)  # (all of it: whatever a key, it is the tested code's)

    def on_request(self, msg):  # (a request of the tested code's own)
        self.datafiles.heard(msg)
        if self.frames.may_hold_slash(msg):
            access.heard_names(msg)
        super().on_request(msg)

    def heard_text(self, value):
        sources.heard(value)

    def on_output(self, msg):
        """A write of the tested process: to sys.stdout or sys.stderr ("s"), or to its file
        descriptor 1 or 2 ("b", bytes as code points 0-255), which goes to ours."""
        raw = "b" in msg
        text = msg.get("b") if raw else msg.get("s")
        if not isinstance(text, str) or self.output_left <= 0:
            return
        text = text[: self.output_left]
        self.output_left -= len(text)
        _heard_printed(text)
        stream = sys.stdout if msg.get("w") == 1 else sys.stderr
        try:
            if not raw:
                stream.write(text)
                return
            stream.flush()  # what was written before goes first, as in one process
            data = text.encode("latin-1", "replace")
            fd = 1 if msg.get("w") == 1 else 2
            while data:
                data = data[os.write(fd, data) :]
        except Exception:
            pass

    def on_log(self, msg):
        try:
            name, level, text = msg["log"]
            text = str(text)[: max(self.output_left, 0)]
            self.output_left -= len(text) + 1
            if self.output_left < 0:
                return
            _heard_printed(text)
            logger = logging.getLogger(str(name)) if name else logging.getLogger()
            if isinstance(level, int) and logger.isEnabledFor(level):
                record = logger.makeRecord(
                    logger.name, level, "(tested code)", 0, str(text), (), None
                )
                logger.handle(record)
        except Exception:
            pass

    # ---- modules -----------------------------------------------------------------------------

    def module_for(self, name, oid, class_node):
        if name in self.manifest.get("modules", ()):
            self.releases.append([oid, 1])
            return importlib.import_module(name)
        return super().module_for(name, oid, class_node)

    # ---- what a request carries first: the tests' patches (patches.py) ---------------------

    def request(self, op, *args):
        if op != "patch":
            changed = self.patches.changes()
            if changed:  # (before the request: its code may call what the tests patched)
                super().request("patch", changed)
        self.asking.append((op, args))  # (`called_by_a_test`)
        try:
            answer = super().request(op, *args)
        except rpc.STOPS as e:
            # (raised into the tests' own code, it may be one they expect: stops.py)
            if rpc.iterator_step(op, args) or stops.crosses(op, args):
                raise
            raise rpc.leaked_stop(e, "a %r request" % op)  # noqa: B904 - (its cause is set)
        finally:
            self.asking.pop()
        rpc.step_method(op, args, answer)
        if type(answer) is bytes:  # a pickle, perhaps: never unpickled here (pickles.py)
            sources.heard(answer)
        return answer

    def value_hack(self, proxy, op, why):
        report("value_hack", op=op, type=type(proxy).__qualname__, why=why)

    def fidelity_gap(self, module, qualname, why):
        report("fidelity_gap", module=module, qualname=qualname, why=why)


_PROBES = frozenset(("probe", "held", "unary"))  # (judging.Judge's requests)
_NOTHING = object()


# ---- the guard's report ------------------------------------------------------------------------


def report(event, **fields):
    """One line in the guard's report (only processes of the tests can write there)."""
    path = _manifest_cached().get("report")
    if not path:
        return
    fields.update(event=event, pid=_getpid())
    line = (json.dumps(fields) + "\n").encode()

    def write():
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    try:
        access.unchecked(write)  # (our own open: never refused for a name the tested code sent)
    except OSError:
        pass


_manifest_memo = {}


def _manifest_cached():
    if "m" not in _manifest_memo:
        try:
            _manifest_memo["m"] = _manifest()
        except (OSError, ValueError):
            _manifest_memo["m"] = {}
    return _manifest_memo["m"]


def _escaped(exc):
    report("solution_exit", code=repr(exc.args[:1]))


rpc.PeerExit.on_escape = staticmethod(_escaped)


# ---- the tested process ------------------------------------------------------------------------

_endpoint = None


def _unpickle(data):
    """An object of the tested process pickled there (TrustedEndpoint.pickled): unpickled
    there, never here, and answered as any object of that process is."""
    if type(data) is not bytes:
        raise TypeError("a pickled object of the tested process is bytes")
    return endpoint().request("unpickle", data)


def _drop_privileges():
    # A session of its own: even SIGCONT, which any process of a session may send to the
    # others whatever their user, cannot reach the tests then.
    os.setsid()
    os.setgroups([])
    os.setresgid(TESTED_UID, TESTED_UID, TESTED_UID)
    os.setresuid(TESTED_UID, TESTED_UID, TESTED_UID)
    # Set after the switch, which then did not mark this process over the limit: the exec
    # that follows succeeds even when the user already holds its share (the killer below must
    # start then), while every fork of the user's from here on is counted against it. Without
    # capabilities the user cannot raise it again (nor above the hard limit it has).
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = TESTED_NPROC if hard == resource.RLIM_INFINITY else min(TESTED_NPROC, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def _spawn(argv, **kwargs):
    """Start the tested process as TESTED_UID; where this process may not switch users (it is
    not root, or lacks the capability), as itself (the Landlock layer then stands alone)."""
    if os.getuid() == 0:
        try:
            return subprocess.Popen(argv, preexec_fn=_drop_privileges, **kwargs), TESTED_UID
        except (OSError, subprocess.SubprocessError):
            pass
    return subprocess.Popen(argv, **kwargs), None


def _as_tested_user(action, limit_s=30.0):
    """Run `action` in a fork of this process switched to the tested user, and wait for it (at
    most `limit_s`, then kill it). A fork, not a new interpreter (which cost more CPU than all
    the rest of ending the tested code): it runs nothing but `action` and `os._exit`. This
    process made itself non-dumpable before it started any tested code (`_not_dumpable`), and
    the fork is too (inherited, and the switch of user sets it again), so the tested user
    cannot read its memory or trace it while it runs; what the tested code might do to it is
    what it could do to the interpreter this replaced: stop it, which the limit ends."""
    with warnings.catch_warnings():
        # Python 3.12 warns of fork() in a process with threads: the fork only makes system
        # calls and exits, and a warning turned into an error must not skip the kill.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            pid = os.fork()
        except OSError:
            return
    if pid == 0:
        try:
            _drop_privileges()
            action()
        finally:
            os._exit(0)
    deadline = time.monotonic() + limit_s
    delay = 0.0002
    try:
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    except ChildProcessError:  # reaped already (the tests ignore SIGCHLD)
        pass


def _kill_everything_of_mine():
    os.kill(-1, 9)


def _kill_tested_user():
    """Kill everything the tested code started (daemons included, which could otherwise
    rewrite files the rest of test.sh reads): kill(-1) sent as the tested user reaches exactly
    that user's processes, in one pass of the kernel."""
    _as_tested_user(_kill_everything_of_mine)


# The shell's own record of where it is (and was): the tests' folder, never one they hand over.
_SHELL_VARIABLES = ("PWD", "OLDPWD", "_")


def _environment_paths(env):
    """The absolute paths among the values of environment `env` (each of a list of them, as
    `PATH` or `XDG_DATA_DIRS` hold), but the shell's record of its folders."""
    found = []
    for name, value in env.items():
        if name in _SHELL_VARIABLES or not isinstance(value, str) or os.sep not in value:
            continue
        found += [p for p in value.split(os.pathsep) if p.startswith(os.sep)]
    return found


def _ours_not_heard(path):
    """A file of the tests in a temporary root itself may be handed over in their request
    where this process wrote it and the tested code never sent its name (access.grant)."""
    return access.written_here(path) and not access.named_by_tested(path)


def _heard_printed(text):
    """The paths in what the tested code printed or logged, word by word: names it sent (the
    tests may read them back through capsys or caplog, and pass them on, which hands nothing
    over, or open them, which its user must be able to do: `guard_links`)."""
    if os.sep not in text:
        return
    words = [w.strip("'\".,;:()[]{}<>") for w in text.split() if os.sep in w]
    access.heard_names(words)
    for word in words:
        if word.startswith(os.sep):
            sources.heard(word)


def _near_loaded_code(path, roots):
    """Whether handing `path` over (access.grant: the folder, or a file's folder, whole, and
    search on each folder above it below its temporary root) would let the tested user reach a
    module this process loaded (the tests' helpers in a folder under /tmp, their copy of the
    tests): one below the path, or below a folder on its way by folders that user may search
    (0755, as a copy makes them); not one behind a folder closed to it (each test's own under
    pytest's, 0700)."""
    real = os.path.normpath(os.path.abspath(path))
    root = next((r for r in roots if real.startswith(r + os.sep)), None)
    if root is None:
        return False
    parts = real[len(root) + 1 :].split(os.sep)
    on_the_way = [os.path.join(root, *parts[:i]) for i in range(1, len(parts) + 1)]
    below = os.path.join(root, "")
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if not isinstance(where, str):
            continue
        # Most modules lie elsewhere (the standard library, installed packages): a path that
        # is its own normal form (but a trailing slash) and not below the root is not below
        # anything on the way either, and abspath, the cost here (every path handed over asks
        # anew: a test's loop over files in its tmp_path), is spared it.
        if _normal(where) and not where.startswith(below):
            continue
        where = os.path.abspath(where)
        if where == real or where.startswith(os.path.join(real, "")):
            return True
        for folder in on_the_way:
            if where.startswith(os.path.join(folder, "")) and _searchable_down(folder, where):
                return True
    return False


def _normal(path):
    """Whether str `path` is absolute with no ".", ".." or empty part: abspath leaves it as it
    is, but a trailing slash."""
    return (
        type(path) is str
        and path[:1] == "/"
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/.", "/.."))
    )


def _searchable_down(folder, where):
    """Whether the tested user may search every folder between `folder` and the file `where`
    (a grant of before included: access.lets_search)."""
    rest = os.path.dirname(where)[len(folder) :].strip(os.sep)
    at = folder
    for part in [p for p in rest.split(os.sep) if p]:
        at = os.path.join(at, part)
        if not access.lets_search(at, TESTED_UID):
            return False
    return True


def _grant_handed(ep, msg):
    """The tested user may use what the tests hand over in a request of theirs: each path under
    a temporary folder in its arguments (access.py), or in the environment variables they
    changed since the tested process started (a test that points `HOME` or a data folder's
    variable at its `tmp_path`). Never from an answer of theirs to the tested code: any object
    of the tests that gives back what it was given (a `StringIO`, a list, a lambda) answers
    with a name the tested code chose, shifted or pieced together as well as whole, and a name
    asked for that does not exist yet hands over the folder it would be made in."""
    uid = getattr(ep, "tested_uid", None)
    if uid is None:
        return
    paths = access.absolute_strings([msg.get(k) for k in ("a", "t", "u", "sy")])
    env = msg.get("env")
    if isinstance(env, dict) and not ep.environ_handed:
        start = ep.env_at_start or {}
        paths += _environment_paths({k: v for k, v in env.items() if start.get(k) != v})
    if not paths:  # (most messages: the roots, a few system calls, are not looked up then)
        return
    roots = access.temporary_roots()
    for path in access.under(paths, roots):
        # Never a name the tested code sent (the tests may pass it on), nor where the tests'
        # own modules lie; a path refused may be asked again (made, or handed, later).
        if path in ep.granted or access.named_by_tested(path) or _near_loaded_code(path, roots):
            continue
        if access.grant(path, uid, roots, ep.made_after, _ours_not_heard):
            ep.granted.add(path)


def _owner_and_parent(pid):
    uid = ppid = None
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
            elif line.startswith("PPid:"):
                ppid = int(line.split()[1])
    return uid, ppid


def _end_programs_processes():
    """Run as the tested user after a program the tests ran: kill every process of that user
    that is not a child of one of the tests' processes (root's, not PID 1). What the program
    started, daemons included, goes (its children are reparented to PID 1 as it ends); the
    tested processes of the tests' imports, and other programs still running, stay."""
    me, mine = os.getuid(), _getpid()
    for _ in range(100):
        killed = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                uid, ppid = _owner_and_parent(pid)
                if uid != me or int(pid) == mine:
                    continue
                if ppid != 1 and _owner_and_parent(ppid)[0] == 0:
                    continue
                os.kill(int(pid), 9)
                killed += 1
            except (OSError, ValueError, TypeError):
                pass
        if not killed:
            break


def _end_program():
    _as_tested_user(_end_programs_processes)


def _end_tested(ep):
    """When the tests' process ends, so does the tested code: the tested process, then
    everything else of the tested user (daemons the tested code started), by kill(-1) as that
    user, always: a look at the process table first would miss a daemon that forks anew as
    fast as it exits, where kill(-1) is one pass of the kernel that a fork cannot outrun."""
    ep.sock.close()
    ep.proc.kill()
    if ep.tested_uid is not None:
        _kill_tested_user()
    try:
        ep.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


# The tested process's start: tested.py loaded as a module (from the compiled file the verifier
# puts beside it; a script is compiled at every start, 5 ms of CPU in the verifier container)
# and its `main` called with the arguments; as the verifier script starts view.py
# (verifier.py `_VIEW_START`).
_TESTED_START = (
    "import importlib.machinery as m, sys; "
    'loader = m.SourceFileLoader("_rollouts_tested", sys.argv[1]); '
    "tested = sys.modules[loader.name] = type(sys)(loader.name); tested.__file__ = loader.path; "
    "loader.exec_module(tested); tested.main(sys.argv[2:])"
)


def _tested_argv(user, *args):
    """`user`: "UID:NPROC" for a tested process that makes itself that user (tested.py `main`),
    "-" for one that stays the user it was started as."""
    tested = os.path.join(_HERE, "tested.py")
    return [sys.executable, "-I", "-B", "-c", _TESTED_START, tested, user, *args]


def _watch_reseeding(ep):
    """Note when the tests re-seed the random module: re-seeding to the state it had at the
    last call must still reach the tested process, whose copy has moved on since. A module of
    the tests that took the function by name before the tested process started (`from random
    import seed` above `import solution`: more-itertools' own tests) holds the unwatched one,
    so its name is pointed at the watched one too."""

    def watched(original):
        def call(*args, **kwargs):
            ep.reseeded = True
            return original(*args, **kwargs)

        call.__wrapped__ = original
        call.__doc__ = original.__doc__
        return call

    taken = {}  # id(original) -> (original, watched)
    for name in ("seed", "setstate"):
        original = getattr(random, name)
        taken[id(original)] = (original, watched(original))
        setattr(random, name, taken[id(original)][1])
    for name, module in list(sys.modules.items()):
        if (
            type(module) is not types.ModuleType
            or name.partition(".")[0] in _STANDARD_LIBRARY
            or _runner_module(name)
        ):
            continue
        names = module.__dict__
        for key, value in list(names.items()):
            found = taken.get(id(value))
            if found is not None and found[0] is value:
                names[key] = found[1]


_STANDARD_LIBRARY = frozenset(getattr(sys, "stdlib_module_names", ()))


def _not_dumpable():
    """No process of another user, or of ours without CAP_SYS_PTRACE, may read our memory or
    open our descriptors through /proc, nor trace us."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:
        pass


def _tested_path(manifest, path):
    """Our path `path` as the tested process names it: /app is its workspace there."""
    app, workspace = manifest["app"], manifest["workspace"]
    path = os.path.abspath(path or _getcwd())
    if path == app or path.startswith(app + os.sep):
        return workspace + path[len(app) :]
    return path


def _setup_for_tested(manifest):
    tests = manifest.get("tests", "/tests")
    return {
        "path": [_tested_path(manifest, p) for p in sys.path if not p.startswith(tests)],
        "cwd": _tested_path(manifest, _getcwd()),
        "workspace": manifest["workspace"],
    }


def endpoint():
    """The channel to this process's tested process, started on first use."""
    global _endpoint
    if _endpoint is not None and _endpoint.pid == _getpid():
        return _endpoint
    manifest = _manifest()
    _not_dumpable()
    ours, theirs = socket.socketpair()
    ep_env = carried.tested_environment()
    # As root, the tested process makes itself the tested user, first thing (tested.py
    # `main`), where a function run between fork and exec would: that function (or a change
    # of user there) makes the start a fork of this process, which copies its page tables and
    # leaves each of its pages to fault once more at its next write (4 to 6 CPU-ms a
    # verification, measured in the verifier container); without them it is a vfork. A
    # session of its own: even SIGCONT, which any process of a session may send to the others
    # whatever their user, cannot reach the tests then.
    uid = TESTED_UID if os.getuid() == 0 else None
    proc = subprocess.Popen(
        _tested_argv(
            "-" if uid is None else "%d:%d" % (uid, TESTED_NPROC), "serve", str(theirs.fileno())
        ),
        start_new_session=True,
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env=ep_env,
    )
    theirs.close()
    ep = TrustedEndpoint(ours, manifest)
    ep.datafiles = datafiles.synced(manifest["app"], manifest["workspace"], report)
    ep.env_sent = ep_env
    ep.proc = proc
    ep.tested_uid, ep.granted = uid, set()
    ep.cwd_seen = _getcwd()  # (the tested process starts there: only a change is handed over)
    ep.made_after = access.made_after(_getpid())
    ep.env_at_start = dict(ep_env)  # (test.sh's: its paths are never handed over)
    _watch_reseeding(ep)
    atexit.register(_end_tested, ep)
    hello = ep.request("hello", _setup_for_tested(manifest))
    # Answered before any of the workspace's code ran in that process: what it says is so.
    if hello.get("uid") != uid:  # (it did not switch: tested.py `_become`; Landlock stands alone)
        ep.tested_uid = None
    report(
        "isolated",
        mode="import",
        tested_pid=proc.pid,
        uid=ep.tested_uid,
        landlock=hello.get("landlock"),
    )
    _endpoint = ep
    return ep


# ---- a module's own containers: what the tests change there, the module sees ----------------
# A list, dict or set of a workspace module travels by value (reading it is local, as fast as
# the tests' own, and it is what it is: `type(tabulate_formats) is list`), so a test that adds
# to it (`inflection.UNCOUNTABLES.add(word)`, then `pluralize(word)`) changed only its copy,
# and a correct solution failed. So the latest copy of each such attribute the tests read is
# kept with a snapshot of its items, and before the tests' next request its changes are made
# to the module's own container (tested.py: "mutate", only the methods of those exact types):
# a set's or dict's by item (what the module changed meanwhile stays), a list's whole. Items
# are compared by identity, never by their own `==`. What the module itself changes later
# reaches the tests at their next read of the attribute, not in a copy they still hold; a
# container nested in one is not followed (docs/reliability.md, Fidelity).

_SHARED_TYPES = (list, dict, set)
_PLAIN_KEYS = (str, int, float, bool, bytes, type(None))


def _snapshot(value):
    if type(value) is dict:
        return dict(value)
    return list(value) if type(value) is list else set(value)


def _plain_keys(value):
    keys = value if type(value) is set else value.keys() if type(value) is dict else ()
    return all(type(k) in _PLAIN_KEYS for k in keys)


def _changes(value, snapshot):
    """[(method, args)] that make the module's container as the tests' copy is now."""
    if type(value) is list:
        # (zip without strict: the lengths are checked, and the runtime runs on Python 3.8)
        same = len(value) == len(snapshot) and all(
            a is b
            for a, b in zip(value, snapshot)  # noqa: B905
        )
        return [] if same else [("__setitem__", (slice(None), list(value)))]
    if type(value) is set:
        return [("discard", (k,)) for k in snapshot - value] + [
            ("add", (k,)) for k in value - snapshot
        ]
    out = [("__delitem__", (k,)) for k in snapshot if k not in value]
    return out + [
        ("__setitem__", (k, v))
        for k, v in value.items()
        if k not in snapshot or snapshot[k] is not v
    ]


def _track_shared(ep, module, name, value):
    """Keep `value`, read as attribute `name` of workspace module `module`, as the latest
    copy of it (sets and dicts whose keys are plain data: a key's own hash and `==` are never
    asked here)."""
    if type(value) in _SHARED_TYPES and _plain_keys(value):
        ep.shared[(id(module), name)] = (module, name, value, _snapshot(value))


def _push_shared(ep):
    """Make the tests' changes to their copies of the module's containers there too."""
    if ep.pushing or not ep.shared:
        return
    ep.pushing = True
    try:
        for key, (module, name, value, snapshot) in list(ep.shared.items()):
            changes = _changes(value, snapshot)
            if not changes:
                continue
            ep.shared[key] = (module, name, value, _snapshot(value))
            for method, args in changes:
                try:
                    ep.request("mutate", module, name, method, args, ())
                except (KeyError, ValueError, TypeError, AttributeError):
                    pass  # the module's container changed under it: its own state stands
    finally:
        ep.pushing = False


# A module's own namespace, under the attribute a subclass of ModuleType shadows below.
_MODULE_DICT = types.ModuleType.__dict__["__dict__"]


def _own(module):
    return _MODULE_DICT.__get__(module)


class _Namespace(collections.abc.MutableMapping):
    """A workspace module's `__dict__` as Python code reads it: its own entries (the import
    system's), then the real module's names in the tested process. A runner that saves an
    attribute from the namespace to restore it (pytest 9's `monkeypatch.setattr`, `mock.patch`)
    finds it there; with the stub's own namespace alone it found nothing, and its undo deleted
    the real module's attribute (parse's `datetime`: every later test failed)."""

    def __init__(self, module):
        self.module = module

    def __getitem__(self, name):
        own = _own(self.module)
        if name in own:
            return own[name]
        if not isinstance(name, str):
            raise KeyError(name)
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise KeyError(name) from None

    def __setitem__(self, name, value):
        setattr(self.module, name, value)

    def __delitem__(self, name):
        try:
            delattr(self.module, name)
        except AttributeError:
            raise KeyError(name) from None

    def __iter__(self):
        return iter(dir(self.module))

    def __len__(self):
        return len(dir(self.module))

    def copy(self):
        # A dict's (`vars(solution).copy()`): each name read once
        return dict(self.items())


class RemoteModule(types.ModuleType):
    """A workspace module: its attributes are those of the real module in the tested process.
    The import system's own attributes (dunders, submodules) stay here."""

    @property
    def __dict__(self):
        return _Namespace(self)

    def __getattr__(self, name):
        remote = _own(self).get("__rollouts_remote__")
        if remote is None or name.startswith("_rollouts_") or not rpc.remote_name(name):
            raise AttributeError(name)
        ep = remote._rollouts_ep
        value = ep.own_module(ep.request("getattr", remote, name), name)
        _track_shared(ep, remote, name, value)
        return value

    def __setattr__(self, name, value):
        own = _own(self)
        remote = own.get("__rollouts_remote__")
        if remote is None or name.startswith("__") or isinstance(value, types.ModuleType):
            types.ModuleType.__setattr__(self, name, value)
            return
        own.pop(name, None)
        remote._rollouts_ep.request("setattr", remote, name, value)

    def __delattr__(self, name):
        own = _own(self)
        remote = own.get("__rollouts_remote__")
        if remote is None or name.startswith("__") or name in own:
            types.ModuleType.__delattr__(self, name)
            return
        remote._rollouts_ep.request("delattr", remote, name)

    def __dir__(self):
        own = _own(self)
        remote = own.get("__rollouts_remote__")
        names = set(own)
        if remote is not None:
            names.update(remote._rollouts_ep.request("op", "dir", remote))
        return sorted(names)

    def __repr__(self):
        return "<module %r (in the tested process)>" % self.__name__


def attach(module_globals, name):
    """Called by the stub of workspace module `name`: make the module being imported a proxy
    of the real one, which the tested process imports now."""
    module = sys.modules.get(module_globals.get("__name__"))
    if module is None or module.__dict__ is not module_globals:
        module = _module_of(module_globals)
    if module is None:
        raise ImportError("load the workspace module %r with import, not by executing it" % name)
    watch_sources()
    sources.adopt(module)
    ep = endpoint()
    remote = ep.request("import", name)
    module.__class__ = RemoteModule
    _own(module)["__rollouts_remote__"] = remote
    # `from NAME import *` reads __all__, or else this module's own namespace: the names the
    # real module exports, then.
    _own(module)["__all__"] = ep.request("exports", remote)
    return module


def _module_of(namespace):
    """The module object whose namespace is `namespace`: in sys.modules under another name, or
    in none where the tests loaded the stub by its path without registering it
    (`spec_from_file_location`, `module_from_spec`, `exec_module`: a common way to load a
    file by path). Then the module made is a proxy of the tested process's module of that name,
    the one `import` reaches (one module, where plain Python would have made a second copy)."""
    for m in list(sys.modules.values()):
        if getattr(m, "__dict__", None) is namespace:
            return m
    for m in gc.get_referrers(namespace):
        if isinstance(m, types.ModuleType) and m.__dict__ is namespace:
            return m
    return None


def watch_sources():
    """The agent's texts for this process's source lookups, and a report of every other read
    of a stub (sources.py). Called by the first stub attached, and by the pytest guard before
    any test module is collected. Also where a reload or a doctest of a workspace module
    runs: in the tested process (reruns.py), as does the unpickling of its pickles
    (pickles.py)."""
    sources.install(_manifest_cached(), report, _of_tested)
    _load("reruns").install(_remote_of)
    _load("pickles").install(sources.was_heard, _unpickle, _tested_uid)
    # Links the tested user makes in folders handed over (or anywhere under /tmp) never
    # take this process where that user could not go itself (access.py).
    access.guard_links(report, sources.was_heard, _tested_uid, _tested_user)


def _tested_uid():
    """The tested user's uid (None: the tested process runs as this one, or has not started)."""
    return getattr(_endpoint, "tested_uid", None)


def _tested_user():
    """The user the tested code runs as when this process may switch to it (a program's too,
    with no tested process of this one's), else None."""
    return TESTED_UID if os.getuid() == 0 else None


def _of_tested(obj):
    """Whether `obj` stands for an object of the tested process: a proxy, a class of it, or a
    workspace module (sources.py evaluates text that only builds values through these)."""
    return isinstance(obj, (rpc.RemoteObject, rpc.RemoteClassMeta, RemoteModule))


def _remote_of(module):
    """The tested process's module that stub module `module` stands for, else None."""
    return _own(module).get("__rollouts_remote__") if isinstance(module, RemoteModule) else None


_SHELLS = {"sh", "bash", "dash", "zsh", "ash", "env", "timeout", "xargs"}


def _tests_process():
    """The process of the tests that ran this program: the nearest ancestor that is not a
    shell (the tests' interpreter, which may pass on strings the tested code chose), or the
    parent when a shell (test.sh) ran it directly (its arguments are the task's own)."""
    pid = os.getppid()
    try:
        while pid > 1:
            with open("/proc/%d/stat" % pid) as f:
                stat = f.read()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            if name not in _SHELLS:
                return pid
            pid = int(stat.rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        pass
    return os.getppid()


def _in_workspace(arg, app, workspace):
    """A program's argument naming something in /app, as the same place in its workspace (the
    tested code's writable view of /app): `PATH` or `--opt=PATH`."""
    head, eq, tail = arg.partition("=")
    for prefix, path in (("", arg), (head + eq, tail if eq else "")):
        if path == app or path.startswith(app + os.sep):
            return prefix + workspace + path[len(app) :]
    return arg


def _program(name, app, workspace):
    """What the tested process runs: module `name`, or, when this program was started by its
    path (`python3 /app/tabulate/__init__.py`: no module spec), that same file in the
    workspace, as Python would run it (a package's `__init__.py` has no `__main__` to run)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(main, "__spec__", None) is not None or not isinstance(path, str):
        return name
    real = _in_workspace(os.path.abspath(path), app, workspace)
    return real if real.startswith(workspace + os.sep) else name


def run_main(name):
    """`python3 /app/NAME.py ARGS` or `python3 -m NAME`: run the real module as __main__ in a
    tested process that shares this one's standard streams, and exit with its status.

    The program runs in its workspace, which the tested user may write: what the tests put in
    /app is copied there first, paths in /app among its arguments name the same files there,
    and when it ends the data files it wrote come back to /app (view.sync: data only, so
    nothing the tests' processes would load). Paths under a temporary folder among its
    arguments, and its working folder there, are handed over (access.py): this process has
    no record of what the tested code sent, nor of the tests' modules (stated limits)."""
    manifest = _manifest()
    app, workspace = manifest["app"], manifest["workspace"]
    setup = _setup_for_tested(manifest)
    args = [_in_workspace(a, app, workspace) for a in sys.argv[1:]]
    view = _load("view")
    view.sync(app, workspace, file_mode=0o666, dir_mode=0o777)
    if os.getuid() == 0:
        roots = access.temporary_roots()
        cwd = _getcwd()
        since = access.made_after(_tests_process())
        for path in [cwd] + access.argument_paths(args, cwd, roots):
            if not _near_loaded_code(path, roots):
                # (its command line is the tests' own: a loose file too)
                access.grant(path, TESTED_UID, roots, since, loose=lambda _path: True)
    _not_dumpable()
    argv = _tested_argv("-", "main", json.dumps(setup), _program(name, app, workspace), *args)
    proc, uid = _spawn(argv, env=carried.tested_environment())
    report("isolated", mode="main", tested_pid=proc.pid, uid=uid)
    status = proc.wait()
    if uid is not None:
        _end_program()
    copied, failed = view.sync(workspace, app)
    if copied or failed:
        report("synced", copied=copied[:50], failed=failed[:50])
    sys.exit(status if status >= 0 else 128 - status)
