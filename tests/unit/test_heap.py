"""The malloc tuning the service applies at startup (service/heap.py)."""

from __future__ import annotations

import platform

import pytest

from service.heap import return_large_buffers_to_os


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_mmap_threshold_is_pinned_on_glibc() -> None:
    assert return_large_buffers_to_os() is True
