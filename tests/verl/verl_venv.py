"""The virtual environment in which verl's own code judges our agent loop (clients/verl.py).

verl 0.9.1 (Python 3.10 to 3.12) is installed without its dependencies, with only the light
packages its agent-loop worker imports, on top of the real vLLM venv's packages (torch,
transformers, numpy, pydantic: tests/e2e/real_vllm.py's venv, which the judged test needs
anyway): the venv is made from that venv's base interpreter, and a .pth file puts its
site-packages after the venv's own. So verl's tensors are real torch tensors and its tokenizer
the real transformers one, without a second multi-GB torch. Cached under
~/.cache/rollouts/verl-0.9.1 (or $ROLLOUTS_VERL_VENV); built by tests/tool_venv.py, again when the
vLLM venv moves.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.tool_venv import CACHE, PURELIB, ToolVenv, ask

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
VENV = ToolVenv(
    CACHE / "verl-0.9.1",
    "ROLLOUTS_VERL_VENV",
    NO_DEPS,
    DEPS,
    ("tests/e2e/test_real_vllm.py::test_verl_",),
)


def ensure_venv(vllm_python: Path) -> Path:
    """The venv's python, building the venv first if it is missing or out of date."""
    base = ask(vllm_python, "import sys; print(sys._base_executable)")
    return VENV.ensure(base, overlay=ask(vllm_python, PURELIB))


def ensure_if_available() -> None:
    """Builds the venv where the vLLM venv is installed (tool_venv.prefetch)."""
    from tests.e2e.real_vllm import VENV as VLLM_VENV

    python = Path(os.environ.get("ROLLOUTS_VLLM_PYTHON") or VLLM_VENV / "bin" / "python")
    if python.is_file():
        ensure_venv(python)
