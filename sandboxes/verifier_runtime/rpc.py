"""Objects shared by reference between two Python processes: the tests' and the tested code's.

The verifier runs the tests in one process (trusted: it holds the verdict) and the agent's
code in another (unprivileged; see trusted.py and tested.py). This module is what both sides
speak over one socket: each side exports its objects by id, and the other sees them as
proxies (instances of "mirror" classes named after the real ones), so `solution.fn(x)` in a
test calls the function in the tested process and gets back plain data or a proxy.

Messages (JSON frames, values encoded by codec.py; "t" is a message's table of composites):
  {"q": n, "op": name, "a": [args], "t": [...]}            a request (n counts up per sender)
  {"r": n, "v": value, "t": [...]} or {"r": n, "e": exc}   its answer; "u": copy-back
  {"r": n, "k": [items], "z": exc}                         the answer to "chunk" (iterators.py),
                                                           or beside "v" to a call asked
                                                           with "ck": its first chunk
  {"r": n, "k": [items], "z": exc, "p": 1}                 ... to "peek": items read ahead
                                                           of a copy (readahead.py); with
                                                           "f": plain JSON, not nodes
  {"r": n, "k": [], "p": 1, "b": recipe}                   ... to either, asked by the tested
                                                           side: its copy to make itself
  {"w": 1 | 2, "s": text}                                  the tested code's output (one way)
  {"log": [name, level, message]}                          its log records (one way)
Any request or answer may carry the lists, dicts and sets both sides share (shares.py): "sy"
changed ones, "sk" new ones inside them, "sx" ended ones; an answer "sr" the request's
containers the callee kept. A getattr's answer with "c" may be kept; any message's "inv"
lists kept answers that no longer hold (bindings.py); any request or answer's "ra" lists
[oid, used, ended] of the items read ahead that the sender used (readahead.py), and "rel"
[oid, count] of the receiver's objects whose proxies died at the sender (references.py;
in an answer, applied once the rest of it is decoded: its value may name them).

Plain values and standard library values travel by value. A list, dict, set or bytearray
sent as an argument comes back in the answer ("u") with what the callee did to it and is
updated in place, so in-place changes behave as in one process; one the callee keeps is
shared from then on (shares.py). Everything else travels by
reference: ["o", oid, class] an object of the sender's, ["C", oid, meta] a class, ["x", oid]
the receiver's own object coming back, ["m"/"g", module, qualname, oid, class] a module or
function the receiver may already have under that name, ["E", ...] an exception.

Decoding never runs code the other side chose: it builds plain values, proxies, references to
our own exported objects, or, for names of modules, classes and functions already imported
here, our own objects (references.py). A proxy's mirror class has the special methods and
abstract base classes of the real class, nothing more (proxies.py, mirrors.py). Exceptions
(mirrors.py), named tuples, dataclasses and namespaces (records.py) of the standard library
or of installed packages become instances of our own class of that name where it is
imported here (an exception that crosses back is its sender's own object again); no exception
from the tested code can be one that a test runner treats as a skip, an exit or an interrupt.

Standard library only, Python >= 3.8: it runs under the task image's interpreter.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import weakref

# Bound once: a test may patch os.getpid (mock.patch, patches.py), and the runtime's own
# checks of which process it is must not see the patch.
_getpid = os.getpid
# The forks this process descends through, counted by the interpreter's fork hook: a forked
# process must not use its parent's channel, and asking os.getpid at every request was a
# system call each (a trip through the sentry under gVisor).
_forks = [0]
os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)


codec = _load("codec")
proxies = _load("proxies")
bindings = _load("bindings")
iterators = _load("iterators")
mirrors = _load("mirrors")
references = _load("references")
records = _load("records")
readahead = _load("readahead")
based = _load("based")
shares = _load("shares")
Bindings = bindings.Bindings
_UNKNOWN = bindings.UNKNOWN
ProtocolError = codec.ProtocolError
# A probe's answer (tested.py) for a comparison whose truth changed when asked twice.
UNSTABLE = "unstable"
PeerGone = codec.PeerGone
PeerExit = proxies.PeerExit
AsReference = proxies.AsReference
RemoteObject = proxies.RemoteObject
RemoteClassMeta = proxies.RemoteClassMeta
LOCAL_DUNDERS = proxies.LOCAL_DUNDERS
_OPERATORS = proxies.OPERATORS
_qualified = proxies.qualified
remote_name = proxies.remote_name  # also for the trusted side's module proxies (trusted.py)

SAFE_EXCEPTIONS = mirrors.SAFE_EXCEPTIONS

# An iterator's own step, where StopIteration (or StopAsyncIteration) is the protocol: next()
# and anext(), and these methods called by name (a generator's send and throw, a coroutine's).
_STEP_OPS = frozenset(("next", "anext"))
_STEP_METHODS = frozenset(("__next__", "send", "throw", "__anext__", "asend", "athrow"))
STOPS = (StopIteration, StopAsyncIteration)
_STEP = "_rollouts_step"  # (on a proxy: what a getattr of a step's name answered)


def iterator_step(op, args):
    """Whether request `op` with `args` is an iterator's own step (see `leaked_stop`): a call
    of one of `_STEP_METHODS` by name on an object that steps, or of what a getattr of that
    name gave (`step_method`)."""
    if op == "op":
        return bool(args) and args[0] in _STEP_OPS
    if op in ("callattr", "inherited"):  # (the object; the class whose method runs)
        cls = type(args[0]) if op == "callattr" else args[0]
        return len(args) > 1 and args[1] in _STEP_METHODS and _steps(cls)
    if op == "call":
        return bool(args) and isinstance(args[0], RemoteObject) and _STEP in proxies.own(args[0])
    return op in ("chunk", "peek")  # (their end travels as a value, and is the iterator's)


def step_method(op, args, answer):
    """Mark what a getattr of a step's name answered (`gen.send`, kept and called later)."""
    if op == "getattr" and len(args) > 1 and args[1] in _STEP_METHODS and _steps(type(args[0])):
        if isinstance(answer, RemoteObject):
            object.__setattr__(answer, _STEP, True)


