"""The tested code's process: the agent's modules run here, and nowhere near the verdict.

trusted.py starts it (as another user where it can) with one end of a socket, by `main`:

    serve FD          serve the tests' requests on FD
    main SETUP NAME   run workspace module NAME as __main__

Before any code of the workspace is read it confines itself with Landlock where the kernel has
it: writes only beneath /tmp, /var/tmp, /root, /dev and its own workspace (the verifier makes
that the tested user's: its writable view of /app, kept in step with the tests' /app between
calls (datafiles.py) and around a program they run), no signals to processes outside its
domain (the tests, the verifier script), no connecting to their abstract sockets. Its
`print`s and log records go to the tests' process (so capsys and caplog see them); its file
descriptors 1 and 2 go nowhere.

Standard library only: this runs under the task image's Python.
"""

import collections
import copy
import ctypes
import importlib
import importlib.machinery
import importlib.util
import io
import os
import random
import select
import sys
import threading
import types
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
_ABSENT = object()  # (patch: an attribute the module did not have)
# Bound once: what the runtime calls here while it serves must not be a test's patch of it
# (patches.py makes the tests' patches of os, select, ... here too).
_read, _chdir, _select = os.read, os.chdir, select.select
WRITABLE = ("/tmp", "/var/tmp", "/root", "/dev")


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


_load = _loader().load
rpc = _load("rpc")
colocate = _load("colocate")
subclasses = _load("subclasses")
datafiles = _load("datafiles")

