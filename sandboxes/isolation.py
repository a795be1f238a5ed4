"""Container isolation: a task's limits and flags -> Docker create arguments (a pure function).

Defaults lock the sandbox down: no network, no capabilities, no privilege escalation, a
read-only root filesystem with size-capped tmpfs for the writable places, bounded pids,
CPU and memory, and a PID 1 that reaps zombies and outlives everything the agent can kill.
The Docker socket is never mounted.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sandboxes.control import PID1_COMMAND, SERVICE_STATE_DIR
from sandboxes.task import Task

LABEL_MANAGED = "rollouts.managed"
LABEL_OWNER = "rollouts.owner"
LABEL_POOL = "rollouts.pool"
LABEL_POOL_KEY = "rollouts.pool_key"
LABEL_BACKEND = "rollouts.backend"

# network_mode values a task may ask for. "host" would share the machine's network stack
# (and its loopback services) with untrusted code, so it is refused.
ALLOWED_NETWORK_MODES = frozenset({"none", "bridge"})

PIDS_LIMIT = 256
# Under gVisor the container's pids cgroup also counts the Sentry's own host threads and, on
# its ptrace platform, a stub process per address space: 54 for an idle sandbox, over 250 while
# 20 processes start (measured here). The sandbox's processes stay bounded by this and by its
# memory; a fork bomb ends the Sentry, which is graded as the agent's doing.
RUNSC_PIDS_LIMIT = 1024


def is_gvisor(runtime: str | None) -> bool:
    """`runsc`, or one of the gVisor settings scripts/runsc_setup.sh registers as runsc-<name>."""
    return runtime is not None and (runtime == "runsc" or runtime.startswith("runsc-"))


# Writable places besides /app, each its own small tmpfs (the root filesystem is read-only).
_SMALL_TMPFS_MB = {"/logs": 64, "/tests": 64, "/root": 64}
# The service's own state in the container (terminal log, tmux socket, PID 1's sealed copy of
# bash for the moment it starts): a tmpfs of its own so an agent that fills /tmp (or deletes
# it) cannot break the terminal. SERVICE_STATE_DIR is defined with the channel (control.py).
SERVICE_STATE_MB = 64


class IsolationError(ValueError):
    """A task asks for something the sandbox does not allow."""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid
    it names one process, even after the pid is reused or a container restarts as pid 1 again."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def owner_label() -> str:
    """`<hostname>:<pid>:<start>` of this process: lets the reaper tell live owners from dead
    ones. Inside a container the hostname is the container's id, which the reaper can check."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start(pid)}"


def container_args(
    task: Task, labels: dict[str, str], image: str, runtime: str | None = None
) -> dict[str, Any]:
    """Arguments for `APIClient.create_container` (host settings under "host_config").
    `runtime`: the OCI runtime (e.g. "runsc"); None: the engine's default."""
    env = task.config.environment
    if env.network_mode not in ALLOWED_NETWORK_MODES:
        raise IsolationError(
            f"task {task.id}: [environment] network_mode={env.network_mode!r} is not allowed "
            f"(use one of {sorted(ALLOWED_NETWORK_MODES)})"
        )
    for name, value in (
        ("cpus", env.cpus),
        ("memory_mb", env.memory_mb),
        ("storage_mb", env.storage_mb),
    ):
        if not value or value <= 0:
            raise IsolationError(f"task {task.id}: [environment] {name} must be > 0, got {value!r}")

    storage_mb = int(env.storage_mb)
    # mode=1777 so whichever user the image runs as can write; exec because agents run
    # what they write in /app and /tmp.
    tmpfs = {
        "/app": f"rw,exec,size={storage_mb}m,mode=1777",
        "/tmp": f"rw,exec,size={storage_mb}m,mode=1777",
    }
    for path, mb in _SMALL_TMPFS_MB.items():
        tmpfs[path] = f"rw,exec,size={mb}m,mode=1777"
    # exec: PID 1 seals itself by running a copy of bash made here (control.py).
    tmpfs[SERVICE_STATE_DIR] = f"rw,exec,nosuid,nodev,size={SERVICE_STATE_MB}m,mode=1777"

    memory = f"{int(env.memory_mb)}m"
    all_labels = {**labels, LABEL_MANAGED: "true", LABEL_OWNER: owner_label()}
    return {
        "image": image,
        # PID 1 runs the service's commands (control.py). The kernel never delivers kill(-1) to
        # PID 1 and ignores signals it has no handler for, so `kill -9 -1` inside the sandbox
        # kills the agent's processes but not the container (with Docker's tini as PID 1 the
        # container exited when its only child died, and a masked sandbox_error rewarded
        # wrecking the sandbox). The engine's SIGKILL (`docker rm -f`) still ends it at once.
        "command": PID1_COMMAND,
        "stdin_open": True,  # the control channel's requests come in on PID 1's stdin
        # With no network the engine need not set one up at all: the container still gets a
        # network namespace of its own (loopback only), but no libnetwork sandbox, whose
        # prestart hook (a re-exec of dockerd per container start) is a good part of what a
        # start costs the engine.
        "network_disabled": env.network_mode == "none",
        "working_dir": "/app",
        # A fixed hostname makes the shell prompt match the initial state the agent is shown.
        "hostname": "sandbox",
        "labels": all_labels,
        "environment": {"HOME": "/root", "TERM": "xterm-256color", "LANG": "C.UTF-8"},
        "host_config": {
            "network_mode": env.network_mode,
            "nano_cpus": int(float(env.cpus) * 1e9),
            "mem_limit": memory,
            "memswap_limit": memory,  # equal to mem_limit: no swap on top
            "pids_limit": RUNSC_PIDS_LIMIT if is_gvisor(runtime) else PIDS_LIMIT,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": tmpfs,
            "init": False,  # PID1_COMMAND is the init: tini exits when its child is killed
            "binds": [],  # nothing from the host, the Docker socket least of all
            # The service talks to sandboxes over exec and attach streams, never reads their
            # logs: an engine-side log file per container would only cost the engine.
            "log_config": {"type": "none"},
            **({"runtime": runtime} if runtime else {}),
        },
    }
