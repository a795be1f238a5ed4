"""The tests' patches of modules both processes have, made there too (the trusted side).

A test that patches the standard library, a builtin or an installed package (`mock.patch(
"builtins.open", mock_open(read_data=...))`, `mock.patch("time.sleep")`, `monkeypatch.setattr(
"sys.stdin", io.StringIO(...))`, `mock.patch("solution.os.path.exists")`, which resolves to the
tests' own `os.path`) patches its own process's module; the solution runs in the tested
process, whose module of that name was untouched, so a correct solution failed there. So the
two ways tests patch, `unittest.mock`'s patchers and pytest's `monkeypatch.setattr`, note
each module attribute they set (hooked when the tests import `unittest.mock`),
and before each request the attributes that changed since they were last sent go to the
tested process first ("patch": [module, name, value]; [module, name] once ours holds its
original again, or its value may no longer go, where the tested process puts back its own).

What goes is what runs nothing but data and a mock's own code (`_replayable`): data, values
the codec sends by value, a StringIO, the pure builtins, and mocks (by reference: a mock's
record of what was called stays the tests' to read, trusted.py) holding only those. Never a
tests' function or object with methods, whose code may fall back on a real function, nor a
spy (`wraps=os.remove`, `side_effect=open`): the tested code's calls would run it here, with
this process's rights, on its arguments. And only for the interpreter's own modules
(`_interpreters_own`: a helper module of the tests is not the tested process's to have).
A tests' mock the tested code calls is checked again at each call (`calls_only_the_tests`).

Only modules: a workspace module's names go to the tested process already (trusted.py's
`RemoteModule`), and the runtime's own are never patched there. What the tests change by
other means (`sys.stdout = ...`, `patch.dict`; the environment and `sys.argv` are carried,
carried.py) stays theirs.

Standard library only, Python >= 3.8.
"""

import functools
import io
import os
import sys
import types

_after_import = sys.modules["_rollouts_loader"].after_import  # (loader.py: an entry loaded it)
_ABSENT = object()  # an attribute the module did not have before the patch
# What each request carries anyway, whoever set it (carried.py): not a patch of its own.
_CARRIED = frozenset([("sys", "argv"), ("os", "environ")])


class Patches:
    def __init__(self):
        self.originals = {}  # (module name, attribute) -> its value before the tests' patch
        self.sent = {}  # (module name, attribute) -> the value the tested process was given
        self.hooked = set()  # the patchers hooked ("mock", "monkeypatch")
        self.install()
        if "mock" not in self.hooked:  # (a test module may import it after the solution, and
            _after_import("unittest.mock", lambda _: self.install())  # patch after that)

    def noted(self, target, name, original):
        """The tests set attribute `name` of `target`, which held `original` before."""
        if type(target) is not types.ModuleType or not isinstance(name, str):
            return
        module = getattr(target, "__name__", None)
        if not isinstance(module, str) or sys.modules.get(module) is not target:
            return
        if module.startswith("_rollouts") or (module, name) in _CARRIED:
            return
        if not _interpreters_own(target):  # (a tests' helper module: the tested process has
            return  # none of that name, unless its code made one to catch what comes)
        self.originals.setdefault((module, name), original)

    def changes(self):
        """[module, name, value] for each patched attribute whose value changed since it was
        sent, [module, name] for each that holds its original again."""
        self.install()
        found = []
        for key, original in list(self.originals.items()):
            module = sys.modules.get(key[0])
            current = _ABSENT if module is None else module.__dict__.get(key[1], _ABSENT)
            if current is original:
                del self.originals[key]
                if self.sent.pop(key, _ABSENT) is not _ABSENT:
                    found.append([key[0], key[1]])
            elif current is not _ABSENT:
                # Checked at each request: a mock the tests configure after they patched it
                # (`m.side_effect = open`) is taken back there once it is no longer replayable.
                # So is one the tests' runner set over a patched name since (pytest's capture
                # of `sys.stdout` in the next test): the tested process gets its own back.
                previous = self.sent.get(key, _ABSENT)
                if not _replayable(current):
                    if previous is not _ABSENT:
                        del self.sent[key]
                        found.append([key[0], key[1]])
                elif previous is not current:
                    self.sent[key] = current
                    found.append([key[0], key[1], current])
        return found

    def install(self):
        """Hook the patchers the tests have imported (a dictionary lookup each when done)."""
        mock = sys.modules.get("unittest.mock")
        if mock is not None and "mock" not in self.hooked:
            self.hooked.add("mock")
            _hook_mock(mock, self)
        monkeypatch = sys.modules.get("_pytest.monkeypatch")
        if monkeypatch is not None and "monkeypatch" not in self.hooked:
            self.hooked.add("monkeypatch")
            _hook_monkeypatch(monkeypatch, self)


