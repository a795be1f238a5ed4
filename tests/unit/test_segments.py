"""Trajectories as segments (issue 36): a summarized episode is committed with its segments and
comes back exactly through the store, the lease API (JSON and Arrow), the event stream,
Parquet and `rollouts export`, and SkyRL's step-wise form; staleness counts every segment's
tokens; `train_segments` chooses what is delivered and is checked at the boundary."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from benchmarks.noop_backend import NoopBackend
from clients.cli import app as cli
from clients.skyrl_output import generator_output, step_wise_output
from sandboxes.tasks import load_tasks
from service.advantages import AdvantageConfig
from service.agent.harnesses import build_harness
from service.episode import EpisodeRunner
from service.payload_codec import (
    CODEC,
    SEGMENTS_CODEC,
    TOKEN_FIELDS,
    encode_payload,
    payload_codec,
    payload_dict,
    payloads_to_arrow,
    with_advantage,
)
from service.policy.client import PolicyClient
from service.sample import SampleSpec
from service.store import GroupPlan, Store
from service.trajectory import (
    ARROW_SCHEMA,
    SegmentKind,
    Status,
    Trajectory,
    from_arrow,
    segment_outline,
    to_arrow,
)
from standin.engine import StubSettings
from standin.server import build_app
from tests.trajectories import make_trajectory, summarized
from tests.unit.live_service import Runner, Server, make_settings, trajectory
from tests.unit.test_harnesses import synthetic_terminus_profile, write_profile
from tests.unit.test_store import lease_kwargs

TASKS = str(Path(__file__).resolve().parents[2] / "examples" / "tasks")


def test_the_model_counts_every_segment() -> None:
    t = summarized("r.g0.s0", "r", "r.g0", "t", 0, version=3)
    assert [s.kind for s in t.segments] == ["main", "summary", "questions", "answers", "main"]
    assert t.all_segments() == t.segments
    assert t.segments[-1].response_token_ids == t.response_token_ids
    assert t.total_tokens() == sum(
        len(s.prompt_token_ids) + len(s.response_token_ids) for s in t.segments
    )
    assert t.generated_tokens() == sum(sum(s.loss_mask) for s in t.segments) > sum(t.loss_mask)
    # The last segment ran under version 4; the summary calls under 3: staleness counts from 3.
    assert set(t.response_policy_versions) == {4, -1} and t.oldest_version() == 3
    outline = segment_outline(t)
    assert [o["kind"] for o in outline] == [s.kind.value for s in t.segments]
    assert outline[1] == {
        "kind": "summary", "parent": 0, "prompt_tokens": 16, "response_tokens": 6,
        "generated_tokens": 5, "versions": [3, 3],
    }  # fmt: skip
    plain = make_trajectory("r.g0.s1", "r", "r.g0", "t", 1)
    assert plain.segments == [] and len(plain.all_segments()) == 1
    assert segment_outline(plain)[0]["kind"] == "main" and plain.total_tokens() == 8


def test_payload_round_trips_every_segment_without_storing_the_last_twice() -> None:
    t = summarized("r.g0.s0", "r", "r.g0", "t", 0).model_copy(update={"advantage": 0.25})
    data = encode_payload(t)
    assert payload_codec(t) == SEGMENTS_CODEC
    assert Trajectory.model_validate(payload_dict(SEGMENTS_CODEC, data, 0.25)) == t
    assert Trajectory.model_validate_json(with_advantage(SEGMENTS_CODEC, data, 0.25)) == t
    assert from_arrow(payloads_to_arrow([(SEGMENTS_CODEC, data, 0.25)])) == [t]
    # Layout: the header, the trajectory's arrays, then only the segments before the last.
    header_len = struct.unpack_from("<III", data)[0]
    per_token = 4 + 1 + 8 + 8  # response id, mask, logprob, version
    arrays = sum(4 * len(s.prompt_token_ids) + per_token * len(s.response_token_ids)
                 for s in t.segments)  # fmt: skip
    assert len(data) == 12 + header_len + arrays
    # One segment: the codec and bytes of before segments.
    plain = make_trajectory("r.g0.s1", "r", "r.g0", "t", 1)
    assert payload_codec(plain) == CODEC and b"segment" not in encode_payload(plain)
    assert payload_dict(CODEC, encode_payload(plain), None)["segments"] == []


def test_records_and_files_without_segments_still_load() -> None:
    t = summarized("r.g0.s0", "r", "r.g0", "t", 0)
    # A cols2 record of the first segment-aware commit kept the segments in its JSON header.
    header = t.model_dump_json(exclude={"advantage", *TOKEN_FIELDS}).encode()
    versions = t.response_policy_versions
    arrays = [struct.pack(f"<{len(t.prompt_token_ids)}i", *t.prompt_token_ids),
              struct.pack(f"<{len(t.response_token_ids)}i", *t.response_token_ids),
              bytes(t.loss_mask),
              struct.pack(f"<{len(t.rollout_logprobs)}d", *t.rollout_logprobs),
              struct.pack(f"<{len(versions)}q", *versions)]  # fmt: skip
    old = struct.pack("<III", len(header), len(t.prompt_token_ids), len(t.response_token_ids))
    old += header + b"".join(arrays)
    assert Trajectory.model_validate(payload_dict(CODEC, old, None)) == t
    assert Trajectory.model_validate_json(with_advantage(CODEC, old, None)) == t
    assert from_arrow(payloads_to_arrow([(CODEC, old, None)])) == [t]
    # A Parquet file written before segments has no such column.
    plain = make_trajectory("r.g0.s1", "r", "r.g0", "t", 1)
    table = to_arrow([plain]).drop_columns(["segments"])
    assert from_arrow(table) == [plain]


async def test_store_commits_segments_and_staleness_counts_them(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.open()
    try:
        tids = [f"r.g0.s{k}" for k in range(4)]
        await store.create_rollout("r", "{}", 0, AdvantageConfig(min_group_size=2),
                                   [GroupPlan("r.g0", "t", tids)])  # fmt: skip
        # Samples 0 and 2 summarized: their summary calls ran under version 0, every other
        # token (their last segments, the plain samples) under version 1.
        committed = [
            summarized(tid, "r", "r.g0", "t", k, reward=float(k % 2 == 0), version=0)
            if k % 2 == 0
            else make_trajectory(tid, "r", "r.g0", "t", k, reward=0.0, version=1)
            for k, tid in enumerate(tids)
        ]
        for t in committed:
            await store.commit_trajectory(t)
        tokens = dict(store.call_sync(lambda c: c.execute(
            "SELECT trajectory_id, tokens FROM samples").fetchall()))  # fmt: skip
        assert tokens == {t.trajectory_id: t.total_tokens() for t in committed}
        # Version 2 with max_staleness 1: the group's oldest token is version 0, in a summary.
        result = await store.lease(**lease_kwargs(policy_version=2, max_staleness=1))
        assert result.groups == [] and result.dropped_stale == 1
    finally:
        store.close()
    store = Store(tmp_path / "again")
    store.open()
    try:
        await store.create_rollout("r", "{}", 0, AdvantageConfig(min_group_size=2),
                                   [GroupPlan("r.g0", "t", tids)])  # fmt: skip
        for t in committed:
            await store.commit_trajectory(t)
        result = await store.lease(**lease_kwargs(policy_version=1, max_staleness=1))
        (group,) = result.groups
        back = from_arrow(payloads_to_arrow(group.rows))
        # RLOO over the group's trajectories (rewards 1, 0, 1, 0), one advantage each.
        assert [t.advantage for t in back] == pytest.approx([2 / 3, -2 / 3, 2 / 3, -2 / 3])
        assert [t.model_copy(update={"advantage": None}) for t in back] == committed
    finally:
        store.close()
    # `rollouts export`: the nested form, one row per trajectory, segments in order.
    out = tmp_path / "out.parquet"
    res = CliRunner().invoke(cli, ["export", "--data-dir", str(tmp_path / "again"), "--out",
                                   str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    table = pq.read_table(out)
    assert table.schema == ARROW_SCHEMA and table.num_rows == 4
    assert [t.model_copy(update={"advantage": None}) for t in from_arrow(table)] == committed
    kinds = table.column("segments").combine_chunks().flatten().field("kind").to_pylist()
    assert kinds == ["main", "summary", "questions", "answers", "main"] * 2


def test_step_wise_form_one_step_per_segment() -> None:
    ts = [
        summarized("r.g0.s0", "r", "r.g0", "t", 0, reward=1.0),
        make_trajectory("r.g0.s1", "r", "r.g0", "t", 1, reward=0.0),
        summarized("r.g0.s2", "r", "r.g0", "t", 2, status=Status.sandbox_error, reward=None),
    ]
    ts = [t.model_copy(update={"advantage": a}) for t, a in zip(ts, [0.5, -0.5, 0.0], strict=True)]
    out = step_wise_output(ts)
    assert len(out["response_ids"]) == 5 + 1 + 5
    assert out["is_last_step"] == [False] * 4 + [True, True] + [False] * 4 + [True]
    assert [t.repetition_id for t in out["trajectory_ids"]] == [0] * 5 + [1] + [2] * 5
    # Reward on the last step only; the service's advantage broadcast to every step.
    assert out["rewards"] == [0.0] * 4 + [1.0, 0.0] + [0.0] * 4 + [0.5]
    assert out["advantages"] == [0.5] * 5 + [-0.5] + [0.0] * 5
    for step, seg in zip(out["response_ids"][:5], ts[0].segments, strict=True):
        assert step == seg.response_token_ids
    assert out["prompt_token_ids"][1] == ts[0].segments[1].prompt_token_ids
    assert out["loss_masks"][1] == ts[0].segments[1].loss_mask
    assert out["rollout_logprobs"][3] == ts[0].segments[3].rollout_logprobs
    # The masked sample trains nothing on any step and gets its group's neutral reward.
    assert all(sum(m) == 0 for m in out["loss_masks"][6:]) and out["rewards"][-1] == 0.5
    assert out["exclude_from_baseline"] == [False] * 6 + [True] * 5
    # Not step-wise: one row per trajectory, its last segment (what train_segments=last keeps).
    flat = generator_output(ts)
    assert flat["response_ids"][0] == ts[0].segments[-1].response_token_ids
    assert len(flat["response_ids"]) == 3 and "is_last_step" not in flat


# --------------------------------------------------------------------------- through the API


class SummarizingRunner(Runner):
    """Even samples summarized once (reward 1), odd ones plain (reward 0)."""

    def report(self, spec: SampleSpec) -> Trajectory:
        ids = (spec.trajectory_id, spec.rollout_id, spec.group_id, spec.task_id)
        if spec.sample_index % 2 == 0:
            return summarized(*ids, spec.sample_index, reward=1.0)
        return trajectory(spec).model_copy(update={"reward": 0.0})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path_factory.mktemp("segments"))
    with Server(settings, SummarizingRunner()) as s:
        yield s


def _submit(c: httpx.Client, **kw: object) -> str:
    body = {"tasks": {"path": TASKS, "limit": 1}, "n_samples": 4,
            "advantage": {"min_group_size": 2}, **kw}  # fmt: skip
    r = c.post("/v1/rollouts", json=body)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def _lease(c: httpx.Client, rid: str, arrow: bool = False) -> list[Trajectory]:
    headers = {"Accept": "application/vnd.apache.arrow.stream"} if arrow else {}
    r = c.post("/v1/batches/lease", json={"wait_s": 20, "rollout_id": rid}, headers=headers)
    assert r.status_code == 200, r.text
    if arrow:
        ts = from_arrow(pa.ipc.open_stream(r.content).read_all())
        batch = r.headers["X-Batch-Id"]
    else:
        body = r.json()
        ts = [Trajectory.model_validate(t) for g in body["groups"] for t in g["trajectories"]]
        batch = body["batch_id"]
    assert c.post(f"/v1/batches/{batch}/ack").status_code == 200
    return ts


def test_lease_json_arrow_and_events_carry_segments(server: Server) -> None:
    server.runner.gate.clear()
    with server.client() as c:
        rid = _submit(c)
        events: list[dict] = []
        with c.stream("GET", f"/v1/rollouts/{rid}/events") as r:
            server.runner.gate.set()
            kind = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: ") and kind == "trajectory":
                    events.append(json.loads(line.removeprefix("data: ")))
        leased = _lease(c, rid)
        rid2 = _submit(c)
        arrowed = _lease(c, rid2, arrow=True)
    for ts in (leased, arrowed):
        assert [len(t.segments) for t in sorted(ts, key=lambda t: t.sample_index)] == [5, 0, 5, 0]
        for t in ts:
            if t.sample_index % 2 == 0:
                assert t.segments == summarized(t.trajectory_id, t.rollout_id, t.group_id,
                                                t.task_id, t.sample_index).segments  # fmt: skip
    by_index = {e["sample_index"]: e for e in events}
    assert [s["kind"] for s in by_index[0]["segments"]] == [k.value for k in SegmentKind] + ["main"]
    assert [s["kind"] for s in by_index[1]["segments"]] == ["main"]
    summarized0 = next(t for t in leased if t.sample_index == 0)
    assert by_index[0]["generated_tokens"] == summarized0.generated_tokens()


def test_train_segments_last_keeps_the_graded_conversation(server: Server) -> None:
    with server.client() as c:
        rid = _submit(c, train_segments="last")
        ts = _lease(c, rid)
    for t in ts:
        assert t.segments == []
        if t.sample_index % 2 == 0:
            full = summarized("x", "r", "g", "t", t.sample_index)
            assert t.prompt_token_ids == full.segments[-1].prompt_token_ids
            assert t.response_token_ids == full.segments[-1].response_token_ids
            # Its versions span the kept tokens: the summary calls' version 0 is gone.
            assert (t.policy_version_start, t.policy_version_end) == (1, 1)
    full = summarized("x", "r", "g", "t", 0)
    # What is kept, and counted (staleness, tokens), is the last segment alone.
    (tokens,) = server.db(f"SELECT tokens FROM samples WHERE rollout_id='{rid}' AND sample_index=0")
    assert tokens == (len(full.prompt_token_ids) + len(full.response_token_ids),)


def test_train_segments_is_checked_at_the_boundary(server: Server, tmp_path: Path) -> None:
    with server.client() as c:
        for bad in ("first", None, 1):
            r = c.post("/v1/rollouts", json={"tasks": {"path": TASKS}, "train_segments": bad})
            assert r.status_code == 422, r.text
            assert ["body", "train_segments"] in [d["loc"] for d in r.json()["detail"]]
    # `rollouts collect`: exit 2 and one line naming the flag, before anything runs.
    args = ["collect", "--tasks", TASKS, "--out", str(tmp_path / "out"),
            "--policy-url", "http://127.0.0.1:1", "--train-segments", "first"]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and res.output.strip().endswith("(--train-segments)"), res.output
    assert len(res.output.strip().splitlines()) == 1


# ------------------------------------------------ through the collect path (the stand-in)


STAND_IN_TASK = "camel-to-snake"


class StandInRunner(Runner):
    """The real episode runner, for tests/e2e/test_skyrl.py's step-wise judge: terminus-2 with
    summarization on (a profile of our own texts) over the stand-in policy in process, whose
    long replies fill a 4,000-token context in a few turns, and sandboxes that run nothing
    (the stand-in types the oracle solution: reward 1). Only `camel-to-snake`."""

    def __init__(self, profile_dir: Path) -> None:
        super().__init__()
        app = build_app(
            StubSettings(p_malformed=0.0, verbose_words=60, max_model_len=4000),
            tasks=load_tasks(Path(TASKS), ids=[STAND_IN_TASK]),
        )
        data = synthetic_terminus_profile("json")
        data["behaviour"].update(summarize_below_free_tokens=2400, unwind_to_free_tokens=1000)
        harness = build_harness("terminus-2", write_profile(profile_dir, data))
        self.policy = PolicyClient(["http://stub"], transport=httpx.ASGITransport(app=app))
        self.episodes = EpisodeRunner(
            self.policy, NoopBackend(), harnesses={"terminus-2": harness},
            default_harness="terminus-2",
        )  # fmt: skip

    async def run_group(self, task: Any, samples: list[SampleSpec], *callbacks: Any) -> None:
        await self.episodes.run_group(task, samples, *callbacks)
