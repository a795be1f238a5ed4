"""Hostile task Parquet files at the loader level: `rollouts verify --tasks bad.parquet` exits 2
with one line naming the task, before any container exists (no Docker needed)."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness import EXAMPLES, REPO, CaseLog


def _task_files() -> dict[str, bytes]:
    folder = EXAMPLES / "camel-to-snake"
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _tar(add: Callable[[tarfile.TarFile], None], *, compress: bool = False) -> bytes:
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w") as tf:
        for name, data in _task_files().items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        add(tf)
    blob = bio.getvalue()
    return gzip.compress(blob, compresslevel=9) if compress else blob


def _file(name: str, data: bytes) -> Callable[[tarfile.TarFile], None]:
    def add(tf: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))

    return add


def _link(
    name: str, target: str, kind: bytes = tarfile.SYMTYPE
) -> Callable[[tarfile.TarFile], None]:
    def add(tf: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = target
        tf.addfile(info)

    return add


def _many(count: int) -> Callable[[tarfile.TarFile], None]:
    def add(tf: tarfile.TarFile) -> None:
        for i in range(count):
            tf.addfile(tarfile.TarInfo(f"environment/f{i}"), io.BytesIO(b""))

    return add


class _Zeros(io.RawIOBase):
    """`size` zero bytes, produced lazily (a 200 MB member without holding it twice)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def _huge(size: int) -> Callable[[tarfile.TarFile], None]:
    def add(tf: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("environment/zeros.bin")
        info.size = size
        tf.addfile(info, io.BufferedReader(_Zeros(size)))

    return add


CASES: dict[str, tuple[str, Callable[[], bytes]]] = {
    "traversal_dotdot": ("member ../../evil.sh", lambda: _tar(_file("../../evil.sh", b"x"))),
    "traversal_absolute": ("member /etc/cron.d/evil",
                           lambda: _tar(_file("/etc/cron.d/evil", b"x"))),
    "symlink_out": ("symlink tests/x -> /etc/shadow",
                    lambda: _tar(_link("tests/x", "/etc/shadow"))),
    "hardlink_out": ("hardlink tests/x -> ../../etc/passwd",
                     lambda: _tar(_link("tests/x", "../../etc/passwd", tarfile.LNKTYPE))),
    "device_node": ("character device member",
                    lambda: _tar(_link("tests/dev", "", tarfile.CHRTYPE))),
    "gzip_bomb": ("gzip of a 200 MB member (~200 KB compressed)",
                  lambda: _tar(_huge(200 << 20), compress=True)),
    "member_bomb": ("20,000 empty members", lambda: _tar(_many(20_000))),
    "not_a_tar": ("random bytes as task_binary", lambda: b"\x00garbage" * 100),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_task_parquet(name: str, tmp_path: Path, case: CaseLog) -> None:
    tried, make = CASES[name]
    rec = case.add(f"task_parquet_{name}", "loader (rollouts verify --tasks bad.parquet)", tried)
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"path": [f"evil-{name}"], "task_binary": [make()]}), bad)
    proc = subprocess.run(
        [sys.executable, "-m", "clients.cli", "verify", "--tasks", str(bad), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    rec.observed = {"exit_code": proc.returncode, "stderr": proc.stderr.strip()[:200]}
    assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr[-500:]}"
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert f"evil-{name}" in lines[0], f"the error does not name the task: {lines[0]}"
    assert proc.stdout == "", "no task may have run"
