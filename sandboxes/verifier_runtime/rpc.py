"""Objects shared by reference between two Python processes: the tests' and the tested code's.

The verifier runs the tests in one process (trusted: it holds the verdict) and the agent's
code in another (unprivileged; see trusted.py and tested.py). This module is what both sides
speak over one socket: each side exports its objects by id, and the other sees them as
proxies (instances of "mirror" classes named after the real ones), so `solution.fn(x)` in a
test calls the function in the tested process and gets back plain data or a proxy.

Messages (JSON frames, values encoded by codec.py; "t" is a message's table of composites):
  {"q": n, "op": name, "a": [args], "t": [...]}            a request (n counts up per sender)
  {"r": n, "v": value, "t": [...]} or {"r": n, "e": exc}   its answer; "u": copy-back
  {"w": 1 | 2, "s": text}                                  the tested code's output (one way)
  {"log": [name, level, message]}                          its log records (one way)

Plain values and standard library values travel by value. A list, dict, set or bytearray
sent as an argument comes back in the answer ("u") with what the callee did to it and is
updated in place, so in-place changes behave as in one process. Everything else travels by
reference: ["o", oid, class] an object of the sender's, ["C", oid, meta] a class, ["x", oid]
the receiver's own object coming back, ["m"/"g", module, qualname, oid, class] a module or
function the receiver may already have under that name, ["E", ...] an exception.

Decoding never runs code the other side chose: it builds plain values, proxies, references to
our own exported objects, or, for names of modules, classes and functions already imported
here, our own objects. A proxy's mirror class has the special methods and abstract base
classes of the real class, nothing more (proxies.py). Exceptions, named tuples, dataclasses
and namespaces of the standard library or of installed packages become instances of our own
class of that name where it is imported here (made from decoded values, never by running
what the other side sent); other exceptions become mirror classes derived from their nearest
such exception or builtin one, so no exception from the tested code can be one that a test
runner treats as a skip, an exit or an interrupt (`_RUNNER_PACKAGES`; `PeerExit` for
SystemExit). What stays a mirror although it is the standard library's or a package's goes
to `fidelity_gap`.

Standard library only, Python >= 3.8: it runs under the task image's interpreter.
"""

from __future__ import annotations

import builtins
import collections
import importlib.util
import os
import socket
import sys
import threading
import traceback
import types
import weakref


def _load(name):
    key = "_rollouts_" + name
    if key not in sys.modules:
        here = os.path.dirname(os.path.abspath(__file__))
        spec = importlib.util.spec_from_file_location(key, os.path.join(here, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


codec = _load("codec")
proxies = _load("proxies")
bindings = _load("bindings")
iterators = _load("iterators")
Bindings = bindings.Bindings
_UNKNOWN = bindings.UNKNOWN
ProtocolError = codec.ProtocolError
PeerGone = codec.PeerGone
PeerExit = proxies.PeerExit
AsReference = proxies.AsReference
RemoteObject = proxies.RemoteObject
RemoteClassMeta = proxies.RemoteClassMeta
LOCAL_DUNDERS = proxies.LOCAL_DUNDERS
_OPERATORS = proxies.OPERATORS
_qualified = proxies.qualified
remote_name = proxies.remote_name  # also for the trusted side's module proxies (trusted.py)

TEXT_CAP = 8 << 10  # an exception's text and traceback, each
CHUNK_MAX = 1024  # items of an iterator in one answer (`_serve_chunk`)
CHUNK_TABLE = 4096  # ... or fewer, once their composites fill this many table entries

# Exceptions that may be raised here as themselves when the other side raised them.
SAFE_EXCEPTIONS = {
    name: cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, Exception)
}
_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
)


