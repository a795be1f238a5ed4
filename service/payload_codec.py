"""How the store keeps a trajectory: a JSON header plus the token arrays as raw binary.

An 8k-token trajectory is ~210 KB of JSON, mostly numbers; encoding, compressing and re-parsing
that text cost milliseconds per trajectory and capped the data path at a few hundred per second
(docs/performance.md). So the token arrays are stored as little-endian machine arrays (int32 ids,
int8 mask, float64 logprobs: lossless for any Python float, int64 policy versions) after a small
JSON header holding every other field. Leasing then
- as Arrow: concatenates the raw arrays straight into Arrow list columns (no per-token Python);
- as JSON: splices the arrays' JSON after the header (orjson over flat lists).

Layout of codec "cols2": struct "<III" (header length, prompt length, response length), the
header (compact JSON object, without the token fields and the advantage), then prompt ids
(int32), response ids (int32), loss mask (int8), rollout logprobs (float64), response policy
versions (int64). Codec "cols1" (stores written before per-token versions) is the same without
the versions, which decoding derives as the trajectory model does for old records.

Codec "cols3" (a summarized episode: more than one segment) is "cols2" followed by the token
arrays of every segment but the last, in order, each laid out as the trajectory's; the header
holds `segment_layout`, one [kind, parent, prompt length, response length] per segment. The
last segment is the trajectory's own arrays (service/trajectory.py), so it is not stored twice.
A trajectory of one segment is written as "cols2", byte for byte what it was before segments.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from service.trajectory import ARROW_SCHEMA, Trajectory

CODEC = "cols2"
SEGMENTS_CODEC = "cols3"  # cols2 and the earlier segments' arrays
_OLD_CODEC = "cols1"  # without the versions
_LAYOUT_KEY = "segment_layout"
TOKEN_FIELDS = ("prompt_token_ids", "response_token_ids", "loss_mask", "rollout_logprobs",
                "response_policy_versions")  # fmt: skip
_PREFIX = struct.Struct("<III")
# array typecodes: 'i', 'b' and 'q' are 4-, 1- and 8-byte signed ints on every platform CPython
# runs on.
_TYPECODES = {"prompt_token_ids": "i", "response_token_ids": "i", "loss_mask": "b",
              "rollout_logprobs": "d", "response_policy_versions": "q"}  # fmt: skip
_ARROW_VALUE_TYPES = {"prompt_token_ids": pa.int32(), "response_token_ids": pa.int32(),
                      "loss_mask": pa.int8(), "rollout_logprobs": pa.float64(),
                      "response_policy_versions": pa.int64()}  # fmt: skip
_STRUCT_FORMATS = {"prompt_token_ids": "<%di", "response_token_ids": "<%di",
                   "rollout_logprobs": "<%dd", "response_policy_versions": "<%dq"}  # fmt: skip
_LITTLE = sys.byteorder == "little"
_EXCLUDE = {"advantage", "segments", *TOKEN_FIELDS}


def _pack(field: str, values: list[Any]) -> bytes:
    # struct.pack and bytes() beat array() from a list ~2x: this runs once per token at commit.
    if field == "loss_mask":
        # Entries are 0/1 (validated by the model); bytearray(list) is ~3x faster than bytes(list).
        return bytes(bytearray(values))
    return struct.pack(_STRUCT_FORMATS[field] % len(values), *values)


def encode_payload(trajectory: Trajectory) -> bytes:
    # The advantage is only known when the group completes; it is spliced in at lease time
    # (see with_advantage) so the stored bytes are written once and never re-encoded.
    header = trajectory.model_dump_json(exclude=_EXCLUDE).encode()
    arrays = [_pack(f, getattr(trajectory, f)) for f in TOKEN_FIELDS]
    segments = trajectory.segments
    if segments:
        layout = [
            [s.kind.value, s.parent, len(s.prompt_token_ids), len(s.response_token_ids)]
            for s in segments
        ]
        header = header[:-1] + b',"%s":' % _LAYOUT_KEY.encode() + orjson.dumps(layout) + b"}"
        arrays += [_pack(f, getattr(s, f)) for s in segments[:-1] for f in TOKEN_FIELDS]
    n_prompt, n_response = len(trajectory.prompt_token_ids), len(trajectory.response_token_ids)
    return b"".join([_PREFIX.pack(len(header), n_prompt, n_response), header, *arrays])


def payload_codec(trajectory: Trajectory) -> str:
    """The codec `encode_payload` wrote this trajectory in."""
    return SEGMENTS_CODEC if trajectory.segments else CODEC


@dataclass
class DecodedSegment:
    kind: str
    parent: int | None
    arrays: dict[str, memoryview]


@dataclass
class DecodedPayload:
    header: bytes  # JSON object of every field but the token arrays and the advantage
    arrays: dict[str, memoryview]  # field -> little-endian values (views into the payload)
    # Every segment of a summarized episode (the last one's arrays are `arrays`); None when the
    # record is one segment (or was written before segments with them in its header).
    segments: list[DecodedSegment] | None = None


def _take(
    view: memoryview, pos: int, fields: tuple[str, ...], n_prompt: int, n_response: int
) -> tuple[dict[str, memoryview], int]:
    arrays: dict[str, memoryview] = {}
    for field in fields:
        n = n_prompt if field == "prompt_token_ids" else n_response
        size = n * array(_TYPECODES[field]).itemsize
        arrays[field] = view[pos : pos + size]
        pos += size
    return arrays, pos


def decode_payload(codec: str, data: bytes) -> DecodedPayload:
    if codec not in (CODEC, SEGMENTS_CODEC, _OLD_CODEC):
        raise ValueError(f"unknown payload codec {codec!r}")
    header_len, n_prompt, n_response = _PREFIX.unpack_from(data)
    view = memoryview(data)
    pos = _PREFIX.size + header_len
    header = bytes(view[_PREFIX.size : pos])
    fields = TOKEN_FIELDS if codec != _OLD_CODEC else TOKEN_FIELDS[:-1]
    arrays, pos = _take(view, pos, fields, n_prompt, n_response)
    segments = None
    if codec == SEGMENTS_CODEC:
        meta = orjson.loads(header)
        layout = meta.pop(_LAYOUT_KEY)
        header = orjson.dumps(meta)
        segments = []
        for kind, parent, seg_prompt, seg_response in layout[:-1]:
            seg_arrays, pos = _take(view, pos, TOKEN_FIELDS, seg_prompt, seg_response)
            segments.append(DecodedSegment(kind, parent, seg_arrays))
        kind, parent, _, _ = layout[-1]
        segments.append(DecodedSegment(kind, parent, arrays))
    if pos != len(data):
        raise ValueError(f"corrupt {codec} payload: {len(data)} bytes, layout says {pos}")
    if codec == _OLD_CODEC:
        arrays["response_policy_versions"] = _old_versions(header, arrays["loss_mask"])
    return DecodedPayload(header, arrays, segments)


def _segment_dicts(p: DecodedPayload) -> list[dict[str, Any]]:
    """The record's segments as Segment-shaped dicts (only summarized episodes have any)."""
    return [
        {
            "kind": s.kind,
            **{f: _values(f, s.arrays[f]) for f in TOKEN_FIELDS},
            "parent": s.parent,
        }
        for s in p.segments or ()
    ]


