"""Fixtures shared across test folders.

`vllm_engines`: the real vLLM servers that several modules share (tests/e2e/real_vllm.py's
EnginePool), one start each for the whole run instead of one per module. They are stopped as soon
as the next test does not use the pool (and start again if a later one does), so an idle engine
holds no core or memory while the rest of the suite runs.

The venvs in which SkyRL's, verl's and verifiers' own code judge ours are built in the
background from the start of the run when a selected test uses one (tests/tool_venv.py), so
their installs overlap the tests before it; so is Harbor's (tests/harbor_env.py), whose terminus-2
profiles are imported once for the modules that use them (`harbor`, `harbor_profiles`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import harbor_env
from tests.e2e.real_vllm import EnginePool
from tests.skyrl import skyrl_venv
from tests.tool_venv import prefetch
from tests.verl import verl_venv
from tests.vf import vf_venv

_POOL = pytest.StashKey[EnginePool]()


@pytest.fixture(scope="session")
def harbor() -> str:
    """A python that imports Harbor 0.25.0's terminus-2."""
    return harbor_env.harbor_python()


@pytest.fixture(scope="session")
def harbor_profiles(harbor: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """terminus-2's json and xml profiles as `rollouts agent import-harbor` writes them."""
    return harbor_env.import_profiles(harbor, tmp_path_factory.mktemp("harbor-profiles"))


@pytest.fixture(scope="session")
def vllm_engines(request: pytest.FixtureRequest) -> Iterator[EnginePool]:
    pool = request.session.stash[_POOL] = EnginePool()
    try:
        yield pool
    finally:
        pool.stop_all()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    pool = item.session.stash.get(_POOL, None)
    needed = nextitem is not None and "vllm_engines" in getattr(nextitem, "fixturenames", ())
    if pool is not None and not needed:
        pool.stop_all()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    venvs = (harbor_env, skyrl_venv, verl_venv, vf_venv)
    builders = [(m.VENV, m.ensure_if_available) for m in venvs]
    prefetch([item.nodeid for item in session.items], builders)
