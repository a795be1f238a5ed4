"""The FastAPI application: wiring, lifespan, auth, request limits and error handling.

The lifespan opens the store, builds the components (policy client, sandbox backend, episode
runner: service/components.py, injectable so tests can drive the scheduler with a runner of
their own), and starts the scheduler, which re-runs samples a previous process left unfinished.
Errors a client caused are `service.errors.ClientError`s, answered by one exception handler.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from service import stack_dump
from service.components import (
    ComponentsFactory,
    build_components,
)
from service.concurrency import ConcurrencyController, ConcurrencySettings
from service.errors import Busy, ClientError, InvalidRequest
from service.events import EventHub
from service.heap import return_large_buffers_to_os
from service.leasing import Leasing, PolicyVersion
from service.metrics import Metrics
from service.request_limits import BodyReadTimeout, BodySizeLimit
from service.scheduler import Scheduler
from service.settings import Settings
from service.state import ServiceState, require_api_key
from service.store import DiskBudget, Store
from service.web_guard import WebGuard

log = logging.getLogger(__name__)


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
    from service.ui.tokens import NoTokenTexts, PolicyServerTexts

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        return_large_buffers_to_os()  # payload buffers would otherwise pile up in RSS
        config = settings.service
        store = Store(config.data_dir)
        store.open()
        metrics = Metrics()
        events = EventHub(config.max_event_streams)
        version, max_staleness = await store.get_policy()
        policy_state = PolicyVersion(
            version, max_staleness, config.stale_policy, config.max_stale_requeues
        )
        metrics.policy_version.set(version)
        components = await components_factory(settings, lambda: policy_state.version)
        keep = getattr(components.runner, "keep_workspaces", None)  # EpisodeRunner's
        if keep is not None:
            keep(store.known_blobs if config.keep_workspaces else None)
        if components.warm_pool_size is not None:
            metrics.bind_warm_pool(components.warm_pool_size)
        if components.sandbox_stats is not None:
            metrics.bind_sandbox_nodes(components.sandbox_stats)
        if components.calibrator is not None:
            metrics.bind_calibration(components.calibrator)
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
            max_staleness=lambda: policy_state.max_staleness,
            retry_masked=config.retry_masked,
            ready=components.ready,
            events=events,
            metrics=metrics,
            on_group_ready=lambda: holder["leasing"].notify(),
            concurrency_control=(
                ConcurrencyController(
                    ConcurrencySettings.starting_at(
                        components.sandbox_cores, ceiling=config.max_concurrent_samples
                    ),
                    time.monotonic(),
                )
                if config.adaptive_concurrency
                else None
            ),
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
        app.state.ui_tokens = (  # the token view's texts: the policy server's /detokenize
            PolicyServerTexts(components.policy)
            if components.policy is not None
            else NoTokenTexts("this service has no policy client to detokenize with")
        )
        await scheduler.start()
        stack_dump.install()
        background = [asyncio.create_task(_retention_loop(store, metrics, config.retention_s))]
        if fleet is not None:  # servers out of rotation come back when they can
            background.append(asyncio.create_task(fleet.run(settings.policy.reconcile_s)))
        try:
            yield
        finally:
            stack_dump.uninstall()
            background += [j.task for j in app.state.service.regrades.values() if j.task]
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
    app.state.ui_source = StoreSource(
        settings.service.data_dir, "service", settings.service.calibration_path
    )  # the web view's
    app.include_router(ui.pages)  # /ui: a page without data; it calls the guarded routes
    app.include_router(ui.api, dependencies=auth, responses=guarded)
    app.add_middleware(BodySizeLimit, max_bytes=settings.service.max_body_bytes)
    app.add_middleware(WebGuard, allowed_hosts=settings.service.host_allowlist())
    app.add_middleware(
        BodyReadTimeout,
        total_s=settings.service.body_read_timeout_s,
        idle_s=settings.service.body_idle_timeout_s,
    )
    return app
