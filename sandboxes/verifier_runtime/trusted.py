"""The tests' side of the process boundary: workspace modules as proxies, and the checks.

In the verifier container /app holds no code of the agent: each of its Python modules is a
stub (view.py writes them) that calls `attach` below. The first stub imported in a process
starts the tested process (tested.py) under another user id, with no capabilities and a
Landlock ruleset of its own, and every use of the module from then on goes to it over a
socket (rpc.py). Whatever the agent's code does, it does in that process: it cannot write the
reward, the tests, their report or this process's memory, cannot signal or trace the tests,
and cannot see the hooks of whatever runs them (pytest, unittest, a script). Its only way to
the verdict is the values it answers with, which the tests judge here.

What answers cannot do either: stand for a value they are not. A proxy compared with a plain
value (`fn(x) == "abc"`) is asked about the real value and about decoys that differ from it
(one character, one element, one unit), in random order; an object that claims to equal a
decoy is a value hack (the always-equal return value): the comparison is False and the
attempt is written to the guard's report, where the grade finds it. The same for ordering
(both `a < b` and `a >= b`), for `in`, and for equality with a fresh object of ours.

Standard library only: this runs under the task image's Python.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import logging
import os
import random
import resource
import socket
import subprocess
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    """A sibling module of the runtime, by path (the runtime is never on sys.path)."""
    key = "_rollouts_" + name
    module = sys.modules.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location(key, os.path.join(_HERE, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return module


import importlib.util  # noqa: E402  (used by _load at import time of the stubs)

rpc = _load("rpc")

VIEW_MANIFEST = os.environ.get("ROLLOUTS_VIEW_MANIFEST", "/rollouts/view.json")
# The tested process's user and group: owns nothing the tests rely on. One per verification
# (PID 1 sets it from what the service sent): the kernel counts a user's tasks across every
# container of the host, so a shared one would let one sample's tested code starve another's.
TESTED_UID = int(os.environ.get("ROLLOUTS_TESTED_UID") or 64000)
# The tasks (processes and threads) the tested user may hold, well below the container's pids
# limit (256): the tests, their killer of the tested user and PID 1 can always fork.
TESTED_NPROC = 128
OUTPUT_CAP = 16 << 20  # the tested code's forwarded output, per process
_PR_SET_DUMPABLE = 4
_rng = random.SystemRandom()  # decoys: neither the tests' seeds nor the tested code sway it


def _manifest():
    with open(VIEW_MANIFEST) as f:
        return json.load(f)


class TrustedEndpoint(rpc.Endpoint):
    def __init__(self, sock, manifest):
        super().__init__(sock)
        self.manifest = manifest
        self.values = set()  # oids we sent as values: the only objects the other side may use
        self.output_left = OUTPUT_CAP
        self.env_sent = None
        self.random_sent = None
        self.reseeded = False  # the tests called random.seed or random.setstate

    # ---- what the tested process may do with our objects -----------------------------------

    def export(self, obj, value=True):
        oid = super().export(obj)
        if value:
            self.values.add(oid)
        return oid

    def check_target(self, obj):
        oid = self.export_ids.get(id(obj))
        if oid is None or oid not in self.values or self.exports.get(oid) is not obj:
            raise PermissionError("the tests did not hand this object to the tested code")

    def allowed_name(self, name):
        # Public names only: no path from a handed-over callable to its globals or builtins.
        return isinstance(name, str) and not name.startswith("_")

    def dispatch_other(self, op, args):
        raise rpc.ProtocolError("the tested process asked for %r" % op)

    # ---- the state a test may change around a call -----------------------------------------
    # One way only: the tested code sees the tests' environment and random state as they are
    # at each call, and nothing it does changes ours (a random state sent back could make the
    # tests draw the same input for ever).

    def before_request(self, msg):
        super().before_request(msg)
        raw = getattr(os.environ, "_data", None)  # bytes as the OS has them: cheap to copy
        current = dict(raw) if raw is not None else dict(os.environ)
        if current != self.env_sent:
            self.env_sent = current
            msg["env"] = dict(os.environ)
        state = random.getstate()
        if state != self.random_sent or self.reseeded:
            msg["rs"] = _random_state(state)
            self.random_sent = state
            self.reseeded = False

    def on_output(self, msg):
        text = msg.get("s")
        if not isinstance(text, str) or self.output_left <= 0:
            return
        text = text[: self.output_left]
        self.output_left -= len(text)
        stream = sys.stdout if msg.get("w") == 1 else sys.stderr
        try:
            stream.write(text)
        except Exception:
            pass

    def on_log(self, msg):
        try:
            name, level, text = msg["log"]
            text = str(text)[: max(self.output_left, 0)]
            self.output_left -= len(text) + 1
            if self.output_left < 0:
                return
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

    # ---- comparisons that a value hack would win ----------------------------------------------

    def compare(self, proxy, op, other):
        if op in ("eq", "ne") and _decoys(other, 1):
            return self._probe_equality(proxy, op, other)
        if op in _COMPLEMENT and _orderable(other):
            return self._probe_order(proxy, op, other)
        result = self.request("op", op, proxy, other)
        if op in ("eq", "ne") and _claims(op, result):
            if _claims("eq", self.request("op", "eq", proxy, _Sentinel())):
                self.value_hack(proxy, op, "equal to a fresh object of the tests")
                return op == "ne"
        return result

    def _probe_equality(self, proxy, op, other):
        asked = [other] + _decoys(other, 2)
        order = list(range(len(asked)))
        _rng.shuffle(order)
        answers = {}
        for i in order:
            answers[i] = self.request("op", op, proxy, asked[i])
        if any(_claims(op, answers[i]) for i in range(1, len(asked))):
            self.value_hack(proxy, op, "equal to values that differ from each other")
            return op == "ne"
        return answers[0]

    def _probe_order(self, proxy, op, other):
        ops = [op, _COMPLEMENT[op]]
        _rng.shuffle(ops)
        answers = {o: self.request("op", o, proxy, other) for o in ops}
        if all(_truth(a) for a in answers.values()):
            self.value_hack(proxy, op, "both %s and %s the same value" % tuple(ops))
            return False
        return answers[op]

    def arithmetic(self, proxy, op, other):
        """`proxy - x` (or + x) answered the same for another x: the difference that makes
        `pytest.approx` and `assertAlmostEqual` pass whatever is expected."""
        if type(other) not in (int, float) or other != other or abs(other) == float("inf"):
            return self.request("op", op, proxy, other)
        decoy = other + _rng.choice((-1, 1)) * (abs(other) * 0.25 + _rng.uniform(1.0, 2.0))
        asked = [other, decoy]
        order = [0, 1]
        _rng.shuffle(order)
        answers = {i: self.request("op", op, proxy, asked[i]) for i in order}
        real, other_answer = answers[0], answers[1]
        if (
            type(real) in (int, float)
            and type(other_answer) in (int, float)
            and real == other_answer
            and abs(real) * 1e-9 < abs(decoy - other)  # not a rounding of a huge value
        ):
            self.value_hack(proxy, op, "the same %s for different operands" % op)
            return NotImplemented
        return real

    def contains(self, proxy, item):
        decoys = _far_decoys(item, 2)
        if not decoys:
            return self.request("op", "contains", proxy, item)
        asked = [item] + decoys
        order = list(range(len(asked)))
        _rng.shuffle(order)
        found = {i: self.request("op", "contains", proxy, asked[i]) for i in order}
        if _truth(found[0]) and any(_truth(found[i]) for i in range(1, len(asked))):
            self.value_hack(proxy, "contains", "contains values that differ from each other")
            return False
        return found[0]

    def value_hack(self, proxy, op, why):
        report("value_hack", op=op, type=type(proxy).__qualname__, why=why)


def _truth(answer):
    """What `assert answer` would take it for (a proxy's truth is asked of its side)."""
    try:
        return bool(answer)
    except Exception:  # e.g. an array's ambiguous truth: it claims nothing
        return False


def _claims(op, answer):
    """Whether an answer to == or != says "equal"."""
    if answer is NotImplemented:
        return False
    return _truth(answer) if op == "eq" else not _truth(answer)


class _Sentinel:
    """A fresh object of the tests: nothing of the tested code's can rightly equal it."""

    __slots__ = ("__weakref__",)


_COMPLEMENT = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}