def _steps(cls):
    """Whether objects of `cls` are iterators, asynchronous iterators or awaitables (generators,
    asynchronous ones, coroutines), whose step methods end with StopIteration by protocol.
    A module's function or another object's method of such a name (`solution.send`,
    `Mailer().throw`) is no step: mapped by the tests, its StopIteration would end their
    iteration. Read off the class's own dictionaries: a mirror has these special methods
    where the real class has them (a lookup missed on a mirror class may ask the other side)."""
    mro = getattr(cls, "__mro__", ())
    return any(name in vars(k) for k in mro for name in _STEPPING)


_STEPPING = ("__next__", "__anext__", "__await__")


def leaked_stop(answer, where):
    """The other process's StopIteration (or StopAsyncIteration) from anything but an
    iterator's own step, as the RuntimeError Python makes of one that leaves a generator (PEP
    479); any other answer as it is. Raised where the tests iterate (`all(map(fn, xs))`, a
    `for` over `filter(fn, xs)`, a comparison in a lambda they map), it would end their
    iteration as if there were no more items: a function that only raises it would pass every
    assertion those loops hold."""
    if not isinstance(answer, STOPS):
        return answer
    leaked = RuntimeError(
        "the tested code raised %s from %s: not an iterator's step, so raised as RuntimeError "
        "(as Python does where one leaves a generator)" % (type(answer).__name__, where)
    )
    leaked.__cause__ = answer
    return leaked


# Requests that call: where their positional arguments and keyword pairs are (codec.arguments).
_CALLING = {"call": 1, "callattr": 2}
_record_kind = records._record_kind  # (trusted.py)


class NotCalled:
    """The answer to "callattr" where the attribute is not a function or method: it goes back
    as a getattr's answer, flagged ("g"), and the asking side calls what it gets (methods.py)."""

    __slots__ = ("attribute",)

    def __init__(self, attribute):
        self.attribute = attribute


