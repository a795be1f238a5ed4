"""A Python with Harbor 0.25.0 for the terminus-2 parity tests, built on demand and cached.

The venv lives in ~/.cache/rollouts/harbor-venv (ROLLOUTS_HARBOR_VENV overrides; an interpreter
named by ROLLOUTS_HARBOR_PYTHON is used as is). It is built with a Python >= 3.12 (Harbor's
floor): `python3.12` or `python3.13` on PATH, or /root/.pyenv/versions/3.12.*. Harbor is
installed without its dependencies, plus only what importing `harbor.agents.terminus_2` needs
(pinned below), which keeps it to one pip run of wheels.

Without such a Python the tests skip, saying why; in CI (CI=true) they fail instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from tests.ci import unavailable

HARBOR = "harbor==0.25.0"
# What `import harbor.agents.terminus_2` needs, found by importing it in a venv with --no-deps.
IMPORT_DEPS = [
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "certifi==2026.10.19.post1",
    "fastuuid==0.14.0",
    "frozenlist==1.8.0",
    "h11==0.16.0",
    "h2==4.4.1",
    "httpcore==1.0.9",
    "httpx==0.28.1",
    "httpx2==2.16.2",
    "hyperframe==6.1.0",
    "idna==3.20",
    "importlib_metadata==10.2.0",
    "Jinja2==3.1.6",
    "lazy-importer==0.1.0",
    "litellm==1.110.2",
    "MarkupSafe==3.0.4",
    "multidict==7.2.1",
    "openai==3.57.0",
    "packaging==26.4",
    "platformdirs==4.14.9",
    "propcache==0.5.4",
    "pydantic==2.14.4",
    "pydantic-settings==2.16.3",
    "pydantic_core==2.50.5",
    "python-dotenv==1.2.4",
    "PyYAML==6.0.4",
    "requests==2.34.2",
    "shortuuid==1.0.13",
    "sniffio==1.3.1",
    "tenacity==9.2.1",
    "tiktoken==0.14.0",
    "toml==0.10.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
    "yarl==1.25.1",
]
ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _works(python: str) -> bool:
    try:
        r = subprocess.run(
            [python, "-c", "import sys, venv; assert sys.version_info >= (3, 12)"],
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _base_python() -> str | None:
    """A working Python >= 3.12 (a pyenv shim on PATH may name one that is not installed)."""
    candidates = [shutil.which(name) for name in ("python3.12", "python3.13")]
    candidates += sorted(glob.glob("/root/.pyenv/versions/3.1[2-9]*/bin/python3"), reverse=True)
    return next((c for c in candidates if c and _works(c)), None)


def _imports_harbor(python: str) -> bool:
    r = subprocess.run(
        [python, "-c", "import harbor.agents.terminus_2"],
        capture_output=True,
        env={**os.environ, **ENV},
        timeout=300,
    )
    return r.returncode == 0


def _unavailable(reason: str) -> None:
    unavailable(f"terminus-2 parity needs Harbor: {reason}")


def harbor_python() -> str:
    """An interpreter that imports Harbor 0.25.0's terminus-2 (skips or fails without one)."""
    given = os.environ.get("ROLLOUTS_HARBOR_PYTHON")
    if given:
        return given
    venv = Path(os.environ.get("ROLLOUTS_HARBOR_VENV", Path.home() / ".cache/rollouts/harbor-venv"))
    python = venv / "bin" / "python"
    if python.exists() and _imports_harbor(str(python)):
        return str(python)
    base = _base_python()
    if base is None:
        _unavailable("no Python >= 3.12 on this machine (python3.12 on PATH or pyenv)")
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [base, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", HARBOR, *IMPORT_DEPS],
    ]
    for cmd in steps:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            _unavailable(f"building {venv} failed: {' '.join(cmd[:4])}: {r.stderr[-2000:]}")
    if not _imports_harbor(str(python)):
        _unavailable(f"{python} cannot import harbor.agents.terminus_2")
    return str(python)
