"""The FastAPI application: wiring, lifespan, auth, request limits and error handling.

The lifespan opens the store, builds the components (policy client, sandbox backend, episode
runner: injectable so tests can drive the scheduler with a runner of their own), and starts the
scheduler, which re-runs samples a previous process left unfinished.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.events import EventHub
from service.heap import return_large_buffers_to_os
from service.leasing import Leasing, PolicyVersion
from service.metrics import Metrics
from service.request_limits import BodyReadTimeout, BodySizeLimit
from service.scheduler import GroupRunner, Scheduler, TaskLoader
from service.settings import Settings
from service.store import Store

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool]]


@dataclass
class Components:
    """What the service drives. Built at startup by a factory (default: real ones)."""

    runner: GroupRunner
    load_tasks: TaskLoader
    readiness: dict[str, ReadinessCheck] = field(default_factory=dict)
    warm_pool_size: Callable[[], float] | None = None
    aclose: Callable[[], Awaitable[None]] | None = None


ComponentsFactory = Callable[[Settings, Callable[[], int]], Awaitable[Components]]


@dataclass
class ServiceState:
    settings: Settings
    store: Store
    scheduler: Scheduler
    leasing: Leasing
    policy: PolicyVersion
    events: EventHub
    metrics: Metrics
    components: Components


def settings_task_loader(settings: Settings) -> TaskLoader:
    from sandboxes.tasks import load_tasks

    def load(path: str, ids: list[str] | None, limit: int | None) -> list:
        return load_tasks(settings.resolve_tasks_path(path), ids=ids, limit=limit)

    return load


async def default_components(settings: Settings, current_version: Callable[[], int]) -> Components:
    """Real policy client, Docker backend and episode runner."""
    from sandboxes.docker_adapter import default_adapter
    from sandboxes.docker_backend import BackendSettings, DockerBackend
    from service.episode import EpisodeRunner
    from service.policy.client import PolicyClient, PolicyError

    if not settings.policy_urls:
        raise ValueError("no policy server: pass --policy-url or set ROLLOUTS_POLICY_URL")
    policy = PolicyClient(settings.policy_urls, settings.model)
    try:
        await policy.start()
    except PolicyError as e:
        # vLLM may still be loading weights: serve anyway, /readyz says not ready, and the
        # first episode resolves the model.
        log.warning("policy server not available yet: %s", e)
    backend = DockerBackend(BackendSettings(image_override=settings.image))
    runner = EpisodeRunner(policy, backend, current_version=current_version)
    adapter = default_adapter()

    async def docker_ready() -> bool:
        try:
            return bool(await adapter.call(lambda: adapter.client.ping()))
        except Exception:  # noqa: BLE001 - not ready is the answer
            return False

    async def policy_ready() -> bool:
        try:
            return bool(await policy.healthy())
        except Exception:  # noqa: BLE001
            return False

    async def aclose() -> None:
        await backend.aclose()
        await policy.aclose()

    # Idle warm containers, whatever the pool calls its per-key lists.
    idle = getattr(backend.pool, "_idle", None)
    warm = (lambda: sum(len(v) for v in idle.values())) if isinstance(idle, dict) else None
    return Components(
        runner=runner,
        load_tasks=settings_task_loader(settings),
        readiness={"policy": policy_ready, "docker": docker_ready},
        warm_pool_size=(lambda: float(warm())) if callable(warm) else None,
        aclose=aclose,
    )


# ---------------------------------------------------------------- request plumbing


_bearer = HTTPBearer(auto_error=False)


async def require_api_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> None:
    expected = request.app.state.service.settings.api_key
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


def _install_handlers(app: FastAPI) -> None:
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


# ---------------------------------------------------------------- the app


def create_app(
    settings: Settings, components_factory: ComponentsFactory = default_components
) -> FastAPI:
    from service.api import batches, health, policy, rollouts
    from service.api.responses import GUARDED, errors

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        return_large_buffers_to_os()  # payload buffers would otherwise pile up in RSS
        store = Store(settings.data_dir)
        store.open()
        metrics = Metrics()
        events = EventHub()
        version, max_staleness = await store.get_policy()
        policy_state = PolicyVersion(version, max_staleness, settings.stale_policy)
        metrics.policy_version.set(version)
        components = await components_factory(settings, lambda: policy_state.version)
        if components.warm_pool_size is not None:
            metrics.bind_warm_pool(components.warm_pool_size)
        holder: dict[str, Any] = {}
        scheduler = Scheduler(
            store,
            components.runner,
            components.load_tasks,
            max_concurrent_samples=settings.max_concurrent_samples,
            max_queued_samples=settings.max_queued_samples,
            current_version=lambda: policy_state.version,
            events=events,
            metrics=metrics,
            on_group_ready=lambda: holder["leasing"].notify(),
        )
        leasing = Leasing(
            store,
            policy_state,
            scheduler.requeue,
            lease_ttl_s=settings.lease_ttl_s,
            metrics=metrics,
        )
        holder["leasing"] = leasing
        app.state.service = ServiceState(
            settings, store, scheduler, leasing, policy_state, events, metrics, components
        )
        await scheduler.start()
        try:
            yield
        finally:
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
    _install_handlers(app)
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
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        BodyReadTimeout,
        total_s=settings.body_read_timeout_s,
        idle_s=settings.body_idle_timeout_s,
    )
    return app