# Linux Landlock ABI (include/uapi/linux/landlock.h); syscall numbers are the same on x86_64
# and arm64.
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4
_WRITE_FILE = 1 << 1
_DIR_WRITES = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # remove_*, make_*
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def confine(workspace):
    """Apply the Landlock ruleset to this process and its future children: writes beneath
    WRITABLE and `workspace` only. Returns the ABI version it applied, or a string saying why
    none was."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    if abi < 1:
        return "landlock unavailable: " + os.strerror(ctypes.get_errno())
    if threading.active_count() != 1:
        return "more than one thread: landlock would confine only one"
    handled = (
        _WRITE_FILE | _DIR_WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    )
    scoped = _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0
    attr = _RulesetAttr(handled, 0, scoped)
    size = ctypes.sizeof(attr) if abi >= 6 else 16
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        return "landlock_create_ruleset: " + os.strerror(ctypes.get_errno())
    try:
        for path in WRITABLE + (workspace,):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = _PathBeneath(handled, fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0):
                    return "landlock_add_rule %s: %s" % (path, os.strerror(ctypes.get_errno()))
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            return "prctl(NO_NEW_PRIVS): " + os.strerror(ctypes.get_errno())
        if libc.syscall(_SYS_RESTRICT, ruleset, 0):
            return "landlock_restrict_self: " + os.strerror(ctypes.get_errno())
    finally:
        os.close(ruleset)
    return abi


class TestedEndpoint(rpc.Endpoint):
    def __init__(self, sock):
        super().__init__(sock)
        self.bindings.watching = True  # its modules' functions and classes may be kept
        self.rebuilds = True  # the tests' pure iterators may be copied here (readahead.py)
        self.shares_answers = True  # what its code answers and keeps is shared (shares.py)
        self.resends_based = True  # its builtin subclasses' objects, changed (based.py)
        self.describes_descriptors = True  # its classes' `__get__`... (mirrors.py)
        self.random_stale = True  # the tests' random state may have moved since it was taken
        self.quiet = set()  # warnings the tests' filters will not show again in this request
        self.serving = 0  # requests of the tests being served (nested ones too)
        self.main_thread = threading.get_ident()
        self.landlock = None
        self.workspace = None
        self.wrote = [False]  # a write that may be the workspace's, since last told (datafiles.py)
        self.generated = {}  # (module, qualname, fields) -> a named tuple class (rebuild)
        self.generated_names = {}  # such a class -> (module, qualname) of the tests' class
        # (id(class), name) -> (class, what it held before the tests set it) (subclasses.py)
        self.class_originals = {}
        self.originals = {}  # id(rebuilt named tuple) -> (it, the tests' oid of theirs)
        self.patched = {}  # (module, attribute) the tests patched -> its own value before
        self.descriptors = None  # what is written to fds 1 and 2 here (_Descriptors)
        self.follower = colocate.Follower()  # sleeps on the tests' processor (colocate.py)

    def rebuild(self, kind, named, fields, values, ref):
        # A named tuple of the tests (trusted.py describes only plain ones): an instance of a
        # named tuple class of its name and fields, made here once (by collections, not by
        # anything sent), where no importable class of that name is.
        found = super().rebuild(kind, named, fields, values, ref)
        if found is not None or kind != "N" or values is None:
            return found
        name = named[1].rpartition(".")[2]
        key = (named[0], named[1], tuple(fields))
        cls = self.generated.get(key)
        if cls is None:
            if not name.isidentifier() or not all(f.isidentifier() for f in fields):
                return None
            try:
                cls = collections.namedtuple(name, fields, module=named[0])
            except (TypeError, ValueError):
                return None
            cls.__qualname__ = named[1]
            self.generated[key] = cls
            self.generated_names[cls] = (named[0], named[1])
        obj = tuple.__new__(cls, values)
        if len(ref) > 1 and type(ref[1]) is int:  # sent back, it is the tests' own again
            self.originals[id(obj)] = (obj, ref[1])
        return obj

    def describe(self, v):
        # A named tuple made here of a class made for the tests' (`row._replace(x=1)`,
        # `type(row)(1, 2)`): a record of the tests' class, theirs there (trusted.py rebuild).
        named = self.generated_names.get(type(v))
        original = self.originals.get(id(v))
        if named is not None and (original is None or original[0] is not v):
            return "N", list(named), list(type(v)._fields), list(v)
        return super().describe(v)

    def based(self, v):
        original = self.originals.get(id(v))  # the tests' named tuple: theirs again
        if original is not None and original[0] is v:
            return None
        return super().based(v)

    def encode_reference(self, v, memo):
        original = self.originals.get(id(v))
        if original is not None and original[0] is v:
            memo.held.append(v)  # (alive until the message is sent: codec.Memo)
            return ["x", original[1]]
        return super().encode_reference(v, memo)

    def is_own_module(self, module):
        if self.workspace is None:
            return False
        where = getattr(module, "__file__", None) or ""
        paths = [where] + list(getattr(module, "__path__", None) or [])
        root = self.workspace + os.sep
        return any(isinstance(p, str) and os.path.abspath(p).startswith(root) for p in paths)

    def on_request(self, msg):
        super().on_request(msg)
        self.follower.told(msg.get("cpu"))
        self.follower.run()
        env = msg.get("env")
        if isinstance(env, dict):
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in env.items()})
        argv = msg.get("argv")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            sys.argv = argv
        cwd = msg.get("cwd")
        if isinstance(cwd, str):
            try:
                _chdir(cwd)
            except OSError:  # a folder this user may not enter: it stays where it is
                pass
        if msg.get("rk") != 1:  # (with it: we have their state already; trusted.py)
            self.random_stale = True
        self.quiet.clear()  # the tests may have changed their filters since

    def serve_one(self, msg):
        self.serving += 1
        try:
            super().serve_one(msg)
        finally:
            self.serving -= 1

    def before_request(self, msg):
        if self.descriptors is not None:
            self.descriptors.drain()
        self._tell_writes(msg)
        super().before_request(msg)

    def before_answer(self, reply):
        if self.descriptors is not None:
            self.descriptors.drain()
        self._tell_writes(reply)
        super().before_answer(reply)

    def _tell_writes(self, msg):
        if self.wrote[0]:  # (the tests' side brings the workspace's data files to /app)
            self.wrote[0] = False
            msg["fw"] = 1
        self.follower.wait()  # (this thread sleeps on the channel next: colocate.py)

    def before_wait(self, msg):
        self.follower.wait()

    def after_wait(self, held):
        self.follower.run()

    def may_ask(self):
        """Whether the tested code's thread may make a request now: the main thread, inside a
        call of the tests (another thread, or the idle loop, would read the socket beside
        the thread that owns it)."""
        return self.serving > 0 and threading.get_ident() == self.main_thread

    def patch(self, entry):
        """[module, name, value]: set the module's attribute as the tests set theirs, keeping
        its own value; [module, name]: put that value back. A module the tests have and this
        process has not imported yet is imported (an installed package the solution imports
        later); one that is the workspace's or the runtime's, or that cannot be, is left."""
        if not isinstance(entry, list) or len(entry) not in (2, 3):
            raise rpc.ProtocolError("patch")
        name, attribute = entry[0], entry[1]
        if not isinstance(name, str) or not isinstance(attribute, str):
            raise rpc.ProtocolError("patch")
        if name.startswith("_rollouts"):
            return
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
        except Exception:
            return
        if type(module) is not types.ModuleType or self.is_own_module(module):
            return
        key = (name, attribute)
        if len(entry) == 3:
            self.patched.setdefault(key, module.__dict__.get(attribute, _ABSENT))
            setattr(module, attribute, entry[2])
            return
        original = self.patched.pop(key, _ABSENT)
        if original is not _ABSENT:
            setattr(module, attribute, original)
        elif attribute in module.__dict__:
            delattr(module, attribute)

    def dispatch(self, op, args):
        if op in ("setattr", "delattr") and isinstance(args[0], type):
            return subclasses.class_attribute(self.class_originals, op, *args)
        return super().dispatch(op, args)

    def dispatch_other(self, op, args):
        if op == "hello":
            if self.workspace is not None:
                raise rpc.ProtocolError("hello twice")
            _apply_setup(args[0])
            self.workspace = args[0]["workspace"]
            # The first request, before any code of the workspace is read: the ruleset needs
            # the workspace's path, which the tests' side says here.
            self.landlock = confine(self.workspace)
            self.wrote = datafiles.note_writes(self.workspace)
            self.descriptors = _Descriptors(self)  # (its thread after confine: one thread there)
            return {"landlock": self.landlock, "uid": os.getuid()}
        if op == "patch":  # the tests' patches of modules both processes have (patches.py)
            for entry in args[0]:
                self.patch(entry)
            return None
        if op == "callattr":  # `obj.name(...)` of the tests in one request (methods.py)
            obj, name, pos, kw = args
            attribute = self.dispatch("getattr", [obj, name])
            if not isinstance(attribute, (types.MethodType, types.FunctionType)):
                return rpc.NotCalled(attribute)
            return self.dispatch("call", [attribute, pos, kw])
        if op == "subclass":  # a class statement of the tests derived from ours (subclasses.py)
            made = subclasses.make(*args)
            self.made_classes.add(made)
            return made
        if op == "inherited":  # an object of such a class reaching a method of ours
            return subclasses.inherited(*args)
        if op == "import":
            if self.workspace is None:
                raise rpc.ProtocolError("import before hello")
            return rpc.AsReference(importlib.import_module(args[0]))
        if op == "exports":
            names = getattr(args[0], "__all__", None)
            if names is None:
                names = [n for n in dir(args[0]) if not n.startswith("_")]
            return [str(n) for n in names]
        if op in ("reload", "doctest"):  # of a workspace module, as the tests asked (reruns.py)
            module = args[0]
            if not (type(module) is types.ModuleType and self.is_own_module(module)):
                raise rpc.ProtocolError("%s: not a workspace module" % op)
            if op == "reload":
                importlib.reload(module)
                return None
            import doctest

            found = doctest.testmod(module, **dict(args[1]))
            return [found.failed, found.attempted, getattr(found, "skipped", 0)]
        if op == "mutate":  # the tests changed their copy of a module's container (trusted.py)
            module, name, method, pos, kw = args
            target = getattr(module, name) if isinstance(module, types.ModuleType) else None
            if method not in _MUTATORS.get(type(target), ()):
                raise rpc.ProtocolError("mutate %r" % (method,))
            getattr(target, method)(*pos, **dict(kw))
            return None
        if op == "pickle" and len(args) == 2 and type(args[1]) is int:
            # A proxy the tests pickle: its bytes, made here (trusted.py `pickled`).
            import pickle

            return pickle.dumps(args[0], args[1])
        if op == "unpickle" and len(args) == 1 and type(args[0]) is bytes:
            import pickle

            return pickle.loads(args[0])
        if op == "probe":
            return _probe(*args)
        if op == "unary":
            return _unary(*args)
        if op == "held":
            return _held(*args)
        return super().dispatch_other(op, args)

    def _global(self, node):
        # A module the tests pass is imported here by name: theirs is not a target (trusted.py).
        if node[2] == "" and isinstance(node[1], str) and node[1] not in sys.modules:
            try:
                importlib.import_module(node[1])
            except Exception:
                pass
        return super()._global(node)


# What the tests may do to a container of a workspace module they read (trusted.py, Shared).
_MUTATORS = rpc.based.MUTATORS


# Operators a probe may ask (trusted.py: the comparisons and arithmetic that a value hack would
# win), and those whose answer is reduced to a bool here.
_TRUTHS = frozenset(("eq", "ne", "lt", "le", "gt", "ge", "contains"))
_PROBED = _TRUTHS | frozenset(rpc.proxies.JUDGED_ARITHMETIC)


def _copied(subject):
    """(a copy of `subject`, None), or (None, the exception where none can be made): a deep
    copy, else a shallow one (an object holding a lock: the copy shares it, and whatever
    else it holds). An answer beside a decoy that got the exception is a value hack
    (arithmetic.unexplained): where neither copy can be made, the decoy cannot be asked."""
    try:
        return copy.deepcopy(subject), None
    except Exception:  # noqa: BLE001 - a lock, a file
        pass
    try:
        return copy.copy(subject), None
    except Exception as e:  # noqa: BLE001
        return None, e


def _probe(subject, asked, via=None):
    """The answer to each of [[operator, operand], ...] about `subject`, taken now and all
    before any is sent: a comparison's as a bool (None: NotImplemented), else the value; the
    exception an operator raised in its place. `via`: a class of ours `subject` is of, whose
    method answers (a tests' subclass's `super().__eq__`: subclasses.py). A question
    [operator, operand, "copy"] is asked of a copy of `subject` made before any question is
    answered (`_copied`: an in-place operator's decoy, which asked of the object would change
    it twice); where no copy can be made, it answers with the copy's exception."""
    if not isinstance(asked, list) or not (via is None or isinstance(subject, via)):
        raise rpc.ProtocolError("probe")
    for item in asked:
        if not (
            isinstance(item, list)
            and (len(item) == 2 or (len(item) == 3 and item[2] == "copy"))
            and item[0] in _PROBED
        ):
            raise rpc.ProtocolError("probe %r" % (item,))
    copies = {}
    for at, item in enumerate(asked):
        if len(item) == 3:
            copies[at] = _copied(subject)
    answers = []
    for at, item in enumerate(asked):
        name, operand = item[0], item[1]
        target, failed = copies.get(at, (subject, None))
        try:
            if failed is not None:
                raise failed
            if via is None:
                answer = rpc._OPERATORS[name](target, operand)
            else:
                answer = subclasses.inherited(via, "__%s__" % name, target, [operand], ())
            if name in _TRUTHS:
                answer = _truth(answer)
        except Exception as e:
            answer = e
        answers.append(answer)
    return answers


