"""Tar archives in and out of sandboxes: build one from a file map, and sanitize a workspace.

A workspace comes from an untrusted agent: the tar of /app is made in its container, where it
can write into the archive's stream or swap it for one of its own. So it is read as plain,
uncompressed tar only (GNU tar in the container never compresses it), with caps on members,
member sizes and total bytes, and without the header kinds `tar -c` never writes there (pax
headers, whose parsing costs time quadratic in their size on Python 3.11, and GNU sparse
maps, which tarfile reads whole into memory): one pass, linear in the archive, whose memory
is bounded by it. Anything it cannot read is `WorkspaceUnreadable`, the agent's doing (graded
0, never masked). Links that point outside /app (a symlink to /etc/shadow, say), hardlinks to
files not in the archive, device nodes, FIFOs, absolute paths and `..` components are
dropped, each with a note.

`sanitize_workspace` returns the re-packed tar; `check_workspace` makes the same decisions
without keeping what it writes, and `copy_workspace` then writes the kept members into a tar
of the caller's (the verifier's upload, sent as it is written), so a workspace already in
memory is never held a second time. The decode runs on a small pool of its own
(`sanitize_workspace_async`, `check_workspace_async`), never the event loop's default
executor, and stops at the next member or block when its sample is cancelled.
"""

from __future__ import annotations

import asyncio
import io
import os
import posixpath
import tarfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import IO, TypeVar

# Defined with the sandbox interface (the episode grades them 0); re-exported for callers here.
from sandboxes.backend import WorkspaceTooLarge as WorkspaceTooLarge
from sandboxes.backend import WorkspaceUnreadable as WorkspaceUnreadable

DEFAULT_MAX_WORKSPACE_BYTES = 256 << 20
DEFAULT_MAX_WORKSPACE_MEMBERS = 200_000
# A GNU long name or link target longer than this is no path a filesystem can hold.
MAX_LONG_NAME = 64 << 10
# Notes on dropped members kept per workspace (the rest are counted).
MAX_NOTES = 50
_REFUSED_TYPES = {
    tarfile.XHDTYPE: "a pax header",
    tarfile.XGLTYPE: "a pax global header",
    tarfile.SOLARIS_XHDTYPE: "a pax header",
    tarfile.GNUTYPE_SPARSE: "a GNU sparse file",
}
_DECODE_WORKERS = 2
T = TypeVar("T")


class UnsafePath(ValueError):
    pass


class _Refused(Exception):
    """Raised from inside tarfile's header parsing. Not a tarfile.HeaderError: tarfile takes
    those past the first member for the end of the archive."""


class _Cancelled(Exception):
    pass


class _WorkspaceMember(tarfile.TarInfo):
    """A member header as tarfile parses it, refused before tarfile acts on it when it is a
    kind our `tar -c` never writes or a long name no filesystem has."""

    @classmethod
    def frombuf(cls, buf: bytes, encoding: str, errors: str) -> tarfile.TarInfo:
        info = super().frombuf(buf, encoding, errors)
        if info.type in _REFUSED_TYPES:
            raise _Refused(f"{_REFUSED_TYPES[info.type]} (not written by `tar -c` there)")
        long_name = info.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
        if long_name and info.size > MAX_LONG_NAME:
            raise _Refused(f"a long name of {info.size} bytes")
        return info


class _CancellableReader(io.RawIOBase):
    """A member's data, read by tarfile in blocks; stops when the sample is cancelled."""

    def __init__(self, inner: IO[bytes], cancelled: threading.Event | None) -> None:
        self._inner = inner
        self._cancelled = cancelled

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        if self._cancelled is not None and self._cancelled.is_set():
            raise _Cancelled()
        return self._inner.read(size)


def _clean_name(name: str) -> str | None:
    """Relative, normalized member name, or None when it is absolute or climbs out with `..`."""
    if name.startswith("/"):
        return None
    norm = posixpath.normpath(name)
    if norm == ".":
        return "."
    if norm.startswith("../") or norm == ".." or "/../" in f"/{norm}/":
        return None
    return norm


