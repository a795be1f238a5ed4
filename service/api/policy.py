"""POST/GET /v1/policy: the current policy version and the staleness bound."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.app import ServiceState, service_state
from service.wire import PolicyState, PolicyUpdate

router = APIRouter(prefix="/v1/policy", tags=["policy"])


def _state(state: ServiceState) -> PolicyState:
    p = state.policy
    return PolicyState(
        version=p.version, max_staleness=p.max_staleness, stale_policy=p.stale_policy
    )


@router.post("", response_model=PolicyState)
async def set_policy(
    body: PolicyUpdate, state: ServiceState = Depends(service_state)
) -> PolicyState:
    """New turns are tagged with `version`. With `max_staleness` k, a complete group whose
    earliest turn used a version older than version - k is no longer offered: it is dropped or
    re-run, as the server's --stale-policy says."""
    await state.store.set_policy(body.version, body.max_staleness)
    state.policy.version = body.version
    state.policy.max_staleness = body.max_staleness
    state.metrics.policy_version.set(body.version)
    state.leasing.notify()
    return _state(state)


@router.get("", response_model=PolicyState)
async def get_policy(state: ServiceState = Depends(service_state)) -> PolicyState:
    return _state(state)
