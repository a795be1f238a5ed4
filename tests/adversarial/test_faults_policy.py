"""Policy server faults through a fault-injecting proxy in front of the stand-in (real HTTP on
loopback, real sandboxes): the server dies, hangs past the client timeout, answers 500,
malformed JSON or a truncated body. Samples are retried and then masked as policy_error, never
scored 0; once the proxy passes traffic again the same runner produces scored samples."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from fault_proxy import FaultProxy
from harness import CaseLog, containers_labelled, free_port

from sandboxes.docker_backend import DockerBackend
from sandboxes.task import Task
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Status, Trajectory

pytestmark = [pytest.mark.docker]

FAULTS = ("down", "hang", "http_500", "malformed", "truncated")
CLIENT_TIMEOUT_S = 3.0


async def _group(runner: EpisodeRunner, task: Task, rollout_id: str, n: int) -> list[Trajectory]:
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(task, rollout_id, n, SamplingParams(seed=1), AgentLimits(max_turns=6))
    await runner.run_group(task, specs, on_trajectory)
    return got


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("when", ["first_turn", "mid_episode"])
async def test_policy_fault_masks_then_recovers(
    fault: str,
    when: str,
    backend: DockerBackend,
    small_task: Callable[..., Task],
    stand_in: Callable,
    case: CaseLog,
) -> None:
    task = small_task("camel-to-snake", agent=60, verifier=60)
    rec = case.add(f"policy_{fault}_{when}", "fault proxy before the stand-in",
                   f"policy answers {fault} from the {when.replace('_', ' ')} on")  # fmt: skip
    run_id = f"pfault-{fault}-{uuid.uuid4().hex[:8]}"
    with stand_in(p_correct=1.0) as upstream:
        proxy = FaultProxy(upstream, free_port()).start()
        policy = PolicyClient(
            [proxy.url + "/v1"], timeout_s=CLIENT_TIMEOUT_S, max_retries=2, backoff_s=0.05
        )
        try:
            await policy.start()  # model and context length, while the server is healthy
            runner = EpisodeRunner(policy, backend)
            if when == "first_turn":
                proxy.set_mode(fault)
            else:
                # Let the first turn (tokenize + one completion) through, then fail.
                original = policy.complete
                calls = 0

                async def complete_then_fail(*a, **kw):  # type: ignore[no-untyped-def]
                    nonlocal calls
                    calls += 1
                    if calls == 2:
                        proxy.set_mode(fault)
                    return await original(*a, **kw)

                policy.complete = complete_then_fail  # type: ignore[method-assign]
            t0 = time.monotonic()
            faulted = await _group(runner, task, run_id, 2)
            fault_s = time.monotonic() - t0
            proxy.set_mode("pass")
            if when == "mid_episode":
                policy.complete = original  # type: ignore[method-assign]
            recovered = await _group(runner, task, run_id + "-after", 1)
        finally:
            await policy.aclose()
            proxy.stop()
    await backend.aclose()
    rec.seconds = round(fault_s, 1)
    rec.observed = {
        "statuses": sorted(t.status.value for t in faulted),
        "rewards": [t.reward for t in faulted],
        "after_recovery": [(t.status.value, t.reward) for t in recovered],
    }
    assert [t.status for t in faulted] == [Status.policy_error] * 2, rec.observed
    assert all(t.reward is None and t.exclude_from_baseline for t in faulted), rec.observed
    # Where the fault struck: before any turn, or after the shared first turn, whose tokens the
    # sample keeps (mask 1 on them, and nothing after them that the policy never saw).
    if when == "first_turn":
        assert all(t.num_turns == 0 and t.response_token_ids == [] for t in faulted)
    else:
        assert all(t.num_turns >= 1 and 1 in t.loss_mask for t in faulted), rec.observed
        assert all(t.loss_mask[-1] == 1 for t in faulted)
    assert [(t.status, t.reward) for t in recovered] == [(Status.ok, 1.0)], rec.observed
    assert containers_labelled("rollouts.rollout_id", run_id) == []
    assert fault_s < 120, f"the faulted group took {fault_s:.0f} s: something hung"
