"""Kept workspaces and regrades in the store, on real SQLite (no Docker): the workspace comes
back byte for byte, identical files are stored once, retention removes workspaces with their
payloads, a grading is recorded once per grader and tests, and a regraded group a trainer had
is offered as a batch of its own, never changed in the batch it acked."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest

from sandboxes.verifier import default_grader, grader_version
from sandboxes.workspace_snapshot import SnapshotError, rebuild, split
from sandboxes.workspace_tar import build_tar, sanitize_workspace
from service.advantages import AdvantageConfig, compute_advantages
from service.payload_codec import payload_dict
from service.store import GroupPlan, Store, group_id_for, sample_trajectory_id
from service.store.workspaces import pack_snapshot
from service.trajectory import Grading, Status, Trajectory
from tests.trajectories import make_trajectory

LEASE = dict(rollout_id=None, lease_s=60.0, policy_version=0, max_staleness=None)


def workspace(files: dict[str, bytes]) -> bytes:
    """A workspace tar as the sandbox hands it to the verifier (sanitized)."""
    return sanitize_workspace(build_tar(files))[0]


def test_a_workspace_rebuilds_byte_for_byte_and_a_foreign_tar_is_kept_whole() -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in (
            ("solution.py", b"def fn(x):\n    return x\n"),
            ("d/" + "x" * 150, b"1"),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o640
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link.py")
        link.type, link.linkname = tarfile.SYMTYPE, "solution.py"
        tar.addfile(link)
        hard = tarfile.TarInfo("hard.py")
        hard.type, hard.linkname = tarfile.LNKTYPE, "solution.py"
        tar.addfile(hard)
        d = tarfile.TarInfo("empty")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
    sanitized = sanitize_workspace(raw.getvalue())[0]
    snap = split(sanitized)
    assert "members" in snap.manifest and len(snap.blobs) == 2
    assert rebuild(snap.manifest, snap.blobs) == sanitized
    # A tar the sanitizer did not write (owners, user names) cannot be rebuilt from the
    # manifest's fields: it is kept whole rather than changed.
    foreign = io.BytesIO()
    with tarfile.open(fileobj=foreign, mode="w") as tar:
        info = tarfile.TarInfo("a.py")
        info.size, info.uid, info.uname = 1, 1000, "agent"
        tar.addfile(info, io.BytesIO(b"x"))
    whole = split(foreign.getvalue())
    assert whole.manifest["whole"] == whole.digest
    assert rebuild(whole.manifest, whole.blobs) == foreign.getvalue()
    with pytest.raises(SnapshotError):
        rebuild(snap.manifest, {})


def _kept(t: Trajectory, files: dict[str, bytes]) -> Trajectory:
    t._workspace = pack_snapshot(split(workspace(files)), t.status.value)
    return t


def _graded(t: Trajectory, grader: str = "g1", tests: str = "t1") -> Trajectory:
    g = Grading(reward=t.reward, status=t.status, grader_version=grader, tests_digest=tests)
    return t.model_copy(update={"gradings": [g], "tests_digest": tests})


async def _rollout(store: Store, rid: str, n: int, task: str = "task0") -> str:
    gid = group_id_for(rid, 0)
    plan = GroupPlan(gid, task, [sample_trajectory_id(gid, k) for k in range(n)])
    await store.create_rollout(rid, "{}", 0, AdvantageConfig("rloo", 1, False), [plan])
    return gid


async def test_identical_files_are_stored_once_and_retention_removes_them(tmp_path: Path) -> None:
    """Eight samples of one task: the task's files and the solutions samples share cost
    nothing again, so bytes grow far less than linearly; acknowledged and past retention,
    payloads, workspaces and blobs all go."""
    rng = random.Random(7)
    base = {f"lib/mod{i}.py": rng.randbytes(3000).hex().encode() for i in range(6)}
    solutions = [f"def fn(x):\n    return x * {k % 2}\n".encode() for k in range(8)]
    store = Store(tmp_path)
    store.open()
    try:
        gid = await _rollout(store, "r", 8)
        sizes = []
        for k in range(8):
            t = make_trajectory(sample_trajectory_id(gid, k), "r", gid, "task0", k)
            files = {**base, "solution.py": solutions[k], "scratch.txt": f"run {k}".encode()}
            snap = split(workspace(files))
            snap.blobs = {
                d: b
                for d, b in snap.blobs.items()
                if d not in await store.known_blobs(snap.digests)
            }
            t._workspace = pack_snapshot(snap, "ok")
            await store.commit_trajectory(t)
            sizes.append((await store.workspace_stats()).stored_bytes)
        stats = await store.workspace_stats()
        assert stats.workspaces == 8
        assert stats.blobs == len(base) + 2 + 8  # two distinct solutions, eight scratch files
        first = sizes[0]
        assert stats.stored_bytes < 1.5 * first < 8 * first, sizes
        assert stats.stored_bytes < stats.tar_bytes / 8
        for k in range(8):
            ws = await store.load_workspace(sample_trajectory_id(gid, k))
            assert ws is not None and ws.graded_status == "ok"
            assert ws.tar == workspace(
                {**base, "solution.py": solutions[k], "scratch.txt": f"run {k}".encode()}
            )

        lease = await store.lease(max_groups=10, stale_policy="drop", **LEASE)
        await store.ack(lease.batch_id)
        assert await store.purge(retention_s=3600) == 0  # acked just now: all kept
        assert (await store.workspace_stats()).workspaces == 8
        assert await store.purge(retention_s=0) == 8
        after = await store.workspace_stats()
        assert (after.workspaces, after.blobs, after.stored_bytes) == (0, 0, 0)
        assert await store.load_workspace(sample_trajectory_id(gid, 0)) is None
    finally:
        store.close()


async def test_a_blob_purged_between_snapshot_and_commit_costs_only_the_workspace(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    store.open()
    try:
        gid = await _rollout(store, "r", 2)
        t0 = make_trajectory(sample_trajectory_id(gid, 0), "r", gid, "task0", 0)
        await store.commit_trajectory(_kept(t0, {"a.py": b"shared"}))
        t1 = make_trajectory(sample_trajectory_id(gid, 1), "r", gid, "task0", 1)
        snap = split(workspace({"a.py": b"shared"}))
        snap.blobs = {}  # "the store holds it" ... until it did not
        t1._workspace = pack_snapshot(snap, "ok")
        await store._call(lambda conn: conn.execute("DELETE FROM workspace_blobs"))
        result = await store.commit_trajectory(t1)
        assert not result.duplicate and result.group_state == "complete"
        assert await store.load_workspace(t1.trajectory_id) is None
    finally:
        store.close()


async def test_regraded_groups_reach_trainers_that_had_them_as_a_batch_of_their_own(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    store.open()
    try:
        gid = await _rollout(store, "r", 4)
        other = await _rollout(store, "s", 4, task="task1")
        for rid, g in (("r", gid), ("s", other)):
            for k in range(4):
                t = make_trajectory(sample_trajectory_id(g, k), rid, g, "t", k, reward=1.0)
                await store.commit_trajectory(_graded(t))
        lease = await store.lease(max_groups=1, stale_policy="drop", **{**LEASE, "rollout_id": "r"})
        await store.ack(lease.batch_id)  # the trainer trained on r's group: all 1.0

        # A regrade (new tests) turns two of r's samples and one of s's to 0.
        for g, ks in ((gid, (0, 1)), (other, (3,))):
            for k in ks:
                grading = Grading(reward=0.0, status=Status.ok, reward_flags=["value_hack"],
                                  grader_version="g1", tests_digest="t2")  # fmt: skip
                recorded = await store.record_grading(sample_trajectory_id(g, k), grading, "out")
                assert recorded is not None and recorded.before_reward == 1.0
                # Resumed after a kill: the same grader on the same tests adds nothing.
                again = await store.record_grading(sample_trajectory_id(g, k), grading, "out")
                assert again is None
        settled = {s.group_id: s for s in await store.settle_regraded([gid, other])}
        assert settled[gid].offered and not settled[other].offered  # nobody had `other`
        assert settled[gid].advantages == pytest.approx([-2 / 3, -2 / 3, 2 / 3, 2 / 3])
        assert await store.settle_regraded([gid, other]) == []  # idempotent

        # The acked group is not offered again as ordinary work; `other`, never delivered,
        # goes out with its new grades as usual.
        plain = await store.lease(max_groups=10, stale_policy="drop", **LEASE)
        assert [g.group_id for g in plain.groups] == [other]
        assert [payload_dict(*row)["reward"] for row in plain.groups[0].rows] == [1, 1, 1, 0]
        await store.ack(plain.batch_id)

        assert await store.remaining_regraded() == 1
        regraded = await store.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        (group,) = regraded.groups
        assert group.group_id == gid
        rows = [payload_dict(c, d, a) for c, d, a in group.rows]
        assert [r["reward"] for r in rows] == [0.0, 0.0, 1.0, 1.0]
        assert [len(r["gradings"]) for r in rows] == [2, 2, 1, 1]
        assert rows[0]["gradings"][0]["reward"] == 1.0  # what it was trained on, kept
        assert rows[0]["reward_flags"] == ["value_hack"] and rows[0]["tests_digest"] == "t2"
        assert [r["advantage"] for r in rows] == pytest.approx([-2 / 3, -2 / 3, 2 / 3, 2 / 3])
        await store.ack(regraded.batch_id)
        assert await store.remaining_regraded() == 0
        nothing = await store.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        assert nothing.batch_id is None
    finally:
        store.close()


async def test_an_unacknowledged_regraded_lease_is_offered_again(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.open()
    try:
        gid = await _rollout(store, "r", 2)
        for k in range(2):
            t = make_trajectory(sample_trajectory_id(gid, k), "r", gid, "t", k, reward=1.0)
            await store.commit_trajectory(_graded(t))
        first = await store.lease(max_groups=1, stale_policy="drop", **LEASE)
        await store.ack(first.batch_id)
        grading = Grading(reward=0.0, status=Status.ok, grader_version="g2", tests_digest="t1")
        await store.record_grading(sample_trajectory_id(gid, 0), grading, "")
        await store.settle_regraded([gid])
        lost = await store.lease_regraded(max_groups=1, rollout_id=None, lease_s=60.0)
        assert lost.batch_id is not None
        assert await store.release(lost.batch_id) == 1  # its trainer went away
        again = await store.lease_regraded(max_groups=1, rollout_id=None, lease_s=60.0)
        assert [g.group_id for g in again.groups] == [gid]
    finally:
        store.close()
    reopened = Store(tmp_path)  # a restart ends the lease: offered again
    reopened.open()
    try:
        third = await reopened.lease_regraded(max_groups=1, rollout_id=None, lease_s=60.0)
        assert [g.group_id for g in third.groups] == [gid]
    finally:
        reopened.close()


def test_the_grader_version_names_the_rules_and_the_runtime() -> None:
    real = default_grader()
    assert real.version == grader_version(real.runtime, _rules_source())
    changed = {**real.runtime, "trusted.py": real.runtime["trusted.py"] + b"\n# fixed\n"}
    assert grader_version(changed, _rules_source()) != real.version
    assert grader_version(real.runtime, _rules_source() + b"\n") != real.version


def _rules_source() -> bytes:
    return (Path(__file__).resolve().parents[2] / "sandboxes" / "reward.py").read_bytes()


# A regrade of a group of four collected as [1, 0, 0, 0]: the 1 was a hack (flagged, now 0)
# and the second sample's 0 was the tests' fault (now 1).
OLD, NEW = [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]
RLOO = AdvantageConfig("rloo", 1, False)


def _regrading(k: int) -> Grading:
    flags = ["value_hack"] if k == 0 else []
    return Grading(reward=NEW[k], status=Status.ok, reward_flags=flags, grader_version="g1",
                   tests_digest="t2")  # fmt: skip


async def _collected(store: Store, rid: str) -> str:
    gid = await _rollout(store, rid, 4)
    for k in range(4):
        t = make_trajectory(sample_trajectory_id(gid, k), rid, gid, "t", k, reward=OLD[k])
        await store.commit_trajectory(_graded(t))
    return gid


def _served(group: object) -> tuple[list[float], list[int]]:
    """The rewards a leased group serves and each trajectory's number of gradings, after
    checking that its advantages are those of its rewards (what a trainer computes from)."""
    rows = [payload_dict(c, d, a) for c, d, a in group.rows]  # type: ignore[attr-defined]
    rewards = [r["reward"] for r in rows]
    assert [r["advantage"] for r in rows] == pytest.approx(
        compute_advantages(rewards, [False] * len(rows), RLOO)
    ), rows
    return rewards, [len(r["gradings"]) for r in rows]


@pytest.mark.parametrize("step", range(4))
async def test_a_lease_racing_each_step_of_a_regrade_gets_one_whole_grading(
    tmp_path: Path, step: int
) -> None:
    """Issue 35, case 2: a lease between `record` of one sample and `settle` of its group used
    to get the new reward beside the old advantage (reward 0.0, advantage +1.0). A lease at
    any step gets one grading whole, with its advantages; a trainer that had the old one gets
    the new one exactly once, as a regraded group, after its ack."""
    store = Store(tmp_path)
    store.open()
    try:
        gid = await _collected(store, "r")
        steps = [
            lambda: store.record_grading(sample_trajectory_id(gid, 0), _regrading(0), "out"),
            lambda: store.record_grading(sample_trajectory_id(gid, 1), _regrading(1), "out"),
            lambda: store.settle_regraded([gid]),
        ]
        lease = None
        for i, do in enumerate(steps):
            if i == step:
                lease = await store.lease(max_groups=1, stale_policy="drop", **LEASE)
            await do()
        if lease is None:
            lease = await store.lease(max_groups=1, stale_policy="drop", **LEASE)
        (group,) = lease.groups
        rewards, gradings = _served(group)
        if step < len(steps):  # leased before the regrade settled: the grading it was made with
            assert (rewards, gradings) == (OLD, [1, 1, 1, 1])
        else:  # never delivered before: it simply serves the new grades
            assert (rewards, gradings) == (NEW, [2, 2, 1, 1])
        await store.ack(lease.batch_id)

        regraded = await store.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        if step < len(steps):
            (again,) = regraded.groups
            assert _served(again) == (NEW, [2, 2, 1, 1])
            await store.ack(regraded.batch_id)
            regraded = await store.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        assert regraded.batch_id is None
        assert (await store.lease(max_groups=10, stale_policy="drop", **LEASE)).batch_id is None
    finally:
        store.close()


async def test_a_group_out_to_a_trainer_serves_its_grading_until_acked(tmp_path: Path) -> None:
    """The rule for a group regraded while its lease is out: every delivery until the ack (a
    trainer that went away, a re-delivery) serves the grading of the first, so no trainer sees
    two histories of it; the ack settles the regrade, offered once as a regraded group."""
    store = Store(tmp_path)
    store.open()
    try:
        gid = await _collected(store, "r")
        first = await store.lease(max_groups=1, stale_policy="drop", **LEASE)
        for k in (0, 1):
            await store.record_grading(sample_trajectory_id(gid, k), _regrading(k), "out")
        (settled,) = await store.settle_regraded([gid])
        assert settled.waiting and not settled.offered
        assert await store.release(first.batch_id) == 1  # its trainer went away
        again = await store.lease(max_groups=1, stale_policy="drop", **LEASE)
        (group,) = again.groups
        assert _served(group) == (OLD, [1, 1, 1, 1])
        early = await store.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        assert early.batch_id is None  # nothing to offer before the ack
        await store.ack(again.batch_id)
        regraded = await store.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        (group,) = regraded.groups
        assert _served(group) == (NEW, [2, 2, 1, 1])
        await store.ack(regraded.batch_id)
        assert await store.remaining_regraded() == 0
    finally:
        store.close()


async def test_a_regrade_killed_between_record_and_settle_is_settled_on_open(
    tmp_path: Path,
) -> None:
    """A regrade stopped after recording its gradings, before settling their groups: the
    store settles them when it opens again (the group never leased serves the new grading
    with its advantages; the one a trainer acknowledged is offered as a regraded group)."""
    store = Store(tmp_path)
    store.open()
    try:
        fresh = await _collected(store, "r")
        had = await _collected(store, "s")
        lease = await store.lease(max_groups=1, stale_policy="drop", **{**LEASE, "rollout_id": "s"})
        await store.ack(lease.batch_id)
        for gid in (fresh, had):
            for k in (0, 1):
                await store.record_grading(sample_trajectory_id(gid, k), _regrading(k), "out")
    finally:
        store.close()  # killed: the regrade never settles
    reopened = Store(tmp_path)
    reopened.open()
    try:
        plain = await reopened.lease(max_groups=10, stale_policy="drop", **LEASE)
        (group,) = plain.groups
        assert group.group_id == fresh and _served(group) == (NEW, [2, 2, 1, 1])
        await reopened.ack(plain.batch_id)
        regraded = await reopened.lease_regraded(max_groups=10, rollout_id=None, lease_s=60.0)
        (group,) = regraded.groups
        assert group.group_id == had and _served(group) == (NEW, [2, 2, 1, 1])
    finally:
        reopened.close()
