"""What the scheduler drives, built in one place from one `Settings`: the policy client, the
Docker sandbox backend, the episode runner, the task loader, readiness checks. `rollouts serve`
(service/app.py) and `rollouts collect` both build them here.

Task loading is also where a request's task errors get their blame: the field of the request
(`tasks.path` or `tasks.ids`) that the caller has to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sandboxes.task import Task
from sandboxes.tasks import TaskLoadError, iter_tasks, load_tasks
from service.errors import ClientError, InvalidRequest
from service.scheduler import GroupRunner, TaskLoader
from service.settings import Settings
from service.wire import TasksSpec

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool]]
TASKS_PATH = ("body", "tasks", "path")
TASKS_IDS = ("body", "tasks", "ids")


@dataclass
class Components:
    """What the service drives. Built at startup by a factory (default: `build_components`)."""

    runner: GroupRunner
    load_tasks: TaskLoader
    readiness: dict[str, ReadinessCheck] = field(default_factory=dict)
    warm_pool_size: Callable[[], float] | None = None
    aclose: Callable[[], Awaitable[None]] | None = None


ComponentsFactory = Callable[[Settings, Callable[[], int]], Awaitable[Components]]


def settings_task_loader(settings: Settings) -> TaskLoader:
    """Tasks by path or by dataset name (`--dataset NAME=PATH`). An id the source lacks is an
    InvalidRequest on `tasks.ids`; other errors are the source's (see `load_request_tasks`)."""

    def load(path: str, ids: list[str] | None, limit: int | None) -> list[Task]:
        source = settings.service.resolve_tasks_path(path)
        if ids is None:
            return load_tasks(source, limit=limit)
        # load_tasks(source, ids=ids, limit=limit), with the unknown ids told apart.
        wanted, tasks = set(ids), []
        for task in iter_tasks(source):
            if task.id in wanted:
                tasks.append(task)
                if limit is not None and len(tasks) >= limit:
                    return tasks
        missing = sorted(wanted - {t.id for t in tasks})
        if missing:
            raise InvalidRequest(
                f"task source {source!r}: no task with id {', '.join(missing)}",
                field=TASKS_IDS,
                kind="task_load_error",
            )
        return tasks

    return load


def load_request_tasks(load: TaskLoader, spec: TasksSpec) -> list[Task]:
    """The tasks a request names, through `load`; blocking. Every failure is an InvalidRequest
    naming the field to fix: a loader's own ClientError as it is, anything else on `tasks.path`."""
    try:
        tasks = load(spec.path, spec.ids, spec.limit)
    except ClientError:
        raise
    except TaskLoadError as e:
        raise InvalidRequest(str(e), field=TASKS_PATH, kind="task_load_error") from e
    except (OSError, ValueError) as e:
        raise InvalidRequest(
            f"cannot load tasks from {spec.path!r}: {e}", field=TASKS_PATH, kind="task_load_error"
        ) from e
    if not tasks:
        raise InvalidRequest(f"no tasks found in {spec.path!r}", field=TASKS_PATH, kind="no_tasks")
    return tasks


async def build_components(
    settings: Settings,
    current_version: Callable[[], int] = lambda: 0,
    *,
    policy_must_answer: bool = False,
) -> Components:
    """The real policy client, Docker backend and episode runner.

    The policy server is asked for its model at once. If it does not answer, this raises
    PolicyError when `policy_must_answer` (collect: nothing to do without it); otherwise it only
    logs (serve: vLLM may still be loading weights; /readyz says not ready meanwhile, and the
    first episode resolves the model).
    """
    from sandboxes.docker_adapter import default_adapter
    from sandboxes.docker_backend import BackendSettings, DockerBackend
    from service.episode import EpisodeRunner
    from service.policy.client import PolicyClient, PolicyError

    p = settings.policy
    if not p.urls:
        raise ValueError("no policy server: pass --policy-url or set ROLLOUTS_POLICY_URL")
    policy = PolicyClient(
        p.urls,
        p.model,
        timeout_s=p.timeout_s,
        max_retries=p.max_retries,
        backoff_s=p.backoff_s,
        cooldown_s=p.cooldown_s,
    )
    try:
        await policy.start()
    except PolicyError as e:
        if policy_must_answer:
            await policy.aclose()
            raise
        log.warning("policy server not available yet: %s", e)
    backend = DockerBackend(
        BackendSettings(pool=settings.sandboxes.pool(), image_override=settings.sandboxes.image)
    )
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
