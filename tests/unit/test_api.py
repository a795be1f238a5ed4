"""The HTTP API over real loopback HTTP (uvicorn in a thread), with the real store and task
loader and a small in-test group runner in place of Docker + a policy server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from service.sample import SampleSpec
from service.settings import Settings
from service.trajectory import ARROW_SCHEMA, Status, Trajectory
from service.wire import Group
from tests.unit.live_service import AUTH, KEY, Runner, Server, wait_for
from tests.unit.live_service import make_settings as live_settings

TASKS = str(Path(__file__).resolve().parents[2] / "examples" / "tasks")


class GatedRunner(Runner):
    """Reports sample k of a group with reward k % 2 == 0 once `gate` is open; sample index 1
    is a masked sandbox error, to exercise rloo_n."""

    def report(self, spec: SampleSpec) -> Trajectory:
        masked = spec.sample_index == 1
        return Trajectory(
            trajectory_id=spec.trajectory_id,
            rollout_id=spec.rollout_id,
            group_id=spec.group_id,
            task_id=spec.task_id,
            sample_index=spec.sample_index,
            prompt_token_ids=[1, 2, 3],
            response_token_ids=[4, 5],
            loss_mask=[1, 0],  # a generated token, then an observation
            rollout_logprobs=[-0.1, 0.0],
            reward=None if masked else float(spec.sample_index % 2 == 0),
            status=Status.sandbox_error if masked else Status.ok,
        )


def make_settings(tmp_path: Path, **kw: object) -> Settings:
    service: dict[str, object] = dict(
        max_body_bytes=4096, datasets={"bundled": TASKS}, tasks_roots=[],
    )  # fmt: skip
    service.update(kw)
    return live_settings(tmp_path, **service)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(make_settings(tmp_path), GatedRunner()) as s:
        yield s


def client(server: Server, headers: dict[str, str] | None = AUTH) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=headers or {}, timeout=30)


SMALL_GROUPS = {"min_group_size": 2}  # rloo_n needs n_samples >= min_group_size


def submit(c: httpx.Client, **kw: object) -> str:
    body: dict[str, object] = {"tasks": {"path": TASKS, "limit": 3}, "n_samples": 4}
    body.update(kw)
    r = c.post("/v1/rollouts", json=body)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def wait_status(c: httpx.Client, rid: str, want: str) -> dict:
    def reached() -> dict | None:
        body = c.get(f"/v1/rollouts/{rid}").json()
        return body if body["status"] == want else None

    return wait_for(reached, what=f"rollout {rid} {want}")


def test_auth(server: Server) -> None:
    with client(server, headers=None) as c:
        assert c.get("/healthz").status_code == 200
        for path in ("/v1/policy", "/metrics", "/readyz", "/openapi.json", "/v1/rollouts/x"):
            assert c.get(path).status_code == 401, path
        assert c.post("/v1/batches/lease", json={}).status_code == 401
        assert c.get("/v1/policy", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/v1/policy", headers={"X-API-Key": KEY}).status_code == 401
        assert c.get("/v1/policy", headers={"Authorization": KEY}).status_code == 401
        assert c.get("/v1/policy", headers={"Authorization": f"Basic {KEY}"}).status_code == 401
        assert c.get("/v1/policy", headers=AUTH).status_code == 200
        assert c.get("/readyz", headers=AUTH).json()["status"] == "ready"
        assert c.get("/openapi.json", headers=AUTH).status_code == 200


def test_bad_input_is_4xx_naming_the_field(server: Server) -> None:
    with client(server) as c:
        r = c.post(
            "/v1/rollouts", content=b"x" * 10_000, headers={"content-type": "application/json"}
        )
        assert r.status_code == 413
        cases = [
            ({"tasks": {"path": TASKS}, "n_samples": 0}, ["body", "n_samples"]),
            ({"tasks": {"path": "/nonexistent/tasks"}}, ["body", "tasks", "path"]),
            ({"tasks": {"path": TASKS, "ids": ["no-such-task"]}}, ["body", "tasks", "ids"]),
            ({"tasks": {"path": TASKS}, "n_sample": 4}, ["body", "n_sample"]),
            ({"tasks": {"path": TASKS}, "sampling": {"top_p": 0}}, ["body", "sampling", "top_p"]),
            ({"tasks": {"path": TASKS}, "advantage": {"estimator": "grpo"}},
             ["body", "advantage", "estimator"]),
            ({}, ["body", "tasks"]),
        ]  # fmt: skip
        for body, loc in cases:
            r = c.post("/v1/rollouts", json=body)
            assert r.status_code == 422, (body, r.text)
            assert loc in [d["loc"] for d in r.json()["detail"]], (body, r.text)
        r = c.post(
            "/v1/rollouts", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert r.status_code == 422
        assert c.post("/v1/batches/lease", json={"max_groups": 0}).status_code == 422
        assert (
            c.post("/v1/batches/lease", json={"rollout_id": "nope", "wait_s": 0}).status_code == 404
        )
        assert c.get("/v1/rollouts/nope").status_code == 404
        assert c.delete("/v1/rollouts/nope").status_code == 404
        assert c.post("/v1/batches/nope/ack").status_code == 404
        assert c.post("/v1/policy", json={"version": -1}).status_code == 422


def test_client_errors_are_mapped_once(server: Server) -> None:
    """Typed errors (service/errors.py) become the bodies the API has always given: a message
    for 404/409, FastAPI's field items for 422 (naming the field to fix)."""
    with client(server) as c:
        gone = {"detail": "no rollout with id 'nope'"}
        for r in (
            c.get("/v1/rollouts/nope"),
            c.delete("/v1/rollouts/nope"),
            c.get("/v1/rollouts/nope/events"),
            c.post("/v1/batches/lease", json={"rollout_id": "nope", "wait_s": 0}),
        ):
            assert (r.status_code, r.json()) == (404, gone), r.request.url
        r = c.post("/v1/batches/b-x/ack")
        assert (r.status_code, r.json()) == (404, {"detail": "no batch with id 'b-x'"})

        r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS, "ids": ["gcd-of-list", "zz"]}})
        assert r.status_code == 422
        [item] = r.json()["detail"]
        assert item["loc"] == ["body", "tasks", "ids"] and item["type"] == "task_load_error"
        assert item["msg"] == f"task source {TASKS!r}: no task with id zz"
        r = c.post("/v1/rollouts", json={"tasks": {"path": "/nonexistent/tasks"}})
        [item] = r.json()["detail"]
        assert (r.status_code, item["loc"]) == (422, ["body", "tasks", "path"])
        assert item["type"] == "task_load_error" and "/nonexistent/tasks" in item["msg"]
        # Known ids (with a limit) still load: the selection is load_tasks' own.
        r = c.post(
            "/v1/rollouts",
            json={"tasks": {"path": TASKS, "ids": ["int-to-roman", "gcd-of-list"], "limit": 1}},
        )
        assert r.status_code == 202, r.text
        rid = r.json()["id"]
        assert wait_status(c, rid, "completed")["groups_total"] == 1


