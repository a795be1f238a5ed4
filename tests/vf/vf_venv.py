"""The virtual environment in which verifiers' own code judges `rollouts serve-env`.

verifiers 0.4.0 and its renderers are installed without their dependencies (those include
prime's sandbox, tunnel and run clients, gepa, mcp, harbor extras), then only what
`verifiers.v1.serve` and its trace types import, and the client side of rollouts that
`serve-env` runs on (the repository itself is put on PYTHONPATH). Python 3.12 (verifiers
allows 3.11 to 3.14; 3.12 is what a prime-rl user runs). Cached under
~/.cache/rollouts/verifiers-venv (or $ROLLOUTS_VERIFIERS_VENV); built by tests/tool_venv.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.tool_venv import CACHE, ToolVenv, on_python312

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
VENV = ToolVenv(
    CACHE / "verifiers-venv",
    "ROLLOUTS_VERIFIERS_VENV",
    NO_DEPS,
    DEPS,
    ("tests/e2e/test_verifiers_env.py",),
)


def ensure_venv(python312: str) -> Path:
    """The venv's python, building the venv first if it is missing or out of date."""
    return VENV.ensure(python312)


ensure_if_available = on_python312(VENV)
