"""Lay out /app for the tests: the agent's data files, and a stub for each of its modules.

Run once in the verifier container, as root, before the tests:

    python3 -I view.py WORKSPACE APP TESTS MANIFEST REPORT

WORKSPACE holds the agent's files as they were; the tests never see it. APP gets:
- for every Python module or package the tests could import by name, a stub of the same name
  (trusted.py then runs the real one in the tested process);
- every other file, as data, owned by root and read-only to the tested code;
- nothing that Python or a test runner would load or obey on its own: no bytecode, no `.pth`,
  no package metadata (`*.dist-info`: entry points are how pytest autoloads plugins), no
  `conftest.py`, no `pytest.ini`/`tox.ini`/`setup.cfg`/`pyproject.toml`/`setup.py`, no
  `sitecustomize`, and no module that would shadow one the tests' interpreter has (the
  standard library, installed packages, a module beside the tests) or named like a test.
MANIFEST records the stubbed modules for trusted.py; REPORT gets one line saying what was
left out.

Standard library only: this runs under the task image's Python.
"""

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import stat
import sys

EXCLUDED_NAMES = {
    "__pycache__",
    ".pytest_cache",
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "setup.py",
    "pyproject.toml",
}
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".pth", ".egg-link", ".dist-info", ".egg-info", ".egg", ".whl")
RESERVED_MODULES = {"sitecustomize", "usercustomize", "__main__", "conftest"}
_TEST_FILE = re.compile(r"^(test_.*|.*_test)$")
_MODULE_SUFFIXES = sorted(
    importlib.machinery.SOURCE_SUFFIXES + importlib.machinery.EXTENSION_SUFFIXES,
    key=len,
    reverse=True,
)

STUB = """\
# Written by rollouts: the workspace module {name!r} runs in a separate, unprivileged
# process (see the verifier runtime's trusted.py); this stub is how the tests reach it.
def _rollouts_runtime():
    import importlib.util
    import sys

    runtime = sys.modules.get("_rollouts_trusted")
    if runtime is None:
        spec = importlib.util.spec_from_file_location("_rollouts_trusted", {runtime!r})
        runtime = importlib.util.module_from_spec(spec)
        sys.modules["_rollouts_trusted"] = runtime
        spec.loader.exec_module(runtime)
    return runtime


if __name__ == "__main__":
    _rollouts_runtime().run_main({name!r})
else:
    _rollouts_runtime().attach(globals(), {name!r})
    del _rollouts_runtime
"""


def _module_name(filename):
    for suffix in _MODULE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return None


def _excluded(name):
    return name in EXCLUDED_NAMES or name.endswith(EXCLUDED_SUFFIXES)


def _shadows(top, tests):
    """True when the tests' interpreter already has a module `top` without /app."""
    if top in sys.builtin_module_names or top in RESERVED_MODULES or top.startswith("_rollouts"):
        return True
    if os.path.exists(os.path.join(tests, top + ".py")) or os.path.isdir(os.path.join(tests, top)):
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return True


def build(workspace, app, tests, runtime):
    """Fill `app` from `workspace`; returns (stubbed module names, what was left out)."""
    modules, left_out = [], []
    for here, dirs, files in os.walk(workspace):
        rel = os.path.relpath(here, workspace)
        parts = [] if rel == "." else rel.split(os.sep)
        kept_dirs = []
        for d in sorted(dirs):
            path = os.path.join(here, d)
            if _excluded(d) or os.path.islink(path):
                left_out.append(os.path.join(rel, d))
            else:
                kept_dirs.append(d)
                os.makedirs(os.path.join(app, *parts, d), mode=0o755, exist_ok=True)
        dirs[:] = kept_dirs
        importable = all(p.isidentifier() for p in parts) and not (
            parts and _shadows(parts[0], tests)
        )
        for f in sorted(files):
            src = os.path.join(here, f)
            st = os.lstat(src)
            if not stat.S_ISREG(st.st_mode) or _excluded(f):
                left_out.append(os.path.join(rel, f))
                continue
            name = _module_name(f)
            if name is None:  # data
                dest = os.path.join(app, *parts, f)
                shutil.copyfile(src, dest)
                os.chmod(dest, 0o644)
                continue
            dotted = ".".join(parts + ([] if name == "__init__" else [name]))
            if (
                not importable
                or not name.isidentifier()
                or (not parts and (_shadows(name, tests) or _TEST_FILE.match(name)))
                or (parts and _TEST_FILE.match(name))
                or not dotted
            ):
                left_out.append(os.path.join(rel, f))
                continue
            if dotted in modules:  # solution.py and solution.cpython-311-*.so: one stub
                continue
            dest = os.path.join(app, *parts, name + ".py")
            with open(dest, "w") as out:
                out.write(STUB.format(name=dotted, runtime=runtime))
            os.chmod(dest, 0o644)
            modules.append(dotted)
    return modules, left_out


def main(argv):
    workspace, app, tests, manifest, report = argv
    runtime = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trusted.py")
    modules, left_out = build(workspace, app, tests, runtime)
    with open(manifest, "w") as f:
        json.dump(
            {
                "app": app,
                "workspace": workspace,
                "tests": tests,
                "report": report,
                "modules": modules,
            },
            f,
        )
    line = {
        "event": "view",
        "modules": modules[:100],
        "left_out": left_out[:100],
        "pid": os.getpid(),
    }
    with open(report, "a") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
