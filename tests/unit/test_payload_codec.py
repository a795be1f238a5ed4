"""The store's payload codec: binary token arrays must round-trip exactly, in every view."""

from __future__ import annotations

import json

import pytest

from service.payload_codec import (
    CODEC,
    encode_payload,
    payload_dict,
    payloads_to_arrow,
    with_advantage,
)
from service.trajectory import Message, Status, Trajectory, to_arrow


def _trajectory(i: int, masked: bool = False) -> Trajectory:
    return Trajectory(
        trajectory_id=f"r:g:{i}",
        rollout_id="r",
        group_id="g",
        task_id="t",
        sample_index=i,
        prompt_token_ids=[0, 151_935, 2**31 - 1, 7 + i],
        response_token_ids=[5, 6, 7, 8 + i],
        loss_mask=[1, 0, 1, 1],
        # 0.1 is not float32-valued: the stored form must still give it back exactly.
        rollout_logprobs=[-0.1, 0.0, -1e-300, -12.5],
        reward=None if masked else 1.0,
        status=Status.sandbox_error if masked else Status.ok,
        messages=[Message(role="user", content='quote " and \\ and ünïcode')],
    )


@pytest.mark.parametrize("masked", [False, True])
def test_json_view_round_trips_exactly(masked: bool) -> None:
    t = _trajectory(1, masked)
    back = Trajectory.model_validate_json(with_advantage(CODEC, encode_payload(t), 0.25))
    assert back == t.model_copy(update={"advantage": 0.25})
    assert payload_dict(CODEC, encode_payload(t), None) == t.model_dump(mode="json")


def test_arrow_view_matches_the_record_schema_conversion() -> None:
    ts = [_trajectory(i, masked=i == 2) for i in range(3)]
    rows = [(CODEC, encode_payload(t), float(i)) for i, t in enumerate(ts)]
    expected = to_arrow([t.model_copy(update={"advantage": float(i)}) for i, t in enumerate(ts)])
    assert payloads_to_arrow(rows).equals(expected)


def test_corrupt_or_unknown_payloads_are_refused() -> None:
    data = encode_payload(_trajectory(4))
    with pytest.raises(ValueError, match="corrupt"):
        with_advantage(CODEC, data[:-3], None)
    with pytest.raises(ValueError, match="unknown payload codec"):
        payload_dict("msgpack", data, None)


def test_binary_form_is_smaller_than_the_json_record() -> None:
    t = _trajectory(5).model_copy(
        update={
            "response_token_ids": list(range(100_000, 107_000)),
            "loss_mask": [1] * 7000,
            "rollout_logprobs": [-0.12300000339746475] * 7000,  # float32-valued, as vLLM
        }
    )
    assert len(encode_payload(t)) < len(json.dumps(t.model_dump(mode="json"))) / 2
