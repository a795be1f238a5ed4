"""Reading untrusted folders without following links out of them, and without a check-then-use gap.

Everything is opened relative to a directory descriptor that is already held, one path component
at a time, with `O_NOFOLLOW`: a component that is a symbolic link is never opened through. Its
target is read (`readlink`) and resolved *lexically* against the folder the walk started from; a
target that leaves that folder is refused, one that stays inside is walked again the same way.
What was opened is then checked by `fstat` against what `lstat` saw, so swapping a file for a
link (or another file) between the two is noticed, never followed. File sizes are capped while
reading: a file over the cap is refused from its size before any byte is read, and a read never
returns more than the cap allows even when the file grows meanwhile.

Linux semantics (`O_NOFOLLOW`, `*at` calls through `dir_fd`).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO never waits for a writer (it is refused right after, by fstat).
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
MAX_LINK_HOPS = 8
_READ_CHUNK = 1 << 20
_RETRIES = 3  # a component that changes between lstat and open this often is refused


class UnsafePath(Exception):
    """`rel` (relative to the folder a walk started from) cannot be read safely; `reason` is one
    of "outside" (a link leaving the folder), "link_dir" (a link to a directory), "special"
    (not a regular file or directory), "changed" (kept changing while being opened),
    "too_large", "missing" and "not_dir"."""

    def __init__(self, rel: str, reason: str, detail: str = "") -> None:
        self.rel = rel
        self.reason = reason
        super().__init__(f"{rel}: {detail or reason}")


@dataclass(frozen=True)
class Folder:
    """A held directory descriptor and the absolute spellings of its path (for link targets
    written as absolute paths that point back inside it)."""

    fd: int
    spellings: tuple[str, ...] = ()


def spellings_of(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The absolute path as written and as resolved; used only to compare link targets."""
    given = os.path.abspath(path)
    real = os.path.realpath(path)
    return (given,) if given == real else (given, real)


def split_relative(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p not in ("", ".")]


def _lexical_target(
    target: str, parent: list[str], spellings: tuple[str, ...], rel: str
) -> list[str]:
    """A link's target as components relative to the walk's folder, or UnsafePath("outside")."""
    if os.path.isabs(target):
        norm = posixpath.normpath(target)
        for s in spellings:
            s = s.rstrip("/") or "/"
            if norm == s:
                return []
            if norm.startswith(s + "/") or s == "/":
                return split_relative(norm[len(s) :])
        raise UnsafePath(rel, "outside", "a symlink pointing outside")
    joined = posixpath.normpath(posixpath.join(*parent, target) if parent else target)
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        raise UnsafePath(rel, "outside", "a symlink pointing outside")
    return split_relative(joined)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_beneath(folder: Folder, rel: str, *, want_dir: bool | None = None) -> tuple[int, bool]:
    """Open `rel` under `folder`; returns (descriptor, is_dir). Links inside are followed
    lexically as the module says; a final component that is neither a regular file nor a
    directory is refused ("special") before it is opened. `want_dir` True/False refuses the
    other kind ("not_dir" / "link_dir" when the path went through a link to a directory).
    OSError (ENOENT, EACCES, ...) passes through."""
    parts = split_relative(rel)
    if any(p == ".." for p in parts):
        raise UnsafePath(rel, "outside", "'..' in the path")
    hops = 0
    linked = False
    cur = os.dup(folder.fd)
    done: list[str] = []
    try:
        retries = 0
        while True:
            if not parts:
                if want_dir is False:
                    raise UnsafePath(rel, "link_dir" if linked else "not_dir", "is a directory")
                return _take(cur), True
            name, last = parts[0], len(parts) == 1
            if name == "..":
                raise UnsafePath(rel, "outside", "'..' in the path")
            st = os.stat(name, dir_fd=cur, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise UnsafePath(rel, "outside", "too many levels of symbolic links")
                try:
                    target = os.readlink(name, dir_fd=cur)
                except OSError as e:  # swapped back to a file meanwhile: look again
                    if e.errno != errno.EINVAL:
                        raise
                    retries += 1
                    if retries > _RETRIES:
                        raise UnsafePath(rel, "changed", "changed while being read") from e
                    continue
                linked = True
                new = _lexical_target(target, done, folder.spellings, rel)
                os.close(cur)
                cur = os.dup(folder.fd)
                parts, done = new + parts[1:], []
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_dir and not last:
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), rel)
            if not is_dir and not stat.S_ISREG(st.st_mode):
                raise UnsafePath(rel, "special", "not a regular file")
            try:
                nfd = os.open(name, _O_DIR if is_dir else _O_FILE, dir_fd=cur)
            except OSError as e:  # became a link (ELOOP/ENOTDIR) or vanished: look again
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                nfd = -1
            if nfd < 0 or not _same(os.fstat(nfd), st):
                if nfd >= 0:
                    os.close(nfd)
                retries += 1
                if retries > _RETRIES:
                    raise UnsafePath(rel, "changed", "changed while being read")
                continue
            if last and not is_dir:
                if want_dir is True:
                    os.close(nfd)
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), rel)
                os.close(cur)
                cur = -1
                return nfd, False
            os.close(cur)
            cur = nfd
            done.append(name)
            parts = parts[1:]
            retries = 0
    finally:
        if cur >= 0:
            os.close(cur)


def _take(fd: int) -> int:
    """Hand a descriptor to the caller, out of the walk's own cleanup."""
    return os.dup(fd)


def read_capped(fd: int, limit: int, rel: str = "") -> bytes:
    """The whole file, refused (UnsafePath "too_large") past `limit` bytes: by its size before
    reading, and by counting while reading (a file that grows is cut off at limit + 1)."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise UnsafePath(rel, "too_large", f"{size} bytes")
    chunks: list[bytes] = []
    n = 0
    while True:
        data = os.read(fd, min(_READ_CHUNK, limit - n + 1))
        if not data:
            return b"".join(chunks)
        n += len(data)
        if n > limit:
            raise UnsafePath(rel, "too_large", f"more than {limit} bytes")
        chunks.append(data)


@contextmanager
def opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def read_tree(
    folder: Folder, *, max_bytes: int, max_files: int, skip_dirs: frozenset[str] = frozenset()
) -> dict[str, bytes]:
    """Every regular file under `folder` as {relative path: bytes}, sorted like a top-down walk
    (a folder's files, then its subfolders). Links are read through only when they stay inside
    `folder` and name a regular file. Raises UnsafePath: "outside", "link_dir", "special",
    "changed", and "too_large" with rel "" when the files together pass `max_bytes` (or their
    number passes `max_files`: detail "files")."""
    files: dict[str, bytes] = {}
    total = 0

    def add(rel: str, fd: int) -> None:
        nonlocal total
        if len(files) >= max_files:
            raise UnsafePath("", "too_large", "files")
        data = read_capped(fd, max_bytes - total, rel)
        total += len(data)
        files[rel] = data

    def walk(dir_fd: int, prefix: str) -> None:
        names = sorted(os.listdir(dir_fd))
        subdirs: list[str] = []
        for name in names:
            rel = prefix + name
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if name not in skip_dirs:
                    subdirs.append(name)
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                raise UnsafePath(rel, "special", "not a regular file")
            # Opened from the top through the link-checking walk: a file swapped for a link
            # after this lstat is noticed there, never read through.
            fd, _ = open_beneath(folder, rel, want_dir=False)
            with opened(fd):
                add(rel, fd)
        for name in subdirs:
            fd, _ = open_beneath(folder, prefix + name, want_dir=True)
            with opened(fd):
                walk(fd, prefix + name + "/")

    walk(folder.fd, "")
    return files
