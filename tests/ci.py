"""One reading of "are we in CI": there a missing part fails the test, elsewhere it skips."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str, *, allow_module_level: bool = False) -> NoReturn:
    """Fail in CI (everything the suite needs is installed there), skip elsewhere."""
    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)
