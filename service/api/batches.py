"""/v1/batches: lease complete groups, acknowledge them.

Delivery is at-least-once until ack (docs/delivery.md); `regraded: true` leases the groups
regraded after a trainer had them, as batches of their own. The stored trajectory bytes are sent
as they are (decompressed, advantage spliced in), never re-validated or re-encoded per lease.
A long poll whose client goes away stops waiting at once, and a lease granted to it that it
can no longer receive is released, so its groups go to the next trainer without waiting for
the lease to expire.
"""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
from fastapi import APIRouter, Depends, Header, Path, Request, Response

from service.api.responses import errors
from service.state import ServiceState, service_state
from service.store import (
    LeasedGroup,
    LeaseResult,
    UnknownRollout,
    payloads_to_arrow,
    with_advantage,
)
from service.trajectory import ARROW_SCHEMA
from service.wire import REMAINING_HEADER, AckResponse, LeaseRequest, LeaseResponse

router = APIRouter(prefix="/v1/batches", tags=["batches"])
ARROW_STREAM = "application/vnd.apache.arrow.stream"
# zstd buffers: token ids and logprobs shrink ~1.6x more for a few ms per batch (readers
# decompress transparently); it pays off as soon as the trainer is not on the same host.
ARROW_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


def _json_body(
    batch_id: str, expires_at: float, groups: list[LeasedGroup], regraded: bool = False
) -> bytes:
    parts = [
        b'{"batch_id":',
        json.dumps(batch_id).encode(),
        b',"lease_expires_at":',
        json.dumps(expires_at).encode(),
        b',"regraded":true' if regraded else b"",
        b',"groups":[',
    ]
    for i, g in enumerate(groups):
        head = {"group_id": g.group_id, "task_id": g.task_id, "rollout_id": g.rollout_id}
        parts.append(b"," if i else b"")
        parts.append(json.dumps(head).encode()[:-1] + b',"trajectories":[')
        parts.append(b",".join(with_advantage(c, d, a) for c, d, a in g.rows))
        parts.append(b"]}")
    parts.append(b"]}")
    return b"".join(parts)


def _arrow_body(
    batch_id: str, expires_at: float, groups: list[LeasedGroup], regraded: bool = False
) -> bytes:
    meta = {"batch_id": batch_id, "lease_expires_at": repr(expires_at)}
    if regraded:
        meta["regraded"] = "true"
    schema = ARROW_SCHEMA.with_metadata(meta)
    # Token columns straight from the stored binary arrays (no per-token Python objects).
    table = payloads_to_arrow([row for g in groups for row in g.rows]).replace_schema_metadata(
        schema.metadata
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=ARROW_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@router.post(
    "/lease",
    response_model=LeaseResponse,
    responses={
        200: {
            "description": "Complete groups (with `regraded`: regraded groups), leased until "
            f"lease_expires_at. With `Accept: {ARROW_STREAM}`: an Arrow IPC stream of "
            "ARROW_SCHEMA rows, batch id and expiry in the X-Batch-Id / X-Lease-Expires-At "
            "headers and schema metadata (and `regraded`).",
            "content": {ARROW_STREAM: {}},
        },
        204: {"description": "No complete group became ready within wait_s."},
        **errors(404, e404="No rollout with this rollout_id."),
    },
)
async def lease(
    body: LeaseRequest,
    request: Request,
    state: ServiceState = Depends(service_state),
    accept: str | None = Header(default=None),
) -> Response:
    if body.rollout_id is not None and not await state.store.rollout_exists(body.rollout_id):
        raise UnknownRollout(body.rollout_id)
    result = await _lease_while_connected(state, body, request)
    if body.regraded:
        remaining = str(await state.store.remaining_regraded(body.rollout_id))
    else:
        remaining = str(await state.store.remaining_groups(body.rollout_id))
    if result is None or result.batch_id is None:
        return Response(status_code=204, headers={REMAINING_HEADER: remaining})
    headers = {
        "X-Batch-Id": result.batch_id,
        "X-Lease-Expires-At": repr(result.expires_at),
        REMAINING_HEADER: remaining,
    }
    if accept is not None and ARROW_STREAM in accept:
        data = await asyncio.to_thread(
            _arrow_body, result.batch_id, result.expires_at, result.groups, body.regraded
        )
        return Response(data, media_type=ARROW_STREAM, headers=headers)
    data = await asyncio.to_thread(
        _json_body, result.batch_id, result.expires_at, result.groups, body.regraded
    )
    return Response(data, media_type="application/json", headers=headers)


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away. The body was read already, so the next ASGI
    message can only be the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _lease_while_connected(
    state: ServiceState, body: LeaseRequest, request: Request
) -> LeaseResult | None:
    """The lease, unless the client leaves first: then the wait is cancelled, and a lease
    granted meanwhile (or by a store job already running) is released at once."""
    leasing = asyncio.ensure_future(
        state.leasing.lease(
            body.max_groups, body.rollout_id, body.wait_s, body.lease_s, body.regraded
        )
    )
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({leasing, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not leasing.done():
            leasing.cancel()  # the store releases a lease its running job still grants
        if not gone.done():
            gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
    if not leasing.done() or leasing.cancelled():
        await asyncio.gather(leasing, return_exceptions=True)
        return None
    result = leasing.result()
    if gone.done() and not gone.cancelled() and result is not None and result.batch_id:
        # Granted, but nobody is left to receive it: offered again now, not at expiry.
        if await state.store.release(result.batch_id):
            state.metrics.leases.labels("released").inc()
            state.leasing.notify()
        return None
    return result


@router.post(
    "/{batch_id}/ack",
    response_model=AckResponse,
    responses=errors(
        404,
        409,
        e404="No batch with this id was ever leased (by this data dir). Nothing changed.",
        e409="The lease expired (or the service restarted) before this ack: its groups are "
        "offered again. Drop nothing: dedupe by trajectory_id.",
    ),
)
async def ack(
    batch_id: str = Path(max_length=200), state: ServiceState = Depends(service_state)
) -> AckResponse:
    return AckResponse.model_validate(await state.ack(batch_id))
