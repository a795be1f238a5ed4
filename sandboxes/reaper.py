"""Label-based clean-up of containers left behind by crashed processes.

Every container carries `rollouts.owner=<hostname>:<pid>:<start>` of the process that created
it. A container is an orphan, and is removed, when its owner ran on this host and that process
(pid plus start time) is gone, or when its owner ran inside a container (hostname = container
id) that is no longer running: a service container restarted by compose, or removed by `down`.
Containers of live processes (other users of the engine, other services) are never touched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket

from sandboxes.docker_adapter import DockerAdapter, default_adapter
from sandboxes.isolation import LABEL_MANAGED, LABEL_OWNER, process_start

log = logging.getLogger(__name__)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


_CONTAINER_ID = re.compile(r"[0-9a-f]{12}")


def is_orphan(
    owner: str | None,
    hostname: str | None = None,
    running_containers: set[str] | None = None,
) -> bool:
    """Whether a container with this owner label belongs to a process that is gone.

    `running_containers` holds the 12-character ids of the engine's running containers; without
    it owners on other hosts are never judged."""
    parts = (owner or "").split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        return False  # unknown owner: not ours to judge
    host, pid, start = parts
    if host == (hostname or socket.gethostname()):
        return not _pid_alive(int(pid)) or process_start(int(pid)) != start
    if running_containers is not None and _CONTAINER_ID.fullmatch(host):
        return host not in running_containers
    return False


async def reap_orphans(
    all_owners: bool = False,
    *,
    adapter: DockerAdapter | None = None,
    extra_labels: dict[str, str] | None = None,
) -> int:
    """Remove managed containers of dead owners (or of every owner). Returns how many."""
    adapter = adapter or default_adapter()
    containers = await adapter.list_containers({LABEL_MANAGED: "true", **(extra_labels or {})})
    running = {c["Id"][:12] for c in await adapter.call(adapter.client.api.containers)}
    doomed = [
        c["Id"]
        for c in containers
        if all_owners or is_orphan((c.get("Labels") or {}).get(LABEL_OWNER), None, running)
    ]
    results = await asyncio.gather(*(adapter.remove(cid) for cid in doomed), return_exceptions=True)
    for cid, r in zip(doomed, results, strict=True):
        if isinstance(r, Exception):
            log.warning("reaper could not remove %s: %s", cid[:12], r)
    return sum(1 for r in results if not isinstance(r, Exception))
