"""POST/GET /v1/policy: the current policy version and the staleness bound."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.app import ServiceState, service_state
from service.wire import PolicyState, PolicyUpdate

router = APIRouter(prefix="/v1/policy", tags=["policy"])


@router.post("", response_model=PolicyState)
async def set_policy(
    body: PolicyUpdate, state: ServiceState = Depends(service_state)
) -> PolicyState:
    """New turns are tagged with `version`. With `max_staleness` k, a complete group whose
    earliest turn used a version older than version - k is no longer offered: it is dropped or
    re-run, as the server's --stale-policy says."""
    return PolicyState.model_validate(await state.set_policy(body.version, body.max_staleness))


@router.get("", response_model=PolicyState)
async def get_policy(state: ServiceState = Depends(service_state)) -> PolicyState:
    return PolicyState.model_validate(state.policy)
