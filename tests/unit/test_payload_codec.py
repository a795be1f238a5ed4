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
        response_policy_versions=[2**40, -1, 2**40, 2**40 + 1],  # a turn across an update
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


def test_records_stored_before_per_token_versions_still_read() -> None:
    """Codec cols1 (no versions array): every generated token reads with the record's
    policy_version_start, -1 elsewhere, in every view, as the trajectory model derives it."""
    import struct

    t = _trajectory(3).model_copy(update={"policy_version_start": 6, "policy_version_end": 6})
    header = t.model_dump_json(exclude={"advantage", "prompt_token_ids", "response_token_ids",
                                        "loss_mask", "rollout_logprobs",
                                        "response_policy_versions"}).encode()  # fmt: skip
    n_p, n_r = len(t.prompt_token_ids), len(t.response_token_ids)
    old = b"".join([
        struct.pack("<III", len(header), n_p, n_r), header,
        struct.pack(f"<{n_p}i", *t.prompt_token_ids),
        struct.pack(f"<{n_r}i", *t.response_token_ids),
        bytes(t.loss_mask), struct.pack(f"<{n_r}d", *t.rollout_logprobs),
    ])  # fmt: skip
    back = Trajectory.model_validate_json(with_advantage("cols1", old, None))
    assert back.response_policy_versions == [6, -1, 6, 6]
    assert payload_dict("cols1", old, None)["response_policy_versions"] == [6, -1, 6, 6]
    table = payloads_to_arrow([("cols1", old, None)])
    assert table.column("response_policy_versions").to_pylist() == [[6, -1, 6, 6]]


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
