"""glibc malloc tuning for a process that moves ~100 KB trajectory payloads all day.

glibc serves allocations above its mmap threshold with mmap, but raises that threshold
dynamically after the first frees, after which ~100 KB payload buffers come from the heap arenas
and freed memory stays resident. With 10k stored trajectories the service's RSS grew to ~1 GiB
this way; pinning the threshold at 64 KiB keeps large buffers on mmap, returned to the OS on
free (RSS flat at ~200 MiB, docs/performance.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
LARGE_BUFFER_BYTES = 64 << 10


def return_large_buffers_to_os() -> bool:
    """Pin glibc's mmap threshold. False (and nothing changed) on a libc without mallopt."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))