def build_tar(files: dict[str, bytes], prefix: str = "", mode: int = 0o644) -> bytes:
    """A tar of `files` (relative path -> bytes), each placed under `prefix`."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as tf:
        add_files(tf, files, prefix, mode)
    return bio.getvalue()


def add_files(
    dst: tarfile.TarFile, files: Mapping[str, bytes], prefix: str = "", mode: int = 0o644
) -> None:
    """Write `files` (relative path -> bytes) into `dst`, each placed under `prefix`."""
    for name in sorted(files):
        clean = _clean_name(name)
        if clean is None or clean == ".":
            raise UnsafePath(f"unsafe file name {name!r}")
        info = tarfile.TarInfo(posixpath.join(prefix, clean) if prefix else clean)
        info.size = len(files[name])
        info.mode = 0o755 if clean.endswith(".sh") else mode
        dst.addfile(info, io.BytesIO(files[name]))


def _link_inside(member_name: str, target: str) -> bool:
    """Whether a symlink at /app/<member_name> pointing to `target` stays inside /app."""
    if target.startswith("/"):
        resolved = posixpath.normpath(target)
        return resolved == "/app" or resolved.startswith("/app/")
    resolved = posixpath.normpath(posixpath.join("/app", posixpath.dirname(member_name), target))
    return resolved == "/app" or resolved.startswith("/app/")


def _place(prefix: str, name: str) -> str:
    if not prefix:
        return name
    return prefix if name == "." else posixpath.join(prefix, name)


def sanitize_workspace(
    data: bytes,
    max_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES,
    prefix: str = "",
    *,
    max_members: int = DEFAULT_MAX_WORKSPACE_MEMBERS,
    cancelled: threading.Event | None = None,
) -> tuple[bytes, list[str]]:
    """Re-pack a workspace tar keeping only safe members. Returns (tar bytes, notes on drops).

    With `prefix`, member names are placed under it (the verifier extracts `app/...` at /).
    Raises WorkspaceTooLarge past `max_bytes` of member data (in all, or in one member) or
    `max_members` members, and WorkspaceUnreadable for anything that is not a plain tar as
    `tar -c` writes it. Setting `cancelled` stops it (with WorkspaceUnreadable) at the next
    member or data block.
    """
    out = io.BytesIO()
    notes = _checked(data, out, max_bytes, prefix, max_members, cancelled)
    return out.getvalue(), notes


def check_workspace(
    data: bytes,
    max_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES,
    prefix: str = "",
    *,
    max_members: int = DEFAULT_MAX_WORKSPACE_MEMBERS,
    cancelled: threading.Event | None = None,
) -> list[str]:
    """`sanitize_workspace` without keeping what it writes (so without holding a copy): the
    same errors, and the notes. A workspace that passes is then written with `copy_workspace`."""
    return _checked(data, _Discard(), max_bytes, prefix, max_members, cancelled)


def copy_workspace(
    data: bytes,
    dst: tarfile.TarFile,
    max_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES,
    prefix: str = "",
    *,
    cancelled: threading.Event | None = None,
) -> None:
    """Write into `dst` what `sanitize_workspace` keeps of a workspace that `check_workspace`
    passed with the same arguments, a member and a data block at a time. Reading it again
    fails the same way or not at all, so an error raised here (as it is) is `dst`'s."""
    _copy(data, dst, max_bytes, prefix, DEFAULT_MAX_WORKSPACE_MEMBERS, cancelled)


class _Discard:
    """A file that keeps nothing of what is written to it."""

    def __init__(self) -> None:
        self._offset = 0

    def write(self, data: bytes) -> int:
        self._offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self._offset


def _checked(
    data: bytes,
    out: IO[bytes] | _Discard,
    max_bytes: int,
    prefix: str,
    max_members: int,
    cancelled: threading.Event | None,
) -> list[str]:
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as dst:  # type: ignore[arg-type]
            return _copy(data, dst, max_bytes, prefix, max_members, cancelled)
    except (WorkspaceTooLarge, WorkspaceUnreadable):
        raise
    except _Cancelled:
        raise WorkspaceUnreadable("reading the workspace was cancelled") from None
    except _Refused as e:
        raise WorkspaceUnreadable(f"the workspace archive holds {e}") from None
    except (tarfile.TarError, EOFError, ValueError, OSError, RecursionError) as e:
        # Only ever the bytes' fault: the archive is in memory, and so is what is written.
        raise WorkspaceUnreadable(f"the workspace is not a readable tar archive: {e}") from None