def _truth(answer):
    """A comparison's answer as a bool, None for NotImplemented, or UNSTABLE: an answer that
    is not a bool is asked its truth twice, and one that changes between the two asks lies
    to whoever asks it later (trusted.py flags it; an honest answer's truth is the same)."""
    if answer is NotImplemented:
        return None
    if type(answer) is bool:
        return answer
    truth = bool(answer)
    return truth if bool(answer) is truth else rpc.UNSTABLE


_UNARY = frozenset(
    ("abs", "neg", "pos", "float", "int", "index", "round", "trunc", "floor", "ceil")
)


def _unary(asked):
    """[[operator, object, [more arguments]], ...]: each applied now, all before any is sent
    (trusted.py asks one for a difference and one for its decoy's twin)."""
    if not isinstance(asked, list):
        raise rpc.ProtocolError("unary")
    answers = []
    for item in asked:
        if not (isinstance(item, list) and len(item) == 3 and item[0] in _UNARY):
            raise rpc.ProtocolError("unary %r" % (item,))
        name, target, extra = item
        if not isinstance(extra, list) or len(extra) > 1:
            raise rpc.ProtocolError("unary arguments")
        try:
            answers.append(rpc._OPERATORS[name](target, *extra))
        except Exception as e:
            answers.append(e)
    return answers