_PREFIXES = tuple(
    sorted({os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                  sys.base_exec_prefix)})
)  # fmt: skip


def _interpreters_own(module):
    """Whether `module` is the interpreter's: built in, or a file under its prefixes (the
    standard library and installed packages), never the tests' own."""
    path = getattr(module, "__file__", None)
    return path is None or os.path.abspath(path).startswith(_PREFIXES)


def _held(v, mock):
    """What mock `v` holds, as (what its use calls here, what it gives): it calls its side
    effect (its own, or that of the function `autospec=True` put in front of it, which holds
    it) and the magic methods set on its own class (`m.__enter__ = ...`); it gives the rest
    of its own dictionary but its record (return value, children, attributes the tests set on
    it: `m.reader = ...`). What it gives travels as any answer: a routine of the interpreter by
    its name (the tested process's own), a tests' one by reference."""
    record = _mock_record(mock)
    own = v.__dict__
    called = [own.get("_mock_side_effect")]
    given = [x for k, x in own.items() if k not in record and k != "_mock_side_effect"]
    delegate = own.get("_mock_delegate")
    if delegate is not None:
        called.append(getattr(delegate, "side_effect", None))
        given.append(getattr(delegate, "return_value", None))
    called.extend(x for k, x in vars(type(v)).items() if k.startswith("__") and callable(x))
    return called, given


@functools.lru_cache(maxsize=None)
def mock_own_names(mock):
    """The names a fresh mock of module `mock` holds in its own dictionary: its record and
    settings (`method_calls`, ...), and what it runs or gives (`_BEHAVIOURS`)."""
    return frozenset(vars(mock.MagicMock()))


def _mock_record(mock):
    """A mock's own names that are its record and settings, not what it runs or gives."""
    return mock_own_names(mock) - _BEHAVIOURS


def autospec_mock(v, mock):
    """The mock behind `v` where `v` is the function `mock.patch(..., autospec=True)` puts in
    place of one (its attributes, `reset_mock`, `call_args_list`, `mock`, are the mock's), else
    None."""
    if not isinstance(v, types.FunctionType):
        return None
    inner = v.__dict__.get("mock")
    return inner if isinstance(inner, mock.NonCallableMock) else None


_BEHAVIOURS = frozenset(
    ("_mock_wraps", "_mock_side_effect", "_mock_return_value", "_mock_children", "_mock_delegate")
)
_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _walk(value, visit, limit=1000):
    """`visit(object, called)` each object reachable from `value` through mocks (`_held`:
    `called` for what a use of the mock calls here), containers and the values left in a side
    effect's iterator (given, not called); False as soon as one visit says so (or past `limit`
    objects that are not scalars)."""
    mock = sys.modules.get("unittest.mock")
    stack, seen = [(value, False)], set()
    while stack:
        v, called = stack.pop()
        if type(v) in _SCALARS or (id(v), called) in seen:
            continue
        seen.add((id(v), called))
        limit -= 1
        if limit < 0:
            return False
        inner = None if mock is None else autospec_mock(v, mock)
        if inner is not None:
            stack.append((inner, False))
            continue
        if mock is not None and isinstance(v, mock.NonCallableMock):
            if v.__dict__.get("_mock_wraps") is not None:
                return False  # a spy: calls run what it wraps
            calls, gives = _held(v, mock)
            stack.extend((x, True) for x in calls)
            stack.extend((x, False) for x in gives)
            continue
        if type(v) in (list, tuple, set, frozenset):
            stack.extend((x, False) for x in v)
            continue
        if type(v) is dict:
            stack.extend((x, False) for x in v.values())
            continue
        if type(v).__name__ in ("list_iterator", "tuple_iterator"):  # a side effect's values
            stack.append((v.__reduce__()[1][0], False))
            continue
        if not visit(v, called):
            return False
    return True


def calls_only_the_tests(value):
    """Whether calling `value` (a mock of the tests, the function autospec puts in front of
    one), or what it holds, runs no real routine or class of the interpreter: checked at each
    call of the tested code (trusted.py), since a mock it kept may be made a spy later
    (`m.side_effect = subprocess.run`)."""
    return _walk(value, lambda v, called: not (called and _interpreters_callable(v)))


