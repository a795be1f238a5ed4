"""The Python 3.12 virtual environment in which SkyRL's own code judges our SkyRL output.

SkyRL needs Python >= 3.12; the suite runs on 3.11. The venv holds skyrl-train 0.3.1 and skyrl
0.4.0 side by side (`skyrl_train` and `skyrl.train`), installed without their dependencies, and
only the light packages the judged modules import. torch and ray are not installed: the judge
stubs them (tests/skyrl/stubs.py). Cached under ~/.cache/rollouts/skyrl-venv (or
$ROLLOUTS_SKYRL_VENV); built by tests/tool_venv.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.tool_venv import CACHE, ToolVenv, find_python312, on_python312

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
VENV = ToolVenv(
    CACHE / "skyrl-venv", "ROLLOUTS_SKYRL_VENV", NO_DEPS, DEPS, ("tests/e2e/test_skyrl.py",)
)
__all__ = ["ensure_venv", "find_python312"]


def ensure_venv(python312: str) -> Path:
    """The venv's python, building the venv first if it is missing or out of date."""
    return VENV.ensure(python312)


ensure_if_available = on_python312(VENV)
