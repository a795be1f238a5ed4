"""The verifier upload's bytecode of the runtime (verifier.runtime_bytecode): a Python of this
cache tag loads the runtime from it, and only while the source is the one it was made from."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

from sandboxes.tasks import load_tasks
from sandboxes.verifier import RUNTIME_DIR, default_grader, write_upload
from sandboxes.workspace_tar import build_tar

EXAMPLE = Path(__file__).parents[2] / "examples" / "tasks" / "camel-to-snake"


def _unpack_upload(dest: Path) -> Path:
    task = load_tasks(str(EXAMPLE))[0]
    out = io.BytesIO()
    write_upload(out, task, build_tar({"solution.py": b"def fn(s):\n    return s\n"}))
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        tar.extractall(dest, filter="data")
    return dest / RUNTIME_DIR


def _load_verbosely(lib: Path, name: str) -> str:
    """Import lib/NAME.py as the runtime does (by path, no bytecode written), with -v."""
    code = (
        "import importlib.util, sys\n"
        f"s = importlib.util.spec_from_file_location('_rollouts_{name}', {str(lib / name)!r})\n"
        "m = importlib.util.module_from_spec(s); sys.modules[s.name] = m\n"
        "s.loader.exec_module(m)\n"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-B", "-v", "-c", code], capture_output=True, text=True, check=True
    )
    return run.stderr


def test_the_runtime_loads_from_the_uploaded_bytecode(tmp_path: Path) -> None:
    lib = _unpack_upload(tmp_path)
    runtime = {n for n in default_grader().runtime if n != "pytest_guard.py"}
    tag = sys.implementation.cache_tag
    assert {p.name for p in (lib / "__pycache__").iterdir()} == {
        f"{n.removesuffix('.py')}.{tag}.pyc" for n in runtime
    }
    out = _load_verbosely(lib, "proxies.py")
    assert f"code object from '{lib}/__pycache__/proxies.{tag}.pyc'" in out


def test_bytecode_of_another_source_is_not_used(tmp_path: Path) -> None:
    lib = _unpack_upload(tmp_path)
    source = lib / "proxies.py"
    source.write_bytes(source.read_bytes() + b"\nCHANGED = True\n")
    out = _load_verbosely(lib, "proxies.py")
    assert f"code object from '{lib}/__pycache__/proxies" not in out
