"""The running service's state and the operations that change it (submit, lease, ack,
policy updates, regrades), and the two request dependencies every router uses: the state
itself and the API key check. The routers in service/api/ and the app (service/app.py) both
import it; it imports neither."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from service import regrade
from service.components import (
    Components,
    load_request_tasks,
)
from service.errors import Busy, Conflict, Forbidden, InvalidRequest, Unavailable
from service.events import EventHub
from service.leasing import Leasing, PolicyVersion
from service.metrics import Metrics
from service.policy.fleet import PauseMode, PolicyFleet, WeightsRefused
from service.policy.servers import ControlError, ServerReport
from service.scheduler import Scheduler
from service.settings import Settings
from service.store import AckResult, DiskBudget, DiskFull, Store, UnknownRollout
from service.wire import (
    PolicyServer,
    PolicyState,
    PolicyUpdate,
    RegradeRequest,
    RolloutRequest,
    TasksSpec,
)

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    """The running service. Its methods are the operations that change state, so the routers
    only translate HTTP."""

    settings: Settings
    store: Store
    scheduler: Scheduler
    leasing: Leasing
    policy: PolicyVersion
    events: EventHub
    metrics: Metrics
    components: Components
    disk: DiskBudget | None = None
    regrades: dict[str, regrade.RegradeJob] = field(default_factory=dict)  # by rollout id

    async def submit(self, request: RolloutRequest, idempotency_key: str | None = None) -> str:
        """Read the tasks, admitting each before the next is read, and queue tasks x
        n_samples; the rollout id. InvalidRequest names the field to fix; QueueFull (Busy,
        429) when the queue has no room now; DiskFull (503) when the data disk has none.
        With an Idempotency-Key seen before: that rollout's id, nothing queued (Conflict if
        the key came with another request)."""
        if request.policy is not None:  # refused before anything is read, queued or sent
            named = self.components.named_policies
            field = ("body", "policy", "urls")
            if named is None:
                raise Forbidden(
                    "this service takes no policy servers from requests (serve --allow-policy-url)",
                    field=field,
                )
            named.check(request.policy.urls, field)
        elif self.components.named_policies is not None and self.components.policy is None:
            raise InvalidRequest(
                "this service has no --policy-url: name the policy servers (policy.urls)",
                field=("body", "policy"),
                kind="missing",
            )
        harnesses = getattr(self.components.runner, "harnesses", None)
        if request.agent.harness is not None and harnesses is not None:
            if request.agent.harness not in harnesses:
                hint = " (start the service with --agent-profile)" * (
                    request.agent.harness == "terminus-2"
                )
                raise InvalidRequest(
                    f"no harness {request.agent.harness!r} in this service{hint}; "
                    f"available: {', '.join(sorted(harnesses))}",
                    field=("body", "agent", "harness"),
                    kind="unknown_harness",
                )
        idempotency = None
        if idempotency_key is not None:
            digest = hashlib.sha256(request.model_dump_json().encode()).hexdigest()
            existing = await self.store.idempotent_rollout(idempotency_key, digest)
            if existing is not None:
                return existing
            idempotency = (idempotency_key, digest)
        queue_admit = self.scheduler.admission(request.n_samples)
        busy = self.scheduler.queued_samples + self.scheduler.running_samples
        disk = self.disk

        def admit(tasks: int) -> None:
            queue_admit(tasks)
            if disk is not None:
                disk.check(busy + tasks * request.n_samples)

        load = self.components.load_tasks
        try:
            tasks = await asyncio.to_thread(load_request_tasks, load, request.tasks, admit)
        except Busy as e:
            self.metrics.requests_refused.labels(
                "disk" if isinstance(e, DiskFull) else "queue"
            ).inc()
            raise
        return await self.scheduler.submit(request, tasks, idempotency=idempotency)

    async def ack(self, batch_id: str) -> AckResult:
        """UnknownBatch, or LeaseExpired when the groups were already offered again."""
        result = await self.store.ack(batch_id)
        if not result.already_acked:
            self.metrics.leases.labels("acked").inc()
        return result

    async def regrade(self, rollout_id: str, request: RegradeRequest) -> regrade.RegradeJob:
        """Start grading the rollout's stored samples again (service/regrade.py): its tasks are
        read first (InvalidRequest naming tasks_path or task_ids), then the verifications run
        in the background. Conflict while a regrade of it runs, or without a sandbox backend;
        DiskFull when the data disk is below its reserve."""
        running = self.regrades.get(rollout_id)
        if running is not None and running.state == "running":
            raise Conflict(f"a regrade of rollout {rollout_id!r} is running; see its status")
        if not await self.store.rollout_exists(rollout_id):
            raise UnknownRollout(rollout_id)
        backend = self.components.sandboxes
        if backend is None:
            raise Conflict("this service has no sandbox backend to regrade with")
        if self.disk is not None:
            self.disk.check(0)
        load = self.components.load_tasks

        async def tasks(_rid: str, path: str, ids: list[str]) -> dict[str, Any]:
            spec = TasksSpec(path=request.tasks_path or path, ids=ids)
            try:
                loaded = await asyncio.to_thread(load_request_tasks, load, spec)
            except InvalidRequest as e:
                where = "task_ids" if e.field == ("body", "tasks", "ids") else "tasks_path"
                raise InvalidRequest(
                    f"{e.message} (the tasks of rollout {rollout_id}: {spec.path!r})",
                    field=("body", where),
                    kind=e.kind,
                ) from e
            return {t.id: t for t in loaded}

        the_plan = await regrade.plan(
            self.store, tasks, rollout_id=rollout_id, task_ids=request.task_ids
        )
        job = regrade.RegradeJob(rollout_id)
        self.regrades[rollout_id] = job

        async def run() -> None:
            try:
                await regrade.run(
                    self.store,
                    backend,
                    the_plan,
                    grader_version=regrade.grader_version_of(backend),
                    # Beside live collection: a quarter of its sample slots, at least two.
                    concurrency=max(
                        regrade.CONCURRENCY, self.settings.service.max_concurrent_samples // 4
                    ),
                    on_offer=self.leasing.notify,
                    report=job.report,
                    calibrator=self.components.calibrator,
                )
                job.state = "done"
            except Exception as e:  # noqa: BLE001 - reported in its status, logged
                log.exception("regrade of rollout %s failed", rollout_id)
                job.state, job.error = "failed", f"{type(e).__name__}: {e}"

        job.task = asyncio.create_task(run(), name=f"regrade {rollout_id}")
        return job

    async def set_policy(self, update: PolicyUpdate) -> PolicyState:
        """A new policy version. With a weights_path or lora_path, load it on every policy
        server (paused with keep; service/policy/fleet.py); else tag the servers with it and
        resume what the service paused. Then persist the version and staleness bound and let
        waiting leases re-check what is now too stale. Answers once every server serves the
        version or is out of rotation (the report says why); Conflict when the servers cannot
        do it (no control routes, no adapter served), Unavailable when none could."""
        reports: list[ServerReport] = []
        fleet = self.components.fleet
        if fleet is None and (update.weights_path or update.lora_path):
            self._fleet("load weights")  # Conflict: nothing to load them on
        if fleet is not None:
            try:
                if update.weights_path is not None or update.lora_path is not None:
                    reports = await fleet.update(
                        update.version, weights_path=update.weights_path, lora_path=update.lora_path
                    )
                else:
                    reports = await fleet.tag(update.version)
            except WeightsRefused as e:
                raise InvalidRequest(str(e), field=("body", e.field)) from e
            except ControlError as e:
                raise Conflict(str(e), field=("body",)) from e
        await self.store.set_policy(update.version, update.max_staleness)
        self.policy.version = update.version
        self.policy.max_staleness = update.max_staleness
        self.metrics.policy_version.set(update.version)
        self.leasing.notify()
        return self._policy_state(reports, f"version {update.version}")

    async def pause_policy(self, mode: PauseMode) -> PolicyState:
        """Pause every policy server (for a trainer that moves the weights itself); answers once
        all are paused. Until the next POST /v1/policy or a resume, no new request is sent."""
        fleet = self._fleet("pause")
        try:
            reports = await fleet.pause(mode)
        except ControlError as e:
            raise Conflict(str(e), field=("body", "mode")) from e
        return self._policy_state(reports, "pause")

    async def resume_policy(self) -> PolicyState:
        """Resume what the service paused, with the weights as they are."""
        return self._policy_state(await self._fleet("resume").resume(), "resume")

    def policy_state(self) -> PolicyState:
        fleet = self.components.fleet
        return self._policy_state(fleet.report() if fleet is not None else [], None)

    def _fleet(self, what: str) -> PolicyFleet:
        if self.components.fleet is None:
            raise Conflict(f"cannot {what}: this service drives no policy servers")
        return self.components.fleet

    def _policy_state(self, reports: list[ServerReport], what: str | None) -> PolicyState:
        state = PolicyState(
            version=self.policy.version,
            max_staleness=self.policy.max_staleness,
            stale_policy=self.policy.stale_policy,
            servers=[PolicyServer.model_validate(r) for r in reports],
        )
        if what is not None and reports and all(r.status == "out" for r in reports):
            detail = "; ".join(f"{r.url}: {r.reason}" for r in reports)
            raise Unavailable(f"{what}: no policy server is in rotation ({detail})")
        return state


# ---------------------------------------------------------------- request plumbing


_bearer = HTTPBearer(auto_error=False)


async def require_api_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> None:
    expected = request.app.state.service.settings.service.api_key
    if not expected:
        return
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise StarletteHTTPException(
            401,
            "missing bearer token (Authorization: Bearer <key>)",
            {"WWW-Authenticate": "Bearer"},
        )
    if not secrets.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise StarletteHTTPException(401, "invalid bearer token", {"WWW-Authenticate": "Bearer"})


def service_state(request: Request) -> ServiceState:
    return request.app.state.service
