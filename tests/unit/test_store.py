"""The durable store: commit -> lease -> ack, expiry, restart, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from service.advantages import AdvantageConfig
from service.leasing import Leasing, PolicyVersion
from service.metrics import Metrics
from service.store import (
    GroupPlan,
    LeaseExpired,
    Requeued,
    Store,
    UnknownBatch,
    group_id_for,
    iter_trajectory_rows,
    sample_trajectory_id,
    with_advantage,
)
from service.trajectory import Status, Trajectory, empty_trajectory
from tests.trajectories import make_trajectory

N = 4


def plans(rollout_id: str, n_groups: int, n: int = N) -> list[GroupPlan]:
    out = []
    for g in range(n_groups):
        gid = group_id_for(rollout_id, g)
        out.append(GroupPlan(gid, f"task{g}", [sample_trajectory_id(gid, k) for k in range(n)]))
    return out


async def fill(store: Store, rollout_id: str, plan: list[GroupPlan], version: int = 0) -> None:
    for p in plan:
        for k, tid in enumerate(p.trajectory_ids):
            t = make_trajectory(tid, rollout_id, p.group_id, p.task_id, k, reward=float(k % 2),
                                version=version)  # fmt: skip
            await store.commit_trajectory(t)


def lease_kwargs(**kw: object) -> dict[str, object]:
    base: dict[str, object] = dict(
        max_groups=100, rollout_id=None, lease_s=60.0, policy_version=0, max_staleness=None,
        stale_policy="drop",
    )  # fmt: skip
    base.update(kw)
    return base


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = Store(tmp_path)
    s.open()
    yield s
    s.close()


async def test_commit_lease_ack(store: Store) -> None:
    plan = plans("r1", 3)
    await store.create_rollout("r1", "{}", 0, AdvantageConfig("rloo_n", 4), plan)
    # An incomplete group is never offered.
    first = plan[0]
    for k, tid in enumerate(first.trajectory_ids[:-1]):
        await store.commit_trajectory(make_trajectory(tid, "r1", first.group_id, "task0", k))
    assert (await store.lease(**lease_kwargs())).batch_id is None
    await fill(store, "r1", plan[1:])
    res = await store.lease(**lease_kwargs())
    assert res.batch_id is not None
    assert [g.group_id for g in res.groups] == [plan[1].group_id, plan[2].group_id]
    rows = [Trajectory.model_validate_json(with_advantage(*r)) for r in res.groups[0].rows]
    assert [t.sample_index for t in rows] == list(range(N))
    # rewards 0,1,0,1 -> RLOO advantages -2/3, 2/3, ...
    assert [round(t.advantage or 0, 6) for t in rows] == [-0.666667, 0.666667] * 2
    assert (await store.lease(**lease_kwargs())).batch_id is None  # leased: not offered twice
    ack = await store.ack(res.batch_id)
    assert not ack.already_acked and ack.groups == 2
    again = await store.ack(res.batch_id)
    assert again.already_acked
    with pytest.raises(UnknownBatch):
        await store.ack("nope")
    assert await store.remaining_groups("r1") == 1  # the incomplete one


async def test_duplicate_commit_is_ignored(store: Store) -> None:
    plan = plans("r1", 1, n=1)
    await store.create_rollout("r1", "{}", 0, AdvantageConfig("rloo", 1), plan)
    t = make_trajectory(plan[0].trajectory_ids[0], "r1", plan[0].group_id, "task0", 0)
    assert not (await store.commit_trajectory(t)).duplicate
    assert (await store.commit_trajectory(t)).duplicate
    summary = await store.rollout_summary("r1")
    assert summary.status == "completed" and summary.samples_completed == 1


async def test_lease_expiry_reoffers_and_late_ack_conflicts(store: Store) -> None:
    plan = plans("r1", 1)
    await store.create_rollout("r1", "{}", 0, AdvantageConfig(), plan)
    await fill(store, "r1", plan)
    first = await store.lease(**lease_kwargs(lease_s=0.05))
    assert first.batch_id
    time.sleep(0.1)
    second = await store.lease(**lease_kwargs())
    assert second.batch_id and second.batch_id != first.batch_id
    assert [g.group_id for g in second.groups] == [plan[0].group_id]
    with pytest.raises(LeaseExpired):
        await store.ack(first.batch_id)
    await store.ack(second.batch_id)


async def test_restart_reoffers_unacked_never_acked(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.open()
    plan = plans("r1", 2)
    await s.create_rollout("r1", "{}", 0, AdvantageConfig(), plan)
    await fill(s, "r1", plan)
    a = await s.lease(**lease_kwargs(max_groups=1))
    await s.ack(a.batch_id)  # type: ignore[arg-type]
    b = await s.lease(**lease_kwargs(max_groups=1))
    assert b.batch_id
    s.close()
    s2 = Store(tmp_path)
    s2.open()
    try:
        with pytest.raises(LeaseExpired):  # the restart ended every open lease
            await s2.ack(b.batch_id)
        c = await s2.lease(**lease_kwargs())
        assert [g.group_id for g in c.groups] == [g.group_id for g in b.groups]
        await s2.ack(c.batch_id)  # type: ignore[arg-type]
        assert (await s2.lease(**lease_kwargs())).batch_id is None
    finally:
        s2.close()


async def test_pending_samples_survive_restart(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.open()
    plan = plans("r1", 1)
    await s.create_rollout("r1", '{"x": 1}', 0, AdvantageConfig(), plan)
    p = plan[0]
    await s.commit_trajectory(make_trajectory(p.trajectory_ids[0], "r1", p.group_id, "task0", 0))
    s.close()
    s2 = Store(tmp_path)
    s2.open()
    try:
        pending = await s2.pending_groups()
        assert len(pending) == 1
        assert [tid for tid, _ in pending[0].samples] == p.trajectory_ids[1:]
        assert pending[0].request_json == '{"x": 1}'
    finally:
        s2.close()


async def test_masked_samples_and_cancel(store: Store) -> None:
    plan = plans("r1", 2)
    await store.create_rollout("r1", "{}", 0, AdvantageConfig("rloo_n", 2), plan)
    p = plan[0]
    statuses = [Status.ok, Status.sandbox_error, Status.ok, Status.ok]
    for k, (tid, st) in enumerate(zip(p.trajectory_ids, statuses, strict=True)):
        t = make_trajectory(tid, "r1", p.group_id, "task0", k, reward=float(k), status=st)
        await store.commit_trajectory(t)
    completed = await store.cancel_rollout("r1", policy_version=3)
    assert completed == [plan[1].group_id]  # all-cancelled group: dropped
    res = await store.lease(**lease_kwargs())
    assert [g.group_id for g in res.groups] == [p.group_id]
    rows = [Trajectory.model_validate_json(with_advantage(*r)) for r in res.groups[0].rows]
    assert rows[1].exclude_from_baseline and rows[1].reward is None and rows[1].advantage == 0.0
    # included rewards 0, 2, 3: leave-one-out.
    assert [rows[i].advantage for i in (0, 2, 3)] == pytest.approx([-2.5, 0.5, 2.0])
    summary = await store.rollout_summary("r1")
    assert summary.status == "cancelled"
    assert summary.counts == {"ok": 3, "sandbox_error": 1, "cancelled": 4}


async def test_staleness_drop_and_requeue(tmp_path: Path) -> None:
    s = Store(tmp_path)
    s.open()
    try:
        plan = plans("r1", 2)
        await s.create_rollout("r1", "{}", 0, AdvantageConfig(), plan)
        await fill(s, "r1", plan[:1], version=0)
        await fill(s, "r1", plan[1:], version=5)
        res = await s.lease(**lease_kwargs(policy_version=6, max_staleness=2))
        assert [g.group_id for g in res.groups] == [plan[1].group_id]
        assert res.dropped_stale == 1

        plan2 = plans("r2", 1)
        await s.create_rollout("r2", "{}", 0, AdvantageConfig(), plan2)
        await fill(s, "r2", plan2, version=0)
        res2 = await s.lease(
            **lease_kwargs(policy_version=6, max_staleness=2, stale_policy="requeue")
        )
        assert res2.batch_id is None
        (rq,) = res2.requeued
        assert rq.group_id == plan2[0].group_id
        assert rq.trajectory_ids == [f"{plan2[0].group_id}.s{k}.a1" for k in range(N)]
        assert (await s.rollout_summary("r2")).status == "running"
        pending = await s.pending_groups()
        assert [tid for tid, _ in pending[0].samples] == rq.trajectory_ids
    finally:
        s.close()


async def test_export_rows(store: Store, tmp_path: Path) -> None:
    plan = plans("r1", 2)
    await store.create_rollout("r1", "{}", 0, AdvantageConfig(), plan)
    await fill(store, "r1", plan)
    chunks = list(iter_trajectory_rows(tmp_path, "r1", chunk=3))
    rows = [r for c in chunks for r in c]
    assert len(rows) == 2 * N and max(len(c) for c in chunks) == 3
    assert all(r["advantage"] is not None for r in rows)


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from service.advantages import AdvantageConfig
    from service.store import GroupPlan, Store
    from tests.trajectories import make_trajectory

    async def main(path):
        s = Store(path)
        s.open()
        n = 100000
        tids = [f"r.g0.s{k}" for k in range(n)]
        await s.create_rollout("r", "{}", 0, AdvantageConfig(), [GroupPlan("r.g0", "t", tids)])
        async def one(k):
            await s.commit_trajectory(make_trajectory(tids[k], "r", "r.g0", "t", k))
            print(tids[k], flush=True)
        k = 0
        while True:
            await asyncio.gather(*(one(k + i) for i in range(8)))
            k += 8

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_committed_trajectories_survive_sigkill(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    acknowledged = []
    for line in proc.stdout:
        acknowledged.append(line.decode().strip())
        if len(acknowledged) >= 300:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(acknowledged) >= 300, "the writer died before committing enough"
    s = Store(tmp_path)
    s.open()
    try:

        def done(conn):  # type: ignore[no-untyped-def]
            return {
                r[0]
                for r in conn.execute(
                    "SELECT trajectory_id FROM samples s JOIN payloads"
                    " p USING (trajectory_id) WHERE s.state='done'"
                )
            }

        stored = s.call_sync(done)
    finally:
        s.close()
    missing = set(acknowledged) - stored
    assert not missing, f"{len(missing)} committed trajectories lost"


async def test_a_sample_that_generated_no_token_does_not_make_its_group_stale(
    tmp_path: Path,
) -> None:
    """Staleness counts from the group's oldest generated token (issue 35): a sample masked
    before its first turn, committed while the version was 0, carries no weights at all."""
    s = Store(tmp_path)
    s.open()
    try:
        (plan,) = plans("r1", 1)
        await s.create_rollout("r1", "{}", 0, AdvantageConfig(), [plan])
        for k, tid in enumerate(plan.trajectory_ids[:-1]):
            await s.commit_trajectory(make_trajectory(tid, "r1", plan.group_id, "t", k, version=5))
        masked = empty_trajectory(
            plan.trajectory_ids[-1], "r1", plan.group_id, "t", N - 1, 0, Status.sandbox_error
        )
        await s.commit_trajectory(masked)
        assert await s.oldest_version(plan.group_id) == 5
        res = await s.lease(**lease_kwargs(policy_version=6, max_staleness=2))
        assert [g.group_id for g in res.groups] == [plan.group_id]
        assert res.dropped_stale == 0
    finally:
        s.close()


async def test_requeue_for_staleness_is_bounded_and_counted(tmp_path: Path) -> None:
    """`--stale-policy requeue` re-runs a stale group at most `max_requeues` times; stale again
    after that, it is dropped, and /metrics counts each outcome (issue 35)."""
    s = Store(tmp_path)
    s.open()
    metrics = Metrics()
    policy = PolicyVersion(version=6, max_staleness=2, stale_policy="requeue", max_requeues=2)
    handed: list[Requeued] = []

    async def requeue(groups: list[Requeued]) -> None:
        handed.extend(groups)

    leasing = Leasing(s, policy, requeue, lease_ttl_s=60, metrics=metrics)
    try:
        (plan,) = plans("r1", 1)
        await s.create_rollout("r1", "{}", 0, AdvantageConfig(), [plan])
        ids = plan.trajectory_ids
        for attempt in range(3):  # every run of the group finishes under version 0 again
            for k, tid in enumerate(ids):
                t = make_trajectory(tid, "r1", plan.group_id, "t", k, version=0)
                await s.commit_trajectory(t)
            assert await leasing.lease(10, None, wait_s=0, lease_s=None) is None
            if attempt < 2:
                ids = handed[-1].trajectory_ids
                assert ids == [f"{plan.group_id}.s{k}.a{attempt + 1}" for k in range(N)]
        assert len(handed) == 2  # re-run twice, then dropped
        assert await s.group_states() == {"dropped": 1}
        assert await s.remaining_groups() == 0
        text = generate_latest(metrics.registry).decode()
        assert 'rollouts_groups_stale_total{action="requeue"} 2.0' in text
        assert 'rollouts_groups_stale_total{action="requeue_limit"} 1.0' in text
        assert 'rollouts_groups_stale_total{action="drop"} 0.0' in text
    finally:
        s.close()
