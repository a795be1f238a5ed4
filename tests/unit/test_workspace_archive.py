"""sanitize_workspace against archives an agent can send out of its container: made by GNU tar
for real, and hostile ones (compression bombs, broken streams, header kinds tarfile parses
slowly or into memory). Each is refused as the agent's doing, in bounded CPU and memory."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import os
import subprocess
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandboxes.backend import AgentCausedSandboxFault
from sandboxes.workspace_tar import (
    MAX_NOTES,
    WorkspaceTooLarge,
    WorkspaceUnreadable,
    sanitize_workspace,
    sanitize_workspace_async,
)
from tests.resource_use import measured

# 535 bytes of bz2: a tar of five members of 60 MiB of zeros (300 MiB, over the 256 MiB cap).
# The landed reader (mode "r:*") inflated and copied 256 MiB of it: 1.4 s and 250 MB.
BZ2_BOMB = base64.b64decode(
    "QlpoOTFBWSZTWUgtZ+gFfj7bgMiAQABdAAABYAAeEAAIIAB1CKEg0ZDQTVVNMEGGmbEKoCWUqVASy4+aNc9FCAqqJARrmrwloExOICi1TecVs/e6xjGoVQEvDFBWSZTWfavTAAAglvbiMiAQAB9AAABYAAeEACAAAggAHBTCaaA0xBNVJqPUDQNHPn+hVASxmVKgJZ9d9OmtKlQEsVjrtNsS323xWbje5Z7bec6ffnHHH7QVQEv5igrJMprOS7AfiAglttxGRAIAAugAAAsAAPCABAAAQQADgpkxMgyME1UmptQaBo33/QqgJYzKlQEs+u+nXWlSoCWKx22m2JcbcYrNz4ume+3nOn35zzz+0FUBL+YoKyTKayHBPFvgK/HIABgAAAEEAAYQCajIVAS1IVAS5igrJMprLt8BCqAE8GtxGRAIAAugAAAsAAPCABAAAQQADgpkxMgyMEUmo9RpoGitfhUAVVEiRAQFVRJ6vTtVICAqqJARvYbQJi2ICS2MxN9MTT75nOfqVQBVUT8xQVkmU1k/hUIZAKneW4jIgEAAXQAAAWAAHhAAgAAIIABwUyYmQZGCKJPSDQNGtfCoAqqJFhAQFVRLdRTeqQEBVUSAjWRmBMTiAsTxOZ305q775nOfrqoAqqJ+YoKyTKazuVNRCAJYjoAFgAAEAAAQQABhmApTTKhCkbFUIUjxdyRThQkEHcXgsA=="
)


def _gnu_tar(folder: Path, *options: str) -> bytes:
    """The archive the agent container's `tar -c` makes (GNU tar, its default format)."""
    return subprocess.run(
        ["tar", "-c", *options, "-C", str(folder), "."], capture_output=True, check=True
    ).stdout


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {m.name: m for m in tar}