def _copy(
    data: bytes,
    dst: tarfile.TarFile,
    max_bytes: int,
    prefix: str,
    max_members: int,
    cancelled: threading.Event | None,
) -> list[str]:
    notes: list[str] = []
    dropped = 0
    kept_files: set[str] = set()
    total = 0
    members = 0
    # "r:": never decompressed, whatever the first bytes claim.
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:", tarinfo=_WorkspaceMember) as src:
        while (m := src.next()) is not None:
            # tarfile keeps every member it has read; these are not looked up again.
            src.members.clear()
            members += 1
            if members > max_members:
                raise WorkspaceTooLarge(f"workspace has more than {max_members} members")
            if cancelled is not None and cancelled.is_set():
                raise _Cancelled()
            name = _clean_name(m.name)
            drop = None
            if name is None:
                drop = f"dropped {m.name!r}: path leaves the workspace"
            elif m.issym():
                if not _link_inside(name, m.linkname):
                    drop = f"dropped symlink {name!r} -> {m.linkname!r}: points outside /app"
            elif m.islnk():
                target = _clean_name(m.linkname)
                if target is None or target not in kept_files:
                    drop = f"dropped hardlink {name!r} -> {m.linkname!r}: not in workspace"
            elif not (m.isreg() or m.isdir()):
                drop = f"dropped {name!r}: special file"
            if drop is not None:
                dropped += 1
                if len(notes) < MAX_NOTES:
                    notes.append(drop)
                continue
            assert name is not None
            size = m.size if m.isreg() else 0
            total += size
            if size > max_bytes or total > max_bytes:
                raise WorkspaceTooLarge(f"workspace exceeds {max_bytes} bytes")
            new = tarfile.TarInfo(_place(prefix, name))
            # setuid/setgid bits are dropped: nothing from the agent gains privileges.
            new.type, new.mode, new.mtime, new.size = m.type, m.mode & 0o777, m.mtime, size
            if m.islnk():
                new.linkname = _place(prefix, _clean_name(m.linkname) or "")
            elif m.issym():
                new.linkname = m.linkname
            if m.isreg():
                dst.addfile(new, _CancellableReader(src.extractfile(m), cancelled))  # type: ignore[arg-type]
                kept_files.add(name)
            else:
                dst.addfile(new)
    if dropped > len(notes):
        notes.append(f"... and {dropped - len(notes)} more dropped")
    return notes


_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None


def _decode_pool() -> ThreadPoolExecutor:
    """The workspace decoders' own threads (re-created after fork, as pools do not survive it):
    a slow archive never holds the threads the event loop's default executor lends out."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool = ThreadPoolExecutor(_DECODE_WORKERS, thread_name_prefix="workspace-tar")
        _pool_pid = os.getpid()
    return _pool


async def sanitize_workspace_async(
    data: bytes, max_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES, prefix: str = ""
) -> tuple[bytes, list[str]]:
    """`sanitize_workspace` off the event loop, on the decoders' pool; cancelling the caller
    stops the decode at its next member or data block."""
    return await _decode(sanitize_workspace, data, max_bytes, prefix)


async def check_workspace_async(
    data: bytes, max_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES, prefix: str = ""
) -> list[str]:
    """`check_workspace` as `sanitize_workspace_async` runs its decode."""
    return await _decode(check_workspace, data, max_bytes, prefix)


async def _decode(fn: Callable[..., T], data: bytes, max_bytes: int, prefix: str) -> T:
    cancelled = threading.Event()
    loop = asyncio.get_running_loop()
    work = partial(fn, data, max_bytes, prefix, cancelled=cancelled)
    try:
        return await loop.run_in_executor(_decode_pool(), work)
    except asyncio.CancelledError:
        cancelled.set()
        raise
