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
    ],
)
def test_invariants_rejected(kw):
    with pytest.raises(ValueError):
        make(**kw)


def test_float32_logprobs_survive_arrow():
    lp = float(pa.array([-7.776259422302246], pa.float32())[0].as_py())
    t = make(rollout_logprobs=[lp, 0.0, lp])
    assert from_arrow(to_arrow([t]))[0].rollout_logprobs == [lp, 0.0, lp]
