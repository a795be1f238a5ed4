"""Issue 16 over real HTTP: what `tasks.path` may name, lazy admission, idempotent submits (also
through TrainerClient retries), long polls whose client left, exact queue counts under cancel,
and retention. Each of these failed on the service before the issue."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_service import (
    AUTH,
    EXAMPLES,
    KEY,
    Runner,
    Server,
    make_settings,
    rollout_status,
    wait_for,
)
from scheduler_fakes import settle, until

import sandboxes.tasks as tasks_module
from clients.trainer import AsyncTrainerClient, TrainerClient
from sandboxes.tasks import load_tasks
from service.scheduler import Scheduler
from service.store import Store
from service.wire import RolloutRequest, TasksSpec

SMALL = {"min_group_size": 2}  # rloo_n needs n_samples >= min_group_size


def write_task(folder: Path) -> Path:
    """A valid task whose Dockerfile would run `id` as root if it were ever built."""
    files = {
        "task.toml": "",
        "instruction.md": "Do something.\n",
        "environment/Dockerfile": "FROM rollouts-base:bookworm\nRUN id\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


# --- the trust boundary ------------------------------------------------------------------------


def test_paths_outside_the_roots_are_refused_alike_and_nothing_runs(tmp_path: Path) -> None:
    outside = write_task(tmp_path / "not-a-dataset" / "evil")
    runner = Runner()
    with Server(make_settings(tmp_path / "data"), runner) as s, s.client() as c:
        answers = {}
        for path in [
            "/etc",
            "/etc/shadow",
            "/nonexistent/tasks",
            str(outside),
            str(outside.parent),
            f"{EXAMPLES}/../../not-there",
            f"{EXAMPLES}/../tasks/camel-to-snake",  # `..`, even one that lands back inside
            "../etc",
        ]:
            r = c.post("/v1/rollouts", json={"tasks": {"path": path}, "n_samples": 4})
            assert r.status_code == 422, (path, r.text)
            [item] = r.json()["detail"]
            assert item["loc"] == ["body", "tasks", "path"]
            answers[path] = item["msg"].replace(repr(path), "<path>")
        assert len(set(answers.values())) == 1, answers  # no oracle: one answer for all
        assert "PackageKit" not in str(answers) and "task.toml" not in str(answers)
        assert s.db("SELECT COUNT(*) FROM rollouts") == [(0,)]
        # Inside the root, by absolute path and by a name relative to it.
        for path in (f"{EXAMPLES}/camel-to-snake", "camel-to-snake"):
            r = c.post("/v1/rollouts", json={"tasks": {"path": path}, "n_samples": 4})
            assert r.status_code == 202, r.text
    assert "evil" not in runner.tasks_run and set(runner.tasks_run) <= {"camel-to-snake"}


# --- lazy admission ----------------------------------------------------------------------------


def test_a_refused_request_reads_only_what_the_queue_has_room_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = tasks_module.task_from_files

    def counting(task_id: str, path: str, files: dict[str, bytes]):  # type: ignore[no-untyped-def]
        reads.append(task_id)
        return real(task_id, path, files)

    monkeypatch.setattr(tasks_module, "task_from_files", counting)
    runner = Runner()
    runner.gate.clear()
    settings = make_settings(tmp_path, max_queued_samples=8)
    with Server(settings, runner) as s, s.client() as c:
        r = c.post(
            "/v1/rollouts", json={"tasks": {"path": str(EXAMPLES), "limit": 2}, "n_samples": 4}
        )
        assert r.status_code == 202, r.text
        wait_for(lambda: runner.started == 4, what="4 samples running, 4 queued")
        reads.clear()
        # All 12 example tasks asked for; room for one group of 4: two are read, then 429.
        r = c.post("/v1/rollouts", json={"tasks": {"path": str(EXAMPLES)}, "n_samples": 4})
        assert r.status_code == 429, r.text
        assert len(reads) == 2, reads
        reads.clear()
        # Not even one group fits: nothing is read at all.
        r = c.post("/v1/rollouts", json={"tasks": {"path": str(EXAMPLES)}, "n_samples": 8})
        assert r.status_code == 429 and reads == []


# --- idempotent submit -------------------------------------------------------------------------


def test_an_idempotency_key_makes_one_rollout(tmp_path: Path) -> None:
    body = {"tasks": {"path": str(EXAMPLES), "limit": 1}, "n_samples": 2, "advantage": SMALL}
    with Server(make_settings(tmp_path), Runner()) as s, s.client() as c:
        key = {"Idempotency-Key": "submit-1"}
        first = c.post("/v1/rollouts", json=body, headers=key)
        again = c.post("/v1/rollouts", json=dict(reversed(body.items())), headers=key)
        assert first.status_code == again.status_code == 202
        assert first.json()["id"] == again.json()["id"]
        assert s.db("SELECT COUNT(*) FROM rollouts") == [(1,)]
        other = c.post("/v1/rollouts", json={**body, "n_samples": 4}, headers=key)
        assert other.status_code == 409 and "submit-1" in other.json()["detail"]
        # Without a key every submit is a new rollout.
        ids = {c.post("/v1/rollouts", json=body).json()["id"] for _ in range(2)}
        assert len(ids) == 2 and first.json()["id"] not in ids
        assert s.db("SELECT COUNT(*) FROM rollouts") == [(3,)]


class LoseFirstSubmitResponse(httpx.BaseTransport):
    """Forwards everything; the first POST /v1/rollouts reaches the service, but its answer is
    lost on the way back (the client sees a read timeout)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.submits = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path == "/v1/rollouts":
            self.submits += 1
            if self.submits == 1:
                response.read()
                response.close()
                raise httpx.ReadTimeout("response lost", request=request)
        return response