class Endpoint:
    """One side of the channel: its exports, its proxies of the other side's objects, and the
    request/serve loop (a request waits for its answer while serving the other side's
    requests, so calls may nest both ways)."""

    def __init__(self, sock):
        self.sock = sock
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.send_lock = threading.Lock()
        self.exports = {}  # oid -> object
        self.export_ids = {}  # id(object) -> oid
        self.sent = {}  # oid -> times sent (released when the other side drops as many)
        self.next_oid = 1
        self.next_q = 1
        self.served = 0  # requests of the other side answered (with next_q: the exchanges)
        self.proxies = weakref.WeakValueDictionary()  # other side's oid -> proxy
        self.received = {}  # other side's oid -> times received (for its release)
        self.mirrors = {}  # other side's class oid -> mirror class
        self.releases = []  # [oid, count] of proxies that died, sent with the next message
        self.broken = None
        self.facts = {}  # id(class) -> (class, what its class node says of it but its oid)
        self.gaps = set()  # (module, qualname) of classes reported to `fidelity_gap`
        self.bindings = Bindings()  # module attributes the other side keeps (`Bindings`)

    def send(self, msg):
        with self.send_lock:
            codec.send_frame(self.sock, msg)

    # ---- requests ------------------------------------------------------------------------

    def request(self, op, *args):
        """Ask the other side to do `op` on `args`; return its answer decoded (or raise the
        exception it answered with)."""
        if op == "getattr":
            kept = self.bindings.kept(args[0], args[1])
            if kept is not _UNKNOWN:
                return kept
        with self.lock:
            if self.broken is not None:
                raise PeerGone("the channel to the other process failed: %s" % self.broken)
            if os.getpid() != self.pid:
                raise PeerGone("a forked process cannot use its parent's channel")
            q = self.next_q
            self.next_q += 1
            memo = codec.Memo(records=self)
            nodes = [self.encode(a, memo) for a in args]
            msg = {"q": q, "op": op, "a": nodes, "t": memo.table}
            self.before_request(msg)
            try:
                self.send(msg)
                answer = {}
                failed, outcome = self._wait(q, memo, answer)
            except (PeerGone, ProtocolError, OSError, RecursionError) as e:
                if self.broken is None:  # a nested request may have recorded the first cause
                    self.broken = e
                raise PeerGone(
                    "the channel to the other process failed: %s" % self.broken
                ) from None
        if failed:
            raise outcome
        if op == "getattr" and "c" in answer:
            self.bindings.keep(args[0], args[1], outcome)
        return outcome

    def _wait(self, q, sent, answer):
        """(failed, exception or value) of request `q`, serving the other side meanwhile;
        `answer` gets the answer's flags."""
        while True:
            msg = codec.recv_frame(self.sock)
            self.bindings.forget(msg.get("inv"))
            if "r" in msg:
                if msg["r"] != q:
                    raise ProtocolError("answer %r to request %r" % (msg["r"], q))
                self.after_answer(msg)
                memo = self._built(msg, sent)
                if "c" in msg:
                    answer["c"] = 1
                if "e" in msg:
                    return True, self.decode_exception(msg["e"], memo)
                if "k" in msg:
                    return False, self._decoded_chunk(msg, memo)
                return False, self.decode(msg.get("v"), memo)
            if "q" in msg:
                self.serve_one(msg)
            elif "w" in msg:
                self.on_output(msg)
            elif "log" in msg:
                self.on_log(msg)
            else:
                raise ProtocolError("unknown message")

    def _built(self, msg, sent=None):
        """The message's composites built; for an answer, the copy-back applied to ours."""
        table = msg.get("t") or []
        back = msg.get("u") or []
        if not isinstance(table, list) or not isinstance(back, list):
            raise ProtocolError("table")
        memo = codec.Memo(table, records=self)
        if sent is not None:
            memo.originals = sent.objects
        try:
            targets = [n for n, _node in back]
            fresh = codec.build(memo, self._reference_decoder(memo), [node for _n, node in back])
        except (TypeError, ValueError) as e:
            raise ProtocolError("copy-back: %s" % e) from None
        for i, new in enumerate(fresh):
            n = targets[i]
            original = sent.objects.get(n) if sent is not None else None
            if original is None or type(original) is not type(new):
                raise ProtocolError("copy-back of container %r" % (n,))
            if not isinstance(original, codec.MUTABLE):  # a mutable record
                _update_record(original, new)
            elif isinstance(original, (list, bytearray)):
                original[:] = new
            elif isinstance(original, collections.deque):
                original.clear()
                original.extend(new)
            else:
                original.clear()
                original.update(new)
        return memo

    def serve_forever(self):
        while True:
            msg = codec.recv_frame(self.sock)
            if "q" not in msg:
                raise ProtocolError("only requests are expected here")
            self.serve_one(msg)

    def _decoded_chunk(self, msg, memo):
        """(items, the exception that ended the iterator or None) of a "chunk" answer."""
        items, end = msg["k"], msg.get("z")
        if not isinstance(items, list):
            raise ProtocolError("chunk")
        values = [self.decode(node, memo) for node in items]
        return values, (None if end is None else self.decode_exception(end, memo))

    def serve_one(self, msg):
        q, op, raw = msg.get("q"), msg.get("op"), msg.get("a")
        if type(q) is not int or not isinstance(op, str) or not isinstance(raw, list):
            raise ProtocolError("malformed request")
        self.served += 1
        self.on_request(msg)
        memo = self._built(msg)
        args = [self.decode(a, memo) for a in raw]
        out = codec.Memo(records=self)
        # The caller's own containers, if they come back in the answer, stay theirs.
        out.refs = {id(c): n for n, c in memo.objects.items() if _mutable(memo, n, c)}
        reply = {"r": q}
        try:
            if op == "chunk":
                self._serve_chunk(args, out, reply)
            else:
                reply["v"] = self.encode(self.dispatch(op, args), out)
                if op == "getattr" and self.bindings.watch(args, self.export_ids):
                    reply["c"] = 1
        except (PeerGone, ProtocolError):
            raise
        except BaseException as e:  # the callee's own exception (SystemExit too) goes back
            reply.pop("v", None)
            reply["e"] = self.encode_exception(e, out)
            codec.drain(out, self._reference_encoder(out))
        back = self._copy_back(memo, out)
        reply["t"] = out.table
        if back:
            reply["u"] = back
        self.before_answer(reply)
        self.send(reply)

    def _serve_chunk(self, args, out, reply):
        """Up to n items of an iterator of ours in one answer ("k"), each encoded as it comes
        (as its own answer would carry it: a list yielded twice, changed between, goes twice),
        and the exception that ended it ("z", StopIteration included). The other side asks
        only while one builtin call of its own consumes the iterator whole (iterators.py);
        to us it is the same as n requests for `next` in a row."""
        if len(args) != 2 or type(args[1]) is not int or not 0 < args[1] <= CHUNK_MAX:
            raise ProtocolError("chunk")
        it = args[0]
        self.check_target(it)
        nodes = reply["k"] = []
        for _ in range(args[1]):
            try:
                item = next(it)
            except (PeerGone, ProtocolError):
                raise
            except BaseException as e:  # the iterator's end, or its own exception
                reply["z"] = self.encode_exception(e, out)
                codec.drain(out, self._reference_encoder(out))
                return
            nodes.append(self.encode(item, out))
            out.ids.clear()  # the next item's composites are its own copies
            out.described.clear()
            if len(out.table) > CHUNK_TABLE:
                return

    def _copy_back(self, request, out):
        """[n, entry] for each of the caller's containers that the call changed."""
        back = []
        encoder = self._reference_encoder(out)
        for n, container in request.objects.items():
            if not _mutable(request, n, container):
                continue
            try:
                node = codec.entry(container, out, encoder)
                codec.drain(out, encoder)
            except Exception:
                continue
            if node is not None and not _same_entry(node, request.table[n - 1]):
                back.append([n, node])
        return back

    def oneway(self, msg):
        if self.broken is None:
            self.send(msg)

    # ---- hooks (the trusted and the tested side override these) --------------------------

    def before_request(self, msg):
        if self.releases:
            msg["rel"], self.releases = self.releases, []
        self.bindings.changed(msg)

    def after_answer(self, msg):
        pass

    def on_request(self, msg):
        for item in msg.get("rel") or []:
            self._release(item)
        self.bindings.forget(msg.get("inv"))

    def before_answer(self, reply):
        self.bindings.changed(reply)

    def on_output(self, msg):
        raise ProtocolError("unexpected output message")

    def on_log(self, msg):
        raise ProtocolError("unexpected log message")

    def compare(self, proxy, op, other):
        return self.request("op", op, proxy, other)

    def contains(self, proxy, item):
        return self.request("op", "contains", proxy, item)

    def arithmetic(self, proxy, op, other):
        return self.request("op", op, proxy, other)

    def allowed_name(self, name):
        """Attribute names the other side may get or set on our objects."""
        return isinstance(name, str)

    def check_target(self, obj):
        """Raise unless the other side may act on `obj` (see trusted.py)."""

    def dispatch(self, op, args):
        if op in ("getattr", "setattr", "delattr"):
            obj, name = args[0], args[1]
            if not self.allowed_name(name):
                raise AttributeError("attribute %r is not available to the other process" % (name,))
            self.check_target(obj)
            if op == "getattr":
                return getattr(obj, name)
            if op == "setattr":
                setattr(obj, name, args[2])
            else:
                delattr(obj, name)
            return None
        if op == "call":
            fn, pos, kw = args
            if not isinstance(pos, tuple) or not isinstance(kw, tuple):
                raise ProtocolError("call arguments")
            self.check_target(fn)
            return fn(*pos, **dict(kw))
        if op == "op":
            name = args[0]
            if not isinstance(name, str) or name not in _OPERATORS:
                raise ProtocolError("operator %r" % (name,))
            self.check_target(args[1])
            return _OPERATORS[name](*args[1:])
        return self.dispatch_other(op, args)

    def dispatch_other(self, op, args):
        raise ProtocolError("unknown request %r" % op)

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

    def fidelity_gap(self, module, qualname, why):
        """A value of the other side's class `module.qualname` (of the standard library or an
        installed package, not the workspace's) arrived as a mirror, which is not what it is
        (`isinstance` with the real class fails): the trusted side records it for the grade's
        calibration. Called once per class."""

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
        if isinstance(v, _ROUTINE_TYPES) and self.allowed_name("__name__"):
            node.append(_routine_names(v))
        return node

    def _defined_here(self, obj):
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        return module is not None and self.is_own_module(module)

    def class_node(self, cls, named=False):
        """["C", oid, meta] for a class: its names and documentation (where the other side may
        read `__doc__`: the tests' is not the tested code's to read), its non-builtin bases,
        for exception classes the nearest builtin exception it derives from, the special
        methods it has ("s"), whether it is hashable ("h"), the abstract base classes it is a
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
            "s": proxies.special_methods(cls),
            "h": proxies.hashable(cls),
            "a": proxies.abcs_of(cls),
            "f": _dataclass_fields(cls),
        }
        if iterators.iterates_itself(cls):
            facts["I"] = 1
        named = None if self._defined_here(cls) else _qualified(cls)
        if named:
            facts["g"] = named
            if _installed(named[0]):
                facts["i"] = 1
        self.facts[id(cls)] = (cls, facts)
        return facts

    def encode_exception(self, e, memo):
        encoder = self._reference_encoder(memo)
        try:
            args = [codec.leaf(a, memo, encoder) for a in e.args]
        except Exception:
            args = [_cap(repr(a)) for a in e.args]
        try:
            text = _cap(str(e))
        except Exception:
            text = "<unprintable %s>" % type(e).__name__
        tb = _cap("".join(traceback.format_exception(type(e), e, e.__traceback__)))
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
        return ["E", node, args, text, tb, self.export(e), attrs]

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
        # (a mirror's __new__ is a local base's: object's, an exception's or tzinfo's)
        proxy = object.__new__(cls) if cls.__new__ is object.__new__ else cls.__new__(cls)
        object.__setattr__(proxy, "_rollouts_ep", self)
        object.__setattr__(proxy, "_rollouts_oid", oid)
        self.proxies[oid] = proxy
        self._mirrored(class_node[2], "an instance of it arrived as a mirror")
        return proxy

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
        if type(oid) is not int or not isinstance(meta, dict):
            raise ProtocolError("class node")
        bases = [self._base(b) for b in meta.get("b") or []]
        builtin = self.exception_base(meta.get("x"))
        if builtin is not None and not any(issubclass(b, builtin) for b in bases):
            bases.append(builtin)
        if not any(issubclass(b, RemoteObject) for b in bases):
            # After a base of _DERIVED (whose own __new__ must make the proxy), else first.
            derived = any(_qualified(b) in _DERIVED for b in bases)
            bases.insert(len(bases) if derived else 0, RemoteObject)
        name, qualname, module = str(meta.get("n")), str(meta.get("q")), str(meta.get("m"))
        doc = meta.get("d")
        specials = meta.get("s")
        specials = set(specials) if isinstance(specials, list) else set()
        namespace = {
            "__module__": module,
            "__qualname__": qualname,
            "__doc__": doc if isinstance(doc, str) else None,
        }
        namespace.update(proxies.mirror_namespace(specials, meta.get("h") is not False, bases))
        iterators.adapt(namespace, meta)
        fields = meta.get("f")
        if isinstance(fields, list):
            namespace["__dataclass_fields__"] = proxies.dataclass_fields(fields)
        for base in bases:
            if _qualified(base) in _DERIVED:  # its methods are the real object's, not the base's
                namespace.update(_forwarded(base))
        try:
            cls = RemoteClassMeta(name, tuple(bases), namespace)
        except TypeError:  # an MRO the local bases cannot form: keep what matters
            fallback = (RemoteObject,) + ((builtin,) if builtin is not None else ())
            namespace = dict(namespace, **proxies.mirror_namespace(specials, True, fallback))
            iterators.adapt(namespace, meta)
            cls = RemoteClassMeta(name, fallback, namespace)
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
        if isinstance(meta, dict) and tuple(meta.get("g") or ()) in _DERIVED:
            cls = self.importable_class(meta)  # fidelity's (codec.py's value types)
            if cls is not None:
                return cls
        return self.mirror(node)

    def exception_base(self, name):
        """The local base of a mirrored exception class whose nearest builtin is `name`."""
        if name is None:
            return None
        if name == "SystemExit":
            return PeerExit
        return SAFE_EXCEPTIONS.get(name, Exception)

    def decode_exception(self, node, memo):
        if not (isinstance(node, list) and len(node) == 7 and node[0] == "E"):
            raise ProtocolError("exception node")
        _, class_node, raw_args, text, tb, oid, raw_attrs = node
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
            self.releases.append([oid, 1])
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
        if isinstance(tb, str) and tb and hasattr(exc, "add_note"):
            exc.add_note("[in the other process]\n" + tb.rstrip())
        return exc

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

    # ---- records: named tuples, dataclasses, namespaces by value (codec.py asks) -----------

    def describe(self, v):
        """(kind, [module, qualname], field names, values) when `v` travels by value as a
        record (`_record_kind`: a named tuple, dataclass or namespace of the standard library
        or an installed package), its state all in its fields; else None."""
        cls = type(v)
        if issubclass(cls, (RemoteObject, type, AsReference)):  # proxies, classes: references
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


# Classes of the standard library whose instances its C code type-checks, with no state of
# their own: a mirror of a class derived from one derives from the real one (so a datetime
# takes the solution's tzinfo), each of its public methods asked of the real object.
_DERIVED = frozenset({("datetime", "tzinfo")})


def _forwarded(base):
    def forward(name):
        def method(self, *args, **kwargs):
            return self._rollouts_ep.request("getattr", self, name)(*args, **kwargs)

        method.__name__ = method.__qualname__ = name
        return method

    return {name: forward(name) for name in vars(base) if not name.startswith("_")}


def _same_entry(new, old):
    """Whether a copy-back entry equals the request's entry for that container. In the
    request every ["@", n] is a request entry; in the answer that is ["R", n], and ["@", n] is
    something new."""

    def norm(x, answer):
        if isinstance(x, list):
            if len(x) == 2 and x[0] in ("@", "R"):
                return ("new" if answer and x[0] == "@" else "req", x[1])
            if len(x) == 5 and x[0] == "M":  # a record: its reference is sent anew each time
                x = x[:4]
            return [norm(y, answer) for y in x]
        return x

    return norm(new, True) == norm(old, False)


_ROUTINE_TYPES = _FUNCTION_TYPES + (
    types.MethodType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
)


_ROUTINE_NAMES = (("n", "__name__"), ("q", "__qualname__"), ("m", "__module__"), ("d", "__doc__"))


def _routine_names(fn):
    """A routine's names and documentation, as its own (C-level) attributes say."""
    names = {}
    for key, attr in _ROUTINE_NAMES:
        value = getattr(fn, attr, None)
        names[key] = (_cap(value) if key == "d" else value) if isinstance(value, str) else None
    return names


def _set_routine_names(proxy, names):
    """Answer a routine proxy's names and documentation here (the class node has its class's)."""
    if not isinstance(names, dict):
        raise ProtocolError("routine names")
    for key, attr in _ROUTINE_NAMES:
        value = names.get(key)
        if isinstance(value, str):
            object.__setattr__(proxy, attr, value)


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


def _refused(cls):
    return any(
        str(getattr(k, "__module__", "")).partition(".")[0] in _RUNNER_PACKAGES for k in cls.__mro__
    )


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


def _mutable(memo, n, obj):
    """Whether decoded entry n is one of the sender's mutable containers, or a mutable record
    rebuilt as ours (not a proxy), whose changes go back to it."""
    if isinstance(obj, codec.MUTABLE):
        return True
    return memo.table[n - 1][0] == "M" and not isinstance(obj, RemoteObject)


def _update_record(original, new):
    """Our mutable record `original` made to hold what the copy-back `new` holds."""
    kind = _record_kind(type(original))
    fields = kind[1] if kind[1] is not None else list(vars(new))
    if kind[1] is None:
        vars(original).clear()
    for name in fields:
        object.__setattr__(original, name, getattr(new, name))


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


def socket_from_fd(fd):
    return socket.socket(fileno=fd)
