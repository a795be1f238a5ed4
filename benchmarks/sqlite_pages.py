"""SQLite page size for the store's payload blobs: commits per second of ~140 KB incompressible
blobs (the size of an 8k-token trajectory's stored payload), 64 per transaction, WAL and
`synchronous=FULL` as the store uses them, at page sizes of 4, 16 and 64 KiB. The store opens
new databases with 64 KiB pages (service/store/schema.py); this shows what that choice is worth
on the machine at hand."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from pathlib import Path

PAGE_SIZES = (4096, 16384, 65536)
BLOB_BYTES = 140_000
PER_TRANSACTION = 64


def blob_commits_per_s(page_size: int, blobs: int) -> float:
    payloads = [os.urandom(BLOB_BYTES) for _ in range(PER_TRANSACTION)]
    with tempfile.TemporaryDirectory(prefix="rollouts-bench-sqlite-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "pages.db", isolation_level=None)
        try:
            conn.execute(f"PRAGMA page_size={page_size}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
            t0 = time.monotonic()
            for start in range(0, blobs, PER_TRANSACTION):
                conn.execute("BEGIN")
                conn.executemany(
                    "INSERT INTO t (payload) VALUES (?)",
                    [
                        (payloads[i % PER_TRANSACTION],)
                        for i in range(start, start + PER_TRANSACTION)
                    ],
                )
                conn.execute("COMMIT")
            return blobs / (time.monotonic() - t0)
        finally:
            conn.close()


def page_size_round(blobs: int) -> dict[int, float]:
    """Commits/s per page size, in one interleaved round."""
    return {size: blob_commits_per_s(size, blobs) for size in PAGE_SIZES}
