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


# ---------------------------------------------------------------- circles

CIRCLE_PACKAGES = ("sandboxes", "service", "clients", "benchmarks", "standin")


def import_graph(sources: dict[str, str], packages: frozenset[str] = frozenset()) -> dict:
    """module -> the modules of `sources` it imports (at any depth of the file, lazy ones too).
    `from a import b` counts as importing the module a.b where there is one. A package's
    __init__ (a module in `packages`) importing its own parts is not an edge: the package is
    made of them."""
    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, source in sources.items():
        # A relative import in a package's __init__ is relative to the package itself.
        anchor = module + ".__init__" if module in packages else module
        for node in ast.walk(ast.parse(source)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = anchor.split(".")[: -node.level]
                    base = ".".join([*parent, node.module] if node.module else parent)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base
                    for a in node.names
                ]
            for name in targets:
                if name in sources and name != module and not name.startswith(module + "."):
                    graph[module].add(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _sources() -> tuple[dict[str, str], frozenset[str]]:
    sources, packages = {}, set()
    for package in CIRCLE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if parts[-1] == "__init__":
                packages.add(module)
            sources[module] = path.read_text()
    return sources, frozenset(packages)


def test_no_two_modules_import_each_other():
    found = circles(import_graph(*_sources()))
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_circle_check_catches_lazy_and_from_imports():
    sources = {
        "p.a": "def f():\n    from p.b import g\n",
        "p.b": "from p import c\n",  # the module p.c
        "p.c": "import p.a\n",
        "p.d": "from p.a import f\n",
    }
    assert circles(import_graph(sources)) == [["p.a", "p.b", "p.c"]]
    assert circles(import_graph({"p.a": "import p.b\n", "p.b": "x = 1\n"})) == []
    # A package's __init__ gathering its parts, which import each other's package: no circle.
    package = {"p": "from . import a\n", "p.a": "from p.b import x\n", "p.b": "x = 1\n"}
    assert circles(import_graph(package, frozenset({"p"}))) == []
