"""Server-sent events: the one stream loop behind GET /v1/rollouts/{id}/events (api/rollouts.py)
and GET /v1/events, every rollout's events plus a `stats` snapshot every few seconds (the web
view's live overview follows it instead of polling)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from service.events import Event
from service.state import ServiceState, service_state

router = APIRouter(tags=["events"])
STATS_S = 2.0
HEALTH_S = 10.0  # the checks call the policy server and Docker: shared, and not every 2 s


def sse(kind: str, data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


async def stream(
    request: Request,
    queue: asyncio.Queue[Event],
    close: Callable[[], None],
    first: list[bytes],
    *,
    tick_s: float,
    tick: Callable[[], Awaitable[bytes]],
    with_rollout_id: bool = False,
    last_kind: str | None = None,
) -> AsyncIterator[bytes]:
    """`first`, then each event as it comes (tagged with its rollout id for a stream of every
    rollout), `tick()` every `tick_s` (a client gone away is noticed there), until an event of
    `last_kind`. `close` unsubscribes, however the stream ends."""
    try:
        for chunk in first:
            yield chunk
        next_tick = time.monotonic() + tick_s
        while True:
            try:
                wait = max(next_tick - time.monotonic(), 0.0)
                event = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                yield await tick()
                next_tick = time.monotonic() + tick_s
                continue
            data = {"rollout_id": event.rollout_id, **event.data} if with_rollout_id else event.data
            yield sse(event.kind, data)
            if event.kind == last_kind:
                return
    finally:
        close()


class LiveStats(BaseModel):
    """What the service is doing now (not in the store): the `stats` event of GET /v1/events."""

    running_samples: int
    queued_samples: int
    concurrency: int = Field(
        description="samples allowed in their episode at once: the controller's level under "
        "--adaptive-concurrency, else --max-concurrent-samples"
    )
    policy_version: int
    max_staleness: int | None
    warm_pool: float | None = Field(description="warm sandboxes ready; null: not tracked")
    health: dict[str, bool] = Field(description="the /readyz checks, refreshed every 10 s")


@router.get(
    "/v1/events",
    response_class=StreamingResponse,
    responses={200: {"description": "Server-sent events.", "content": {"text/event-stream": {}}}},
)
async def all_events(
    request: Request, state: ServiceState = Depends(service_state)
) -> StreamingResponse:
    """Server-sent events of every rollout: `stats` (LiveStats) first and every 2 s; between
    them `submitted`, `trajectory`, `group` and `rollout` events as they happen (as in
    /v1/rollouts/{id}/events, each with its `rollout_id`). A live view: the durable record is
    the lease API."""
    queue = state.events.subscribe(None)

    async def stats() -> bytes:
        health = await state.components.recent_checks(HEALTH_S)  # one run for every stream
        pool = state.components.warm_pool_size
        live = LiveStats(
            running_samples=state.scheduler.running_samples,
            queued_samples=state.scheduler.queued_samples,
            concurrency=state.scheduler.concurrency,
            policy_version=state.policy.version,
            max_staleness=state.policy.max_staleness,
            warm_pool=pool() if pool is not None else None,
            health=health,
        )
        return sse("stats", live.model_dump())

    try:
        first = [await stats()]
    except BaseException:
        state.events.unsubscribe(None, queue)
        raise
    body = stream(
        request,
        queue,
        lambda: state.events.unsubscribe(None, queue),
        first,
        tick_s=STATS_S,
        tick=stats,
        with_rollout_id=True,
    )
    return StreamingResponse(body, media_type="text/event-stream")