def _replayable(value):
    """Whether the tested process may be given `value` in place of its own module attribute:
    data, exceptions, an `io.StringIO`/`BytesIO`, or mocks whose behaviours are those (and a
    mock's own helpers: `mock_open`'s). No function or object with methods of the tests': their
    code may call the real one (a fake `open` that falls back on the real `open` would read
    /tests for the tested code), and no real routine of the interpreter's (a spy)."""
    return _walk(value, lambda v, called: _inert(v) or (not called and _interpreters_callable(v)))


def _inert(v):
    if type(v) in (io.StringIO, io.BytesIO) or _class_name(type(v)) in _VALUE_CLASSES:
        return True  # (the codec sends those by value: the tested process gets its own)
    if isinstance(v, BaseException) or (isinstance(v, type) and issubclass(v, BaseException)):
        return True
    mock = sys.modules.get("unittest.mock")
    if mock is None:
        return False
    if isinstance(v, types.FunctionType) and v.__module__ == "unittest.mock":
        return True  # a mock's own helpers (`mock_open`'s read)
    if isinstance(v, types.GeneratorType):  # `mock_open`'s readline: a mock's own generator
        return v.gi_code.co_filename == getattr(mock, "__file__", None)
    return type(v).__module__ == "unittest.mock" and not callable(v)  # DEFAULT, `call(...)`


# Classes whose objects travel by value (codec.py: dates, numbers, paths), and
# `CompletedProcess`, whose one method raises; by name, as an object's class names itself: a
# test may have patched `datetime.datetime` when this is asked.
_VALUE_CLASSES = frozenset(
    [("datetime", n) for n in ("datetime", "date", "time", "timedelta", "timezone")]
    + [("decimal", "Decimal"), ("fractions", "Fraction"), ("uuid", "UUID"),
       ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
       ("subprocess", "CompletedProcess")]
)  # fmt: skip


def _class_name(cls):
    return (getattr(cls, "__module__", None), getattr(cls, "__qualname__", None))


def _interpreters_callable(v):
    """A routine or class of the interpreter's own (a mock's helpers, exceptions and the pure
    builtins aside: `Mock(side_effect=len)`)."""
    while isinstance(v, functools.partial):
        v = v.func
    if _pure(v):
        return False
    if isinstance(v, types.MethodType):
        v = v.__func__
    if isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = getattr(v, "__self__", None)  # a method of an object is that object's
        return owner is None or isinstance(owner, types.ModuleType)
    if isinstance(v, type):
        return not issubclass(v, BaseException) and _interpreters_own(sys.modules.get(v.__module__))
    if isinstance(v, types.FunctionType):
        if v.__module__ == "unittest.mock":
            return False
        return os.path.abspath(v.__code__.co_filename).startswith(_PREFIXES)
    return False


_PURE_NAMES = (
    "abs all any ascii bin bool bytes callable chr complex divmod enumerate filter float "
    "format frozenset hash hex int isinstance issubclass iter len list map max min next oct "
    "ord pow range repr reversed round set slice sorted str sum tuple zip"
).split()


def _pure(v):
    """A builtin that reads only its arguments (no file, import, code or attribute by name)."""
    import builtins

    return any(getattr(builtins, name) is v for name in _PURE_NAMES)


def _hook_mock(mock, patches):
    patcher = getattr(mock, "_patch", None)
    enter = getattr(patcher, "__enter__", None)
    if enter is None:
        return

    def __enter__(self):
        value = enter(self)
        original = getattr(self, "temp_original", _ABSENT)
        if original is mock.DEFAULT:  # (`create=True`: the module had no such attribute)
            original = _ABSENT
        patches.noted(getattr(self, "target", None), getattr(self, "attribute", None), original)
        return value

    __enter__.__wrapped__ = enter
    patcher.__enter__ = __enter__


def _hook_monkeypatch(module, patches):
    cls = getattr(module, "MonkeyPatch", None)
    setattr_ = getattr(cls, "setattr", None)
    notset = getattr(module, "notset", _ABSENT)
    if setattr_ is None:
        return

    def hooked_setattr(self, *args, **kwargs):
        value = setattr_(self, *args, **kwargs)
        done = getattr(self, "_setattr", None)
        if done:
            target, name, original = done[-1]
            patches.noted(target, name, _ABSENT if original is notset else original)
        return value

    hooked_setattr.__wrapped__ = setattr_
    hooked_setattr.__name__ = hooked_setattr.__qualname__ = "setattr"
    cls.setattr = hooked_setattr
