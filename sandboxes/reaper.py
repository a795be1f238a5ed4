"""Label-based clean-up of containers left behind by crashed processes.

Every container carries `rollouts.owner=<hostname>:<pid>` of the process that created it. A
container whose owner is on this host and no longer alive is an orphan and is removed.
Containers of live processes (other users of the engine, other services) are never touched.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from sandboxes.docker_adapter import DockerAdapter, default_adapter
from sandboxes.isolation import LABEL_MANAGED, LABEL_OWNER

log = logging.getLogger(__name__)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def is_orphan(owner: str | None, hostname: str | None = None) -> bool:
    """Whether a container with this owner label belongs to a dead process on this host."""
    if not owner or ":" not in owner:
        return False  # unknown owner: not ours to judge
    host, _, pid = owner.rpartition(":")
    if host != (hostname or socket.gethostname()) or not pid.isdigit():
        return False
    return not _pid_alive(int(pid))


async def reap_orphans(
    all_owners: bool = False,
    *,
    adapter: DockerAdapter | None = None,
    extra_labels: dict[str, str] | None = None,
) -> int:
    """Remove managed containers of dead owners (or of every owner). Returns how many."""
    adapter = adapter or default_adapter()
    containers = await adapter.list_containers({LABEL_MANAGED: "true", **(extra_labels or {})})
    doomed = [
        c["Id"]
        for c in containers
        if all_owners or is_orphan((c.get("Labels") or {}).get(LABEL_OWNER))
    ]
    results = await asyncio.gather(*(adapter.remove(cid) for cid in doomed), return_exceptions=True)
    for cid, r in zip(doomed, results, strict=True):
        if isinstance(r, Exception):
            log.warning("reaper could not remove %s: %s", cid[:12], r)
    return sum(1 for r in results if not isinstance(r, Exception))
