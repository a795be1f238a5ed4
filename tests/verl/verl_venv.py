"""The virtual environment in which verl's own code judges our agent loop (clients/verl.py).

verl 0.9.1 (Python 3.10 to 3.12) is installed without its dependencies, with only the light
packages its agent-loop worker imports, on top of the real vLLM venv's packages (torch,
transformers, numpy, pydantic: tests/e2e/real_vllm.py's venv, which the judged test needs
anyway): the venv is made from that venv's base interpreter, and a .pth file puts its
site-packages after the venv's own. So verl's tensors are real torch tensors and its tokenizer
the real transformers one, without a second multi-GB torch. Cached under
~/.cache/rollouts/verl-0.9.1 (or $ROLLOUTS_VERL_VENV), rebuilt when missing, when the package
list below changes, or when the vLLM venv moves.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

# Installed with --no-deps: verl's declared dependencies include torch, ray[default], vllm,
# wandb, peft, accelerate; tensordict's pin a torch build.
NO_DEPS = ["verl==0.9.1", "tensordict==0.10.0"]
# What verl's agent-loop worker imports (and tensordict needs), with their own dependencies.
DEPS = [
    "omegaconf==2.3.0",
    "hydra-core==1.3.2",
    "codetiming",
    "cloudpickle",
    "orjson",
    "pyvers<0.2",
    "importlib_metadata",
    "ray==2.52.0",
    "pandas",
    "pyarrow",
    "datasets==4.0.0",
]
DEFAULT_DIR = Path.home() / ".cache" / "rollouts" / "verl-0.9.1"


def _ask(python: Path, code: str) -> str:
    return subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()


def ensure_venv(vllm_python: Path, where: Path | None = None) -> Path:
    """The venv's python, building the venv first if it is missing or out of date."""
    where = Path(os.environ.get("ROLLOUTS_VERL_VENV", where or DEFAULT_DIR))
    base = _ask(vllm_python, "import sys; print(sys._base_executable)")
    shared = _ask(vllm_python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    spec = hashlib.sha256("\n".join(["v1", base, shared, *NO_DEPS, "--", *DEPS]).encode())
    marker = where / "rollouts-spec.txt"
    python = where / "bin" / "python"
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(str(where) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time
        if python.exists() and marker.exists() and marker.read_text().strip() == spec.hexdigest():
            return python
        tmp = Path(str(where) + ".building")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([base, "-m", "venv", "--without-pip", str(tmp)], check=True, timeout=300)
        own = Path(
            _ask(
                tmp / "bin" / "python", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
            )
        )
        (own / "rollouts-vllm-venv.pth").write_text(shared + "\n")
        # pip comes from the vLLM venv (through the .pth) and installs into this one.
        pip = [str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--no-input"]
        pip += ["--disable-pip-version-check"]
        subprocess.run([*pip, "--no-deps", *NO_DEPS], check=True, timeout=900)
        subprocess.run([*pip, *DEPS], check=True, timeout=1800)
        (tmp / "rollouts-spec.txt").write_text(spec.hexdigest() + "\n")
        shutil.rmtree(where, ignore_errors=True)
        tmp.rename(where)  # its python is a link to the base interpreter: the move breaks nothing
        return python
