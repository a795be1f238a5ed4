"""/v1/rollouts: submit, inspect, cancel, and follow a rollout's events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse

from service.api.responses import errors
from service.app import ServiceState, service_state
from service.scheduler import QueueFull
from service.store import UnknownRollout
from service.wire import RolloutCreated, RolloutRequest, RolloutStatus

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"])
HEARTBEAT_S = 15.0


def _field_error(loc: list[str], msg: str, kind: str) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": ["body", *loc], "msg": msg, "type": kind}]}, 422)


@router.post("", status_code=202, response_model=RolloutCreated, responses=errors(429))
async def submit(
    body: RolloutRequest, state: ServiceState = Depends(service_state)
) -> RolloutCreated | JSONResponse:
    """Load the tasks (errors name `tasks.path` / `tasks.ids`) and queue tasks x n_samples."""
    from sandboxes.tasks import TaskLoadError

    spec = body.tasks
    try:
        tasks = await asyncio.to_thread(
            state.components.load_tasks, spec.path, spec.ids, spec.limit
        )
    except TaskLoadError as e:
        loc = ["tasks", "ids"] if spec.ids and "no task with id" in e.message else ["tasks", "path"]
        return _field_error(loc, str(e), "task_load_error")
    except (OSError, ValueError) as e:
        return _field_error(
            ["tasks", "path"], f"cannot load tasks from {spec.path!r}: {e}", "task_load_error"
        )
    if not tasks:
        return _field_error(["tasks", "path"], f"no tasks found in {spec.path!r}", "no_tasks")
    n = len(tasks) * body.n_samples
    if n > state.settings.max_queued_samples:
        return _field_error(
            ["n_samples"],
            f"{len(tasks)} tasks x {body.n_samples} samples = {n} exceeds the server's "
            f"queue capacity ({state.settings.max_queued_samples}); submit fewer tasks",
            "too_many_samples",
        )
    try:
        rollout_id = await state.scheduler.submit(body, tasks)
    except QueueFull as e:
        retry = str(state.settings.retry_after_s)
        return JSONResponse({"detail": str(e)}, status_code=429, headers={"Retry-After": retry})
    return RolloutCreated(id=rollout_id)


async def _summary(state: ServiceState, rollout_id: str) -> RolloutStatus:
    try:
        s = await state.store.rollout_summary(rollout_id)
    except UnknownRollout:
        raise HTTPException(404, f"no rollout with id {rollout_id!r}") from None
    return RolloutStatus(
        id=s.id,
        status=s.status,
        groups_total=s.groups_total,
        groups_completed=s.groups_completed,
        samples_total=s.samples_total,
        samples_completed=s.samples_completed,
        counts=s.counts,
        mean_reward=s.mean_reward,
        created_at=s.created_at,
    )


@router.get("/{rollout_id}", response_model=RolloutStatus, responses=errors(404))
async def status(rollout_id: str, state: ServiceState = Depends(service_state)) -> RolloutStatus:
    return await _summary(state, rollout_id)


@router.delete("/{rollout_id}", response_model=RolloutStatus, responses=errors(404))
async def cancel(rollout_id: str, state: ServiceState = Depends(service_state)) -> RolloutStatus:
    """Stop in-flight samples (their sandboxes are removed); unfinished samples become
    `cancelled`. Cancelling a finished rollout changes nothing."""
    try:
        await state.scheduler.cancel(rollout_id)
    except UnknownRollout:
        raise HTTPException(404, f"no rollout with id {rollout_id!r}") from None
    return await _summary(state, rollout_id)


def _sse(kind: str, data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


@router.get(
    "/{rollout_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {"description": "Server-sent events.", "content": {"text/event-stream": {}}},
        **errors(404),
    },
)
async def events(
    rollout_id: str, request: Request, state: ServiceState = Depends(service_state)
) -> StreamingResponse:
    """Server-sent events: `status` first, then `trajectory` and `group` as they complete, and a
    final `rollout` when it ends. A live view: the durable record is the lease API."""
    # Subscribe before reading the status, so nothing that happens in between is missed.
    queue = state.events.subscribe(rollout_id)
    try:
        first = await _summary(state, rollout_id)
    except HTTPException:
        state.events.unsubscribe(rollout_id, queue)
        raise

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield _sse("status", first.model_dump())
            if first.status != "running":
                return
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    yield b": keep-alive\n\n"
                    continue
                yield _sse(event.kind, event.data)
                if event.kind == "rollout":
                    return
        finally:
            state.events.unsubscribe(rollout_id, queue)

    return StreamingResponse(stream(), media_type="text/event-stream")
