"""The Python 3.12 virtual environment in which SkyRL's own code judges our SkyRL output.

SkyRL needs Python >= 3.12; the suite runs on 3.11. The venv holds skyrl-train 0.3.1 and skyrl
0.4.0 side by side (`skyrl_train` and `skyrl.train`), installed without their dependencies, and
only the light packages the judged modules import. torch and ray are not installed: the judge
stubs them (tests/skyrl/stubs.py). Cached under ~/.cache/rollouts/skyrl-venv (or
$ROLLOUTS_SKYRL_VENV), rebuilt when missing or when the package list below changes.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

# Installed with --no-deps: their declared dependencies include torch, ray, vllm, flash-attn.
NO_DEPS = ["skyrl-train==0.3.1", "skyrl==0.4.0", "skyrl-gym==0.4.0", "torchdata==0.11.0"]
# What the judged SkyRL modules (and clients/skyrl.py) import, with their own dependencies.
DEPS = [
    "numpy<3",
    "loguru",
    "omegaconf==2.3.0",
    "hydra-core==1.3.2",
    "pandas",
    "requests",
    "func_timeout",
    "tqdm",
    "jaxtyping",
    "cloudpathlib",
    "fastapi",
    "uvicorn",
    "fsspec",
    "transformers==5.16.1",
    "datasets==4.0.0",
    "aiohttp",
    "orjson",
    "pybase64",
    "httpx",
    "pydantic>=2.6",
    "pyarrow>=15",
]
SPEC = hashlib.sha256("\n".join(["v1", *NO_DEPS, "--", *DEPS]).encode()).hexdigest()[:16]
DEFAULT_DIR = Path.home() / ".cache" / "rollouts" / "skyrl-venv"


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


def ensure_venv(python312: str, where: Path | None = None) -> Path:
    """The venv's python, building the venv first if it is missing or out of date."""
    where = Path(os.environ.get("ROLLOUTS_SKYRL_VENV", where or DEFAULT_DIR))
    marker = where / "rollouts-spec.txt"
    python = where / "bin" / "python"
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(str(where) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time
        if python.exists() and marker.exists() and marker.read_text().strip() == SPEC:
            return python
        tmp = Path(str(where) + ".building")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([python312, "-m", "venv", str(tmp)], check=True)
        pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input"]
        pip += ["--disable-pip-version-check"]
        subprocess.run([*pip, "--no-deps", *NO_DEPS], check=True, timeout=900)
        subprocess.run([*pip, *DEPS], check=True, timeout=1800)
        (tmp / "rollouts-spec.txt").write_text(SPEC + "\n")
        shutil.rmtree(where, ignore_errors=True)
        # Moved into place once complete (its python is a link to the base interpreter, and
        # pip is run as `python -m pip`, so the move breaks nothing the tests use).
        tmp.rename(where)
        return python
