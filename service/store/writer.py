"""The one thread that holds the writable connection, and its group commit.

Every SQLite call runs on this thread. Jobs that arrive while a transaction runs are folded into
the next one (group commit), each inside its own SAVEPOINT so one failing job does not undo its
neighbours. A job's result is handed back only after COMMIT returns, so a trajectory is durable
before any lease can deliver it, and a lease is durable before its batch id reaches the trainer.
A job submitted `bare` (maintenance: checkpoints, vacuum) runs alone, outside any transaction.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from service.store.schema import connect

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_JOBS_PER_TRANSACTION = 1024
# (job, its future, bare: run alone outside a transaction)
_Job = tuple[Callable[[sqlite3.Connection], Any], concurrent.futures.Future[Any], bool]


class DbThread:
    def __init__(self, path: Path, synchronous: str) -> None:
        self._path = path
        self._synchronous = synchronous
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name="rollouts-store", daemon=True)
        self.init: Callable[[sqlite3.Connection], None] = lambda conn: None

    def start(self) -> None:
        self._thread.start()
        self._ready.result()

    def submit(
        self, fn: Callable[[sqlite3.Connection], T], *, bare: bool = False
    ) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((fn, fut, bare))
        return fut

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:
            conn = connect(self._path, self._synchronous)
            self.init(conn)
        except BaseException as e:  # noqa: BLE001 - reported to the opener
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        try:
            stop = False
            held: _Job | None = None  # a bare job that ended a group of ordinary ones
            while not stop:
                first = held if held is not None else self._jobs.get()
                held = None
                if first is None:
                    break
                if first[2]:
                    self._bare(conn, first)
                    continue
                jobs = [first]
                while len(jobs) < MAX_JOBS_PER_TRANSACTION:
                    try:
                        nxt = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    if nxt[2]:
                        held = nxt
                        break
                    jobs.append(nxt)
                self._transaction(conn, jobs)
            if held is not None:
                self._bare(conn, held)
        finally:
            conn.close()

    @staticmethod
    def _bare(conn: sqlite3.Connection, job: _Job) -> None:
        fn, fut, _ = job
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(conn))
        except Exception as e:  # noqa: BLE001 - handed to the caller
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            fut.set_exception(e)

    @staticmethod
    def _transaction(conn: sqlite3.Connection, jobs: list[_Job]) -> None:
        outcomes: list[tuple[concurrent.futures.Future[Any], bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, fut, _ in jobs:
                if not fut.set_running_or_notify_cancel():
                    continue
                conn.execute("SAVEPOINT job")
                try:
                    result = fn(conn)
                except Exception as e:  # noqa: BLE001 - handed to the caller
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    outcomes.append((fut, False, e))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((fut, True, result))
            conn.execute("COMMIT")
        except BaseException as e:  # the transaction as a whole failed: nobody's work is durable
            log.exception("store transaction failed")
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for _, fut, _ in jobs:
                if not fut.done():
                    fut.set_exception(e)
            return
        # Only now, after COMMIT, do results become visible to callers.
        for fut, ok, value in outcomes:
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
