"""Tar archives in and out of sandboxes: build one from a file map, and sanitize a workspace.

A workspace comes from an untrusted agent. Before it reaches the verifier, links that point
outside /app (a symlink to /etc/shadow, say), hardlinks to files not in the archive, device
nodes, FIFOs, absolute paths and `..` components are dropped, each with a note, and the total
size is capped.
"""

from __future__ import annotations

import io
import posixpath
import tarfile

# Defined with the sandbox interface (the episode grades it 0); re-exported for callers here.
from sandboxes.backend import WorkspaceTooLarge as WorkspaceTooLarge

DEFAULT_MAX_WORKSPACE_BYTES = 256 << 20


class UnsafePath(ValueError):
    pass


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
        for name in sorted(files):
            clean = _clean_name(name)
            if clean is None or clean == ".":
                raise UnsafePath(f"unsafe file name {name!r}")
            info = tarfile.TarInfo(posixpath.join(prefix, clean) if prefix else clean)
            info.size = len(files[name])
            info.mode = 0o755 if clean.endswith(".sh") else mode
            tf.addfile(info, io.BytesIO(files[name]))
    return bio.getvalue()


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
    data: bytes, max_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES, prefix: str = ""
) -> tuple[bytes, list[str]]:
    """Re-pack a workspace tar keeping only safe members. Returns (tar bytes, notes on drops).

    With `prefix`, member names are placed under it (the verifier extracts `app/...` at /).
    """
    notes: list[str] = []
    kept_files: set[str] = set()
    total = 0
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as src,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for m in src:
            name = _clean_name(m.name)
            if name is None:
                notes.append(f"dropped {m.name!r}: path leaves the workspace")
                continue
            if m.issym():
                if not _link_inside(name, m.linkname):
                    notes.append(f"dropped symlink {name!r} -> {m.linkname!r}: points outside /app")
                    continue
            elif m.islnk():
                target = _clean_name(m.linkname)
                if target is None or target not in kept_files:
                    notes.append(f"dropped hardlink {name!r} -> {m.linkname!r}: not in workspace")
                    continue
            elif not (m.isreg() or m.isdir()):
                notes.append(f"dropped {name!r}: special file")
                continue
            total += m.size if m.isreg() else 0
            if total > max_bytes:
                raise WorkspaceTooLarge(f"workspace exceeds {max_bytes} bytes")
            new = tarfile.TarInfo(_place(prefix, name))
            # setuid/setgid bits are dropped: nothing from the agent gains privileges.
            new.type, new.mode, new.mtime, new.size = m.type, m.mode & 0o777, m.mtime, m.size
            if m.islnk():
                new.linkname = _place(prefix, _clean_name(m.linkname) or "")
            elif m.issym():
                new.linkname = m.linkname
            if m.isreg():
                dst.addfile(new, src.extractfile(m))
                kept_files.add(name)
            else:
                new.size = 0
                dst.addfile(new)
    return out.getvalue(), notes
