"""What the tests' process does to a workspace module as a whole, done in the tested process:
`importlib.reload(solution)` and `doctest.testmod(solution)` (see trusted.py).

In the tests' process a workspace module is a stub whose namespace reads through the tested
process (trusted.py `RemoteModule`), so the import system's reload, which executes the module's
code in its `__dict__`, failed ("exec() globals must be a dict"), and doctest, which runs the
examples of the module's docstrings in a copy of it, would run the agent's text with the tests'
rights (sources.py refuses that compile: a correct module's doctests all failed). Both are the
module's own code, so both run where it lives:

- reload: a finder first on `sys.meta_path` answers the reload's lookup of a stub module with a
  loader whose `exec_module` reloads the real module in the tested process, then reads its
  exports again. What the tests read of it before (functions, classes) is the old module's,
  as in one process; its containers the tests read are no longer the module's.
- doctest: `doctest.testmod(m)` for a stub module `m` runs `doctest.testmod` of the real module
  there, with the tests' arguments (globs, optionflags, ...), and answers its counts as a
  `TestResults` made here of two ints; the report it prints is the tested process's output.
  `testmod` is replaced in the tests' doctest module as it is imported (or at the first stub's
  import, where it was already), so `from doctest import testmod` finds the replacement. Not
  covered: `doctest.DocTestSuite(solution)` and `DocTestFinder` on a stub, whose examples are
  refused as before (sources.py; the oracle fails too, so calibration's fallback), and a
  `testmod` bound before the first stub's import in a program without pytest.

Standard library only, Python >= 3.8.
"""

import copy
import functools
import sys
import types

_installed = []
# doctest.testmod's parameters after `m`, in order (its positional form).
_TESTMOD = "name globs verbose report optionflags extraglobs raise_on_error exclude_empty".split()


def install(remote_of):
    """Reload and doctest workspace modules in the tested process. `remote_of(module)`: the
    tested process's module a stub module stands for (a proxy), else None. Once per process."""
    if _installed:
        return
    _installed.append(remote_of)
    sys.meta_path.insert(0, _Finder(remote_of))
    # Replaced as doctest is imported (before a test module can bind testmod), not imported
    # here: it costs the tests' process a few milliseconds, and most tests never use it.
    sys.modules["_rollouts_loader"].after_import(
        "doctest", lambda doctest: _replace(doctest, remote_of)
    )


def _replace(doctest, remote_of):
    doctest.testmod = _testmod(doctest, doctest.testmod, remote_of)


class _Finder:
    """A meta path finder that answers only a reload of a workspace module (its `target`)."""

    def __init__(self, remote_of):
        self.remote_of = remote_of

    def find_spec(self, name, path=None, target=None):
        if target is None or self.remote_of(target) is None:
            return None
        old = getattr(target, "__spec__", None)
        if old is None or old.name != name:
            return None
        spec = copy.copy(old)  # its origin and locations: the reload keeps __file__, __path__
        spec.loader = _Reload(old.loader, self.remote_of)
        return spec

    def invalidate_caches(self):
        pass


class _Reload:
    """The loader of one reload of a workspace module: the real module is reloaded in the
    tested process; the stub's own loader (its `get_source` is the agent's text) stays its
    loader."""

    def __init__(self, loader, remote_of):
        self.loader = loader
        self.remote_of = remote_of

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        spec = module.__spec__
        spec.loader = self.loader
        module.__loader__ = self.loader
        remote = self.remote_of(module)
        ep = remote._rollouts_ep
        ep.request("reload", remote)
        for key in [k for k in ep.shared if k[0] == id(remote)]:
            del ep.shared[key]  # the module's containers are new ones now
        types.ModuleType.__setattr__(module, "__all__", ep.request("exports", remote))


def _testmod(doctest, original, remote_of):
    @functools.wraps(original)
    def testmod(m=None, *args, **kwargs):
        remote = remote_of(m) if m is not None else None
        if remote is None:
            return original(m, *args, **kwargs)
        if len(args) > len(_TESTMOD):
            raise TypeError("testmod() takes at most %d arguments" % (len(_TESTMOD) + 1))
        options = {name: args[i] for i, name in enumerate(_TESTMOD[: len(args)])}
        for key, value in kwargs.items():
            if key not in _TESTMOD or key in options:
                raise TypeError("testmod() got an unexpected or repeated argument %r" % key)
            options[key] = value
        counts = remote._rollouts_ep.request("doctest", remote, tuple(options.items()))
        if not (
            isinstance(counts, list)
            and len(counts) == 3
            and all(type(n) is int and n >= 0 for n in counts)
        ):
            raise RuntimeError("the tested process answered no doctest counts")
        failed, attempted, skipped = counts
        try:  # (3.13's TestResults counts the skipped examples too)
            return doctest.TestResults(failed, attempted, skipped=skipped)
        except TypeError:
            return doctest.TestResults(failed, attempted)

    return testmod
