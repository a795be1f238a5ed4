"""The web view's JSON (/ui/api) and the service-wide event stream it follows (/v1/events):

- over a generated store of 10,000 trajectories whose payloads are deleted but one: listing,
  filtering, paging, groups and the overview still answer in full, so none of them reads a
  payload; the one payload left opens;
- the same routes over an exported Parquet file (`rollouts view FILE`);
- in the service: /ui needs no key, its JSON does; /v1/events tags every event with its
  rollout, carries what the overview plots, and sends `stats`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.advantages import AdvantageConfig
from service.export import export_parquet
from service.store import DB_NAME, GroupPlan, Store, group_id_for, sample_trajectory_id
from service.trajectory import Status, Timings, Trajectory
from service.ui.viewer import create_view_app, open_source
from tests.unit.test_api import AUTH, TASKS, GatedRunner, Server, client, make_settings

TASK_IDS = [f"task-{i:03d}" for i in range(50)]
STATUSES = [Status.ok] * 6 + [Status.agent_timeout, Status.sandbox_error]  # by sample index


def _trajectory(rid: str, g: int, k: int, version: int) -> Trajectory:
    gid = group_id_for(rid, g)
    status = STATUSES[k % len(STATUSES)]
    return Trajectory(
        trajectory_id=sample_trajectory_id(gid, k),
        rollout_id=rid,
        group_id=gid,
        task_id=TASK_IDS[g % len(TASK_IDS)],
        sample_index=k,
        policy_version_start=version,
        policy_version_end=version,
        prompt_token_ids=list(range(40)),
        response_token_ids=[7, 8, 9, 2, 11, 12],
        loss_mask=[1, 1, 1, 0, 0, 1],
        rollout_logprobs=[-0.5, -0.25, -0.125, 0.0, 0.0, -1.0],
        reward=float((g + k) % 3 == 0),
        status=status,
        messages=[{"role": "user", "content": "Task"}, {"role": "assistant", "content": "{}"}],
        verifier_output=f"{k} passed",
        timings=Timings(total_s=1.0 + k),
    )


def generate_store(data_dir: Path, rid: str, n_groups: int, n_samples: int = 8) -> None:
    """A rollout of n_groups x n_samples committed through the store's own API."""

    async def fill() -> None:
        store = Store(data_dir, synchronous="OFF")
        store.open()
        try:
            plans = [
                GroupPlan(group_id_for(rid, g), TASK_IDS[g % len(TASK_IDS)],
                          [sample_trajectory_id(group_id_for(rid, g), k) for k in range(n_samples)])
                for g in range(n_groups)
            ]  # fmt: skip
            await store.create_rollout(rid, "{}", 0, AdvantageConfig("rloo", 1), plans)
            for g in range(n_groups):
                await asyncio.gather(*(store.commit_trajectory(_trajectory(rid, g, k, g % 5))
                                       for k in range(n_samples)))  # fmt: skip
        finally:
            store.close()

    asyncio.run(fill())


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("big")
    generate_store(data, "big", n_groups=1250)
    return data


KEPT = sample_trajectory_id(group_id_for("big", 3), 6)  # the one payload left: agent_timeout


def test_a_10k_store_lists_filters_and_pages_without_reading_payloads(big_store: Path) -> None:
    conn = sqlite3.connect(big_store / DB_NAME)
    with conn:
        conn.execute("DELETE FROM payloads WHERE trajectory_id != ?", (KEPT,))
    conn.close()
    with TestClient(create_view_app(open_source(big_store)), base_url="http://localhost") as c:
        ov = c.get("/ui/api/overview").json()
        [r] = ov["rollouts"]
        assert (r["samples_completed"], r["groups_completed"], r["status"]) == (
            10_000,
            1250,
            "completed",
        )
        assert r["counts"] == {"ok": 7500, "agent_timeout": 1250, "sandbox_error": 1250}
        assert [v["version"] for v in ov["reward_by_version"]] == [0, 1, 2, 3, 4]
        assert sum(v["n"] for v in ov["reward_by_version"]) == 8750  # masked ones unscored
        assert ov["tasks"] == TASK_IDS and ov["live"] is False

        page = c.get("/ui/api/samples", params={"offset": 9990, "limit": 50}).json()
        assert page["total"] == 10_000 and len(page["rows"]) == 10
        failed = c.get("/ui/api/samples", params={"status": "ok", "reward_max": 0}).json()
        assert failed["total"] == 5000 and len(failed["rows"]) == 50
        assert {(x["status"], x["reward"]) for x in failed["rows"]} == {("ok", 0.0)}
        task = c.get("/ui/api/samples", params={"task_id": "task-007", "reward_min": 1}).json()
        assert {x["task_id"] for x in task["rows"]} == {"task-007"} and task["total"] > 0
        group = c.get("/ui/api/samples", params={"group_id": group_id_for("big", 3)}).json()
        assert [x["sample_index"] for x in group["rows"]] == list(range(8))
        assert all(x["advantage"] is not None for x in group["rows"] if x["status"] == "ok")

        t = c.get(f"/ui/api/trajectories/{KEPT}").json()
        assert t["status"] == "agent_timeout" and t["loss_mask"] == [1, 1, 1, 0, 0, 1]
        gone = sample_trajectory_id(group_id_for("big", 3), 5)
        assert c.get(f"/ui/api/trajectories/{gone}").status_code == 404
        assert c.get("/ui/api/samples", params={"limit": 501}).status_code == 422
        assert c.get("/ui").headers["content-type"].startswith("text/html")
        assert c.get("/ui/static/main.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/ui/static/..%2Froutes.py").status_code == 404


