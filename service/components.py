"""What the scheduler drives, built in one place from one `Settings`: the policy client, the
sandbox backend (this machine's Docker Engine, or a Ray cluster's nodes with `ray_address`),
the episode runner, the task loader, readiness checks. `rollouts serve`
(service/app.py) and `rollouts collect` both build them here.

Task loading is also where a request's task errors get their blame: the field of the request
(`tasks.path` or `tasks.ids`) that the caller has to fix.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from sandboxes.backend import SandboxBackend
from sandboxes.calibration import Calibrator
from sandboxes.task import Task
from sandboxes.tasks import TaskLoadError, TaskRoots, UnknownTaskIds, select_tasks
from service.errors import ClientError, InvalidRequest
from service.policy.allowlist import PolicyAllowList
from service.policy.fleet import PolicyFleet
from service.policy.named import NamedPolicies, NamedPolicyRunner
from service.sample import PolicyTarget
from service.scheduler import GroupRunner, TaskLoader
from service.settings import PolicySettings, Settings
from service.wire import TasksSpec

if TYPE_CHECKING:
    from sandboxes.docker_adapter import DockerAdapter
    from service.policy.client import PolicyClient

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool]]
READY_TIMEOUT_S = 5.0  # a readiness check slower than this counts as failed
SHARED_CHECKS_MAX_AGE_S = 2.0  # how old shared results may be (recent_checks)
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
    # Where the sandboxes run (the Ray backend): per-node health, and samples placed per node
    # of a rollout, for /metrics and GET /v1/rollouts/{id}.
    sandbox_stats: Callable[[], dict] | None = None
    placement: Callable[[str], dict[str, int]] | None = None
    # The weight-update control plane over the policy servers (service/policy/fleet.py).
    fleet: PolicyFleet | None = None
    # The sandbox backend, for regrades (service/regrade.py); None: this service cannot regrade.
    sandboxes: SandboxBackend | None = None
    # The policy client, for the web view's token texts (/detokenize; service/ui/tokens.py).
    policy: PolicyClient | None = None
    # Grades each task's oracle at its first use (sandboxes/calibration.py), for /metrics.
    calibrator: Calibrator | None = None
    # The policy servers requests may name, and the sets they named (service/policy/named.py);
    # None: requests may name none.
    named_policies: NamedPolicies | None = None
    # The cores of the machines the sandboxes run on, as known at start: the Docker Engine's
    # CPUs, or the Ray cluster's sandbox slots. Where adaptive admission starts
    # (service/concurrency.py); None: unknown, or not asked (fixed concurrency).
    sandbox_cores: int | None = None
    _checks_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _checked: tuple[float, dict[str, bool]] | None = field(default=None, repr=False)

    async def checks(self) -> dict[str, bool]:
        """Each readiness check (policy server, Docker or Ray), run at once; a failing or slow
        check is False. What /readyz and the web view report."""

        async def run(check: ReadinessCheck) -> bool:
            try:
                return bool(await asyncio.wait_for(check(), READY_TIMEOUT_S))
            except Exception:  # noqa: BLE001 - a failing check means not ready
                return False

        results = await asyncio.gather(*(run(c) for c in self.readiness.values()))
        return dict(zip(self.readiness, results, strict=True))

    async def recent_checks(self, max_age_s: float) -> dict[str, bool]:
        """The checks' results, run again only when the last run is older than `max_age_s`:
        every event stream and waiting re-run shares one run (each check calls the policy
        server or Docker)."""
        async with self._checks_lock:
            now = time.monotonic()
            if self._checked is None or now - self._checked[0] > max_age_s:
                self._checked = (now, await self.checks())
            return self._checked[1]

    async def ready(self) -> bool:
        """Every readiness check passes: what a re-run of a masked sample waits for."""
        return all((await self.recent_checks(SHARED_CHECKS_MAX_AGE_S)).values())


ComponentsFactory = Callable[[Settings, Callable[[], int]], Awaitable[Components]]


def settings_task_loader(settings: Settings) -> TaskLoader:
    """Tasks by path inside the tasks roots (`--tasks-root`) or by dataset name (`--dataset
    NAME=PATH`), read lazily: one task at a time as the caller takes them. A path outside the
    roots is refused like a missing one; an id the source lacks is an InvalidRequest on
    `tasks.ids`; other errors are the source's (see `load_request_tasks`)."""
    roots = TaskRoots(settings.service.all_tasks_roots())

    def load(path: str, ids: list[str] | None, limit: int | None) -> Iterator[Task]:
        source = settings.service.resolve_tasks_path(path)
        tasks = select_tasks(source, ids=ids, limit=limit, roots=roots)  # source errors: now

        def blamed() -> Iterator[Task]:
            try:
                yield from tasks
            except UnknownTaskIds as e:
                raise InvalidRequest(str(e), field=TASKS_IDS, kind="task_load_error") from e
            finally:
                tasks.close()

        return blamed()

    return load


