"""The virtual environments in which another project's own code judges ours (SkyRL, verl,
verifiers, Harbor: tests/skyrl/skyrl_venv.py, tests/verl/verl_venv.py, tests/vf/vf_venv.py,
tests/harbor_env.py).

Each holds that project's packages installed without their dependencies (those name torch, ray,
vllm, flash-attn and the like), then only the packages the judged modules import. A venv is
cached in its folder, built at most once at a time (a lock next to it), and rebuilt when its
spec (the package lists and whatever else its builder names) changes; it is built beside its
folder and moved into place once complete, so a half-built venv is never used.

`prefetch` starts the builds the selected tests will need in the background as the run begins
(tests/conftest.py), one at a time, so they overlap the tests before them instead of holding up
the first test that asks; that test's own `ensure` then waits on the lock and finds the venv
built.
"""

from __future__ import annotations

import atexit
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path.home() / ".cache" / "rollouts"


def find_python312() -> str | None:
    """A Python 3.12 interpreter: $ROLLOUTS_PYTHON312, python3.12 on PATH, or pyenv's."""
    candidates = [os.environ.get("ROLLOUTS_PYTHON312"), shutil.which("python3.12")]
    for root in (Path.home() / ".pyenv", Path("/root/.pyenv")):
        candidates += sorted(glob.glob(str(root / "versions" / "3.12*" / "bin" / "python3.12")))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            ok = subprocess.run(
                [c, "-c", "import sys, venv; assert sys.version_info[:2] == (3, 12)"],
                capture_output=True,
            )
            if ok.returncode == 0:
                return c
    return None


def ask(python: str | Path, code: str) -> str:
    """What `code` prints when run by `python`."""
    return subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()


# Builds in progress: stopped when this process exits (a run that ends while one is under way
# in the background), so no orphaned pip writes on into a folder the next build starts afresh.
_RUNNING: set[subprocess.Popen] = set()


def _run(cmd: list[str], timeout_s: float) -> None:
    # Output is kept, not printed: a build may run in the background while a test's output is
    # captured; a failure says what went wrong in its exception. At a lower priority: a build
    # in the background leaves the CPU to the tests running beside it first.
    nice = ["nice", "-n", "10", *cmd]
    with subprocess.Popen(nice, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        _RUNNING.add(proc)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        finally:
            proc.kill()  # a no-op once it has exited
            _RUNNING.discard(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-4000:]}")


@atexit.register
def _stop_builds() -> None:
    for proc in list(_RUNNING):
        proc.kill()


@dataclass(frozen=True)
class ToolVenv:
    """One project's venv: where it lives and what goes into it."""

    default_dir: Path
    env_var: str  # names a folder to use instead of default_dir
    no_deps: Sequence[str]  # installed with --no-deps
    deps: Sequence[str]  # installed with their own dependencies
    # `prefetch` builds it when a selected test's id starts with one of these.
    used_by: Sequence[str] = field(default=())

    def ensure(self, base_python: str | Path, *, overlay: str | None = None) -> Path:
        """The venv's python, building it first from `base_python` if missing or out of date
        (other package lists, base or overlay). `overlay`: a site-packages folder whose packages
        the venv sees after its own (a .pth file); the venv then gets no pip of its own and
        uses the overlay's."""
        folder = Path(os.environ.get(self.env_var) or self.default_dir)
        spec = "\n".join(["v2", str(base_python), str(overlay), *self.no_deps, "--", *self.deps])
        spec = hashlib.sha256(spec.encode()).hexdigest()[:16]
        marker = folder / "rollouts-spec.txt"
        python = folder / "bin" / "python"
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(str(folder) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time
            if python.exists() and marker.exists() and marker.read_text().strip() == spec:
                return python
            tmp = Path(str(folder) + ".building")
            shutil.rmtree(tmp, ignore_errors=True)
            venv = [str(base_python), "-m", "venv", *(["--without-pip"] if overlay else [])]
            _run([*venv, str(tmp)], 300)
            if overlay:
                own = ask(tmp / "bin" / "python", PURELIB)
                (Path(own) / "rollouts-overlay.pth").write_text(overlay + "\n")
            pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input"]
            pip += ["--disable-pip-version-check", "--no-compile"]
            _run([*pip, "--no-deps", *self.no_deps], 900)
            if self.deps:
                _run([*pip, *self.deps], 1800)
            (tmp / "rollouts-spec.txt").write_text(spec + "\n")
            shutil.rmtree(folder, ignore_errors=True)
            # Its python is a link to the base interpreter, and pip runs as `python -m pip`:
            # the move breaks nothing the tests use.
            tmp.rename(folder)
            return python


def on_python312(venv: ToolVenv) -> Callable[[], None]:
    """A builder for `prefetch`: `venv` on this machine's Python 3.12, where there is one."""

    def build() -> None:
        python312 = find_python312()
        if python312 is not None:
            venv.ensure(python312)

    return build


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def prefetch(
    nodeids: Sequence[str], builders: Sequence[tuple[ToolVenv, Callable[[], object]]]
) -> None:
    """Start, in a daemon thread, the builds whose venv a selected test (`nodeids`, in run
    order) uses: one at a time, in the order the tests will need them. A build that fails here
    is not reported: the test's own `ensure` then builds again and fails with the reason."""
    first_use = {}
    for venv, build in builders:
        uses = [i for i, n in enumerate(nodeids) if n.startswith(tuple(venv.used_by))]
        if uses:
            first_use[build] = uses[0]
    order = sorted(first_use, key=first_use.__getitem__)
    if order:
        threading.Thread(target=_quietly, args=(order,), daemon=True).start()


def _quietly(builds: list[Callable[[], object]]) -> None:
    for build in builds:
        try:
            build()
        except Exception:  # reported by the test that needs the venv
            pass