def test_an_exported_parquet_file(tmp_path: Path) -> None:
    generate_store(tmp_path / "data", "small", n_groups=3, n_samples=4)
    out = tmp_path / "small.parquet"
    assert export_parquet(tmp_path / "data", out) == 12
    with TestClient(create_view_app(open_source(out)), base_url="http://localhost") as c:
        ov = c.get("/ui/api/overview").json()
        assert ov["source"] == "file small.parquet"
        [r] = ov["rollouts"]
        assert (r["samples_completed"], r["groups_total"], r["status"]) == (12, 3, "exported")
        # Reward 1 where (group + sample) % 3 == 0: samples 0 and 3, 2, and 1 of groups 0-2.
        assert r["pass_at_n"] == 1.0 and r["mean_reward"] == pytest.approx(4 / 12)
        page = c.get("/ui/api/samples", params={"status": "ok", "reward_max": 0}).json()
        assert page["total"] == 8 and all(x["reward"] == 0.0 for x in page["rows"])
        tid = page["rows"][0]["trajectory_id"]
        t = c.get(f"/ui/api/trajectories/{tid}").json()
        assert t["trajectory_id"] == tid and t["verifier_output"].endswith("passed")
        assert c.get("/ui/api/trajectories/nope").status_code == 404
    with pytest.raises(FileNotFoundError):
        open_source(tmp_path / "empty-dir-or-missing")


def _events(r: httpx.Response, until: str) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    kind = ""
    for line in r.iter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            out.append((kind, json.loads(line.removeprefix("data: "))))
            if kind == until:
                return out
    raise AssertionError(f"stream ended before a {until!r} event: {out}")


def test_service_ui_auth_and_the_service_wide_event_stream(tmp_path: Path) -> None:
    async def ready() -> bool:
        return True

    with Server(make_settings(tmp_path), GatedRunner(), readiness={"test": ready}) as s:
        with client(s, headers={}) as anon:
            assert anon.get("/ui").status_code == 200  # the page holds no data
            assert anon.get("/ui/api/overview").status_code == 401
            assert anon.get("/v1/events").status_code == 401
        with client(s) as c:
            assert c.get("/ui/api/overview").json()["live"] is True
            with c.stream("GET", "/v1/events") as r:
                body = {"tasks": {"path": TASKS, "limit": 1}, "n_samples": 2,
                        "advantage": {"min_group_size": 2}}  # fmt: skip
                rid = httpx.post(s.url + "/v1/rollouts", json=body, headers=AUTH).json()["id"]
                events = _events(r, until="rollout")
        kinds = [k for k, _ in events]
        assert kinds[0] == "stats" and set(events[0][1]) >= {"running_samples", "health"}
        assert events[0][1]["health"] == {"test": True}
        rest = [(k, d) for k, d in events if k != "stats"]
        assert [k for k, _ in rest] == ["submitted", "trajectory", "trajectory", "group", "rollout"]
        assert all(d["rollout_id"] == rid for _, d in rest)
        trajectory = rest[1][1]
        assert trajectory["generated_tokens"] == 1 and trajectory["policy_version"] == 0
        assert "total_s" in trajectory
        with client(s) as c:
            ov = c.get("/ui/api/overview").json()
            [row] = ov["rollouts"]
            assert row["id"] == rid and row["samples_completed"] == 2
            assert row["counts"] == {"ok": 1, "sandbox_error": 1}
