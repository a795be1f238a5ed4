"""safe_tar: real tar / tar.gz blobs built in memory, including hostile ones."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile

import pytest

from sandboxes.safe_tar import UnsafeTarError, read_tar_members


def _make_tar(entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
            else:
                name, data = entry
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _info(name: str, type_: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.linkname = linkname
    return info


def test_reads_files_and_skips_directories() -> None:
    blob = _make_tar(
        [_info("task", tarfile.DIRTYPE), ("task/a.txt", b"hello"), ("./task/sub/b", b"x")]
    )
    assert read_tar_members(blob) == {"task/a.txt": b"hello", "task/sub/b": b"x"}


@pytest.mark.parametrize(
    "compress",
    [gzip.compress, bz2.compress, lzma.compress],
    ids=["gzip", "bz2", "xz"],
)
def test_compressed_archives(compress) -> None:
    blob = compress(_make_tar([("f.txt", b"data")]))
    assert read_tar_members(blob) == {"f.txt": b"data"}


@pytest.mark.parametrize(
    ("entries", "needle"),
    [
        ([("/etc/passwd", b"x")], "absolute path"),
        ([("a/../../escape", b"x")], "'..'"),
        ([("..", b"x")], "'..'"),
        ([_info("link", tarfile.SYMTYPE, "/etc/passwd")], "is a link"),
        ([_info("link", tarfile.SYMTYPE, "inside.txt")], "is a link"),
        ([("f", b"x"), _info("hard", tarfile.LNKTYPE, "../../etc/shadow")], "is a link"),
        ([_info("dev", tarfile.CHRTYPE)], "not a regular file"),
        ([_info("blk", tarfile.BLKTYPE)], "not a regular file"),
        ([_info("fifo", tarfile.FIFOTYPE)], "not a regular file"),
        ([("dup", b"1"), ("./dup", b"2")], "more than once"),
    ],
)
def test_refuses_unsafe_members(entries, needle: str) -> None:
    with pytest.raises(UnsafeTarError, match=needle):
        read_tar_members(_make_tar(entries))


@pytest.mark.parametrize(
    "blob", [b"definitely not a tar archive" * 40, b"\x1f\x8bgarbage", b""], ids=str
)
def test_refuses_non_tar(blob: bytes) -> None:
    with pytest.raises(UnsafeTarError, match="tar archive"):
        read_tar_members(blob)


def test_member_count_cap() -> None:
    blob = _make_tar([(f"f{i}", b"") for i in range(11)])
    with pytest.raises(UnsafeTarError, match="more than 10 members"):
        read_tar_members(blob, max_members=10)
    assert len(read_tar_members(blob, max_members=11)) == 11


def test_size_cap_uses_declared_sizes_before_reading() -> None:
    # Header claims 1 GiB, but the archive is tiny: the cap must trip on the header alone.
    info = tarfile.TarInfo("huge")
    info.size = 1 << 30
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    with pytest.raises(UnsafeTarError, match="exceed 1000 bytes"):
        read_tar_members(header + b"\0" * 1024, max_total_bytes=1000)


def test_size_cap_sums_members() -> None:
    blob = _make_tar([("a", b"x" * 600), ("b", b"x" * 600)])
    with pytest.raises(UnsafeTarError, match="exceed 1000 bytes"):
        read_tar_members(blob, max_total_bytes=1000)


def test_gzip_bomb_is_stopped_while_streaming() -> None:
    # 200 MiB of one real member compresses to ~200 KiB; the member header alone trips the cap,
    # and the decompressed-stream limit backs it up for bombs hiding in padding.
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo("bomb")
        info.size = 200 << 20
        gz.write(info.tobuf())
        chunk = b"\0" * (1 << 20)
        for _ in range(200):
            gz.write(chunk)
    with pytest.raises(UnsafeTarError, match="exceed"):
        read_tar_members(out.getvalue(), max_total_bytes=1 << 20)


def test_gzip_bomb_of_padding_hits_stream_limit() -> None:
    # Many zero-size members with junk in between (pax headers padded with huge records) make
    # the decompressed stream grow without any member data: the stream counter must stop it.
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        info = tarfile.TarInfo("padded")
        info.pax_headers = {"comment": "x" * (8 << 20)}
        gz.write(info.tobuf(format=tarfile.PAX_FORMAT))
        gz.write(b"\0" * 1024)
    with pytest.raises(UnsafeTarError, match="decompresses to more than"):
        read_tar_members(out.getvalue(), max_total_bytes=1024, max_members=10)
