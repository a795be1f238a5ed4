"""The FastAPI application: wiring, lifespan, auth, request limits and error handling.

The lifespan opens the store, builds the components (policy client, sandbox backend, episode
runner: service/components.py, injectable so tests can drive the scheduler with a runner of
their own), and starts the scheduler, which re-runs samples a previous process left unfinished.
Errors a client caused are `service.errors.ClientError`s, answered by one exception handler.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.components import (
    Components,
    ComponentsFactory,
    build_components,
    load_request_tasks,
)
from service.errors import Busy, ClientError, Conflict, InvalidRequest, Unavailable
from service.events import EventHub
from service.heap import return_large_buffers_to_os
from service.leasing import Leasing, PolicyVersion
from service.metrics import Metrics
from service.policy.fleet import (
    ControlError,
    PauseMode,
    PolicyFleet,
    ServerReport,
    WeightsRefused,
)
from service.request_limits import BodyReadTimeout, BodySizeLimit
from service.scheduler import Scheduler
from service.settings import Settings
from service.store import AckResult, DiskBudget, DiskFull, Store
from service.wire import PolicyServer, PolicyState, PolicyUpdate, RolloutRequest

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

    async def submit(self, request: RolloutRequest, idempotency_key: str | None = None) -> str:
        """Read the tasks, admitting each before the next is read, and queue tasks x
        n_samples; the rollout id. InvalidRequest names the field to fix; QueueFull (Busy,
        429) when the queue has no room now; DiskFull (503) when the data disk has none.
        With an Idempotency-Key seen before: that rollout's id, nothing queued (Conflict if
        the key came with another request)."""
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


def _install_handlers(app: FastAPI, settings: Settings) -> None:
    @app.exception_handler(ClientError)
    async def _client_error(_: Request, exc: ClientError) -> JSONResponse:
        # The body FastAPI gives for that status: a 422 lists `[{loc, msg, type}]` items like
        # a schema error, other statuses carry the message; a 429 says when to come back.
        detail: Any = exc.message
        if isinstance(exc, InvalidRequest):
            detail = [{"loc": list(exc.field or ("body",)), "msg": exc.message, "type": exc.kind}]
        retry = str(settings.service.retry_after_s)
        headers = {"Retry-After": retry} if isinstance(exc, Busy) else None
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        # pydantic's items, minus echoes of the input (which may be huge).
        items = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": items}, status_code=422)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error (logged)"}, status_code=500)


async def _retention_loop(store: Store, metrics: Metrics, retention_s: float) -> None:
    """Delete acknowledged payloads older than `retention_s`, checking every tenth of it
    (between a second and ten minutes)."""
    interval = min(max(retention_s / 10, 1.0), 600.0)
    while True:
        try:
            purged = await store.purge(retention_s)
        except Exception:  # noqa: BLE001 - retried at the next round; never stops the service
            log.exception("retention: purging old payloads failed")
        else:
            if purged:
                metrics.payloads_purged.inc(purged)
                log.info("retention: deleted %d acknowledged payloads", purged)
        await asyncio.sleep(interval)


# ---------------------------------------------------------------- the app


def create_app(
    settings: Settings, components_factory: ComponentsFactory = build_components
) -> FastAPI:
    from service.api import batches, events, health, policy, rollouts
    from service.api.responses import GUARDED, errors
    from service.ui import routes as ui
    from service.ui.sources import StoreSource

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        return_large_buffers_to_os()  # payload buffers would otherwise pile up in RSS
        config = settings.service
        store = Store(config.data_dir)
        store.open()
        metrics = Metrics()
        events = EventHub()
        version, max_staleness = await store.get_policy()
        policy_state = PolicyVersion(version, max_staleness, config.stale_policy)
        metrics.policy_version.set(version)
        components = await components_factory(settings, lambda: policy_state.version)
        if components.warm_pool_size is not None:
            metrics.bind_warm_pool(components.warm_pool_size)
        if components.sandbox_stats is not None:
            metrics.bind_sandbox_nodes(components.sandbox_stats)
        disk = DiskBudget(store, config.disk_reserve_mb << 20)
        metrics.bind_disk(disk)
        fleet = components.fleet
        if fleet is not None:
            metrics.bind_policy(lambda: fleet.stats)
        holder: dict[str, Any] = {}
        scheduler = Scheduler(
            store,
            components.runner,
            components.load_tasks,
            max_concurrent_samples=config.max_concurrent_samples,
            max_queued_samples=config.max_queued_samples,
            current_version=lambda: policy_state.version,
            events=events,
            metrics=metrics,
            on_group_ready=lambda: holder["leasing"].notify(),
        )
        leasing = Leasing(
            store,
            policy_state,
            scheduler.requeue,
            lease_ttl_s=config.lease_ttl_s,
            metrics=metrics,
        )
        holder["leasing"] = leasing
        app.state.service = ServiceState(
            settings, store, scheduler, leasing, policy_state, events, metrics, components, disk
        )
        await scheduler.start()
        background = [asyncio.create_task(_retention_loop(store, metrics, config.retention_s))]
        if fleet is not None:  # servers out of rotation come back when they can
            background.append(asyncio.create_task(fleet.run(settings.policy.reconcile_s)))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await scheduler.aclose()
            if components.aclose is not None:
                await components.aclose()
            store.close()

    app = FastAPI(
        title="rollouts",
        version="1",
        description="Agentic rollouts for RL: submit, lease complete groups, ack.",
        lifespan=lifespan,
        docs_url=None,
        openapi_url=None,
    )
    _install_handlers(app, settings)
    auth = [Depends(require_api_key)]

    # The schema and its viewer sit behind the key like everything but /healthz.
    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi_schema() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=auth)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="rollouts API")

    app.include_router(health.router)  # /healthz has no auth; the router guards the rest
    guarded = errors(*GUARDED)
    app.include_router(rollouts.router, dependencies=auth, responses=guarded)
    app.include_router(batches.router, dependencies=auth, responses=guarded)
    app.include_router(policy.router, dependencies=auth, responses=guarded)
    app.include_router(events.router, dependencies=auth, responses=guarded)
    app.state.ui_source = StoreSource(settings.service.data_dir, "service")  # the web view's
    app.include_router(ui.pages)  # /ui: a page without data; it calls the guarded routes
    app.include_router(ui.api, dependencies=auth, responses=guarded)
    app.add_middleware(BodySizeLimit, max_bytes=settings.service.max_body_bytes)
    app.add_middleware(
        BodyReadTimeout,
        total_s=settings.service.body_read_timeout_s,
        idle_s=settings.service.body_idle_timeout_s,
    )
    return app
