"""Module attributes one side keeps of the other's modules, so `solution.fn(x)` is one
exchange (a call) and not two (a getattr, then the call): see rpc.py.

The serving side (the tested process) says an answer to `getattr(module, name)` may be kept
("c") when the name is bound in the module's own namespace (no module `__getattr__`, no
module subclass: nothing computed) to a function or a class, which modules bind once and
rarely rebind. From then on it watches that binding, and every message it sends (an answer,
or a request of its own: a callback, during which the tests may read the module) lists the
bindings that no longer hold ("inv"), so the asking side forgets them before it reads
anything else of that message. A kept binding is therefore what a getattr would answer at
any moment the tests can observe the other process: after its last message, that process
ran nothing that the tests could see (stated limit: a thread or signal handler of its own
that rebinds a module's function or class while it is idle, which no exchange reveals).

Data attributes (flags, counters, results a test polls) are never kept: each read asks.
What is kept is what the other side answered anyway: nothing new crosses.

Standard library only, Python >= 3.8.
"""

import sys
import types

_load = sys.modules["_rollouts_loader"].load  # (loader.py: an entry point loaded it)
proxies = _load("proxies")

UNKNOWN = object()  # `kept`: no binding kept, ask
_GONE = object()
_KEPT_TYPES = (types.FunctionType, types.BuiltinFunctionType, type)


class Bindings:
    def __init__(self):
        self.watching = False  # the serving side that may say "c" (the tested process)
        self.watched = {}  # (oid of our module, name) -> (module, the value answered)
        self.kept_values = {}  # (oid of the other side's module, name) -> value

    # ---- the serving side --------------------------------------------------------------

    def watch(self, args, export_ids):
        """Whether the answer to getattr `args` may be kept (then watched from now on)."""
        if not self.watching:
            return False
        module, name = args[0], args[1]
        if type(module) is not types.ModuleType or not isinstance(name, str):
            return False
        value = module.__dict__.get(name, _GONE)
        if not isinstance(value, _KEPT_TYPES):
            return False
        oid = export_ids.get(id(module))
        if oid is None:
            return False
        self.watched[(oid, name)] = (module, value)
        return True

    def changed(self, msg):
        """Put into outgoing `msg` the watched bindings that no longer hold ("inv")."""
        if not self.watched:
            return
        gone = [
            key
            for key, (module, value) in self.watched.items()
            if module.__dict__.get(key[1], _GONE) is not value
        ]
        for key in gone:
            del self.watched[key]
        if gone:
            msg["inv"] = [list(key) for key in gone]

    # ---- the asking side ---------------------------------------------------------------

    def kept(self, target, name):
        if not self.kept_values:
            return UNKNOWN
        oid = _oid(target)
        return self.kept_values.get((oid, name), UNKNOWN)

    def keep(self, target, name, value):
        oid = _oid(target)
        if oid is not None and isinstance(name, str):
            self.kept_values[(oid, name)] = value

    def forget(self, gone):
        """Drop the bindings an incoming message says no longer hold."""
        if not isinstance(gone, list):  # none, or malformed: nothing to drop
            return
        for item in gone:
            if isinstance(item, list) and len(item) == 2:
                self.kept_values.pop((item[0], item[1]), None)


def _oid(target):
    """The other side's id of proxy or mirror class `target` (None for anything else)."""
    try:
        return proxies.own(target).get("_rollouts_oid")
    except AttributeError:  # (no instance dictionary)
        return None
