"""Issue 16, bounded disk: acknowledged payloads are deleted after the retention period and the
database file shrinks (the space goes back to the file system), and on a small data disk new work
gets a clear 503 before the disk is full, while everything admitted commits."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_service import (
    EXAMPLES,
    Runner,
    Server,
    make_settings,
    rollout_status,
    trajectory,
    wait_for,
)

from sandboxes.tasks import load_tasks
from service.advantages import AdvantageConfig
from service.sample import AgentLimits, SampleSpec, SamplingParams
from service.store import DB_NAME, GroupPlan, Store, group_id_for, sample_trajectory_id
from tests.ci import unavailable


def _db_bytes(data_dir: Path) -> int:
    return sum(
        (data_dir / (DB_NAME + suffix)).stat().st_size
        for suffix in ("", "-wal")
        if (data_dir / (DB_NAME + suffix)).exists()
    )


def test_purged_payloads_give_their_space_back(tmp_path: Path) -> None:
    groups, n, tokens = 10, 4, 50_000  # 40 payloads of ~450 KB

    async def scenario() -> None:
        store = Store(tmp_path)
        store.open()
        try:
            plans = []
            for g in range(groups):
                gid = group_id_for("r1", g)
                plans.append(GroupPlan(gid, "t", [sample_trajectory_id(gid, k) for k in range(n)]))
            await store.create_rollout("r1", "{}", 0, AdvantageConfig(), plans)
            for plan in plans:
                for k, tid in enumerate(plan.trajectory_ids):
                    spec = SampleSpec(
                        tid, "r1", plan.group_id, "t", k, SamplingParams(), AgentLimits()
                    )
                    await store.commit_trajectory(trajectory(spec, tokens, seed=hash(tid)))
            lease = await store.lease(
                max_groups=groups, rollout_id=None, lease_s=600, policy_version=0,
                max_staleness=None, stale_policy="drop",
            )  # fmt: skip
            await store.ack(lease.batch_id)  # type: ignore[arg-type]
            await store.reclaim()
            full = _db_bytes(tmp_path)
            assert await store.purge(retention_s=3600) == 0  # acked just now: kept
            assert await store.purge(retention_s=0) == groups * n
            emptied = _db_bytes(tmp_path)
            assert emptied < full * 0.1, (full, emptied)
            summary = await store.rollout_summary("r1")
            assert summary.samples_completed == groups * n and summary.counts == {"ok": groups * n}
        finally:
            store.close()

    asyncio.run(scenario())


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 160 MiB tmpfs as the data dir (needs root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_nearly_full_disk_refuses_new_work_and_admitted_work_commits(small_disk: Path) -> None:
    assert load_tasks(EXAMPLES, limit=1)
    # ~1 MB payloads; 80 MiB kept in reserve (it holds the WAL, up to 64 MiB).
    settings = make_settings(small_disk, disk_reserve_mb=80)
    body = {"tasks": {"path": str(EXAMPLES), "limit": 1}, "n_samples": 4}
    accepted: list[str] = []
    refused = None
    with Server(settings, Runner(response_tokens=110_000)) as s, s.client() as c:
        for _ in range(60):
            r = c.post("/v1/rollouts", json=body)
            if r.status_code != 202:
                refused = r
                break
            rid = r.json()["id"]
            accepted.append(rid)
            wait_for(lambda: rollout_status(c, rid)["status"] != "running", 60)  # noqa: B023
        assert refused is not None, "the disk filled without a refusal"
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "5"
        assert "data disk is nearly full" in refused.json()["detail"]
        assert len(accepted) >= 5
        for rid in accepted:  # everything admitted was committed, whole
            status = rollout_status(c, rid)
            assert status["status"] == "completed" and status["counts"] == {"ok": 4}, status
        metrics = c.get("/metrics").text
        assert "rollouts_data_disk_free_bytes" in metrics and "rollouts_store_bytes" in metrics
        assert 'rollouts_requests_refused_total{reason="disk"} 1.0' in metrics
        assert s.db("SELECT COUNT(*) FROM samples WHERE state='pending'") == [(0,)]
