"""Real-package tasks, built at test time: calibration inputs whose tests their projects wrote.

Each task is made, pymethods2test-style, from the source distribution of a small pure-Python
package on PyPI whose sdist carries its own tests: the package's module is the solution (the
oracle's solve.sh copies it into /app), the project's test files are the task's tests, run by
pytest with PYTHONPATH=/app, and the task's image has no copy of the module, so only /app
provides it. Nothing of those projects is kept in this repository: the sdists are downloaded
with pip (`pip download --no-deps --no-binary :all:`) into a cache folder and read there.

    python -m tests.real_tasks OUT_DIR    # build every task into OUT_DIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Where downloaded sdists are kept between runs (CI caches it).
CACHE_ENV = "ROLLOUTS_SDIST_CACHE"


@dataclass(frozen=True)
class RealPackage:
    name: str  # on PyPI
    version: str  # pinned: the same tests every run
    module: str  # the import name, which the tests use
    sources: tuple[str, ...]  # paths in the sdist (below its top folder) that make the module
    tests: tuple[str, ...]  # the project's test files in the sdist

    @property
    def task_id(self) -> str:
        return f"real-{self.name}"


PACKAGES = (
    RealPackage("inflection", "0.5.1", "inflection", ("inflection",), ("test_inflection.py",)),
    RealPackage(
        "more-itertools", "11.2.1", "more_itertools", ("more_itertools",),
        ("tests/test_recipes.py",),
    ),
    RealPackage("six", "1.17.0", "six", ("six.py",), ("test_six.py",)),
    RealPackage(
        "parse", "1.22.4", "parse", ("parse",),
        ("tests/test_parse.py", "tests/test_findall.py", "tests/test_result.py"),
    ),
    # (test_idna_codec.py imports its neighbour relatively: it needs the sdist's tests package)
    RealPackage(
        "idna", "3.10", "idna", ("idna",),
        ("tests/test_idna.py", "tests/test_idna_compat.py", "tests/test_idna_other.py",
         "tests/test_intranges.py"),
    ),
    RealPackage(
        "tabulate", "0.9.0", "tabulate", ("tabulate",),
        ("test/common.py", "test/test_api.py", "test/test_cli.py", "test/test_input.py",
         "test/test_internal.py", "test/test_output.py", "test/test_regression.py",
         "test/test_textwrapper.py"),
    ),
)  # fmt: skip


def cache_dir() -> Path:
    default = Path(os.path.expanduser("~")) / ".cache" / "rollouts" / "sdists"
    return Path(os.environ.get(CACHE_ENV) or default)


class DownloadFailed(RuntimeError):
    """pip could not fetch an sdist (no index reachable, or the release is gone)."""


def sdist(pkg: RealPackage, cache: Path | None = None) -> Path:
    """The package's sdist, downloaded into the cache on first use."""
    cache = cache or cache_dir()
    stem = f"{pkg.name.replace('-', '_')}-{pkg.version}"
    for candidate in (cache / f"{stem}.tar.gz", cache / f"{pkg.name}-{pkg.version}.tar.gz"):
        if candidate.is_file():
            return candidate
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "-d", str(cache),
           f"{pkg.name}=={pkg.version}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    found = [p for p in cache.glob(f"*-{pkg.version}.tar.gz") if _same_name(p.name, pkg.name)]
    if proc.returncode != 0 or not found:
        raise DownloadFailed(f"pip download {pkg.name}=={pkg.version}: {proc.stderr[-500:]}")
    return found[0]


def _same_name(filename: str, name: str) -> bool:
    base = filename.rsplit("-", 1)[0]
    return base.replace("_", "-").lower() == name.lower()


def _members(pkg: RealPackage, archive: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(module files by path below the sdist's top folder, test files by base name)."""
    module: dict[str, bytes] = {}
    tests: dict[str, bytes] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for m in tar:
            parts = PurePosixPath(m.name).parts
            if not m.isreg() or len(parts) < 2:
                continue
            rel = "/".join(parts[1:])
            data = tar.extractfile(m)
            if data is None:
                continue
            in_module = any(rel == s or rel.startswith(s + "/") for s in pkg.sources)
            if in_module and "__pycache__" not in parts and not rel.endswith(".pyc"):
                module[rel] = data.read()
            elif rel in pkg.tests:
                tests[PurePosixPath(rel).name] = data.read()
    missing = [t for t in pkg.tests if PurePosixPath(t).name not in tests]
    if not module or missing:
        raise ValueError(f"{archive.name}: no {pkg.sources} or no {missing} in it")
    return module, tests


# Any copy of the module the image has goes: only /app may provide it.
_REMOVE = (
    'import importlib.util, os, shutil; s = importlib.util.find_spec("{m}"); '
    "p = s and (list(s.submodule_search_locations or [])[:1] or [s.origin])[0]; "
    "p and os.path.exists(p) and (shutil.rmtree(p) if os.path.isdir(p) else os.remove(p))"
)


def build_task(pkg: RealPackage, archive: Path, out: Path) -> Path:
    """The Harbor-format task folder of `pkg` under `out`."""
    module, tests = _members(pkg, archive)
    root = out / pkg.task_id
    if root.exists():
        shutil.rmtree(root)
    files = {
        "task.toml": (
            f"# Built by tests/real_tasks.py from the {pkg.name} {pkg.version} sdist: the "
            "project's own tests.\n"
            f'[metadata]\nname = "{pkg.task_id}"\n\n[verifier]\ntimeout_sec = 120\n\n'
            "[agent]\ntimeout_sec = 120\n\n[environment]\nmemory_mb = 2048\n"
        ).encode(),
        "instruction.md": (
            f"Write the Python module `{pkg.module}` in /app: the library {pkg.name} "
            f"{pkg.version} as published on PyPI. Its project's own tests grade it.\n"
        ).encode(),
        "environment/Dockerfile": (
            f"FROM python:3.11\nRUN python3 -c '{_REMOVE.format(m=pkg.module)}'\nWORKDIR /app\n"
        ).encode(),
        "tests/test.sh": (
            "#!/bin/bash\nmkdir -p /logs/verifier\nexport PYTHONPATH=/app\ncd /app\n"
            "python3 -m pytest -q -p no:cacheprovider "
            + " ".join(f"/tests/{name}" for name in sorted(tests))
            + "\nrc=$?\n"
            'if [ "$rc" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; '
            "else echo 0 > /logs/verifier/reward.txt; fi\n"
        ).encode(),
        "solution/solve.sh": (
            b"#!/bin/bash\n# The published module, as the sdist has it.\n"
            b'cp -r "$(dirname "$0")/module/." /app/\n'
        ),
    }
    files.update({f"tests/{name}": data for name, data in tests.items()})
    files.update({f"solution/module/{rel}": data for rel, data in module.items()})
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def build_real_tasks(out: Path, packages: tuple[RealPackage, ...] = PACKAGES) -> list[Path]:
    """Every package's task under `out` (raises DownloadFailed without PyPI and no cache)."""
    out.mkdir(parents=True, exist_ok=True)
    return [build_task(pkg, sdist(pkg), out) for pkg in packages]


if __name__ == "__main__":
    for path in build_real_tasks(Path(sys.argv[1])):
        print(path)
