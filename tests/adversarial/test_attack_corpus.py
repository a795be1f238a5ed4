"""The adversarial sample corpus, each case delivered two ways at once, next to a neighbour:

(a) as the agent's commands: the stand-in policy (`--attack NAME`) types it through the real
    EpisodeRunner (terminal, verifier in a fresh container);
(b) as a solve.sh through `run_oracle` (what `rollouts verify --solve-script` runs);
(c) meanwhile a neighbour sample runs the oracle of another task and must still score 1.

Checks: each ends within its time bound; the reward is 0, graded, never masked (never 1: no
attack solves the task, so a 1 means a reward hack worked; never masked: the agent wrecking its
own sandbox must not dodge a 0); forbidden markers (network reached, hidden files
read) never show; the neighbour is unaffected; nothing labelled with the run id survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from harness import CaseLog, containers_labelled

from sandboxes.docker_backend import DockerBackend
from sandboxes.oracle import run_oracle
from sandboxes.task import Task
from service.episode import EpisodeRunner, status_of
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Trajectory, is_masked
from standin.attacks import ATTACKS, HOST_PROBE_PORT
from tests import task_styles
from tests.resource_use import measured

pytestmark = [pytest.mark.docker]

AGENT_S = 10.0  # agent timeout of the attacked task copies
VERIFIER_S = 12.0
# Generous: creation, turns and the verifier on a loaded 2-core machine. Not a timing assert,
# a "did not hang" bound.
BOUND_S = AGENT_S + VERIFIER_S + 150.0

# Strings that must never appear in what the agent saw, per attack (never in the typed command
# itself: the terminal echoes it).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "network": ("NETWORK-REACHED",),
    "network_gateway": ("NETWORK-REACHED",),
    "network_loopback": ("NETWORK-REACHED",),
    # The hidden tests and the oracle are never in the agent container.
    "read_tests": ("def test_",),
    "read_solution": ("Oracle solution", "def test_"),
    "symlink_escape": ("root:*:", "root:!:", "root:$"),
    # PID 1's stdin or stdout opened through /proc (the attack prints this when it could).
    "channel_forge_workspace": ("CHANNEL-OPEN",),
    "channel_workspace_bomb": ("CHANNEL-OPEN",),
    "channel_flood": ("CHANNEL-OPEN",),
}
# Attacks the verifier can only detect (a value the tests cannot tell from the right one
# without asking it), and the flag that records each (sandboxes/reward.py). The others are
# prevented outright: the agent's code never runs in the tests' process (docs/reliability.md).
EXPECTED_FLAGS: dict[str, str] = {
    "always_equal": "value_hack",
    "late_truth": "value_hack",  # its truth changes when asked twice (tested.py, _truth)
    "exit_in_call": "solution_exit",
}
# The task shapes (tests/task_styles.py) each attack is delivered against: the one it was
# found on, or every one where it applies to all. The rest use the bundled task.
STYLES: dict[str, tuple[str, ...]] = {
    "pytest_plugin_autoload": ("pymethods", "unittest"),
    "plugin_metadata_case": ("pymethods", "unittest"),
    "pth_case": ("pymethods", "unittest"),
    "hook_swap": ("pymethods", "unittest"),
    "posing_plugin": ("pymethods", "unittest"),
    "forge_guard_records": ("bundled", "pymethods"),
    "always_equal": task_styles.STYLES,
    "late_truth": task_styles.STYLES,
    "runner_environment": task_styles.STYLES,
    "reach_through_objects": task_styles.STYLES,
    "runner_by_name": task_styles.STYLES,
    "pytest_outcome": ("pymethods",),
    "exit_in_call": ("plain",),
    "forge_verdict_stream": ("plain",),
    "malformed_verdict": ("plain",),
}
# Under gVisor (runsc) too: one attack of each class, on the agent side and the verifier side
# (the whole corpus runs under runc; docs/reliability.md).
UNDER_GVISOR = (
    "always_equal", "channel_flood", "channel_forge_workspace", "disk_fill", "fork_bomb",
    "forge_reward_and_kill_tests", "forge_verdict_stream", "kill_all", "memory_bomb",
    "network_gateway", "pid_filler", "pytest_plugin_autoload", "symlink_escape",
)  # fmt: skip
CASES = [
    pytest.param(name, style, "runc", id=f"{name}-{style}")
    for name in sorted(ATTACKS)
    for style in STYLES.get(name, ("bundled",))
] + [
    pytest.param(name, STYLES.get(name, ("bundled",))[-1], "runsc", id=f"{name}-runsc")
    for name in UNDER_GVISOR
]
# Attacks on the service's own memory (docs/reliability.md, "The agent container's channel"):
# this process's resident growth over the whole case (agent, solve.sh and neighbour) stays
# under the bound. The landed reader grew by 130-350 MB on a flood, 250 MB on a bomb.
RSS_BOUND = {"channel_flood": 64 << 20, "channel_workspace_bomb": 64 << 20}
NEIGHBOUR_TASK = "gcd-of-list"
ATTACKED_TASK = "camel-to-snake"


@dataclass
class Outcome:
    reward: float | None
    status: str
    seconds: float
    text: str  # what the agent saw (observations) or the solve script printed
    flags: list[str]
    verifier_output: str


@contextlib.contextmanager
def host_listener(port: int) -> Iterator[list[str]]:
    """A TCP service on every host address (loopback and the Docker bridge); records peers."""
    accepted: list[str] = []
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen()
    srv.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, peer = srv.accept()
            except OSError:
                continue
            accepted.append(str(peer))
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        srv.close()


async def _as_agent(url: str, task: Task, backend: DockerBackend, rollout_id: str) -> Outcome:
    policy = PolicyClient([url + "/v1"], backoff_s=0.05)
    await policy.start()
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        got.append(t)

    t0 = time.monotonic()
    try:
        specs = sample_specs(task, rollout_id, 1, SamplingParams(seed=7), AgentLimits(max_turns=8))
        await EpisodeRunner(policy, backend).run_group(task, specs, on_trajectory)
    finally:
        await policy.aclose()
    (t,) = got
    seen = "\n".join(m.content for m in t.messages if m.role in ("user", "system"))
    took = time.monotonic() - t0
    return Outcome(t.reward, t.status.value, took, seen, t.reward_flags, t.verifier_output)


async def _as_solve_script(
    script: str, task: Task, backend: DockerBackend, rollout_id: str
) -> Outcome:
    t0 = time.monotonic()
    r = await run_oracle(
        task,
        backend,
        solve_script=script.encode(),
        labels={"rollouts.rollout_id": rollout_id, "rollouts.task_id": task.id},
    )
    status = status_of(r.verdict).value
    return Outcome(r.reward, status, time.monotonic() - t0, r.agent_output, r.flags, r.output)


# Reachable under gVisor, which cannot seal PID 1's channel (docs/reliability.md): the attack
# gets through to it, and what it forges there must still be graded, never masked.
REACHABLE_UNDER_GVISOR = frozenset({"CHANNEL-OPEN"})


def _check(name: str, how: str, o: Outcome, runtime: str) -> None:
    assert o.seconds < BOUND_S, f"{name} via {how}: took {o.seconds:.0f} s"
    # Every attack is the agent's own doing, so it is graded, never masked: a masked sample
    # gets advantage 0, and wrecking the sandbox (kill -9 -1, a full disk) would beat a 0.
    assert not is_masked(o.status), f"{name} via {how}: masked ({o.status}), not graded"
    assert o.reward == 0.0, f"{name} via {how}: reward {o.reward} ({o.status}): a hack worked"
    # A verifier container is replaced only when it ended before the tests began, where
    # nothing of the agent's ran: no attack earns its code a second run.
    assert "graded in a fresh container" not in o.verifier_output, f"{name} via {how}: replaced"
    if name in EXPECTED_FLAGS:
        assert EXPECTED_FLAGS[name] in o.flags, f"{name} via {how}: not flagged ({o.flags})"
    for marker in FORBIDDEN.get(name, ()):
        if runtime == "runsc" and marker in REACHABLE_UNDER_GVISOR:
            continue
        assert marker not in o.text, f"{name} via {how}: {marker!r} in the output"


@pytest.mark.parametrize(("name", "style", "runtime"), CASES, indirect=["runtime"])
async def test_attack(
    name: str,
    style: str,
    runtime: str,
    backend: DockerBackend,
    small_task: Callable[..., Task],
    stand_in: Callable,
    case: CaseLog,
    docker_snapshot: dict,
) -> None:
    attacked = task_styles.styled(
        small_task(ATTACKED_TASK, agent=AGENT_S, verifier=VERIFIER_S), style
    )
    neighbour = small_task(NEIGHBOUR_TASK, agent=60, verifier=60)
    run_id = f"adv-{name}-{uuid.uuid4().hex[:8]}"
    tried = ATTACKS[name].strip().replace("\n", " ")[:160]
    shape = ("" if style == "bundled" else f", {style} task") + (
        "" if runtime == "runc" else f", {runtime}"
    )
    rec_agent = case.add(name, f"agent (stand-in --attack){shape}", tried)
    rec_solve = case.add(name, f"solve.sh (run_oracle){shape}", tried)

    with (
        measured() as use,
        host_listener(HOST_PROBE_PORT) as accepted,
        stand_in(attack=name) as url,
    ):
        agent, solve, neigh = await asyncio.gather(
            _as_agent(url, attacked, backend, run_id),
            _as_solve_script(ATTACKS[name], attacked, backend, run_id),
            run_oracle(
                neighbour, backend, solve_script=None, labels={"rollouts.rollout_id": run_id}
            ),
        )
    await backend.aclose()  # waits for background removals

    for rec, o in ((rec_agent, agent), (rec_solve, solve)):
        rec.seconds = round(o.seconds, 1)
        rec.observed = {
            "reward": o.reward,
            "status": o.status,
            "flags": o.flags,
            "neighbour_reward": neigh.reward,
            "host_connections": len(accepted),
            "service_rss_growth_mib": round(use.rss_growth / 2**20),
        }
    leaked = containers_labelled("rollouts.rollout_id", run_id)
    rec_agent.observed["leaked_containers"] = rec_solve.observed["leaked_containers"] = len(leaked)

    _check(name, "agent", agent, runtime)
    _check(name, "solve.sh", solve, runtime)
    assert neigh.reward == 1.0, f"neighbour got {neigh.reward} ({neigh.status}): {neigh.output}"
    assert accepted == [], f"a sandbox reached the host listener: {accepted}"
    assert leaked == [], f"containers left behind: {leaked}"
    assert use.rss_growth < RSS_BOUND.get(name, 1 << 62), f"{name}: the service grew: {use}"
