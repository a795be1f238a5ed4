"""The runtime's modules, loaded by path, each once per process under "_rollouts_<name>".

The runtime ships as loose files, never on sys.path (the tests cannot import it by name), so
its modules find each other here. The entry points (trusted.py, which the workspace's stubs
load; tested.py, which trusted.py starts as its own process) load this module by path under
"_rollouts_loader"; every other module takes `load` from there. And `after_import`: the
runtime's hook on a standard module that the process may never import (it costs a start what
the module costs only where something uses it).

Standard library only, Python >= 3.8.
"""

import importlib.util
import os
import sys
import threading

KEY = "_rollouts_loader"
_HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    """The runtime's module `name` (loaded on first use)."""
    key = "_rollouts_" + name
    module = sys.modules.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location(key, os.path.join(_HERE, name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return module


def after_import(name, then):
    """Call `then(module)` once module `name` is imported: now where it is, else as soon as its
    own code has run, before the import that made it returns."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


class _AfterImport:
    """A finder that finds nothing itself: for its module, the spec the finders after it find,
    whose loader calls `then` after the module's code (set on the loader object, so the
    module's `__loader__` and `__spec__` are what they would be). It leaves once the module
    the import system made (the one in sys.modules) ran: a lookup that imports nothing
    (`importlib.util.find_spec`), or a copy made by hand from that spec, does not use it up."""

    def __init__(self, name, then):
        self.name, self.then, self.done = name, then, False
        self.looking = threading.local()  # (a finder after this one that asks again)

    def find_spec(self, name, path=None, target=None):
        if name != self.name or self.done or getattr(self.looking, "now", False):
            return None
        self.looking.now = True
        try:
            spec = _found_after(self, name, path, target)
        finally:
            self.looking.now = False
        loader = getattr(spec, "loader", None)
        made = getattr(loader, "exec_module", None)
        if made is None:
            return spec

        def exec_module(module):
            loader.__dict__.pop("exec_module", None)  # (the loader's own again)
            made(module)
            if not self.done and sys.modules.get(self.name) is module:
                self.done = True
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                self.then(module)

        loader.exec_module = exec_module
        return spec


def _found_after(finder, name, path, target):
    """The spec the finders after `finder` on sys.meta_path find (the import system's lookup)."""
    finders = sys.meta_path
    for other in finders[finders.index(finder) + 1 :] if finder in finders else finders:
        find = getattr(other, "find_spec", None)
        spec = find(name, path, target) if find is not None else None
        if spec is not None:
            return spec
    return None