# The builtin's own value of an object derived from it: what the object holds, whatever its
# class says of itself (a `class Color(str, Enum)` member holds "red", though str() of it is
# "Color.RED").
_BASE_VALUES = rpc.codec.BASE_VALUES
_CONVERSIONS = {
    "str": str, "bytes": bytes, "int": int, "float": float, "complex": complex, "bool": bool,
    "list": list, "tuple": tuple, "dict": dict, "set": set, "frozenset": frozenset,
    "text": str,
}  # fmt: skip


# The most items `_members` sends: past it, the trusted side judges `in` by its own copy of a
# builtin container's value (a mirror holds one), else by decoys alone.
_MEMBERS_CAP = 4096
_CONTAINER_BASES = (
    (str, str.__str__),
    (bytes, lambda v: bytes.__getitem__(v, slice(None))),
    (dict, lambda v: list(dict.__iter__(v))),  # `in` asks a dict's keys
    (list, lambda v: list.__getitem__(v, slice(None))),
    (tuple, lambda v: list(tuple.__iter__(v))),
    (set, lambda v: list(set.__iter__(v))),
    (frozenset, lambda v: list(frozenset.__iter__(v))),
)


def _members(subject):
    """What `subject` holds for `in` (trusted.py asks before it shows the item): the builtin's
    own value of an object derived from a builtin container (a text, else its items; a dict's
    keys), else the items of the iteration its class defines (`__iter__`: the old sequence
    protocol of `__getitem__` says nothing of `in`, as parse's Result, whose `in` asks its
    names) where asking for them changes nothing: each iter() is a fresh iterator, not the
    object (a stream would be consumed), and it ends within _MEMBERS_CAP items and
    _MEMBERS_STEPS steps of Python code (more-itertools' `bucket` over `count()` reads for
    ever before its first key). None: it cannot say."""
    try:
        for base, value in _CONTAINER_BASES:
            if isinstance(subject, base):
                held = value(subject)
                return held if len(held) <= _MEMBERS_CAP else None
        if getattr(type(subject), "__iter__", None) is None:
            return None
        first = iter(subject)
        if first is subject or iter(subject) is first:
            return None
        return _within_steps(first)
    except Exception:  # noqa: BLE001 - not iterable, or its iteration failed: cannot say
        return None