def _tar(*infos: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for info, data in infos:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return out.getvalue()


def _file(name: str, data: bytes = b"x", type_: bytes = tarfile.REGTYPE) -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.size = type_, len(data)
    return info, data


def test_a_gnu_tar_workspace_is_kept_and_its_escapes_dropped(tmp_path: Path) -> None:
    app = tmp_path / "app"
    deep = app / ("d" * 120) / ("e" * 120)
    deep.mkdir(parents=True)
    (deep / "long.py").write_text("print(1)\n")
    (app / "solution.py").write_text("x = 1\n")
    os.chmod(app / "solution.py", 0o4755)
    os.link(app / "solution.py", app / "hard.py")
    (app / "inside").symlink_to("solution.py")
    (app / "outside").symlink_to("/etc/shadow")
    os.mkfifo(app / "fifo")
    out, notes = sanitize_workspace(_gnu_tar(app))
    kept = _members(out)
    long_name = f"{'d' * 120}/{'e' * 120}/long.py"
    assert {"solution.py", "hard.py", "inside", long_name} <= kept.keys()
    assert "outside" not in kept and "fifo" not in kept
    assert kept["solution.py"].mode == 0o755  # no setuid from the agent
    assert any("outside" in n for n in notes) and any("fifo" in n for n in notes)
    # The verifier sanitizes it again, under app/: our own output always reads back.
    again, _ = sanitize_workspace(out, prefix="app")
    assert f"app/{long_name}" in _members(again)


def test_a_compression_bomb_is_refused_unread() -> None:
    with measured() as use, pytest.raises(WorkspaceUnreadable) as e:
        sanitize_workspace(BZ2_BOMB)
    assert isinstance(e.value, AgentCausedSandboxFault)
    assert use.cpu_s < 0.5 and use.rss_growth < 32 << 20, use


def test_a_gzip_that_breaks_mid_way_is_the_agents_not_the_engines() -> None:
    """It raised gzip.BadGzipFile, an OSError, which was masked as an engine fault."""
    tar = _tar(_file("solution.py", os.urandom(60_000)))
    for blob in (
        gzip.compress(tar[:30_000]) + b"\x1f\x8b" + b"X" * 16,
        gzip.compress(tar),
        tar[:20_000],  # a plain tar cut short
        b"\0" * 10 + os.urandom(5000),
    ):
        with pytest.raises(WorkspaceUnreadable):
            sanitize_workspace(blob)


def test_header_kinds_tar_never_writes_there_are_refused(tmp_path: Path) -> None:
    # A pax header (quadratic to parse on this Python when it is large), however small.
    with pytest.raises(WorkspaceUnreadable, match="pax"):
        sanitize_workspace(_tar(_file("n" * 200), fmt=tarfile.PAX_FORMAT))
    # A pax header of a MiB of digits: refused before tarfile reads it.
    with measured() as use, pytest.raises(WorkspaceUnreadable, match="pax"):
        sanitize_workspace(_tar(_file("x", b"1" * (1 << 20), tarfile.XHDTYPE), _file("y")))
    assert use.cpu_s < 0.5, use
    # A GNU sparse file (its map is read whole into memory), made by GNU tar itself.
    app = tmp_path / "app"
    app.mkdir()
    with open(app / "sparse", "wb") as f:
        f.seek(1 << 20)
        f.write(b"end")
    with pytest.raises(WorkspaceUnreadable, match="sparse"):
        sanitize_workspace(_gnu_tar(app, "--sparse"))
    # A GNU long name longer than any path.
    with pytest.raises(WorkspaceUnreadable, match="long name"):
        sanitize_workspace(_tar(_file("x", b"a" * (1 << 20), tarfile.GNUTYPE_LONGNAME), _file("y")))


def test_members_and_sizes_are_capped_before_their_data_is_read() -> None:
    many = _tar(*(_file(f"f{i}") for i in range(101)))
    with pytest.raises(WorkspaceTooLarge, match="members"):
        sanitize_workspace(many, max_members=100)
    assert len(sanitize_workspace(many, max_members=101)[0]) > 0
    huge = _tar(_file("big", b"\0" * 1024))
    with pytest.raises(WorkspaceTooLarge):
        sanitize_workspace(huge, max_bytes=1000)
    # A header declaring 1 TiB with no data behind it: refused by its size, nothing read.
    info, _ = _file("declared")
    info.size = 1 << 40
    header = info.tobuf(tarfile.GNU_FORMAT)
    with measured() as use, pytest.raises(WorkspaceTooLarge):
        sanitize_workspace(header + b"\0" * 1024)
    assert use.rss_growth < 16 << 20, use
    assert isinstance(WorkspaceTooLarge("x"), AgentCausedSandboxFault)


def test_notes_are_capped() -> None:
    links = [_file(f"l{i}", type_=tarfile.SYMTYPE) for i in range(500)]
    for info, _ in links:
        info.linkname, info.size = "/etc/passwd", 0
    _, notes = sanitize_workspace(_tar(*links))
    assert len(notes) == MAX_NOTES + 1 and notes[-1].endswith("more dropped")


def test_a_cancelled_decode_stops() -> None:
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(WorkspaceUnreadable, match="cancelled"):
        sanitize_workspace(_tar(_file("a")), cancelled=cancelled)


async def test_decodes_never_use_the_default_executor() -> None:
    class Refuse(ThreadPoolExecutor):
        def submit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise AssertionError("the workspace was decoded on the default executor")

    asyncio.get_running_loop().set_default_executor(Refuse())
    out, notes = await sanitize_workspace_async(_tar(_file("solution.py", b"x = 1\n")))
    assert "solution.py" in _members(out) and notes == []
