"""The real service for unit tests: the app on loopback HTTP (uvicorn in a thread), the real
store and task loader, and a group runner that needs neither Docker nor a policy. One setup
for the API, hardening, web-surface and scheduler tests."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from sandboxes.task import Task
from service.app import create_app
from service.components import Components, settings_task_loader
from service.sample import SampleSpec
from service.scheduler import TaskLoader
from service.settings import ServiceSettings, Settings
from service.store import DB_NAME
from service.trajectory import Status, Trajectory

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
KEY = "hardening-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trajectory(spec: SampleSpec, response_tokens: int = 2, seed: int = 0) -> Trajectory:
    """A valid ok trajectory; with many `response_tokens`, random ones (payload ~9 B/token)."""
    rng = random.Random(seed)
    n = response_tokens
    return Trajectory(
        trajectory_id=spec.trajectory_id,
        rollout_id=spec.rollout_id,
        group_id=spec.group_id,
        task_id=spec.task_id,
        sample_index=spec.sample_index,
        prompt_token_ids=[1, 2, 3],
        response_token_ids=[rng.randrange(150_000) for _ in range(n)],
        loss_mask=[1] * n,
        rollout_logprobs=[-rng.random() for _ in range(n)],
        reward=float(spec.sample_index % 2),
        status=Status.ok,
    )


class Runner:
    """Reports every sample once `gate` is open (what `report` makes of it); records the tasks
    it was asked to run."""

    def __init__(self, response_tokens: int = 2) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.response_tokens = response_tokens
        self.tasks_run: list[str] = []
        self.started = 0

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: Callable[..., Any],
        on_episode_end: Any = None,
        on_start: Any = None,
    ) -> None:
        self.tasks_run.append(task.id)
        self.started += len(samples)
        for s in samples:
            if on_start is not None:
                await on_start(s.trajectory_id)
            while not self.gate.is_set():
                await asyncio.sleep(0.01)
            await on_trajectory(await asyncio.to_thread(self.report, s))

    def report(self, spec: SampleSpec) -> Trajectory:
        return trajectory(spec, self.response_tokens, hash(spec.trajectory_id))


def make_settings(data_dir: Path, **service: Any) -> Settings:
    config: dict[str, Any] = dict(
        port=free_port(), data_dir=data_dir, api_key=KEY, max_concurrent_samples=4,
        max_queued_samples=64, tasks_roots=[EXAMPLES],
    )  # fmt: skip
    config.update(service)
    # (Leaves out settings an older service lacks, so these tests can be run against it.)
    config = {k: v for k, v in config.items() if k in ServiceSettings.model_fields}
    return Settings(service=ServiceSettings(**config))


@contextlib.contextmanager
def serve_in_thread(app: Any, port: int) -> Iterator[uvicorn.Server]:
    """`app` on 127.0.0.1:`port` (lifespan on) until the block ends."""
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield server
    finally:
        server.should_exit = True
        thread.join(30)


class Server:
    """The service on 127.0.0.1 in a thread, driving `runner`. `wrap_loader` may wrap the real
    task loader; `readiness` are the components' readiness checks; `extra`, more of the
    components' fields."""

    def __init__(
        self,
        settings: Settings,
        runner: Any,
        wrap_loader: Callable[[TaskLoader], TaskLoader] = lambda load: load,
        readiness: dict[str, Callable[[], Any]] | None = None,
        **extra: Any,
    ) -> None:
        async def components(s: Settings, _version: Callable[[], int]) -> Components:
            loader = wrap_loader(settings_task_loader(s))
            return Components(runner, loader, dict(readiness or {}), **extra)

        self.settings = settings
        self.runner = runner
        self.url = f"http://127.0.0.1:{settings.service.port}"
        self._app = create_app(settings, components)
        self._serving = serve_in_thread(self._app, settings.service.port)

    def __enter__(self) -> Server:
        self.server = self._serving.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.gate.set()
        self._serving.__exit__(*exc)

    @property
    def state(self) -> Any:
        return self.server.config.app.state.service

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=AUTH, timeout=30, **kw)

    def db(self, sql: str) -> list[tuple[Any, ...]]:
        """A read-only query of the service's database."""
        path = self.settings.service.data_dir / DB_NAME
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return conn.execute(sql).fetchall()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 20, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.05)


def rollout_status(c: httpx.Client, rollout_id: str) -> dict[str, Any]:
    r = c.get(f"/v1/rollouts/{rollout_id}")
    assert r.status_code == 200, r.text
    return r.json()