_MEMBERS_STEPS = 100_000  # calls and lines (an honest iteration of the cap: ~5 an item)


class _TooLong(BaseException):
    """(a BaseException: the iteration's own `except Exception` does not end it)"""


def _within_steps(iterator):
    """The items of `iterator`, up to _MEMBERS_CAP of them, or None where it gives more or
    runs more than _MEMBERS_STEPS steps. Counted by a trace function of this thread, the
    code's own one put back after."""
    steps, over = [0], [False]

    def trace(frame, event, arg):
        if over[0]:
            return None
        steps[0] += 1
        if steps[0] > _MEMBERS_STEPS:
            over[0] = True
            raise _TooLong
        return trace

    before = sys.gettrace()
    held = []
    sys.settrace(trace)
    try:
        for item in iterator:
            if len(held) == _MEMBERS_CAP:
                return None
            held.append(item)
        return held
    except _TooLong:
        return None
    finally:
        sys.settrace(before)


def _held(subject, kind):
    """What `subject` is as a value of `kind` (trusted.py asks before it shows the subject an
    operand of that kind): the builtin's own value of an object derived from it, else the
    conversion its class defines; the exception in its place. Kind "members": what it holds
    for `in` (`_members`)."""
    if kind == "members":
        return _members(subject)
    if type(kind) is list and len(kind) == 2 and kind[0] == "attributes":
        return _attributes(subject, kind[1])
    if kind not in _CONVERSIONS:
        raise rpc.ProtocolError("held %r" % (kind,))
    try:
        base = _BASE_VALUES.get(kind)
        if base is not None and isinstance(subject, rpc.codec.BASE_TYPES[kind]):
            return base(subject)
        return _CONVERSIONS[kind](subject)
    except Exception as e:
        return e


def _attributes(subject, names):
    """Kind ["attributes", names]: `subject`'s attributes of those names that it has, a dict
    (the fields of a tests' object it is compared with: trusted.py asks before it shows it)."""
    if not (isinstance(names, list) and len(names) <= _ATTRIBUTES_MAX):
        raise rpc.ProtocolError("held attributes")
    out = {}
    for name in names:
        if type(name) is not str:
            raise rpc.ProtocolError("held attributes")
        try:
            value = getattr(subject, name)
            # A method named as the field (`def area(self)` for the tests' `area`) holds its
            # value as a property would: what it answers, taking nothing.
            out[name] = value() if _a_getter(subject, value) else value
        except Exception:  # noqa: BLE001 - one it does not have, or cannot give
            pass
    return out


def _a_getter(subject, value):
    """Whether `value` is a Python method of `subject` that takes no argument."""
    if type(value) is not types.MethodType or value.__self__ is not subject:
        return False
    function = value.__func__
    code = getattr(function, "__code__", None)
    if code is None or code.co_flags & _ANSWERS_NO_VALUE:
        return False
    kw_defaults = function.__kwdefaults__ or {}
    return code.co_argcount - 1 == len(function.__defaults__ or ()) and all(
        name in kw_defaults
        for name in code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    )


