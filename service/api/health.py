"""/healthz (liveness, no auth), /readyz (policy server and Docker answer), /metrics."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.responses import errors
from service.state import ServiceState, require_api_key, service_state
from service.wire import ReadyReport

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


async def readiness(state: ServiceState) -> dict[str, bool]:
    """Each readiness check (policy server, Docker or Ray); also what the web view shows as
    health."""
    return await state.components.checks()


@router.get(
    "/readyz",
    dependencies=[Depends(require_api_key)],
    response_model=ReadyReport,
    responses={503: {"model": ReadyReport, "description": "A check failed."}, **errors(401)},
)
async def readyz(state: ServiceState = Depends(service_state)) -> JSONResponse:
    report = await readiness(state)
    ok = all(report.values())
    return JSONResponse(
        {"status": "ready" if ok else "not ready", "checks": report}, status_code=200 if ok else 503
    )


@router.get(
    "/metrics",
    dependencies=[Depends(require_api_key)],
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": "Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **errors(401),
    },
)
async def metrics(state: ServiceState = Depends(service_state)) -> PlainTextResponse:
    m = state.metrics
    for name in ("pending", "complete", "leased", "acked", "dropped"):
        m.groups_by_state.labels(name).set(0)
    for name, n in (await state.store.group_states()).items():
        m.groups_by_state.labels(name).set(n)
    m.policy_version.set(state.policy.version)
    return PlainTextResponse(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