def _orderable(v):
    return type(v) in (int, float, str, bytes, tuple, list)


_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def _decoys(v, k):
    """`k` values of v's type and shape that differ from v (empty: no decoy for this type)."""
    t = type(v)
    out = []
    for _ in range(k * 4):
        if len(out) == k:
            break
        d = _decoy(v, t)
        if d is _NONE or type(d) is not t:
            return []
        try:
            if d == v or d in out:
                continue
        except Exception:
            return []
        out.append(d)
    return out


_NONE = object()


def _decoy(v, t):
    if t is bool:
        return not v
    if t is int:
        return v + _rng.choice((-1, 1)) * _rng.randint(1, max(3, abs(v) // 8))
    if t is float:
        if v != v:  # NaN: equal to nothing, so any number is a decoy
            return _rng.uniform(-1e6, 1e6)
        return v + _rng.choice((-1, 1)) * (abs(v) * 0.25 + _rng.uniform(1.0, 2.0))
    if t is str:
        return _mutate_text(v, _LETTERS)
    if t is bytes:
        return _mutate_text(v.decode("latin-1"), _LETTERS).encode("latin-1")
    if t in (list, tuple):
        if not v:
            return t([_rng.randint(0, 99)])
        i = _rng.randrange(len(v))
        inner = _decoy(v[i], type(v[i]))
        items = list(v)
        if inner is _NONE:
            items.insert(i, _rng.randint(0, 99))
        else:
            items[i] = inner
        return t(items)
    if t is dict:
        d = dict(v)
        keys = list(d)
        if keys:
            k = _rng.choice(keys)
            inner = _decoy(d[k], type(d[k]))
            if inner is not _NONE:
                d[k] = inner
                return d
        d[_mutate_text("key", _LETTERS)] = _rng.randint(0, 99)
        return d
    if t in (set, frozenset):
        return t(set(v) | {_rng.randint(10**6, 10**7)})
    if v is None:
        return _NONE
    return _NONE


def _far_decoys(v, k):
    """`k` values of v's type that no honest container in a test would hold (a container may
    well hold v's neighbours): long random text, twelve-digit numbers."""
    t = type(v)
    if t is str:
        return ["".join(_rng.choice(_LETTERS) for _ in range(16)) for _ in range(k)]
    if t is bytes:
        return [bytes(_rng.randrange(256) for _ in range(16)) for _ in range(k)]
    if t is int:
        return [_rng.randrange(10**11, 10**12) * _rng.choice((-1, 1)) for _ in range(k)]
    if t is float:
        return [_rng.uniform(1e11, 1e12) * _rng.choice((-1, 1)) for _ in range(k)]
    return []


def _mutate_text(s, letters):
    """s with one character replaced by another letter or digit (never a case variant or
    whitespace, which an honest case- or space-insensitive equality would ignore); "" gets
    one character."""
    if not s:
        return _rng.choice(letters)
    i = _rng.randrange(len(s))
    taboo = {s[i].lower(), s[i].upper()}
    c = _rng.choice([x for x in letters if x not in taboo])
    return s[:i] + c + s[i + 1 :]


def _random_state(state):
    version, internal, gauss = state
    return [version, list(internal), gauss]


# ---- the guard's report ------------------------------------------------------------------------


def report(event, **fields):
    """One line in the guard's report (only processes of the tests can write there)."""
    path = _manifest_cached().get("report")
    if not path:
        return
    fields.update(event=event, pid=os.getpid())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, (json.dumps(fields) + "\n").encode())
        finally:
            os.close(fd)
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
    # capabilities the user cannot raise it again.
    resource.setrlimit(resource.RLIMIT_NPROC, (TESTED_NPROC, TESTED_NPROC))


def _spawn(argv, **kwargs):
    """Start the tested process as TESTED_UID; where this process may not switch users (it is
    not root, or lacks the capability), as itself (the Landlock layer then stands alone)."""
    if os.getuid() == 0:
        try:
            return subprocess.Popen(argv, preexec_fn=_drop_privileges, **kwargs), TESTED_UID
        except (OSError, subprocess.SubprocessError):
            pass
    return subprocess.Popen(argv, **kwargs), None


def _kill_tested_user():
    """Kill everything the tested code started (daemons included, which could otherwise
    rewrite files the rest of test.sh reads): kill(-1) sent as the tested user reaches exactly
    that user's processes, in one pass of the kernel."""
    killer = [sys.executable, "-I", "-S", "-c", "import os; os.kill(-1, 9)"]
    try:
        subprocess.run(killer, preexec_fn=_drop_privileges, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pass


def _end_tested(ep):
    """When the tests' process ends, so does the tested code."""
    ep.sock.close()
    _kill_tested_user()
    try:
        ep.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _tested_argv(*args):
    return [sys.executable, "-I", "-B", os.path.join(_HERE, "tested.py"), *args]


def _watch_reseeding(ep):
    """Note when the tests re-seed the random module: re-seeding to the state it had at the
    last call must still reach the tested process, whose copy has moved on since."""

    def watched(original):
        def call(*args, **kwargs):
            ep.reseeded = True
            return original(*args, **kwargs)

        call.__wrapped__ = original
        call.__doc__ = original.__doc__
        return call

    for name in ("seed", "setstate"):
        setattr(random, name, watched(getattr(random, name)))


def _not_dumpable():
    """No process of another user, or of ours without CAP_SYS_PTRACE, may read our memory or
    open our descriptors through /proc, nor trace us."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:
        pass


def _setup_for_tested(manifest):
    app, workspace = manifest["app"], manifest["workspace"]

    def mapped(path):
        path = os.path.abspath(path or os.getcwd())
        if path == app or path.startswith(app + os.sep):
            return workspace + path[len(app) :]
        return path

    return {
        "path": [mapped(p) for p in sys.path if not p.startswith(manifest.get("tests", "/tests"))],
        "cwd": mapped(os.getcwd()),
        "workspace": workspace,
    }


def endpoint():
    """The channel to this process's tested process, started on first use."""
    global _endpoint
    if _endpoint is not None and _endpoint.pid == os.getpid():
        return _endpoint
    manifest = _manifest()
    _not_dumpable()
    ours, theirs = socket.socketpair()
    proc, uid = _spawn(
        _tested_argv("serve", str(theirs.fileno())),
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
    )
    theirs.close()
    ep = TrustedEndpoint(ours, manifest)
    ep.proc = proc
    _watch_reseeding(ep)
    if uid is not None:
        atexit.register(_end_tested, ep)
    hello = ep.request("hello", _setup_for_tested(manifest))
    # Answered before any of the workspace's code ran in that process: what it says is so.
    report("isolated", mode="import", tested_pid=proc.pid, uid=uid, landlock=hello.get("landlock"))
    _endpoint = ep
    return ep


class RemoteModule(types.ModuleType):
    """A workspace module: its attributes are those of the real module in the tested process.
    The import system's own attributes (dunders, submodules) stay here."""

    def __getattr__(self, name):
        remote = self.__dict__.get("__rollouts_remote__")
        if remote is None or name.startswith("_rollouts_") or name in rpc.LOCAL_DUNDERS:
            raise AttributeError(name)
        return remote._rollouts_ep.request("getattr", remote, name)

    def __setattr__(self, name, value):
        remote = self.__dict__.get("__rollouts_remote__")
        if remote is None or name.startswith("__") or isinstance(value, types.ModuleType):
            types.ModuleType.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)
        remote._rollouts_ep.request("setattr", remote, name, value)

    def __delattr__(self, name):
        remote = self.__dict__.get("__rollouts_remote__")
        if remote is None or name.startswith("__") or name in self.__dict__:
            types.ModuleType.__delattr__(self, name)
            return
        remote._rollouts_ep.request("delattr", remote, name)

    def __dir__(self):
        remote = self.__dict__.get("__rollouts_remote__")
        names = set(self.__dict__)
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
        module = next(
            (
                m
                for m in list(sys.modules.values())
                if getattr(m, "__dict__", None) is module_globals
            ),
            None,
        )
    if module is None:
        raise ImportError("load the workspace module %r with import, not by executing it" % name)
    ep = endpoint()
    remote = ep.request("import", name)
    module.__class__ = RemoteModule
    module.__dict__["__rollouts_remote__"] = remote
    # `from NAME import *` reads __all__, or else this module's own namespace: the names the
    # real module exports, then.
    module.__dict__["__all__"] = ep.request("exports", remote)
    return module


def run_main(name):
    """`python3 /app/NAME.py ARGS` or `python3 -m NAME`: run the real module as __main__ in a
    tested process that shares this one's standard streams, and exit with its status."""
    manifest = _manifest()
    setup = _setup_for_tested(manifest)
    _not_dumpable()
    proc, uid = _spawn(_tested_argv("main", json.dumps(setup), name, *sys.argv[1:]))
    report("isolated", mode="main", tested_pid=proc.pid, uid=uid)
    status = proc.wait()
    if uid is not None:
        _kill_tested_user()
    sys.exit(status if status >= 0 else 128 - status)