# Generator, coroutine and async generator functions (CO_GENERATOR ... CO_ASYNC_GENERATOR):
# called, they answer a new iterator or coroutine, not a value.
_ANSWERS_NO_VALUE = 0x20 | 0x80 | 0x100 | 0x200


_ATTRIBUTES_MAX = 64


class _StubsHere:
    """What a stub of view.py finds here as its runtime: the real module instead of a proxy.

    A stub runs in this process only where the tests' path named a copy of /app (a test.sh
    that copies /app and runs the tests from there): that folder is not /app, so trusted.py
    does not map it to the workspace. Loading trusted.py there would start another tested process
    from this one, which imports the copy again, and so on until the container's process limit;
    the correct solution would fail. So a stub here makes the workspace's own module of its
    name, and that module stands in for the stub (the import returns what `sys.modules`
    holds once the stub ran), as a copy of the agent's module would in plain pytest."""

    def __init__(self, workspace):
        self.workspace = workspace

    def _spec(self, dotted, as_name):
        parts = dotted.split(".")
        found = importlib.machinery.PathFinder.find_spec(
            parts[-1], [os.path.join(self.workspace, *parts[:-1])]
        )
        if found is None or found.origin is None:
            raise ImportError("the workspace has no module %r" % (dotted,), name=as_name)
        return importlib.util.spec_from_file_location(
            as_name, found.origin, submodule_search_locations=found.submodule_search_locations
        )

    def attach(self, module_globals, dotted):
        name = module_globals["__name__"]
        spec = self._spec(dotted, name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module

    def run_main(self, dotted):
        import runpy

        runpy.run_path(self._spec(dotted, "__main__").origin, run_name="__main__")


def _apply_setup(setup):
    sys.path[:] = [p for p in setup["path"] if isinstance(p, str)]
    sys.modules["_rollouts_trusted"] = _StubsHere(setup["workspace"])
    try:
        os.chdir(setup["cwd"])
    except OSError:
        os.chdir(setup["workspace"])


class _Output(io.TextIOBase):
    """sys.stdout / sys.stderr of the tested code: each write goes to the tests' process."""

    def __init__(self, ep, fd):
        self._ep = ep
        self._fd = fd
        self.buffer = _Bytes(self)

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        if s:
            self._ep.oneway({"w": self._fd, "s": s})
        return len(s)

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "replace"

    def isatty(self):
        return False


class _Descriptors:
    """What is written to file descriptors 1 and 2 here (a program the tested code runs, a C
    library, `os.write`) goes to the tests' descriptors 1 and 2, as it would in one process,
    where `capfd` sees it and `capsys` does not. Pipes replace the descriptors; a thread sends
    what comes, and every message this side sends first takes what the pipes hold, so what a
    call's programs wrote before the call returned arrives before its answer."""

    def __init__(self, ep):
        self._ep = ep
        self._lock = threading.Lock()  # a read and its sending, whole
        self._pipes = {}  # read end -> the descriptor it stands for
        self._poll = select.poll()
        # Past the tests' side's cap on output (trusted.py OUTPUT_CAP) nothing is sent; the
        # pipes are still read, so a writer never blocks on them.
        self._left = 16 << 20
        for fd in (1, 2):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            self._pipes[r] = fd
            self._poll.register(r, select.POLLIN)
        threading.Thread(target=self._watch, name="rollouts-descriptors", daemon=True).start()

    def _watch(self):
        try:
            while self._pipes:
                readable = _select(list(self._pipes), [], [])[0]
                self.drain(readable)
        except Exception:  # noqa: BLE001 - the channel is gone: nothing more to send
            return

    def drain(self, pipes=None):
        """Sends what the pipes hold now: one read each, which takes all a pipe holds."""
        with self._lock:
            if pipes is None:  # (before each message: one system call when nothing came)
                pipes = [r for r, _ in self._poll.poll(0)]
            for r in pipes:
                if r not in self._pipes:  # (closed by the other thread since its select)
                    continue
                try:
                    data = _read(r, 1 << 20)
                except BlockingIOError:
                    continue
                if not data:  # every writer closed it (the tested code closed fd 1 or 2)
                    self._poll.unregister(r)
                    os.close(r)
                    del self._pipes[r]
                    continue
                if self._left > 0:
                    self._left -= len(data)
                    # Bytes as the code points 0-255 (the codec carries text, not bytes).
                    self._ep.oneway({"w": self._pipes[r], "b": data.decode("latin-1")})


class _Bytes(io.RawIOBase):
    def __init__(self, text):
        self._text = text

    def writable(self):
        return True

    def write(self, b):
        self._text.write(bytes(b).decode("utf-8", "replace"))
        return len(b)


# The interpreter's own folders: its standard library's, pure and compiled modules.
_STDLIB = [
    p
    for p in (
        os.path.dirname(os.__file__),
        os.path.join(os.path.dirname(os.__file__), "lib-dynload"),
    )
    if os.path.isdir(p)
]
# Modules this process once imported at its start and now imports only where used (the
# runtime's own lazy imports among them), with what they import, on Python 3.8 to 3.13: still
# the standard library's, whatever the workspace holds, as at that start and as in plain
# pytest, whose process holds them all (a unit test checks the list is closed under imports).
_DEFERRED = frozenset(
    "_colorize _compat_pickle _functools _locale _opcode _opcode_metadata _pickle _socket _sre "
    "_string _tokenize _typing array atexit base64 collections contextlib copyreg dis errno "
    "functools json linecache logging opcode pickle pkgutil re runpy selectors socket "
    "sre_compile sre_constants sre_parse string textwrap token tokenize traceback typing".split()
)


class _Stdlib:
    """A finder, first on sys.meta_path, that finds the names of _DEFERRED in the standard
    library's folders only: a workspace file `logging.py` on the tested code's path is not
    what the tested code's (or the runtime's) `import logging` makes."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _DEFERRED:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, _STDLIB)


def _forward_logs(ep):
    """Every record of the tested code goes to the tests' process (whose loggers decide): a
    handler on the root logger, added as the logging module is imported here. Not at the
    start: logging (and the regular expressions it imports) is a sixth of this process's
    start, which most solutions never use. It is added as soon as the module's own code has
    run, before the import returns: a record the importing call logs at once reaches the tests
    too (caplog)."""
    _loader().after_import("logging", lambda logging: _add_log_handler(logging, ep))


def _add_log_handler(logging, ep):
    class Logs(logging.Handler):
        def emit(self, record):
            try:
                ep.oneway({"log": [record.name, record.levelno, record.getMessage()]})
            except Exception:
                pass

    root = logging.getLogger()
    root.addHandler(Logs(logging.NOTSET))
    root.setLevel(logging.NOTSET)


def _sync_random(ep):
    """Make each function of the random module (those of its shared generator, before any
    code of the workspace can hold one) take the tests' random state first, once per request
    of theirs: the tested code draws from their stream as of that call (trusted.py). Only its
    main thread during a call asks; other threads draw from the copy as it is."""
    shared = getattr(random, "_inst", None)

    def synced(original):
        def call(*args, **kwargs):
            if ep.random_stale and ep.may_ask():
                ep.random_stale = False
                state = ep.request("random")
                if state is not None:
                    random.setstate((state[0], tuple(state[1]), state[2]))
            return original(*args, **kwargs)

        call.__name__ = call.__qualname__ = getattr(original, "__name__", "call")
        call.__doc__ = getattr(original, "__doc__", None)
        # (pickled by name, as `random.choice` itself: an RRCache holding it pickles)
        call.__module__ = "random"
        return call

    for name, value in list(vars(random).items()):
        if getattr(value, "__self__", None) is shared and shared is not None:
            setattr(random, name, synced(value))


def _forward_warnings(ep):
    """Every warning of the tested code goes to the tests' process, whose filters decide, as
    in one process: shown, recorded (`pytest.warns`, `recwarn`), ignored, or an error, which
    the tests' side raises and which is then raised here, at the `warnings.warn` call. Only
    the main thread during a call asks (else the warning is shown here, to the forwarded
    stderr); one the tests' filters will not show again is not asked about twice in a request
    (a loop that warns costs one exchange, not one per item)."""
    original = warnings.showwarning
    modules = {}  # file -> module name, for the filters' `module` patterns

    def module_of(filename):
        if filename not in modules:
            for name, m in list(sys.modules.items()):
                if getattr(m, "__file__", None) == filename:
                    modules[filename] = name
                    break
            else:
                modules[filename] = os.path.splitext(os.path.basename(filename))[0]
        return modules[filename]

    def show(message, category, filename, lineno, file=None, line=None):
        filename = str(filename)
        # (A warning with stacklevel=2 names our runtime, the tested code's caller here.)
        if file is not None or not ep.may_ask():
            return original(message, category, filename, lineno, file, line)
        key = (str(message), category, filename, lineno)
        if key in ep.quiet:
            return None
        again = ep.request("warn", str(message), category, filename, lineno, module_of(filename))
        if again is not True:
            ep.quiet.add(key)
        return None

    warnings.showwarning = show
    warnings.simplefilter("always")  # the tests' filters decide, not this process's


def serve(fd):
    ep = TestedEndpoint(rpc.socket_from_fd(fd))
    _sync_random(ep)
    _forward_warnings(ep)
    sys.stdout = _Output(ep, 1)
    sys.stderr = _Output(ep, 2)
    _forward_logs(ep)
    try:
        ep.serve_forever()
    except rpc.PeerGone:
        pass


def run_main(setup, name, args):
    confine(setup["workspace"])
    _apply_setup(setup)
    import runpy

    if name.startswith("/"):  # run by its path (`python3 /app/pkg/__init__.py`): that file
        sys.argv = [name] + args
        runpy.run_path(name, run_name="__main__")
        return
    spec = importlib.util.find_spec(name)
    sys.argv = [getattr(spec, "origin", None) or name] + args
    runpy.run_module(name, run_name="__main__", alter_sys=True)


def main(argv):
    """The process's entry (trusted.py `_tested_argv`: this module is loaded as any of the
    runtime's, from its compiled file, where a script would be compiled at every start)."""
    user, mode, args = argv[0], argv[1], argv[2:]
    if user != "-":
        _become(*(int(n) for n in user.split(":")))
    sys.meta_path.insert(0, _Stdlib())
    if mode == "serve":
        serve(int(args[0]))
    elif mode == "main":
        import json

        run_main(json.loads(args[0]), args[1], args[2:])
    else:
        sys.exit("usage: tested.py USER serve FD | USER main SETUP NAME [ARGS...]")


def _become(uid, nproc):
    """Become the tested user, as root (trusted.py `endpoint` says why here, not before the
    exec), before any code or file of the workspace is read. Where it cannot (no capability
    to switch), or where that user could not read this interpreter's files (one under a
    folder only root may enter, where its exec as that user failed before), it goes on as
    itself, and says so at hello (its uid): Landlock then stands alone."""
    import resource  # (before the switch: it is read from the interpreter's folders)

    groups, gids = os.getgroups(), os.getresgid()
    needed = _interpreter_paths()  # (looked up as root: as the user, one it cannot reach is gone)
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, 0)  # (root stays the saved user until the check says yes)
    except OSError:
        _stay_root(groups, gids)
        return
    if not all(os.access(p, os.R_OK | os.X_OK, effective_ids=True) for p in needed):
        _stay_root(groups, gids)
        return
    os.setresuid(uid, uid, uid)
    # Set after the switch: every fork of the user's from here on is counted against it.
    # Without capabilities the user cannot raise it again (nor above the hard limit it has).
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = nproc if hard == resource.RLIM_INFINITY else min(nproc, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    # The switch made this process undumpable (root's, to /proc), as an exec would not have:
    # its own /proc/self/fd, environ, ... are the tested code's to read, as in one process.
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


def _interpreter_paths():
    """What the tested user must be able to read for the tested code to run here: the
    interpreter (the path it was started by: a venv's under /root is not, as its exec as that
    user failed before), the runtime, and what lies on its path within the interpreter's
    installation: its standard library, and its (or its venv's) site-packages, where the
    solution's dependencies are. Not a folder elsewhere on its path (a `.pth`'s under /root):
    that one is skipped by its imports, as when it ran as that user from its exec, where
    staying root for it would let the tested code read what the tests keep from it."""
    own = tuple(os.path.join(p, "") for p in {sys.prefix, sys.base_prefix})
    paths = [sys.executable, _HERE] + _STDLIB
    paths += [p for p in sys.path if os.path.join(p, "").startswith(own) and os.path.exists(p)]
    return paths


def _stay_root(groups, gids):
    """Back to root's ids, each as far as it was changed."""
    for restore in (
        lambda: os.setresuid(0, 0, 0),
        lambda: os.setresgid(*gids),
        lambda: os.setgroups(groups),
    ):
        try:
            restore()
        except OSError:
            pass