def test_expired_lease_ack_is_409(tmp_path: Path) -> None:
    with Server(make_settings(tmp_path), GatedRunner()) as s, client(s) as c:
        rid = submit(c, tasks={"path": TASKS, "limit": 1}, n_samples=2, advantage=SMALL_GROUPS)
        batch_id = c.post("/v1/batches/lease", json={"wait_s": 10, "rollout_id": rid}).headers[
            "X-Batch-Id"
        ]
    # A restart ends every open lease: the ack comes too late.
    with Server(make_settings(tmp_path), GatedRunner()) as s, client(s) as c:
        r = c.post(f"/v1/batches/{batch_id}/ack")
        assert r.status_code == 409
        assert r.json() == {
            "detail": f"lease of batch {batch_id!r} expired before this ack; its groups are "
            "offered again (dedupe by trajectory_id)"
        }


def test_submit_lease_ack(server: Server) -> None:
    with client(server) as c:
        r = c.post("/v1/batches/lease", json={"wait_s": 0.2})
        assert r.status_code == 204
        rid = submit(c, tasks={"path": "bundled", "limit": 3})  # dataset name
        seen: dict[str, dict] = {}
        batches = []
        while len(seen) < 3:
            r = c.post("/v1/batches/lease", json={"max_groups": 2, "wait_s": 10, "rollout_id": rid})
            assert r.status_code == 200, r.text
            body = r.json()
            batches.append(body["batch_id"])
            for g in body["groups"]:
                assert g["group_id"] not in seen
                seen[g["group_id"]] = g
        for g in seen.values():
            trajs = [Trajectory.model_validate(t) for t in g["trajectories"]]
            assert [t.sample_index for t in trajs] == [0, 1, 2, 3]
            assert trajs[1].exclude_from_baseline and trajs[1].advantage == 0.0
            # rloo_n, min_group_size 4, only 3 included: every advantage is 0.
            assert all(t.advantage == 0.0 for t in trajs)
        status = wait_status(c, rid, "completed")
        assert status["counts"] == {"ok": 9, "sandbox_error": 3}
        assert status["groups_completed"] == 3
        for b in batches:
            assert c.post(f"/v1/batches/{b}/ack").json()["already_acked"] is False
            assert c.post(f"/v1/batches/{b}/ack").json()["already_acked"] is True
        r = c.post("/v1/batches/lease", json={"wait_s": 0.1, "rollout_id": rid})
        assert r.status_code == 204
        assert r.headers["X-Rollouts-Remaining"] == "0"
        metrics = c.get("/metrics").text
        assert 'rollouts_samples_total{status="ok"} 9.0' in metrics


