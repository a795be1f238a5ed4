"""Fixtures for tests against the real Docker Engine (marker `docker`).

`backend` runs its containers under the engine's default runtime (runc), or under each of
RUNTIMES for a test marked `@both_runtimes` (the isolation suite: gVisor must hold the same
guarantees, docs/reliability.md). runsc is registered by scripts/runsc_setup.sh, which
.ci/run calls; without it the runsc cases skip, or fail where CI=true."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandboxes.docker_adapter import default_adapter
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import BASE_TAG, ensure_base_image
from sandboxes.isolation import LABEL_BACKEND
from sandboxes.pool import PoolSettings
from sandboxes.task import Task
from sandboxes.tasks import iter_tasks
from tests.runtimes import usable_runtime

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "camel-to-snake"


@pytest.fixture
def example_task() -> Task:
    return next(iter_tasks(EXAMPLE))


@pytest.fixture
def run_labels() -> dict[str, str]:
    return {"rollouts.rollout_id": f"test-{uuid.uuid4().hex[:8]}", "rollouts.sample_id": "0"}


async def _leftovers(backend: DockerBackend) -> list[dict]:
    return await backend.adapter.list_containers({LABEL_BACKEND: backend.backend_id})


@pytest.fixture
def runtime(request: pytest.FixtureRequest) -> str:
    """The OCI runtime of `backend`'s containers: runc unless the test is `@both_runtimes`."""
    return usable_runtime(getattr(request, "param", "runc"))


async def _backend(warm_per_key: int, runtime: str = "runc") -> AsyncIterator[DockerBackend]:
    await ensure_base_image(BASE_TAG)
    pool = PoolSettings(warm_per_key=warm_per_key)
    b = DockerBackend(BackendSettings(pool=pool, reap_at_start=False, runtime=runtime))
    try:
        yield b
    finally:
        await b.aclose()
        assert await _leftovers(b) == [], "containers of this test were left behind"


@pytest.fixture
async def backend(runtime: str) -> AsyncIterator[DockerBackend]:
    """A backend without a warm pool (fewer containers on 2 cores); checks for leaks after."""
    async for b in _backend(warm_per_key=0, runtime=runtime):
        yield b


@pytest.fixture
async def pooled_backend(runtime: str) -> AsyncIterator[DockerBackend]:
    async for b in _backend(warm_per_key=1, runtime=runtime):
        yield b


@pytest.fixture
def adapter():
    return default_adapter()
