"""The verifier runtime reads a test function's instructions off its bytes
(verifier_runtime/iterators.py `_decoded`), where `dis` would build each one's value, text and
source position: what it reads must be what `dis.get_instructions` says, field for field, on
every interpreter the runtime supports (Python >= 3.8; each one found here is asked)."""

from __future__ import annotations

import glob
import marshal
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sandboxes

RUNTIME = Path(sandboxes.__file__).parent / "verifier_runtime"

# Run by each interpreter: argv[1] the runtime, argv[2] (where given) a file of marshalled code
# objects of this interpreter's. Every code object of a third of the standard library's
# top-level modules (some 3,000), and those.
COMPARE = r"""
import dis, glob, importlib.util, marshal, os, sys, sysconfig, types
at = os.path.join(sys.argv[1], "loader.py")
spec = importlib.util.spec_from_file_location("_rollouts_loader", at)
loader = importlib.util.module_from_spec(spec)
sys.modules["_rollouts_loader"] = loader  # (the runtime's modules find each other by it)
spec.loader.exec_module(loader)
iterators = loader.load("iterators")
codes = []
def walk(code):
    codes.append(code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            walk(const)
for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[::3]:
    try:
        with open(path, encoding="utf-8") as f:
            walk(compile(f.read(), path, "exec"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        pass
if len(sys.argv) > 2:
    with open(sys.argv[2], "rb") as f:
        for code in marshal.load(f):
            walk(code)
named = iterators._NAMED
differ = []
for code in codes:
    want = [
        (i.offset, i.opname, i.opcode, i.arg, i.argval if i.opname in named else None,
         i.is_jump_target)
        for i in dis.get_instructions(code) if i.opname not in iterators._SKIP
    ]
    got = [(i.offset, i.opname, i.opcode, i.arg, i.argval, i.is_jump_target)
           for i in iterators._decoded(code)]
    if got != want:
        differ.append(code.co_name)
print(len(codes), len(differ), differ[:5])
"""


def _interpreters() -> list[str]:
    """One of each minor version 3.8+ but this one's found that runs: on PATH, or in pyenv's
    versions (a shim on PATH may name one that is not installed)."""
    found, minors = [], {sys.version_info[1]}
    for minor in range(8, 15):
        candidates = [shutil.which(f"python3.{minor}")]
        candidates += sorted(glob.glob(f"/root/.pyenv/versions/3.{minor}.*/bin/python3"))
        for path in candidates:
            if minor in minors or path is None:
                continue
            try:
                ok = subprocess.run([path, "-c", "pass"], capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if ok.returncode == 0:
                found.append(path)
                minors.add(minor)
    return found


def _compare(python: str, *extra: str) -> None:
    run = subprocess.run(
        [python, "-I", "-c", COMPARE, str(RUNTIME), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    codes, differ, names = run.stdout.split(" ", 2)
    assert int(codes) > 2000, run.stdout  # (the standard library was read)
    assert differ == "0", names


@pytest.mark.parametrize("python", _interpreters())
def test_other_interpreters_read_the_instructions_as_dis_does(python: str) -> None:
    _compare(python)


def _rewritten(p, xs):
    """Shapes the runtime reads most: calls in pytest's rewritten asserts, a long function
    (EXTENDED_ARG), a closure's cell, comprehensions, a try, a loop."""
    total = 0
    for x in xs:
        try:
            total += len(list(p(x)))
        except ValueError:
            continue
    assert sorted(p(x) for x in xs) == [p(x) for x in sorted(xs)]
    assert {k: p(k) for k in xs}
    assert (lambda: total)() == total
    return total


def test_this_interpreter_reads_pytests_rewritten_code_as_dis_does(tmp_path: Path) -> None:
    long = "def f(p):\n" + "".join(f"    assert p({i}) == p(x{i} := {i})\n" for i in range(300))
    codes = tmp_path / "codes.marshal"
    codes.write_bytes(marshal.dumps([_rewritten.__code__, compile(long, "<long>", "exec")]))
    _compare(sys.executable, str(codes))
