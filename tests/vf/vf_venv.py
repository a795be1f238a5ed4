"""The virtual environment in which verifiers' own code judges `rollouts serve-env`.

verifiers 0.4.0 and its renderers are installed without their dependencies (those include
prime's sandbox, tunnel and run clients, gepa, mcp, harbor extras), then only what
`verifiers.v1.serve` and its trace types import, and the client side of rollouts that
`serve-env` runs on (the repository itself is put on PYTHONPATH). Python 3.12 (verifiers
allows 3.11 to 3.14; 3.12 is what a prime-rl user runs). Cached under
~/.cache/rollouts/verifiers-venv (or $ROLLOUTS_VERIFIERS_VENV), rebuilt when the package list
below changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

NO_DEPS = ["verifiers==0.4.0", "renderers==0.1.12"]
# What verifiers.v1.serve.{server,client,delta,types}, .trace and .episode import.
DEPS = [
    "msgpack>=1.1.2",
    "pyzmq>=27.1.0",
    "pydantic>=2.12.3",
    "numpy>=2.1.0",
    "prime-pydantic-config[toml]>=0.4.3",
    "httpx>=0.27.0",
    "openai>=2.54.0,<3",
    "anthropic>=1.0.0",
    "prime-sandboxes>=0.4.2",
    "aiohttp>=3.14.1",
    "tomli-w>=1.0.0",
    "math-verify>=0.8.0",
    # rollouts' client side (clients.verifiers_env, clients.trainer)
    "typer",
    "pyarrow>=15",
]
SPEC = hashlib.sha256("\n".join(["v1", *NO_DEPS, "--", *DEPS]).encode()).hexdigest()[:16]
DEFAULT_DIR = Path.home() / ".cache" / "rollouts" / "verifiers-venv"


def ensure_venv(python312: str) -> Path:
    """The venv's python, building the venv first if it is missing or out of date."""
    where = Path(os.environ.get("ROLLOUTS_VERIFIERS_VENV", DEFAULT_DIR))
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
        tmp.rename(where)
        return python
