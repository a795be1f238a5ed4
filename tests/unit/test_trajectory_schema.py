import pyarrow as pa
import pytest

from service.trajectory import ARROW_SCHEMA, Status, Trajectory, from_arrow, to_arrow


def make(**kw) -> Trajectory:
    base = dict(
        trajectory_id="r:t:0", rollout_id="r", group_id="r:t", task_id="t", sample_index=0,
        prompt_token_ids=[1, 2], response_token_ids=[3, 4, 5], loss_mask=[1, 0, 1],
        rollout_logprobs=[-0.5, 0.0, -1.25], reward=1.0, status=Status.ok,
    )  # fmt: skip
    base.update(kw)
    return Trajectory(**base)


def test_arrow_round_trip_is_exact():
    t = make(advantage=0.5, messages=[{"role": "user", "content": "hi"}])
    table = to_arrow([t])
    assert table.schema == ARROW_SCHEMA
    assert from_arrow(table) == [t]


def test_masked_status_derives_exclusion_and_drops_reward():
    t = make(status=Status.policy_error, reward=0.0)
    assert t.exclude_from_baseline is True and t.reward is None
    assert make(status=Status.agent_timeout, reward=0.0).exclude_from_baseline is False


@pytest.mark.parametrize(
    "kw",
    [
        {"loss_mask": [1, 0]},
        {"rollout_logprobs": [-0.5, -0.1, -1.0]},  # logprob where mask is 0
        {"loss_mask": [1, 2, 1]},
        {"response_policy_versions": [0, -1]},  # one per response token
        {"response_policy_versions": [0, 0, 1]},  # a version on an observation token
        {"response_policy_versions": [-1, -1, 1]},  # a generated token without one
        {"response_policy_versions": [0, -2, 1]},
    ],
)
def test_invariants_rejected(kw):
    with pytest.raises(ValueError):
        make(**kw)


def test_policy_versions_per_token_and_for_old_records():
    t = make(response_policy_versions=[4, -1, 5], policy_version_start=4, policy_version_end=5)
    assert from_arrow(to_arrow([t]))[0].response_policy_versions == [4, -1, 5]
    # A record without the field (written before it existed): its start version on every
    # generated token.
    old = make(policy_version_start=3).model_dump(exclude={"response_policy_versions"})
    assert Trajectory.model_validate(old).response_policy_versions == [3, -1, 3]


def test_float32_logprobs_survive_arrow():
    lp = float(pa.array([-7.776259422302246], pa.float32())[0].as_py())
    t = make(rollout_logprobs=[lp, 0.0, lp])
    assert from_arrow(to_arrow([t]))[0].rollout_logprobs == [lp, 0.0, lp]