def load_request_tasks(
    load: TaskLoader, spec: TasksSpec, admit: Callable[[int], None] | None = None
) -> list[Task]:
    """The tasks a request names, through `load`; blocking. `admit(k)` is asked before the
    first task is read and again as each is read (k: the tasks held with it); it raises when
    they no longer fit, and then nothing more is read. Every failure is an InvalidRequest
    naming the field to fix: a loader's own ClientError as it is, anything else on `tasks.path`."""
    tasks: list[Task] = []
    loaded: Iterable[Task] = ()
    try:
        if admit is not None:
            admit(1)
        loaded = load(spec.path, spec.ids, spec.limit)
        for task in loaded:
            if admit is not None:
                admit(len(tasks) + 1)
            tasks.append(task)
    except ClientError:
        raise
    except TaskLoadError as e:
        raise InvalidRequest(str(e), field=TASKS_PATH, kind="task_load_error") from e
    except (OSError, ValueError) as e:
        raise InvalidRequest(
            f"cannot load tasks from {spec.path!r}: {e}", field=TASKS_PATH, kind="task_load_error"
        ) from e
    finally:
        close = getattr(loaded, "close", None)
        if close is not None:
            close()
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
    from sandboxes.calibration import CalibrationCache, sandbox_setting
    from sandboxes.docker_adapter import default_adapter
    from sandboxes.docker_backend import BackendSettings, DockerBackend
    from sandboxes.images import ImageResolver
    from sandboxes.verifier import default_grader
    from service.episode import EpisodeRunner
    from service.policy.client import PolicyClient, PolicyError

    p = settings.policy
    if not p.urls and not p.allow_urls:
        raise ValueError("no policy server: pass --policy-url or set ROLLOUTS_POLICY_URL")
    harnesses = settings.agent.harnesses()  # a bad profile fails before anything starts
    policy = PolicyClient(
        p.urls,
        p.model,
        timeout_s=p.timeout_s,
        max_retries=p.max_retries,
        backoff_s=p.backoff_s,
        cooldown_s=p.cooldown_s,
        pause_poll_s=p.pause_poll_s,
        update_retries=p.update_retries,
        lora=p.lora_adapter(),
        version=current_version(),
    )
    try:
        if p.urls:  # else every request names its own (--allow-policy-url)
            await policy.start()
    except PolicyError as e:
        if policy_must_answer:
            await policy.aclose()
            raise
        log.warning("policy server not available yet: %s", e)
    backend_settings = BackendSettings(
        pool=settings.sandboxes.pool(),
        image_override=settings.sandboxes.image,
        runtime=settings.sandboxes.runtime,
    )
    if settings.sandboxes.ray_address:
        try:
            backend = await start_ray_backend(settings, backend_settings)
        except BaseException:
            await policy.aclose()
            raise
    else:
        backend = DockerBackend(
            backend_settings, resolver=ImageResolver(build=settings.sandboxes.build())
        )
    # The cache is read here, once, before the loop serves anything (a small file).
    calibrator = Calibrator(
        backend,
        CalibrationCache(settings.service.calibration_path),
        grader_version=default_grader().version,
        setting=sandbox_setting(settings.sandboxes.runtime, settings.sandboxes.image),
    )
    runner = EpisodeRunner(
        policy,
        backend,
        current_version=current_version,
        chat_template_kwargs=p.chat_template_kwargs,
        harnesses=harnesses,
        default_harness=settings.agent.harness,
        calibrator=calibrator,
        max_hold_s=p.max_hold_s,
    )
    named = None
    if p.allow_urls:
        named = NamedPolicies(
            PolicyAllowList(p.allow_urls), partial(_follower_client, p), idle_s=p.named_idle_s
        )
        runner = NamedPolicyRunner(runner, named)
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
        await calibrator.aclose()
        await backend.aclose()
        await policy.aclose()
        if named is not None:
            await named.aclose()

    # Idle warm containers, whatever the pool calls its per-key lists.
    idle = getattr(getattr(backend, "pool", None), "_idle", None)
    warm = (lambda: sum(len(v) for v in idle.values())) if isinstance(idle, dict) else None
    readiness: dict[str, ReadinessCheck] = {"policy": policy_ready} if p.urls else {}
    adaptive = settings.service.adaptive_concurrency
    if settings.sandboxes.ray_address:
        readiness["sandboxes"] = backend.ready  # some Ray node can take a sandbox
        cores = (backend.cluster.capacity() or None) if adaptive else None
    else:
        readiness["docker"] = docker_ready
        cores = await _engine_cpus(adapter) if adaptive else None
    return Components(
        runner=runner,
        load_tasks=settings_task_loader(settings),
        readiness=readiness,
        warm_pool_size=(lambda: float(warm())) if callable(warm) else None,
        aclose=aclose,
        sandbox_stats=getattr(backend, "stats", None),
        placement=getattr(backend, "placement", None),
        fleet=policy.fleet if p.urls else None,
        sandboxes=backend,
        policy=policy if p.urls else None,
        calibrator=calibrator,
        named_policies=named,
        sandbox_cores=cores,
    )


