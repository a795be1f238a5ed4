"""Fixtures of the adversarial corpus and fault-injection tests (real Docker, real processes).

- `case`: a `CaseResult` the test fills; at teardown it is appended to the results file with
  the test's outcome and wall time (the input of scripts/reliability_table.py).
- `small_task(name, agent=..., verifier=...)`: a copy of an example task in tmp_path with short
  timeouts, so the corpus stays fast.
- `stand_in(attack=...)`: a stand-in process (`python -m standin`) on loopback, one per attack.
- `backend`: a Docker backend without a warm pool whose containers are checked for leaks.
- `docker_snapshot`: volume and network names before the test, compared after it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import BASE_TAG, ensure_base_image
from sandboxes.isolation import LABEL_BACKEND
from sandboxes.pool import PoolSettings
from sandboxes.task import Task

# The helpers sit beside this file (tests/ is not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import CaseLog, copy_task, free_port, run_stand_in  # noqa: E402
from results_log import append_result  # noqa: E402

# The port the corpus's host listener takes and its network attacks aim at
# (standin/attacks.py reads it on import; the stand-in processes inherit it): a free one, so
# two runs on one machine do not collide.
os.environ.setdefault("ROLLOUTS_HOST_PROBE_PORT", str(free_port()))

from tests.runtimes import usable_runtime  # noqa: E402

# ---------------------------------------------------------------- results file


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def case(request: pytest.FixtureRequest) -> Iterator[CaseLog]:
    log = CaseLog(request.node.nodeid)
    started = time.monotonic()
    yield log
    rep = getattr(request.node, "rep_call", None)
    if rep is None or rep.skipped:
        return  # skipped cases are not results
    for result in log.results:
        if not result.seconds:
            result.seconds = round(time.monotonic() - started, 2)
        result.passed = bool(rep.passed)
        if rep.failed and "error" not in result.observed:
            lines = str(rep.longrepr).strip().splitlines()
            result.observed["error"] = (lines[-1] if lines else "failed")[:300]
        append_result(result)


# ---------------------------------------------------------------- tasks


@pytest.fixture
def small_task(tmp_path: Path) -> Callable[..., Task]:
    def make(name: str = "camel-to-snake", *, agent: float = 30, verifier: float = 30) -> Task:
        return copy_task(tmp_path, name, agent_s=agent, verifier_s=verifier)

    return make


# ---------------------------------------------------------------- processes


@pytest.fixture
def stand_in() -> Iterator[Callable[..., contextlib.AbstractContextManager[str]]]:
    yield run_stand_in


# ---------------------------------------------------------------- docker


@pytest.fixture
def runtime(request: pytest.FixtureRequest) -> str:
    """The OCI runtime of `backend`'s containers: runc unless a case names another."""
    return usable_runtime(getattr(request, "param", "runc"))


@pytest.fixture
async def backend(runtime: str) -> AsyncIterator[DockerBackend]:
    """No warm pool (fewer containers on 2 cores); nothing of this backend may survive it."""
    await ensure_base_image(BASE_TAG)
    settings = BackendSettings(
        pool=PoolSettings(warm_per_key=0), reap_at_start=False, runtime=runtime
    )
    b = DockerBackend(settings)
    try:
        yield b
    finally:
        await b.aclose()
        left = await b.adapter.list_containers({LABEL_BACKEND: b.backend_id})
        assert left == [], f"containers of this test were left behind: {left}"


def _names(kind: str) -> set[str]:
    out = subprocess.run(
        ["docker", kind, "ls", "-q"], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


@pytest.fixture
def docker_snapshot() -> Iterator[dict[str, set[str]]]:
    """Volumes and networks before the test; after it, none of ours may have been added.

    Others use the engine at the same time, so a name added meanwhile counts only when it
    carries our label (`rollouts.managed`)."""
    before = {"volume": _names("volume"), "network": _names("network")}
    yield before
    for kind in ("volume", "network"):
        added = _names(kind) - before[kind]
        ours = []
        for name in added:
            labels = subprocess.run(
                ["docker", kind, "inspect", "-f", "{{json .Labels}}", name],
                capture_output=True,
                text=True,
            ).stdout
            if "rollouts.managed" in labels:
                ours.append(name)
        assert not ours, f"{kind}s left behind: {ours}"
