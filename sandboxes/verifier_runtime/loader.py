"""The runtime's modules, loaded by path, each once per process under "_rollouts_<name>".

The runtime ships as loose files, never on sys.path (the tests cannot import it by name), so
its modules find each other here. The entry points (trusted.py, which the workspace's stubs
load; tested.py, run as a script) load this module by path under "_rollouts_loader"; every
other module takes `load` from there.

Standard library only, Python >= 3.8.
"""

import importlib.util
import os
import sys

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
