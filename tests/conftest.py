"""Fixtures shared across test folders.

`vllm_engines`: the real vLLM servers that several modules share (tests/e2e/real_vllm.py's
EnginePool), one start each for the whole run instead of one per module. They are stopped as soon
as the next test does not use the pool (and start again if a later one does), so an idle engine
holds no core or memory while the rest of the suite runs.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.real_vllm import EnginePool

_POOL = pytest.StashKey[EnginePool]()


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
