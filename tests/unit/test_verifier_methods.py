"""Which reads of a proxy's attribute the verifier runtime may send with their call as one
request (verifier_runtime/methods.py): only where the value is called next, with nothing that
can run code between, in plain code and in pytest's rewritten assertions (this module's
asserts are rewritten, as a task's tests are)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import sandboxes

_spec = importlib.util.spec_from_file_location(
    "_methods_under_test", Path(sandboxes.__file__).parent / "verifier_runtime" / "methods.py"
)
methods = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(methods)

LIMIT = 3


class Probe:
    """Records, for each attribute read, whether the read would go with its call."""

    def __init__(self):
        self.seen = []

    def __getattr__(self, name):
        self.seen.append((name, methods.called_at_once(sys._getframe(1), name)))
        return lambda *args, **kwargs: 1


def shapes(p, x):
    p.a()
    p.b(1, x, LIMIT)
    p.c(k=1)
    p.d(x, k=x)
    p.e(len([1]))
    p.f(x + 1)
    p.g(p.h)
    kept = p.i
    kept()
    getattr(p, "j")()  # noqa: B009 - the builtin called, not a read by the interpreter
    p.k(*[x])
    p.l(x if x else 2)
    assert p.o(x, LIMIT) == 1
    assert p.q(x + 1) == 1
    assert p.r(k=x) == 1
    assert p.s(p.t) == 1
    return p.n(x)


AT_ONCE = {"a", "b", "c", "d", "o", "r", "n"}


def test_only_a_read_called_next_with_nothing_between_goes_with_its_call() -> None:
    for _ in range(100):  # (and once the interpreter has specialized the code)
        probe = Probe()
        shapes(probe, 1)
        assert {name for name, at_once in probe.seen if at_once} == AT_ONCE
        assert [name for name, _ in probe.seen] == list("abcdefghijkloqrstn")


class Globals(dict):
    """Globals whose lookups could run code (a dict subclass)."""


def test_a_global_read_between_counts_only_from_plain_dicts() -> None:
    source = compile("def g(p):\n    return p.m(LIMIT)\n", "<g>", "exec")
    code = next(c for c in source.co_consts if isinstance(c, types.CodeType))
    for namespace, at_once in (({"LIMIT": 3}, True), (Globals(LIMIT=3), False)):
        probe = Probe()
        types.FunctionType(code, namespace)(probe)
        assert probe.seen == [("m", at_once)]