def _old_versions(header: bytes, mask: memoryview) -> memoryview:
    """A cols1 record's versions, as the trajectory model derives them for old records: its
    first turn's version on every generated token, -1 elsewhere."""
    start = int(orjson.loads(header).get("policy_version_start") or 0)
    versions = array("q", [start if m else -1 for m in bytes(mask)])
    if not _LITTLE:
        versions.byteswap()
    return memoryview(versions.tobytes())


def _values(field: str, raw: memoryview) -> list[Any]:
    a = array(_TYPECODES[field])
    a.frombytes(raw)
    if not _LITTLE:
        a.byteswap()
    return a.tolist()


def with_advantage(codec: str, data: bytes, advantage: float | None) -> bytes:
    """The stored record as JSON bytes of the Trajectory model, advantage included."""
    p = decode_payload(codec, data)
    parts = [p.header[:-1]]  # compact JSON object: drop the closing brace, append fields
    for field in TOKEN_FIELDS:
        parts.append(b',"%s":' % field.encode())
        # orjson writes the same shortest round-trip floats as json.dumps, ~8x faster.
        parts.append(orjson.dumps(_values(field, p.arrays[field])))
    if p.segments is not None:
        parts.append(b',"segments":' + orjson.dumps(_segment_dicts(p)))
    parts.append(b',"advantage":' + json.dumps(advantage).encode() + b"}")
    return b"".join(parts)


def payload_dict(codec: str, data: bytes, advantage: float | None) -> dict[str, Any]:
    p = decode_payload(codec, data)
    row = orjson.loads(p.header)
    for field in TOKEN_FIELDS:
        row[field] = _values(field, p.arrays[field])
    if p.segments is not None:
        row["segments"] = _segment_dicts(p)
    row.setdefault("segments", [])
    row["advantage"] = advantage
    return row


_META_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name not in TOKEN_FIELDS])


def payloads_to_arrow(rows: list[tuple[str, bytes, float | None]]) -> pa.Table:
    """(codec, data, advantage) rows as an ARROW_SCHEMA table. The token columns are built from
    the stored binary arrays in one copy each; only the small header goes through Python."""
    decoded = [decode_payload(codec, data) for codec, data, _ in rows]
    metas = []
    for p, (_, _, advantage) in zip(decoded, rows, strict=True):
        meta = orjson.loads(p.header)
        meta["advantage"] = advantage
        if p.segments is not None:  # rare: Python per token only for summarized episodes
            meta["segments"] = _segment_dicts(p)
        meta.setdefault("segments", [])
        metas.append(meta)
    meta_table = pa.Table.from_pylist(metas, schema=_META_SCHEMA)
    columns: dict[str, pa.Array] = {}
    itemsizes = {f: array(_TYPECODES[f]).itemsize for f in TOKEN_FIELDS}
    for field in TOKEN_FIELDS:
        offsets = array("i", [0])
        for p in decoded:
            offsets.append(offsets[-1] + len(p.arrays[field]) // itemsizes[field])
        buf = pa.py_buffer(b"".join(p.arrays[field] for p in decoded))
        values = pa.Array.from_buffers(_ARROW_VALUE_TYPES[field], offsets[-1], [None, buf])
        target = ARROW_SCHEMA.field(field).type
        if values.type != target.value_type:
            # float64 -> float32 (the exchange schema's width for logprobs)
            values = values.cast(target.value_type, safe=False)
        columns[field] = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)
    arrays = [
        columns[f.name] if f.name in columns else meta_table.column(f.name) for f in ARROW_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)
