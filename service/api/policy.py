"""/v1/policy: the policy version, the staleness bound, and weight updates of the policy servers
(load a checkpoint or adapter; or pause, let the trainer move the weights, tag and resume)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.api.responses import errors
from service.state import ServiceState, service_state
from service.wire import PolicyPause, PolicyState, PolicyUpdate

router = APIRouter(prefix="/v1/policy", tags=["policy"])
_UPDATE_ERRORS = errors(
    409,
    503,
    e409="The policy servers cannot do this (no control routes, no adapter served).",
    e503="No policy server could be brought to the new state (the detail says why).",
)


@router.post("", response_model=PolicyState, responses=_UPDATE_ERRORS)
async def set_policy(
    body: PolicyUpdate, state: ServiceState = Depends(service_state)
) -> PolicyState:
    """New turns are tagged with `version`. With `weights_path` (or `lora_path`), every policy
    server is paused (keep), loads it in place, is tagged `version` and resumed (one server
    first: weights it cannot load are answered 422 naming the field, and only that server,
    whose engine a failed load leaves unusable, is out of rotation); without, the
    servers are tagged and whatever the service paused resumes. Answers once every server serves
    `version` or is out of rotation (`servers` says which and why). With `max_staleness` k, a
    complete group whose oldest generated token came from a version older than version - k is
    no longer offered: it is dropped or re-run, as the server's --stale-policy says. Without
    the field the bound in force stays; `null` removes it. The answer shows the bound in
    force."""
    if "max_staleness" not in body.model_fields_set:
        # A version alone (flow 2's tag after a transfer) must not turn the bound off.
        body = body.model_copy(update={"max_staleness": state.policy.max_staleness})
    return await state.set_policy(body)


@router.get("", response_model=PolicyState)
async def get_policy(state: ServiceState = Depends(service_state)) -> PolicyState:
    return state.policy_state()


@router.post("/pause", response_model=PolicyState, responses=_UPDATE_ERRORS)
async def pause(body: PolicyPause, state: ServiceState = Depends(service_state)) -> PolicyState:
    """Pause every policy server and answer once all are paused; new requests wait in the
    service. The trainer then moves the weights and posts `/v1/policy` with the new version
    (tag and resume), or `/v1/policy/resume`."""
    return await state.pause_policy(body.mode)


@router.post("/resume", response_model=PolicyState, responses=_UPDATE_ERRORS)
async def resume(state: ServiceState = Depends(service_state)) -> PolicyState:
    """Resume the servers the service paused, with the weights they hold."""
    return await state.resume_policy()
