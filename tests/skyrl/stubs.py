"""Import-only stand-ins for torch and ray, so SkyRL's trainer modules import without them.

Only these two packages are faked; everything else SkyRL's judged modules import is the real
package (tests/skyrl/skyrl_venv.py). Every attribute of a stubbed module is a placeholder class;
calling a placeholder returns a falsy placeholder, except that a placeholder given one function
or class returns it unchanged, so decorators such as `@torch.no_grad()` and `@ray.remote` leave
what they decorate as it is. A torch 2.8.0 distribution record makes transformers take its
torch import path (its `modeling_utils` needs `torch.nn` names at import time).

SkyRL reaches the stubs only while its modules import (decorators, `ray.is_initialized()` in its
registries, transformers' feature probes). `CALLS` records every call; the judge empties it once
the imports are done and asserts that no judged function called into torch or ray.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import tempfile
import types
from pathlib import Path

STUBBED = ("torch", "ray")
CALLS: list[str] = []


class _Meta(type):
    def __getattr__(cls, item: str):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _placeholder(f"{cls.__qualname__}.{item}")

    def __call__(cls, *args, **kwargs):
        CALLS.append(cls.__qualname__)
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # a decorator: what it decorates is left as it is
        return super().__call__()

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

    def __contains__(cls, item) -> bool:
        return False


class _Placeholder(metaclass=_Meta):
    def __getattr__(self, item: str):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        return _placeholder(f"{type(self).__qualname__}.{item}")

    def __call__(self, *args, **kwargs):
        CALLS.append(type(self).__qualname__ + "()")
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _placeholder(type(self).__qualname__ + "()")()

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __contains__(self, item) -> bool:
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def _placeholder(name: str) -> type:
    return _Meta(name, (_Placeholder,), {"__qualname__": name})


class _Module(types.ModuleType):
    def __getattr__(self, item: str):
        if item.startswith("__") and item.endswith("__"):
            raise AttributeError(item)
        value = _placeholder(f"{self.__name__}.{item}")
        setattr(self, item, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        module.__version__ = "2.8.0" if spec.name == "torch" else "0.0.0"
        return module

    def exec_module(self, module) -> None:
        pass


def install() -> None:
    """Before anything imports torch, ray or transformers."""
    for name in STUBBED:
        assert name not in sys.modules, f"{name} was imported before the stubs"
    site = Path(tempfile.mkdtemp(prefix="rollouts-skyrl-stubs-"))
    info = site / "torch-2.8.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.8.0\n")
    (info / "top_level.txt").write_text("torch\n")
    sys.path.append(str(site))
    sys.meta_path.insert(0, _Finder())
