"""The two operations the general schema fuzz (tests/e2e/test_api_fuzz.py) leaves out because
they wait by design, against a real `rollouts serve` (the stand-in, real Docker sandboxes):

- `POST /v1/batches/lease`: schemathesis generates bodies from /openapi.json (long polls cut to
  half a second, everything else as generated, JSON and Arrow): no 5xx, every status code and
  body as the schema documents;
- `GET /v1/rollouts/{id}/events`: generated ids (404 as documented) and finished rollouts (one
  `status` event, then the stream ends), then a live stream read strictly as server-sent
  events: `status` first, one `trajectory` per sample, one `group` per group with its
  advantages, a final `rollout`, every frame well formed, every payload of the documented shape;
  and the stream of a cancelled rollout ends with `rollout: cancelled`.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from service.wire import RolloutStatus
from tests.e2e.live import AUTH, SMALL_GROUPS, TASKS, Service, serve, stand_in, wait_until

pytestmark = pytest.mark.docker
EVENT_KINDS = {"status", "trajectory", "group", "rollout"}


def _body(n: int = 2, **kw: object) -> dict:
    return {
        "tasks": {"path": TASKS, "ids": ["camel-to-snake"]},
        "n_samples": n,
        "sampling": {"seed": 1},
        "agent": {"max_turns": 1},
        "advantage": SMALL_GROUPS,
        **kw,
    }


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, object, str]]:
    tmp = tmp_path_factory.mktemp("lease-events")
    with (
        stand_in(tmp, p_correct=1.0) as policy,
        serve(tmp, [policy.url], "--lease-ttl", "5") as svc,
    ):
        done = svc.submit(_body())
        svc.wait_finished(done)
        yield svc, policy, done


@pytest.fixture(scope="module")
def api_schema(live):  # type: ignore[no-untyped-def]
    svc, _, _ = live
    return schemathesis.from_uri(
        f"{svc.url}/openapi.json", headers=AUTH, base_url=svc.url, force_schema_version="30"
    )


lease_schema = schemathesis.from_pytest_fixture("api_schema").include(path="/v1/batches/lease")
events_schema = schemathesis.from_pytest_fixture("api_schema").include(
    path_regex=r"^/v1/rollouts/\{rollout_id\}/events$"
)
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


@lease_schema.parametrize()
@FUZZ
def test_lease_fuzz(case) -> None:  # type: ignore[no-untyped-def]
    body = case.body
    if isinstance(body, dict):  # a valid long poll, kept short (absent: the 30 s default)
        wait = body.get("wait_s", 30.0)
        if type(wait) in (int, float):
            body["wait_s"] = min(wait, 0.05)
    for accept in ("application/json", "application/vnd.apache.arrow.stream"):
        response = case.call_and_validate(headers={**AUTH, "Accept": accept}, timeout=30)
        assert response.status_code < 500


@events_schema.parametrize()
@FUZZ
def test_events_fuzz(case, live) -> None:  # type: ignore[no-untyped-def]
    _, _, done = live
    for rollout_id in (case.path_parameters["rollout_id"], done):
        case.path_parameters["rollout_id"] = rollout_id
        response = case.call_and_validate(headers=AUTH, timeout=30)
        if rollout_id == done:  # finished: its status, then the stream ends
            assert response.status_code == 200
            [(kind, data)] = parse_sse(response.text)
            assert kind == "status" and RolloutStatus.model_validate(data).status == "completed"


def parse_sse(text: str) -> list[tuple[str, dict]]:
    """Server-sent events, strictly: frames of `event:` + `data:` (JSON) or `:` comments."""
    assert text.endswith("\n\n"), text[-200:]
    events = []
    for frame in text[:-2].split("\n\n"):
        lines = frame.split("\n")
        if all(line.startswith(":") for line in lines):
            continue  # keep-alive
        assert len(lines) == 2, frame
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        kind = lines[0].removeprefix("event: ")
        assert kind in EVENT_KINDS, frame
        events.append((kind, json.loads(lines[1].removeprefix("data: "))))
    return events


def _stream(svc: Service, rollout_id: str, opened: list[bool]) -> str:
    with httpx.stream(
        "GET", f"{svc.url}/v1/rollouts/{rollout_id}/events", headers=AUTH, timeout=300
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        opened.append(True)
        return r.read().decode()


def test_live_event_stream_is_well_formed_and_complete(live) -> None:  # type: ignore[no-untyped-def]
    svc, policy, _ = live
    policy.pause()  # nothing can finish before the stream is open
    rid = svc.submit(_body(n=2, tasks={"path": TASKS, "ids": ["camel-to-snake", "gcd-of-list"]}))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        opened: list[bool] = []
        future = pool.submit(_stream, svc, rid, opened)
        wait_until("the stream to open", lambda: opened or future.done(), 30)
        policy.resume()
        events = parse_sse(future.result(timeout=300))

    kinds = [k for k, _ in events]
    assert kinds[0] == "status" and kinds[-1] == "rollout", kinds
    first = RolloutStatus.model_validate(events[0][1])
    assert (first.id, first.status, first.samples_total) == (rid, "running", 4)
    trajectories = [d for k, d in events if k == "trajectory"]
    assert sorted(d["trajectory_id"] for d in trajectories) == [
        f"{rid}.g{g}.s{s}" for g in range(2) for s in range(2)
    ]
    for d in trajectories:
        assert set(d) == {"trajectory_id", "group_id", "task_id", "sample_index", "status",
                          "reward", "generated_tokens", "total_s", "policy_version",
                          "segments"}  # fmt: skip
        assert d["status"] == "ok" and d["reward"] == 1.0
        assert d["generated_tokens"] > 0 and d["total_s"] > 0 and d["policy_version"] == 0
        # Never summarized: one main segment, whose trained tokens are the sample's.
        [segment] = d["segments"]
        assert (segment["kind"], segment["parent"], segment["versions"]) == ("main", None, [0, 0])
        assert segment["generated_tokens"] == d["generated_tokens"]
    groups = [d for k, d in events if k == "group"]
    assert sorted(d["group_id"] for d in groups) == [f"{rid}.g0", f"{rid}.g1"]
    for g in groups:
        assert g["state"] == "complete" and g["advantages"] == [0.0, 0.0]  # both solved
        # a group's event comes after its samples' events
        last_sample = max(i for i, (k, d) in enumerate(events)
                          if k == "trajectory" and d["group_id"] == g["group_id"])  # fmt: skip
        assert events.index(("group", g)) > last_sample
    assert events[-1][1] == {"id": rid, "status": "completed"}


def test_stream_of_a_cancelled_rollout_ends_cancelled(live) -> None:  # type: ignore[no-untyped-def]
    svc, policy, _ = live
    policy.pause()
    rid = svc.submit(_body())
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            opened: list[bool] = []
            future = pool.submit(_stream, svc, rid, opened)
            wait_until("the stream to open", lambda: opened or future.done(), 30)
            assert svc.call("DELETE", f"/v1/rollouts/{rid}").status_code == 200
            events = parse_sse(future.result(timeout=120))
    finally:
        policy.resume()
    assert events[0][0] == "status" and events[-1] == (
        "rollout",
        {"id": rid, "status": "cancelled"},
    )
    assert all(d["state"] in ("cancelled", "dropped") for k, d in events if k == "group")
    unknown = svc.call("GET", "/v1/rollouts/nope/events")
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
