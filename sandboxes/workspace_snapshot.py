"""A workspace tar as a manifest plus its files by content, and back again: how the final
workspaces of samples are kept for regrading, with identical files stored once.

`split` lists every member of the tar in order with what tarfile writes of it (name, type,
mode, mtime, size, link target) and the sha256 of each regular file's content; `rebuild`
writes those members again the way `workspace_tar.sanitize_workspace` does (GNU format, no
owners) and checks the result against the sha256 of the original tar, so the verifier of a
regrade receives the very bytes the first verifier received. A tar that would not come back
identical (one the sanitizer did not write) is kept whole, as a single blob.

Blobs travel and are stored compressed (`pack`: zlib, or raw when that is not smaller); the
manifest says nothing of compression.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

MANIFEST_VERSION = 1
ZLIB_LEVEL = 6  # source files shrink ~3-4x; higher levels gain little for much more CPU
# A member: [name, type, mode, mtime, size, link target, sha256 of the content or None]
Member = list[Any]


# Which blob digests the keeper of workspaces already holds (of those asked about).
KnownBlobs = Callable[[list[str]], Awaitable[set[str]]]


class SnapshotError(ValueError):
    """A kept workspace cannot be rebuilt as it was: a blob is missing or does not match."""


@dataclass
class Snapshot:
    """A workspace tar (`digest`, `size`: its sha256 and length) as a manifest plus blobs."""

    digest: str
    size: int
    manifest: dict[str, Any]
    blobs: dict[str, bytes] = field(default_factory=dict)  # sha256 -> content

    @property
    def digests(self) -> list[str]:
        """Every blob the manifest references, each once, in order of first use."""
        return blob_digests(self.manifest)


async def snapshot_of(tar: bytes, known: KnownBlobs) -> Snapshot:
    """`split` on a worker thread (a tar we wrote, not the agent's raw bytes), keeping only
    the blobs `known` does not hold."""
    snap = await asyncio.to_thread(split, bytes(tar))
    have = await known(snap.digests)
    snap.blobs = {d: b for d, b in snap.blobs.items() if d not in have}
    return snap


def blob_digests(manifest: Mapping[str, Any]) -> list[str]:
    if "whole" in manifest:
        return [manifest["whole"]]
    seen: dict[str, None] = {}
    for m in manifest["members"]:
        if m[6] is not None:
            seen.setdefault(m[6], None)
    return list(seen)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split(tar: bytes) -> Snapshot:
    """The manifest and blobs of `tar`, checked to rebuild into the same bytes (else the
    whole tar is one blob)."""
    digest = _sha(tar)
    try:
        snapshot = _split_members(tar, digest)
        # Hashed as it is written: the check holds no second copy of the workspace.
        rebuilt = _Hashing()
        _write_members(snapshot.manifest["members"], snapshot.blobs, rebuilt)
        if rebuilt.sha.hexdigest() == digest:
            return snapshot
    except (tarfile.TarError, EOFError, OSError, ValueError, SnapshotError):
        pass
    whole = {"v": MANIFEST_VERSION, "tar": digest, "size": len(tar), "whole": digest}
    return Snapshot(digest, len(tar), whole, {digest: tar})


def _split_members(tar: bytes, digest: str) -> Snapshot:
    members: list[Member] = []
    blobs: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as src:
        for m in src:
            content = None
            if m.isreg():
                f = src.extractfile(m)
                assert f is not None
                data = f.read()
                content = _sha(data)
                blobs[content] = data
            kind = m.type.decode("latin-1")
            members.append([m.name, kind, m.mode, int(m.mtime), m.size, m.linkname, content])
    manifest = {"v": MANIFEST_VERSION, "tar": digest, "size": len(tar), "members": members}
    return Snapshot(digest, len(tar), manifest, blobs)


def rebuild(manifest: Mapping[str, Any], blobs: Mapping[str, bytes]) -> bytes:
    """The tar a manifest describes, from its blobs. SnapshotError when a blob is missing or
    the result is not the tar that was split (its sha256 differs)."""
    try:
        if "whole" in manifest:
            data = blobs[manifest["whole"]]
        else:
            out = io.BytesIO()
            _write_members(manifest["members"], blobs, out)
            data = out.getvalue()
    except KeyError as e:
        raise SnapshotError(f"blob {e.args[0]} of the workspace is missing") from None
    if _sha(data) != manifest["tar"]:
        raise SnapshotError(f"the workspace rebuilt does not match its digest {manifest['tar']}")
    return data


class _Hashing:
    """A file that keeps only the sha256 and length of what is written to it."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self._offset = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self._offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self._offset


def _write_members(
    members: list[Member], blobs: Mapping[str, bytes], out: IO[bytes] | _Hashing
) -> None:
    # As workspace_tar.sanitize_workspace writes it: GNU format, tarfile's default owners.
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as dst:  # type: ignore[arg-type]
        for name, kind, mode, mtime, size, linkname, content in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.size = kind.encode("latin-1"), mode, mtime, size
            info.linkname = linkname
            if content is None:
                dst.addfile(info)
            else:
                dst.addfile(info, io.BytesIO(blobs[content]))


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as stored: compact JSON, compressed."""
    return zlib.compress(json.dumps(manifest, separators=(",", ":")).encode(), ZLIB_LEVEL)


def manifest_of(data: bytes) -> dict[str, Any]:
    manifest = json.loads(zlib.decompress(data))
    if manifest.get("v") != MANIFEST_VERSION:
        raise SnapshotError(f"unknown workspace manifest version {manifest.get('v')!r}")
    return manifest


def pack(data: bytes) -> tuple[str, bytes]:
    """(codec, stored bytes) of a blob: zlib where it is smaller, else the bytes as they are."""
    packed = zlib.compress(data, ZLIB_LEVEL)
    return ("zlib", packed) if len(packed) < len(data) else ("raw", data)


def unpack(codec: str, data: bytes, size: int) -> bytes:
    """A stored blob's content; SnapshotError when it does not decode to `size` bytes."""
    if codec == "raw":
        out = bytes(data)
    elif codec == "zlib":
        d = zlib.decompressobj()
        out = d.decompress(data, size + 1)  # never more than the recorded size (and one byte)
    else:
        raise SnapshotError(f"unknown blob codec {codec!r}")
    if len(out) != size:
        raise SnapshotError(f"a blob decoded to {len(out)} bytes, not {size}")
    return out
