"""The engine connection under DockerAdapter: the docker SDK client and the two thread pools
its blocking calls run on, so the event loop never blocks. Short control calls (create, start,
remove, list, inspect) and long output streams (attach sessions, execs, builds) have a pool each:
a flood of long-running streams can never starve the calls that create or remove containers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import docker
import docker.errors

T = TypeVar("T")

# Engine API calls block for at most this long (image builds get their own timeout).
_API_TIMEOUT_S = 120


class DockerUnavailable(RuntimeError):
    """The Docker Engine could not be reached."""


class EngineCalls:
    """The client (made on first use) and the pools; DockerAdapter's parts build on it."""

    def __init__(self, control_workers: int = 16, stream_workers: int = 128) -> None:
        self._control = ThreadPoolExecutor(control_workers, thread_name_prefix="docker-ctl")
        self._stream = ThreadPoolExecutor(stream_workers, thread_name_prefix="docker-stream")
        self._client_lock = threading.Lock()
        self._client: docker.DockerClient | None = None

    @property
    def client(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                try:
                    self._client = docker.from_env(timeout=_API_TIMEOUT_S)
                except docker.errors.DockerException as e:
                    raise DockerUnavailable(f"cannot reach the Docker Engine: {e}") from e
            return self._client

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a short blocking SDK call on the control pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._control, partial(fn, *args, **kwargs))

    async def on_stream_pool(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking stream conversation (reads that last as long as a command)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._stream, partial(fn, *args))

    def close(self) -> None:
        self._control.shutdown(wait=False, cancel_futures=True)
        self._stream.shutdown(wait=False, cancel_futures=True)