async def _engine_cpus(adapter: DockerAdapter) -> int | None:
    """The Docker Engine's CPUs; None (logged) where it cannot say yet: the service starts
    without the engine, as /readyz reports."""
    try:
        return await asyncio.wait_for(adapter.cpus(), READY_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - unknown is an answer
        log.warning("the Docker Engine did not say its CPUs (%s): adaptive admission starts "
                    "at its default level", e)  # fmt: skip
        return None


def _follower_client(p: PolicySettings, target: PolicyTarget) -> PolicyClient:
    """The client of a request-named set: the service's timeouts and retries, a fleet that
    never controls the servers (service/policy/follower.py)."""
    from service.policy.client import PolicyClient
    from service.policy.follower import FollowerFleet

    return PolicyClient(
        list(target.urls),
        target.model,
        timeout_s=p.timeout_s,
        max_retries=p.max_retries,
        backoff_s=p.backoff_s,
        cooldown_s=p.cooldown_s,
        pause_poll_s=p.pause_poll_s,
        fleet=FollowerFleet,
    )


async def start_ray_backend(settings: Settings, backend_settings: object):
    """The Ray backend (sandboxes/ray_backend.py) on `settings.sandboxes.ray_address`, started:
    connected, and the cluster's sandbox nodes found."""
    from sandboxes.ray_backend import RayBackend, ray_available
    from sandboxes.ray_cluster import RaySettings

    if not ray_available():
        raise ValueError("--ray-address needs Ray: pip install 'rollouts[ray]'")
    backend = RayBackend(
        RaySettings(address=settings.sandboxes.ray_address or "auto"),
        backend_settings,
        settings.sandboxes.build(),
    )
    await backend.start()
    return backend
