"""Read an untrusted tar (or tar.gz / tar.bz2 / tar.xz) blob into memory, safely.

Task archives come from datasets we do not control, so nothing is extracted to disk: members are
read into a `{relative path: bytes}` map while streaming, with caps on the number of members and
on the total uncompressed size that are enforced *before* the bytes are produced (tar bombs), and
on the decompressed stream itself (gzip bombs made of padding or endless headers).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import posixpath
import tarfile
import zlib
from typing import IO

DEFAULT_MAX_TOTAL_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_MEMBERS = 10_000

# Headers, long-name records and padding are not counted as member data, so the decompressed
# stream may exceed the data cap by this much per member (plus a fixed end-of-archive slack).
_HEADER_ALLOWANCE_PER_MEMBER = 4 * 512
_FIXED_ALLOWANCE = 64 * 1024


def max_archive_bytes(
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES, max_members: int = DEFAULT_MAX_MEMBERS
) -> int:
    """The most bytes a tar within the caps can take, uncompressed (its data, headers and
    padding); a compressed archive of it is no larger, give or take a little."""
    return max_total_bytes + max_members * _HEADER_ALLOWANCE_PER_MEMBER + _FIXED_ALLOWANCE


class UnsafeTarError(ValueError):
    """The blob is not a readable tar, or it holds something we refuse to read."""


class _LimitedReader(io.RawIOBase):
    """Counts bytes read from a (decompressing) stream and fails once past a limit."""

    def __init__(self, inner: IO[bytes], limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        self._count += len(data)
        if self._count > self._limit:
            raise UnsafeTarError(
                f"archive decompresses to more than {self._limit} bytes (compression bomb?)"
            )
        buffer[: len(data)] = data
        return len(data)


def _decompressed_stream(blob: bytes) -> IO[bytes]:
    """Pick the decompressor from the magic bytes; plain tar passes through."""
    raw = io.BytesIO(blob)
    if blob[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if blob[:3] == b"BZh":
        return bz2.BZ2File(raw, mode="rb")
    if blob[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(raw, mode="rb")
    return raw


def _safe_member_name(name: str) -> str:
    """Normalise a member name and refuse anything that could land outside the task folder."""
    if not name or "\x00" in name:
        raise UnsafeTarError(f"tar member with an empty or NUL-containing name: {name!r}")
    if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeTarError(f"tar member {name!r} has an absolute path")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeTarError(f"tar member {name!r} contains '..' (path traversal)")
    return posixpath.join(*parts) if parts else ""


def read_tar_members(
    blob: bytes,
    *,
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> dict[str, bytes]:
    """Return the regular files of a tar blob as `{normalised relative path: contents}`.

    Refused (UnsafeTarError): non-tar data, absolute paths, `..`, symlinks and hardlinks (a task
    folder has no need for them, and refusing them all closes every link-traversal trick), device
    files and FIFOs, duplicate paths, more than `max_members` members, member data totalling more
    than `max_total_bytes`, and a compressed stream that inflates far beyond that.
    Directories are accepted and implied by the file paths.
    """
    if not blob:
        raise UnsafeTarError("empty blob, not a tar archive")
    limit = max_archive_bytes(max_total_bytes, max_members)
    files: dict[str, bytes] = {}
    total = 0
    members = 0
    try:
        stream = _LimitedReader(_decompressed_stream(blob), limit)
        # "r|" = streaming mode: headers are read one by one, no seeking and no index built
        # up front, so the caps below trip before the rest of the archive is touched.
        with tarfile.open(fileobj=io.BufferedReader(stream), mode="r|") as tar:
            for member in tar:
                members += 1
                if members > max_members:
                    raise UnsafeTarError(f"archive has more than {max_members} members")
                name = _safe_member_name(member.name)
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise UnsafeTarError(
                        f"tar member {member.name!r} is a link (to {member.linkname!r}); "
                        "links are not allowed in task archives"
                    )
                if not member.isreg():
                    raise UnsafeTarError(
                        f"tar member {member.name!r} is not a regular file or directory "
                        "(device, FIFO or other special file)"
                    )
                if not name:
                    raise UnsafeTarError(f"tar member {member.name!r} has no file name")
                total += member.size
                if total > max_total_bytes:
                    raise UnsafeTarError(
                        f"archive contents exceed {max_total_bytes} bytes uncompressed"
                    )
                if name in files:
                    raise UnsafeTarError(f"tar member {name!r} appears more than once")
                extracted = tar.extractfile(member)
                if extracted is None:  # pragma: no cover - isreg() members always have data
                    raise UnsafeTarError(f"tar member {member.name!r} has no data")
                data = extracted.read()
                if len(data) != member.size:
                    raise UnsafeTarError(f"tar member {member.name!r} is truncated")
                files[name] = data
    except UnsafeTarError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        raise UnsafeTarError(f"not a readable tar archive: {e}") from e
    if members == 0:
        raise UnsafeTarError("not a tar archive (no members found)")
    return files
