"""/v1/rollouts: submit, inspect, cancel, follow a rollout's events, and regrade it."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import StreamingResponse

from service.api.events import sse, stream
from service.api.responses import errors
from service.errors import NotFound
from service.state import ServiceState, service_state
from service.wire import (
    ErrorResponse,
    RegradeRequest,
    RegradeStatus,
    RolloutCreated,
    RolloutRequest,
    RolloutStatus,
)

router = APIRouter(prefix="/v1/rollouts", tags=["rollouts"])
HEARTBEAT_S = 15.0


@router.post(
    "",
    status_code=202,
    response_model=RolloutCreated,
    responses={
        **errors(
            403,
            409,
            429,
            e403="A policy server in `policy.urls` is not under the service's "
            "--allow-policy-url prefixes (`detail` names it).",
            e409="This Idempotency-Key was already used for another request.",
        ),
        503: {
            "model": ErrorResponse,
            "description": "The data disk has no room for more work; retry after Retry-After.",
        },
    },
)
async def submit(
    body: RolloutRequest,
    state: ServiceState = Depends(service_state),
    idempotency_key: str | None = Header(
        default=None,
        min_length=1,
        max_length=200,
        description="Retries with the same key and body get the same rollout id, and queue "
        "nothing twice; the same key with another body is a 409.",
    ),
) -> RolloutCreated:
    """Load the tasks (errors name `tasks.path` / `tasks.ids`; paths must lie inside the
    server's tasks roots) and queue tasks x n_samples."""
    return RolloutCreated(id=await state.submit(body, idempotency_key))


async def _summary(state: ServiceState, rollout_id: str) -> RolloutStatus:
    status = RolloutStatus.model_validate(await state.store.rollout_summary(rollout_id))
    placement = state.components.placement
    if placement is not None:
        status.placement = placement(rollout_id)
    return status


@router.get("/{rollout_id}", response_model=RolloutStatus, responses=errors(404))
async def status(rollout_id: str, state: ServiceState = Depends(service_state)) -> RolloutStatus:
    return await _summary(state, rollout_id)


@router.delete("/{rollout_id}", response_model=RolloutStatus, responses=errors(404))
async def cancel(rollout_id: str, state: ServiceState = Depends(service_state)) -> RolloutStatus:
    """Stop in-flight samples (their sandboxes are removed); unfinished samples become
    `cancelled`. Cancelling a finished rollout changes nothing."""
    await state.scheduler.cancel(rollout_id)
    return await _summary(state, rollout_id)


@router.post(
    "/{rollout_id}/regrade",
    status_code=202,
    response_model=RegradeStatus,
    responses={
        **errors(
            404,
            409,
            e404="No rollout with this id.",
            e409="A regrade of this rollout is running, or the service has no sandboxes.",
        ),
        503: {"model": ErrorResponse, "description": "The data disk is below its reserve."},
    },
)
async def regrade(
    rollout_id: str,
    body: RegradeRequest | None = None,
    state: ServiceState = Depends(service_state),
) -> RegradeStatus:
    """Grade the rollout's stored samples again, without re-running the agent: each kept final
    workspace goes to a fresh verifier container with the task's current tests (or
    `tasks_path`'s) and this service's grader. Every trajectory keeps its gradings; groups a
    trainer already had are offered as regraded groups (lease with `regraded: true`).
    Answers once the tasks are read (errors name `tasks_path` / `task_ids`); follow it with
    GET. Samples whose latest grading has this grader and these tests are not graded again, so
    a regrade cut short (a restart) resumes when asked again."""
    job = await state.regrade(rollout_id, body or RegradeRequest())
    return RegradeStatus.model_validate(job.status())


@router.get("/{rollout_id}/regrade", response_model=RegradeStatus, responses=errors(404))
async def regrade_status(
    rollout_id: str, state: ServiceState = Depends(service_state)
) -> RegradeStatus:
    """The rollout's latest regrade in this process: progress, then the changes it made."""
    job = state.regrades.get(rollout_id)
    if job is None:
        raise NotFound(f"no regrade of rollout {rollout_id!r} since the service started")
    return RegradeStatus.model_validate(job.status())


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
    except Exception:  # UnknownRollout: a 404
        state.events.unsubscribe(rollout_id, queue)
        raise

    head = sse("status", first.model_dump())
    if first.status != "running":  # finished: nothing more will come
        state.events.unsubscribe(rollout_id, queue)
        return StreamingResponse(iter([head]), media_type="text/event-stream")

    async def keep_alive() -> bytes:
        return b": keep-alive\n\n"

    body = stream(
        request,
        queue,
        lambda: state.events.unsubscribe(rollout_id, queue),
        [head],
        tick_s=HEARTBEAT_S,
        tick=keep_alive,
        last_kind="rollout",
    )
    return StreamingResponse(body, media_type="text/event-stream")
