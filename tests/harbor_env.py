"""A Python with Harbor 0.25.0 for the terminus-2 parity tests, built on demand and cached.

The venv lives in ~/.cache/rollouts/harbor-venv (ROLLOUTS_HARBOR_VENV overrides; an interpreter
named by ROLLOUTS_HARBOR_PYTHON is used as is), built by tests/tool_venv.py with a Python >= 3.12
(Harbor's floor): `python3.12` or `python3.13` on PATH, or /root/.pyenv/versions/3.12.*. Harbor
is installed without its dependencies, plus only what importing `harbor.agents.terminus_2` needs
(pinned below). `import_profiles`: the terminus-2 profiles that `rollouts agent import-harbor`
writes from it (tests/conftest.py's `harbor_profiles`: one import for the whole run).

Without such a Python the tests skip, saying why; in CI (CI=true) they fail instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

from tests.ci import unavailable
from tests.tool_venv import CACHE, ToolVenv

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
VENV = ToolVenv(
    CACHE / "harbor-venv",
    "ROLLOUTS_HARBOR_VENV",
    [HARBOR, *IMPORT_DEPS],
    [],
    ("tests/e2e/test_harbor_parity.py", "tests/e2e/test_collect_harnesses.py"),
)


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


def _unavailable(reason: str) -> NoReturn:
    unavailable(f"terminus-2 parity needs Harbor: {reason}")


def harbor_python() -> str:
    """An interpreter that imports Harbor 0.25.0's terminus-2 (skips or fails without one)."""
    given = os.environ.get("ROLLOUTS_HARBOR_PYTHON")
    if given:
        return given
    base = _base_python()
    if base is None:
        _unavailable("no Python >= 3.12 on this machine (python3.12 on PATH or pyenv)")
    try:
        return str(VENV.ensure(base))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        _unavailable(f"building {VENV.default_dir} failed: {e}")


def ensure_if_available() -> None:
    """Builds the venv where a Python >= 3.12 is found (tool_venv.prefetch)."""
    base = _base_python()
    if base is not None and not os.environ.get("ROLLOUTS_HARBOR_PYTHON"):
        VENV.ensure(base)


def import_profiles(python: str, out: Path) -> dict[str, Path]:
    """terminus-2's json and xml profiles, imported from Harbor by `rollouts agent
    import-harbor` into `out`."""
    from typer.testing import CliRunner

    from clients.cli import app

    paths = {}
    for variant in ("json", "xml"):
        path = out / f"terminus-2-{variant}.toml"
        args = ["agent", "import-harbor", "--out", str(path), "--variant", variant]
        result = CliRunner().invoke(app, [*args, "--python", python], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        paths[variant] = path
    return paths