class AsyncLoseFirstSubmitResponse(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.submits = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path == "/v1/rollouts":
            self.submits += 1
            if self.submits == 1:
                await response.aread()
                await response.aclose()
                raise httpx.ReadTimeout("response lost", request=request)
        return response


def test_trainer_client_retry_after_a_lost_response_submits_once(tmp_path: Path) -> None:
    with Server(make_settings(tmp_path), Runner()) as s:
        transport = LoseFirstSubmitResponse()
        with TrainerClient(s.url, KEY, backoff_s=0.01) as tc:
            tc._http = httpx.Client(base_url=s.url, headers=AUTH, transport=transport)
            rid = tc.submit(str(EXAMPLES), n_samples=2, limit=1, advantage=SMALL)
        assert transport.submits == 2  # the lost answer was retried
        assert s.db("SELECT id FROM rollouts") == [(rid,)]

        async def async_submit() -> str:
            transport = AsyncLoseFirstSubmitResponse()
            async with AsyncTrainerClient(s.url, KEY, backoff_s=0.01) as atc:
                atc._http = httpx.AsyncClient(base_url=s.url, headers=AUTH, transport=transport)
                rid = await atc.submit(str(EXAMPLES), n_samples=2, limit=1, advantage=SMALL)
            assert transport.submits == 2
            return rid

        rid2 = asyncio.run(async_submit())
        assert sorted(s.db("SELECT id FROM rollouts")) == sorted([(rid,), (rid2,)])


# --- long polls whose client left --------------------------------------------------------------


def test_a_long_poll_whose_client_left_takes_no_group(tmp_path: Path) -> None:
    runner = Runner()
    runner.gate.clear()
    # The lease TTL is the server's default (600 s): a ghost lease would hold the group for it.
    with Server(make_settings(tmp_path), runner) as s, s.client() as c:
        body = {"tasks": {"path": str(EXAMPLES), "limit": 1}, "n_samples": 2, "advantage": SMALL}
        rid = c.post("/v1/rollouts", json=body).json()["id"]
        polls = threading.Semaphore(0)
        leasing = s.state.leasing
        real_lease = leasing.lease

        async def counted_lease(*args: Any, **kwargs: Any) -> Any:
            polls.release()
            return await real_lease(*args, **kwargs)

        leasing.lease = counted_lease
        # The ghost long-polls and, once its poll waits for a group, goes away (closes its
        # socket). Its 60 s would outlast the test: only noticing the disconnect ends it.
        poll = json.dumps({"wait_s": 60, "rollout_id": rid}).encode()
        with socket.create_connection(("127.0.0.1", s.settings.service.port)) as ghost:
            ghost.sendall(
                b"POST /v1/batches/lease HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (KEY.encode(), len(poll), poll)
            )
            assert polls.acquire(timeout=10), "the ghost's poll never reached the lease"
        # The service notices the disconnect: the ghost's request is over, with no answer.
        wait_for(lambda: not s.server.server_state.tasks, 10, "the ghost's poll to end")
        runner.gate.set()  # the group completes now, with the ghost's poll gone
        wait_for(lambda: rollout_status(c, rid)["status"] == "completed")
        t0 = time.monotonic()
        r = c.post("/v1/batches/lease", json={"wait_s": 10, "rollout_id": rid})
        assert r.status_code == 200, r.status_code
        assert time.monotonic() - t0 < 5
        assert s.db("SELECT COUNT(*) FROM leases") == [(1,)]  # the ghost never got one


def query(store: Store, sql: str) -> list[tuple[Any, ...]]:
    """A read-only query of the store's database, beside its thread."""
    with sqlite3.connect(f"file:{store.path}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


async def lease_all(store: Store):  # type: ignore[no-untyped-def]
    return await store.lease(
        max_groups=8, rollout_id=None, lease_s=600, policy_version=0, max_staleness=None,
        stale_policy="drop",
    )  # fmt: skip


def test_a_lease_granted_to_a_client_that_left_is_released(tmp_path: Path) -> None:
    """The store job granting the lease was already running when the client left."""

    async def scenario() -> None:
        store = Store(tmp_path)
        store.open()
        jobs: list[concurrent.futures.Future[Any]] = []
        submit = store._submit

        def recorded(fn: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
            jobs.append(submit(fn, **kwargs))
            return jobs[-1]

        try:
            runner = Runner()
            tasks = load_tasks(EXAMPLES / "camel-to-snake")
            scheduler = Scheduler(
                store, runner, lambda *a: tasks, max_concurrent_samples=4,
                max_queued_samples=64, current_version=lambda: 0,
            )  # fmt: skip
            await scheduler.start()
            request = RolloutRequest(tasks=TasksSpec(path="x"), n_samples=2, advantage=SMALL)
            await scheduler.submit(request, tasks)
            complete = [("complete",)]
            await until(lambda: query(store, "SELECT state FROM groups") == complete)
            store._submit = recorded  # type: ignore[method-assign]
            lease = asyncio.ensure_future(lease_all(store))
            await asyncio.sleep(0)  # the job is submitted to the database thread ...
            [job] = jobs
            # (the event loop is held: the job grants the lease meanwhile)
            assert job.result(timeout=10).batch_id is not None
            lease.cancel()  # ... and its caller goes away before it hears the answer
            await asyncio.gather(lease, return_exceptions=True)
            assert lease.cancelled()  # the caller never heard the answer
            await until(lambda: query(store, "SELECT state FROM leases") == [("released",)])
            again = await lease_all(store)
            assert again.batch_id is not None and len(again.groups) == 1
            await scheduler.aclose()
        finally:
            store.close()

    asyncio.run(scenario())


# --- queue counts under cancel -----------------------------------------------------------------


def test_cancel_during_chunked_dispatch_keeps_queue_counts_exact(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = Store(tmp_path)
        store.open()
        runner = Runner()
        runner.gate.clear()
        tasks = load_tasks(EXAMPLES / "camel-to-snake")
        scheduler = Scheduler(
            store, runner, lambda *a: tasks, max_concurrent_samples=4, max_queued_samples=16,
            current_version=lambda: 0,
        )  # fmt: skip
        await scheduler.start()
        try:
            request = RolloutRequest(tasks=TasksSpec(path="x"), n_samples=10)
            # One group of 10, handed to the runner at once: 4 hold a slot, 6 wait for one.
            rid = await scheduler.submit(request, tasks)
            await until(lambda: runner.started == 10, what="the group handed over")
            assert (scheduler.running_samples, scheduler.queued_samples) == (4, 6)
            await scheduler.cancel(rid)  # 6 samples still wait for a slot
            assert scheduler.queued_samples == 0  # was -4: 6 queued, the whole 10 subtracted
            assert scheduler.running_samples == 0
            await settle()  # what the cancel woke (the dispatcher, slot hand-offs) has run
            assert (scheduler.queued_samples, scheduler.running_samples) == (0, 0)
            # The full queue is usable again: the cap was neither loosened nor tightened.
            runner.gate.set()
            admit = scheduler.admission(16)
            admit(1)
            with pytest.raises(Exception, match="queue"):
                scheduler.admission(17)(1)
        finally:
            await scheduler.aclose()
            store.close()

    asyncio.run(scenario())


# --- retention ---------------------------------------------------------------------------------


def test_acknowledged_payloads_are_deleted_after_the_retention_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds: list[tuple[float, int]] = []  # (when it started, payloads deleted) per purge
    real_purge = Store.purge

    async def recorded_purge(self: Store, *args: Any, **kwargs: Any) -> int:
        started = time.monotonic()
        deleted = await real_purge(self, *args, **kwargs)
        rounds.append((started, deleted))
        return deleted

    monkeypatch.setattr(Store, "purge", recorded_purge)
    settings = make_settings(tmp_path, retention_s=1.0)
    with Server(settings, Runner(response_tokens=2000)) as s, s.client() as c:
        body = {"tasks": {"path": str(EXAMPLES), "limit": 2}, "n_samples": 2, "advantage": SMALL}
        rid = c.post("/v1/rollouts", json=body).json()["id"]
        wait_for(lambda: rollout_status(c, rid)["status"] == "completed")
        r = c.post("/v1/batches/lease", json={"max_groups": 1, "wait_s": 5, "rollout_id": rid})
        assert c.post(f"/v1/batches/{r.headers['X-Batch-Id']}/ack").status_code == 200
        wait_for(lambda: s.db("SELECT COUNT(*) FROM payloads") == [(2,)], 15, "the acked purged")
        # A later round, past the retention period of the unacked group too, keeps it.
        purged = time.monotonic()
        later = wait_for(lambda: [d for t, d in rounds if t > purged], 15, "the next purge")
        assert later == [0] and s.db("SELECT COUNT(*) FROM payloads") == [(2,)]
        status = rollout_status(c, rid)
        assert status["samples_completed"] == 4 and status["counts"] == {"ok": 4}
        assert "rollouts_payloads_purged_total 2.0" in c.get("/metrics").text
