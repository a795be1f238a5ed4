"""Imports go one way: sandboxes < service < clients. The stand-in policy server is a separate
program: it may use the sandbox layer (task loading) and the shared vLLM wire models, nothing
else of the service. benchmarks/ and tests/ may import anything."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANK = {"sandboxes": 0, "service": 1, "clients": 2}
# Modules of a higher layer that a package may still import, named exactly.
STANDIN_MAY_IMPORT = {"service.policy.vllm_wire"}


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in `source`, relative ones resolved."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def violations(package: str, module: str, source: str) -> list[str]:
    bad = []
    for line, name in imported_modules(source, module):
        top = name.split(".")[0]
        if package == "standin":
            if top in ("service", "clients") and name not in STANDIN_MAY_IMPORT:
                bad.append(f"{module}:{line} imports {name}")
        elif top == "standin" or (top in RANK and RANK[top] > RANK[package]):
            bad.append(f"{module}:{line} imports {name}")
    return bad


def _modules() -> list[tuple[str, str, Path]]:
    out = []
    for package in [*RANK, "standin"]:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((package, module, path))
    return out


def test_every_package_is_scanned():
    scanned = {package for package, _, _ in _modules()}
    assert scanned == {*RANK, "standin"}, scanned


def test_no_import_goes_up_a_layer():
    bad = []
    for package, module, path in _modules():
        bad += violations(package, module, path.read_text())
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_the_check_catches_upward_imports():
    # The checker itself must be able to fail, including on lazy and relative imports.
    assert violations("sandboxes", "sandboxes.x", "from service.trajectory import Status")
    assert violations("sandboxes", "sandboxes.x", "def f():\n    import clients.cli\n")
    assert violations("service", "service.a.b", "from ...clients import trainer")
    assert violations("service", "service.x", "import standin.server")
    assert violations("standin", "standin.x", "from service.episode import EpisodeRunner")
    assert not violations("standin", "standin.x", "from service.policy.vllm_wire import Usage")
    assert not violations("clients", "clients.x", "from service.store import Store")
    assert not violations("service", "service.x", "from . import store")
