"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """An open store in the test's own folder, closed after it."""
    s = Store(tmp_path)
    s.open()
    yield s
    s.close()