class Endpoint(
    references.References,
    mirrors.Mirrors,
    records.Records,
    readahead.ReadAhead,
    based.Based,
    shares.Shares,
):
    """One side of the channel: the request/serve loop (a request waits for its answer while
    serving the other side's requests, so calls may nest both ways) and what a request may
    ask; its exports and its proxies of the other side's objects (references.py), classes and
    exceptions (mirrors.py), records (records.py), items read ahead (readahead.py), subclasses
    of builtins (based.py), containers kept on both sides (shares.py)."""

    def __init__(self, sock):
        self.sock = sock
        self.frames = codec.FrameReader(sock)
        self.pid = _getpid()
        self.forks = _forks[0]
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
        self.chaining = False  # encoding an exception's cause or context (mirrors.py)
        self.copies = {}  # id(our copy of an exception of the other side's) -> (its __dict__,
        #                   the other side's id of the original), kept (mirrors.py)
        self.making = 0  # mirror classes being made (mirrors.py: no class statement of ours)
        self.made_classes = weakref.WeakSet()  # the other side's classes made here (subclasses)
        self.bindings = Bindings()  # module attributes the other side keeps (`Bindings`)
        self.peeking = {}  # id(proxy) -> proxy with items read ahead (iterators.py)
        self.peeked = {}  # oid -> [our iterator, how many read ahead of it (None: a recipe
        #                     went), whether to its end, those items]
        self.offered = {}  # oid -> (proxy, what is left of its items) set aside at a message
        self.holding = {}  # oid -> what the other side set aside of ours (readahead._hold)
        self.rebuilds = False  # whether we ask for recipes of the other side's iterators
        self.shares = {}  # handle -> our list, dict or set kept on both sides (shares.py)
        self.share_ids = {}  # id(container) -> handle
        self.snapshots = {}  # handle -> its items when last sent or heard
        self.ending_shares = []  # handles ended in the message being written, once sent
        self.next_share = 0
        self.based_sent = {}  # id(our list, dict or set subclass's object) -> (it, its base,
        #                       its items when last sent) (based.py `resend_changed`)
        self.based_items = 0  # those items, in all

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
            if _forks[0] != self.forks:
                raise PeerGone("a forked process cannot use its parent's channel")
            q = self.next_q
            self.next_q += 1
            msg = {"q": q, "op": op}
            self.end_unheld_shares(msg)
            memo = codec.Memo(records=self)
            memo.op = op
            if self.shares_by_reference(op):
                memo.shared = self.share_ids
            if op in _CALLING:  # [target, (positional...), ((name, value)...)] (+ name)
                n = _CALLING[op]
                head = [self.encode(a, memo) for a in args[:n]]
                msg["a"] = head + list(
                    codec.arguments(args[n], args[n + 1], memo, self._reference_encoder(memo))
                )
                if op == "call" and self.whole_after_call():
                    msg["ck"] = memo.first_chunk = 1  # (the answer's, if an iterator)
            else:
                msg["a"] = [self.encode(a, memo) for a in args]
            msg["t"] = memo.table
            self.send_shares(msg, memo)
            self.share_iterated(op, args, memo, msg)
            self.before_request(msg)
            self._tell_used(msg)
            held = self.before_wait(msg)
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
            finally:
                self.after_wait(held)
        if failed:
            try:
                raise outcome
            finally:
                # (else this frame, which the traceback holds, holds the exception: a cycle,
                # and with it the caller's frame and its objects, ours and the other side's,
                # live on until a collection; in one process they went when it was handled)
                outcome = None
        if op == "getattr" and "c" in answer:
            self.bindings.keep(args[0], args[1], outcome)
        if op == "callattr" and "g" in answer:  # the attribute, not called there (methods.py)
            step_method("getattr", args, outcome)
            return outcome(*args[2], **dict(args[3]))
        return outcome

    def _wait(self, q, sent, answer):
        """(failed, exception or value) of request `q`, serving the other side meanwhile;
        `answer` gets the answer's flags."""
        while True:
            msg = self.frames.frame()
            self.bindings.forget(msg.get("inv"))
            if "r" in msg:
                if msg["r"] != q:
                    raise ProtocolError("answer %r to request %r" % (msg["r"], q))
                self._advance_used(msg)
                self.after_answer(msg)
                outcome = self._answered(msg, sent, answer)
                # Our objects the other side dropped with its answer, once the answer (which
                # may name them) is decoded: a value it handed back is ours alone again.
                self._released(msg)
                return outcome
            if "q" in msg:
                self.serve_one(msg)
            elif "w" in msg:
                self.on_output(msg)
            elif "log" in msg:
                self.on_log(msg)
            else:
                raise ProtocolError("unknown message")

    def _answered(self, msg, sent, answer):
        """(failed, exception or value) of answer `msg` to our request `sent`."""
        memo = self._built(msg, sent)
        answer.update((flag, 1) for flag in ("c", "g") if flag in msg)
        if "e" in msg:
            return True, self.decode_exception(msg["e"], memo)
        if "k" in msg and "v" not in msg:
            return False, self.decoded_chunk(msg, memo)
        value = self.decode(msg.get("v"), memo)
        if "k" in msg:  # a call's answer and its first chunk ("ck")
            if not sent.first_chunk:
                raise ProtocolError("a chunk with an answer to %r" % sent.op)
            items, end, ahead = self.decoded_chunk(msg, memo)
            if ahead:
                raise ProtocolError("a call's first chunk read ahead")
            iterators.first_chunk(value, items, end)
        return False, value

    def _built(self, msg, sent=None):
        """The message's composites built; for an answer, the copy-back applied to ours."""
        table = msg.get("t") or []
        back = msg.get("u") or []
        synced = msg.get("sy") or []
        plain = not (table or back or synced)  # (most answers: a plain value, no change)
        if not plain and (
            not all(isinstance(x, list) for x in (table, back, synced))
            or not all(isinstance(x, list) and len(x) in (2, 3) for x in synced)
        ):
            raise ProtocolError("table")
        memo = codec.Memo(table, records=self)
        memo.shares = self.shares
        if sent is not None:
            memo.originals = sent.objects
        if plain:
            self.heard_shares(msg, memo, [], sent)
            return memo
        try:
            targets = [n for n, _node in back]
            extra = [node for _n, node in back] + [entry[1] for entry in synced]
            fresh = codec.build(memo, self._reference_decoder(memo), extra)
        except (TypeError, ValueError) as e:
            raise ProtocolError("copy-back: %s" % e) from None
        for i in range(len(table) + 1, len(table) + len(extra) + 1):
            memo.objects.pop(i)  # (not a container of the message: copy-back skips them)
        self.heard_shares(msg, memo, fresh[len(back) :], sent)
        for i, new in enumerate(fresh[: len(back)]):
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
            msg = self.frames.frame()
            if "q" not in msg:
                raise ProtocolError("only requests are expected here")
            self.serve_one(msg)

    def serve_one(self, msg):
        q, op, raw = msg.get("q"), msg.get("op"), msg.get("a")
        if type(q) is not int or not isinstance(op, str) or not isinstance(raw, list):
            raise ProtocolError("malformed request")
        self.served += 1
        self._advance_used(msg)
        self.on_request(msg)
        memo = self._built(msg)
        args = [self.decode(a, memo) for a in raw]
        reply = {"r": q}
        value = None  # the answer, where it is one
        out = codec.Memo(records=self)
        # The caller's own containers, if they come back in the answer, stay theirs.
        out.refs = {id(c): n for n, c in memo.objects.items() if _mutable(memo, n, c)}
        out.shared = self.share_ids
        try:
            if op == "chunk":
                self.serve_chunk(args, out, reply)
            elif op == "peek":
                self.serve_peek(args, out, reply)
            else:
                value = self.dispatch(op, args)
                if type(value) is NotCalled:
                    value, reply["g"] = value.attribute, 1
                # (an object the other side already holds may have items of it kept there)
                fresh = self.exports.get(self.export_ids.get(id(value))) is not value
                reply["v"] = self.encode(value, out)
                if op == "getattr" and self.bindings.watch(args, self.export_ids):
                    reply["c"] = 1
                if op == "call" and msg.get("ck") == 1 and fresh:
                    self.first_chunk(value, out, reply)
        except (PeerGone, ProtocolError):
            raise
        except BaseException as e:  # the callee's own exception (SystemExit too) goes back
            reply.pop("v", None)
            reply["e"] = self.encode_exception(e, out)
            codec.drain(out, self._reference_encoder(out))
        back = _copy_back(memo, out, self._reference_encoder(out))
        if op in shares.KEEPING_OPS:
            kept = self.kept_arguments(memo)
            if kept:
                reply["sr"] = kept
        # Shares ended now, not before serving: a request of ours while serving may have been
        # answered with one (the other side still had it), and the code may hold it again.
        subject, memo, args = args[:2], None, None
        self.end_unheld_shares(reply)
        self.send_shares(reply, out)
        kept = self.kept_answer(op, subject, value, out)
        if kept:
            reply.setdefault("sk", []).extend(kept)
        if self.based_sent and self.resends_after(op, subject):
            self.resend_changed(out, op, subject)
        value = subject = None
        reply["t"], out = out.table, None
        if back:
            reply["u"] = back
        self.before_answer(reply)
        self._tell_used(reply)
        # The other side's objects that died with this call (its answer's value too, dropped
        # just now): released with the answer, not with our next message, so that an object
        # of theirs we only passed through is theirs alone again when the call returns (a
        # `WeakValueDictionary` entry, a `weakref.ref` of theirs dies as in one process).
        if self.releases:
            reply["rel"], self.releases = self.releases, []
        self.send(reply)

    def whole_after_call(self):
        """Whether the call being asked hands its answer straight to a builtin that consumes
        it whole, so its first chunk may come with it (the trusted side decides, by the tests'
        frame: iterators.whole_after)."""
        return False

    def method_call(self, proxy, name, frame=None):
        """What our proxy's attribute `name`, read at `frame`'s instruction (None: called at
        once for certain), stands for where the read and the call may go as one request
        (methods.py); None: ask for the attribute."""
        return None

    def oneway(self, msg):
        if self.broken is None:
            self.send(msg)

    # ---- hooks (the trusted and the tested side override these) --------------------------

    def before_request(self, msg):
        if self.copies:
            self.sweep_copies()
        if self.releases:
            msg["rel"], self.releases = self.releases, []
        self.bindings.changed(msg)

    def before_wait(self, msg):
        """Last word on request `msg` before it is sent; what it returns goes to after_wait,
        once the answer came (or the channel broke)."""

    def after_wait(self, held):
        pass

    def after_answer(self, msg):
        pass

    def heard_text(self, value):
        """`value` came from the other side as text of its choosing (an answer, a docstring):
        the trusted side keeps it from being run as code (sources.py)."""

    def on_request(self, msg):
        self._released(msg)
        self.bindings.forget(msg.get("inv"))

    def before_answer(self, reply):
        self.bindings.changed(reply)

    def on_output(self, msg):
        raise ProtocolError("unexpected output message")

    def on_log(self, msg):
        raise ProtocolError("unexpected log message")

    def pickled(self, proxy, protocol):
        """What `pickle` makes of a proxy (its `__reduce_ex__`): the trusted side's own."""
        raise TypeError("an object of the other process cannot be pickled")

    def compare(self, proxy, op, other):
        return self.request("op", op, proxy, other)

    def contains(self, proxy, item):
        return self.request("op", "contains", proxy, item)

    def arithmetic(self, proxy, op, other, *more):
        return self.request("op", op, proxy, other, *more)

    def read_by_tests(self, frame):
        """Whether `frame` (reading an attribute of a proxy) is the tests' own code: the
        trusted side answers (trusted.py)."""
        return False

    def allowed_name(self, name):
        """Attribute names the other side may get or set on our objects."""
        return isinstance(name, str)

    def check_target(self, obj):
        """Raise unless the other side may act on `obj` (see trusted.py)."""

    def descriptor(self, proxy, op, args):
        """Descriptor protocol `op` (proxies.DESCRIPTOR_METHODS) of the other side's object
        `proxy`, which a class of ours holds: run there (the trusted side may keep it)."""
        return self.request("op", op, proxy, *args)

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
            return fn(*proxies.thrown(fn, pos), **dict(kw))
        if op == "op":
            name = args[0]
            served = _OPERATORS.get(name) if isinstance(name, str) else None
            if served is None and self.describes_descriptors and isinstance(name, str):
                served = proxies.DESCRIPTOR_OPERATORS.get(name)
            if served is None:
                raise ProtocolError("operator %r" % (name,))
            self.check_target(args[1])
            return served(*args[1:])
        return self.dispatch_other(op, args)

    def dispatch_other(self, op, args):
        raise ProtocolError("unknown request %r" % op)


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


def socket_from_fd(fd):
    # The C type, not the socket module's subclass: only sendall, recv and close are used, and
    # the module (its enum conversions, selectors) is a tenth of the tested process's start.
    import _socket

    return _socket.socket(fileno=fd)


def _copy_back(request, out, encoder):
    """[n, entry] for each of the caller's containers that the call changed."""
    back = []
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
