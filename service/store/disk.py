"""The data disk as a budget: new work is refused (DiskFull, 503) while the free space, less a
reserve, cannot hold what queued and running samples will commit plus the new request, so an
admitted sample never meets a full disk in the middle of its commit.

A sample's size on disk is estimated from the payloads committed so far and what their kept
workspaces added (their mean, rounded up to whole database pages, with slack for rows and
indexes), and pessimistically before any.
The WAL (cut back to `schema.WAL_SIZE_LIMIT` after checkpoints) lives in the reserve.
"""

from __future__ import annotations

import math
import os

from service.store.errors import DiskFull
from service.store.facade import Store

PAGE_BYTES = 64 << 10  # schema.connect's page_size
UNKNOWN_SAMPLE_BYTES = 256 << 10  # before the first commit: a typical payload is ~100-150 KB
_MiB = 1 << 20


class DiskBudget:
    def __init__(self, store: Store, reserve_bytes: int) -> None:
        self.store = store
        self.reserve_bytes = reserve_bytes

    def _statvfs(self) -> os.statvfs_result:
        return os.statvfs(self.store.data_dir)

    def free_bytes(self) -> int:
        st = self._statvfs()
        return st.f_bavail * st.f_frsize

    def size_bytes(self) -> int:
        st = self._statvfs()
        return st.f_blocks * st.f_frsize

    def sample_bytes(self) -> int:
        mean = self.store.mean_payload_bytes()
        if mean is None:
            return UNKNOWN_SAMPLE_BYTES
        mean += self.store.mean_workspace_bytes()  # its kept workspace, what it newly stored
        pages = math.ceil(mean * 1.25 / PAGE_BYTES) + 1
        return max(pages * PAGE_BYTES, PAGE_BYTES * 2)

    def check(self, samples: int) -> None:
        """DiskFull unless `samples` more trajectories (queued, running and requested) fit in
        the free space above the reserve."""
        free = self.free_bytes()
        need = samples * self.sample_bytes()
        if free - self.reserve_bytes >= need:
            return
        raise DiskFull(
            f"the data disk is nearly full: {free // _MiB} MiB free, "
            f"{self.reserve_bytes // _MiB} MiB kept in reserve (--disk-reserve), and about "
            f"{math.ceil(need / _MiB)} MiB needed by queued work and this request; new rollouts "
            "are refused until space is freed (acknowledged payloads are deleted after "
            "--retention)"
        )