def test_arrow_lease_and_rloo(server: Server) -> None:
    with client(server) as c:
        rid = submit(
            c, tasks={"path": TASKS, "limit": 1},
            advantage={"estimator": "rloo", "min_group_size": 1},
        )  # fmt: skip
        r = c.post(
            "/v1/batches/lease",
            json={"wait_s": 10, "rollout_id": rid},
            headers={"Accept": "application/vnd.apache.arrow.stream"},
        )
        assert r.status_code == 200
        table = pa.ipc.open_stream(r.content).read_all()
        assert table.schema.remove_metadata() == ARROW_SCHEMA
        assert table.schema.metadata[b"batch_id"].decode() == r.headers["X-Batch-Id"]
        rows = table.to_pylist()
        assert [row["sample_index"] for row in rows] == [0, 1, 2, 3]
        # rewards 1, masked, 1, 0 -> RLOO over the included: 0.5, 0, 0.5, -1.
        assert [row["advantage"] for row in rows] == pytest.approx([0.5, 0.0, 0.5, -1.0])
        assert c.post(f"/v1/batches/{r.headers['X-Batch-Id']}/ack").status_code == 200


def test_queue_full_then_cancel(tmp_path: Path) -> None:
    runner = GatedRunner()
    runner.gate.clear()
    with Server(make_settings(tmp_path, max_queued_samples=8), runner) as s, client(s) as c:
        rid = submit(c, tasks={"path": TASKS, "limit": 2}, n_samples=4)  # 4 run, 4 queue
        wait_for(lambda: runner.started >= 4, 10, "the first group started")
        r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS, "limit": 2}, "n_samples": 4})
        assert r.status_code == 429 and r.headers["Retry-After"] == "5"
        assert r.json() == {"detail": "sample queue is full: 4 queued + 8 requested > 8"}
        # Tasks are read only while they fit the queue's room: a request that could never fit
        # is told so (422) once the tasks read pass its size, not before the room is used up.
        r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS, "limit": 3}, "n_samples": 4})
        assert r.status_code == 429
        body = c.delete(f"/v1/rollouts/{rid}").json()
        assert body["status"] == "cancelled"
        assert body["counts"] == {"cancelled": 8}
        r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS, "limit": 3}, "n_samples": 4})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "n_samples"]
        assert r.json()["detail"][0]["type"] == "too_many_samples"
        # All-cancelled groups carry nothing to train on: never offered.
        assert c.post("/v1/batches/lease", json={"wait_s": 0.1}).status_code == 204
        # The queue has room again.
        runner.gate.set()
        rid2 = submit(c, tasks={"path": TASKS, "limit": 2}, n_samples=4)
        wait_status(c, rid2, "completed")


