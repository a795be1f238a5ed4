"""One fast guard per bug a mutation review planted and the no-Docker unit suite let through.

Each test names the bug it guards; each fails with that bug planted and passes without it."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from pathlib import Path

import httpx
import pytest

from sandboxes import reward as r
from sandboxes.backend import Verdict
from sandboxes.reward import Evidence, grade
from sandboxes.tasks import NotInRoots
from service.advantages import AdvantageConfig
from service.agent.harnesses import ProfileError, build_harness
from service.agent.harnesses.base import PROFILES_DIR, dump_profile
from service.components import settings_task_loader
from service.episode import EpisodeRunner, status_of
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.settings import ServiceSettings, Settings
from service.store import LeaseExpired, Store
from service.trajectory import Status, Trajectory
from tests.fakes import FakeBackend
from tests.unit.test_episode_runner import TASK, FakeVLLM, check_tokens, solves
from tests.unit.test_hardening_tasks import write_task
from tests.unit.test_store import fill, lease_kwargs, plans

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------- 1. time runs out while the model generates


async def test_timeout_while_generating_rewinds_the_unseen_observation() -> None:
    """Bug: the token ledger is not rewound when the agent's time runs out *while the model is
    generating*: the observation appended for that turn was never seen by the engine, so the
    ledger fails its invariant and the group crashes with InvariantError."""
    vllm = FakeVLLM(solves)
    hung: list[httpx.Request] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions" and vllm.completions():
            hung.append(request)  # every turn after the shared first one outlives the agent
            await asyncio.sleep(30)
        return await vllm.handle(request)

    policy = PolicyClient(["http://a:8000"], backoff_s=0.001, transport=httpx.MockTransport(handle))
    backend = FakeBackend()
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(TASK, "r1", 2, SamplingParams(seed=1), AgentLimits(timeout_s=1.0))
    try:
        await EpisodeRunner(policy, backend).run_group(TASK, specs, on_trajectory)
    finally:
        await policy.aclose()
    assert len(got) == 2 and backend.live == [] and len(hung) == 2  # both timed out generating
    for t in got:
        assert (t.status, t.reward, t.num_turns) == (Status.agent_timeout, 1.0, 1)
        check_tokens(t, vllm)  # ends on the first generation: the observation was dropped
        assert t.loss_mask == [1] * len(t.response_token_ids)


# ------------------------------------------------- 2. errored tests and a full reward


def test_an_errored_test_forbids_a_full_reward() -> None:
    """Bug: errored tests (pytest/junit errors: setup, teardown or collection, as opposed to
    failures) no longer count against a full reward."""
    guard = [
        {"event": "start"},
        {"event": "isolated", "mode": "import", "uid": 64000, "landlock": 7},
        {"event": "finish", "exitstatus": 1, "tampered": [], "passed": 3, "failed": 0, "error": 1},
    ]
    report = "".join(json.dumps(rec) + "\n" for rec in guard).encode()
    ev = Evidence(tests_exit=0, files={"reward.txt": b"1\n"}, verifier_dir_mode=0o755,
                  guard_report=report, pytest_task=True)  # fmt: skip
    g = grade(ev)
    assert (g.reward, g.flags) == (0.0, [r.REWARD_CONTRADICTS_TESTS])
    assert "1 tests failed or errored" in g.note


# ------------------------------------------------- 3. the agent_timeout verdict


def test_every_verdict_maps_to_its_own_status() -> None:
    """Bug: `Verdict.agent_timeout` mapped to status `ok` (a timed-out solve would read as a
    clean finish, and mask_agent_timeout could never apply to it)."""
    assert status_of(Verdict.agent_timeout) is Status.agent_timeout
    assert {v: status_of(v) for v in Verdict} == {
        Verdict.graded: Status.ok,
        Verdict.agent_timeout: Status.agent_timeout,
        Verdict.tests_timeout: Status.verifier_timeout,
        Verdict.tests_broken: Status.verifier_error,
        Verdict.infrastructure: Status.sandbox_error,
    }


# ------------------------------------------------- 4. a late ack with no lease in between


async def test_a_late_ack_is_refused_even_with_no_lease_in_between(tmp_path: Path) -> None:
    """Bug: an ack after the lease's TTL expired is accepted when no other lease came in between
    (nothing had marked the lease expired yet): its groups would be acked, never redelivered."""
    store = Store(tmp_path)
    store.open()
    try:
        plan = plans("r1", 1)
        await store.create_rollout("r1", "{}", 0, AdvantageConfig(), plan)
        await fill(store, "r1", plan)
        late = await store.lease(**lease_kwargs(lease_s=0.05))
        assert late.batch_id is not None
        await asyncio.sleep(0.1)
        with pytest.raises(LeaseExpired):
            await store.ack(late.batch_id)
        again = await store.lease(**lease_kwargs())  # the group is offered again
        assert [g.group_id for g in again.groups] == [plan[0].group_id]
    finally:
        store.close()


# ------------------------------------------------- 5. no tasks roots: nothing is allowed


def test_no_tasks_roots_and_no_datasets_refuse_every_path(tmp_path: Path) -> None:
    """Bug: with no `--tasks-root` and no `--dataset`, every path a request names is allowed
    (fail-open) instead of none."""
    task = write_task(tmp_path / "suite" / "real-task")
    settings = Settings(service=ServiceSettings(data_dir=tmp_path / "data"))
    assert settings.service.all_tasks_roots() == []
    load = settings_task_loader(settings)
    for path in (str(task), str(task.parent), "/", str(REPO / "examples" / "tasks")):
        with pytest.raises(NotInRoots):
            list(load(path, None, None))


# ------------------------------------------------- 6. malformed harness profiles


def _shipped_default() -> dict:
    return tomllib.loads((PROFILES_DIR / "default.toml").read_text())


@pytest.mark.parametrize("value", [3, 1.5, True])
def test_a_profile_text_that_is_not_a_string_is_refused(tmp_path: Path, value: object) -> None:
    """Bug: a harness profile (`--agent-profile`) with a non-string text is accepted."""
    data = _shipped_default()
    data["texts"]["error"] = value
    path = tmp_path / "p.toml"
    path.write_text(dump_profile(data))
    with pytest.raises(ProfileError, match="texts.error must be a string"):
        build_harness(None, path)


@pytest.mark.parametrize("value", ["5", '"fast"', "[]", '["ab", "cd"]'])
def test_a_profile_whose_behaviour_is_not_a_table_is_refused(tmp_path: Path, value: str) -> None:
    """Bug: a harness profile (`--agent-profile`) whose `behaviour` is not a table is accepted
    (or fails with a bare TypeError/ValueError instead of a clear ProfileError)."""
    data = _shipped_default()
    del data["behaviour"]
    path = tmp_path / "p.toml"
    path.write_text(f"behaviour = {value}\n" + dump_profile(data))
    with pytest.raises(ProfileError, match=r"\[behaviour\] must be a table"):
        build_harness(None, path)


# ------------------------------------------------- 7. the documented lease TTL


def test_the_default_lease_ttl_is_the_documented_one() -> None:
    """Bug: the default lease TTL (ServiceSettings.lease_ttl_s) changed while README.md and the
    docs still state 600 s: the number is read from the docs, so either side changing fails."""
    stated: dict[str, float] = {}
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for m in re.finditer(r"`--lease-ttl`[ |]*(\d[\d,]*(?:\.\d+)?) s\b", doc.read_text()):
            stated[f"{doc.name}:{m.start()}"] = float(m.group(1).replace(",", ""))
    assert any(k.startswith("README.md:") for k in stated), "README no longer states it"
    default = ServiceSettings.model_fields["lease_ttl_s"].default
    assert Settings().service.lease_ttl_s == default
    assert set(stated.values()) == {default}, stated