def test_events_stream(server: Server) -> None:
    server.runner.gate.clear()
    with client(server) as c:
        rid = submit(c, tasks={"path": TASKS, "limit": 1}, n_samples=2, advantage=SMALL_GROUPS)
        kinds: list[str] = []
        with c.stream("GET", f"/v1/rollouts/{rid}/events") as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            server.runner.gate.set()
            for line in r.iter_lines():
                if line.startswith("event: "):
                    kinds.append(line.removeprefix("event: "))
        assert kinds == ["status", "trajectory", "trajectory", "group", "rollout"]


def test_policy_version_persists(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with Server(settings, GatedRunner()) as s, client(s) as c:
        r = c.post("/v1/policy", json={"version": 7, "max_staleness": 2})
        assert r.json() == {"version": 7, "max_staleness": 2, "stale_policy": "drop", "servers": []}
    with Server(make_settings(tmp_path), GatedRunner()) as s, client(s) as c:
        assert c.get("/v1/policy").json()["version"] == 7


def test_a_version_without_max_staleness_keeps_the_bound(tmp_path: Path) -> None:
    """Issue 35, case 6: the trainer-driven `POST /v1/policy {"version": N}` (flow 2 of
    docs/weight-updates.md) keeps the staleness bound in force; only an explicit null removes
    it; every answer shows the bound in force, and it survives a restart. The trainer client
    sends the field only when given."""
    from clients.trainer import TrainerClient

    with Server(make_settings(tmp_path), GatedRunner()) as s, client(s) as c:
        assert (
            c.post("/v1/policy", json={"version": 1, "max_staleness": 2}).json()["max_staleness"]
            == 2
        )
        kept = c.post("/v1/policy", json={"version": 2})
        assert kept.status_code == 200 and kept.json()["max_staleness"] == 2
        assert c.get("/v1/policy").json()["max_staleness"] == 2
    with Server(make_settings(tmp_path), GatedRunner()) as s, TrainerClient(s.url, KEY) as tc:
        with client(s) as c:
            assert c.get("/v1/policy").json()["max_staleness"] == 2  # persisted
        assert tc.set_policy(3).max_staleness == 2  # omitted: kept
        assert tc.set_policy(4, max_staleness=None).max_staleness is None  # null: removed
        assert tc.set_policy(5).max_staleness is None
        assert tc.set_policy(6, max_staleness=0).max_staleness == 0


def test_max_stale_requeues_reaches_the_leases(tmp_path: Path) -> None:
    with Server(make_settings(tmp_path, max_stale_requeues=1), GatedRunner()) as s:
        assert s.server.config.app.state.service.leasing.policy.max_requeues == 1


def test_policy_update_requests_are_checked(tmp_path: Path) -> None:
    """Bad weight-update requests name what to fix; a service that drives no policy servers
    (here: a runner of the test's own) says it cannot pause them."""
    with Server(make_settings(tmp_path), GatedRunner()) as s, client(s) as c:
        both = {"version": 1, "weights_path": "/a", "lora_path": "/b"}
        r = c.post("/v1/policy", json=both)
        assert r.status_code == 422 and "not both" in r.text
        r = c.post("/v1/policy/pause", json={"mode": "sideways"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "mode"]
        r = c.post("/v1/policy/pause", json={"mode": "keep"})
        assert r.status_code == 409 and "drives no policy servers" in r.text
        assert c.post("/v1/policy/resume").status_code == 409
        r = c.post("/v1/policy", json={"version": 1, "weights_path": "/ckpt"})
        assert r.status_code == 409 and c.get("/v1/policy").json()["version"] == 0
    from clients.trainer import ServiceError, TrainerClient

    with Server(make_settings(tmp_path), GatedRunner()) as s, TrainerClient(s.url, KEY) as tc:
        assert tc.set_policy(2, max_staleness=1).version == 2
        with pytest.raises(ServiceError) as info:
            tc.pause_policy("abort")
        assert info.value.status_code == 409
        with pytest.raises(ServiceError):
            tc.set_policy(3, lora_path="/adapter")


def test_trainer_client_pull_and_export(server: Server, tmp_path: Path) -> None:
    import datasets
    import pyarrow.parquet as pq

    from clients.commands.pull import write_batch
    from clients.trainer import TrainerClient
    from service.export import export_parquet

    with TrainerClient(server.url, KEY) as tc:
        rid = tc.submit(TASKS, n_samples=4, limit=3, advantage={"min_group_size": 2})
        out = tmp_path / "pulled"
        out.mkdir()
        ids: list[str] = []
        for batch in tc.batches(max_groups=2, rollout_id=rid, wait_s=5):
            skyrl = batch.to_skyrl()
            n = len(batch.trajectories)
            assert all(len(v) == n for v in skyrl.values() if isinstance(v, list))
            for resp, mask, lp in zip(
                skyrl["response_ids"], skyrl["loss_masks"], skyrl["rollout_logprobs"], strict=True
            ):
                assert len(resp) == len(mask) == len(lp)
            # SkyRL's TrajectoryID shape, one uid per group, unique ids; its metrics are there.
            tids = skyrl["trajectory_ids"]
            assert [t.instance_id for t in tids] == skyrl["uids"]
            assert len({t.to_string() for t in tids}) == n
            assert skyrl["rollout_metrics"]["rollouts/num_masked"] == sum(
                skyrl["exclude_from_baseline"]
            )
            assert set(skyrl["stop_reasons"]) <= {"stop", "length", "abort"}
            # Masked samples are never scored 0 (README): they train nothing (all-zero mask and
            # logprobs) and carry the neutral reward, the mean of their group's graded samples
            # (GatedRunner: 1, masked, 1, 0 -> 2/3).
            masked = [i for i, ex in enumerate(skyrl["exclude_from_baseline"]) if ex]
            assert masked
            for i in masked:
                assert set(skyrl["loss_masks"][i]) == {0}
                assert set(skyrl["rollout_logprobs"][i]) == {0.0}
                graded = [
                    r
                    for r, u, ex in zip(
                        skyrl["rewards"], skyrl["uids"], skyrl["exclude_from_baseline"], strict=True
                    )
                    if u == skyrl["uids"][i] and not ex
                ]
                assert skyrl["rewards"][i] == pytest.approx(sum(graded) / len(graded))
                assert skyrl["rewards"][i] == pytest.approx(2 / 3)
                assert skyrl["advantages"][i] == 0.0
            write_batch(batch, out)
            batch.ack()
            ids += [t.trajectory_id for t in batch.trajectories]
        assert len(ids) == len(set(ids)) == 12
        assert tc.status(rid).status == "completed"
        pulled = pq.read_table(out)
        assert sorted(pulled.column("trajectory_id").to_pylist()) == sorted(ids)

    target = tmp_path / "export.parquet"
    data_dir = server.server.config.app.state.service.settings.service.data_dir
    assert export_parquet(data_dir, target) == 12
    table = pq.read_table(target)
    assert table.schema == pq.read_schema(target) and table.num_rows == 12
    ds = datasets.load_dataset("parquet", data_files=str(target), split="train")
    assert len(ds) == 12 and set(ds["trajectory_id"]) == set(ids)


def test_client_dedupes_redelivered_groups(tmp_path: Path) -> None:
    from clients.trainer import TrainerClient

    settings = make_settings(tmp_path)
    with Server(settings, GatedRunner()) as s, TrainerClient(s.url, KEY) as tc:
        rid = tc.submit(TASKS, n_samples=2, limit=2, advantage=SMALL_GROUPS)
        wait_for(lambda: tc.status(rid).status == "completed", what="rollout completed")
        first, _ = tc.lease(max_groups=1, rollout_id=rid, wait_s=5)
        assert first is not None
    # Restart on the same data dir before the ack reaches the service: the ack gets 409, the
    # group is offered again, and the client skips it (it already handed it out).
    settings2 = make_settings(tmp_path)
    with Server(settings2, GatedRunner()) as s:
        tc._http = type(tc._http)(base_url=s.url, headers={"Authorization": f"Bearer {KEY}"})
        first.ack()
        seen: list[str] = []
        for b in tc.batches(max_groups=10, rollout_id=rid, wait_s=2):
            seen += [t.trajectory_id for t in b.trajectories]
            b.ack()
        assert not set(seen) & {t.trajectory_id for t in first.trajectories}
        assert len(seen) == 2
        # The re-delivered group was acked in time at last: nothing left to remember.
        assert tc._dedupe.pending == {}


def test_the_client_remembers_only_groups_on_their_way_back(tmp_path: Path) -> None:
    """TrainerClient's dedupe memory is bounded over a long run (issue 35): a batch acked in
    time is never offered again, so it keeps no ids of it; ids of a batch acked too late stay
    only until their group comes back, and never more than its window."""
    from clients.trainer import Batch, TrainerClient, _Dedupe

    with Server(make_settings(tmp_path), GatedRunner()) as s, TrainerClient(s.url, KEY) as tc:
        rid = tc.submit(TASKS, n_samples=2, limit=3, advantage=SMALL_GROUPS)
        seen = []
        for batch in tc.batches(max_groups=1, rollout_id=rid, wait_s=5):
            seen += [t.trajectory_id for t in batch.trajectories]
            batch.ack()
            assert tc._dedupe.pending == {}
        assert len(seen) == len(set(seen)) == 6
    window = _Dedupe(window=3)
    groups = [
        Group(group_id=f"g{i}", task_id="t", rollout_id="r", trajectories=[
            GatedRunner().report(SampleSpec(f"g{i}.s{k}", "r", f"g{i}", "t", k))
            for k in range(2)
        ])
        for i in range(3)
    ]  # fmt: skip
    for g in groups:
        window.record(Batch(g.group_id, 0.0, [g]), in_time=False)
    assert list(window.pending) == [("g1.s1", -1), ("g2.s0", -1), ("g2.s1", -1)]
    assert window.fresh(groups) == groups[:2]  # g0 forgotten, g1 half: both handed out again


def test_serve_refuses_public_host_without_key() -> None:
    import typer
    from typer.testing import CliRunner

    from clients.commands import serve

    app = typer.Typer()
    serve.register(app)
    app.command("noop")(lambda: None)  # typer needs two commands to keep names
    result = CliRunner().invoke(
        app, ["serve", "--host", "0.0.0.0", "--policy-url", "http://x"], env={}
    )
    assert result.exit_code == 2
    assert "without an API key" in result.output


def test_n_samples_below_min_group_size_is_refused_naming_both(tmp_path: Path) -> None:
    with Server(make_settings(tmp_path), GatedRunner()) as s, client(s) as c:
        r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS, "limit": 1}, "n_samples": 2})
        assert r.status_code == 422, r.text
        msg = r.json()["detail"][0]["msg"]
        assert "n_samples (2)" in msg and "advantage.min_group_size (4)" in msg, msg
        plain = {"estimator": "rloo"}  # plain RLOO has no minimum
        r = c.post(
            "/v1/rollouts",
            json={"tasks": {"path": TASKS, "limit": 1}, "n_samples": 2, "advantage": plain},
        )
        assert r.status_code == 202, r.text
