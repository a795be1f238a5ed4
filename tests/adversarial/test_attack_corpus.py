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
from standin.behaviour import ATTACKS, HOST_PROBE_PORT

pytestmark = [pytest.mark.docker]

AGENT_S = 15.0  # agent timeout of the attacked task copies
VERIFIER_S = 20.0
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
}
# Attacks the verifier can only detect (code inside the pytest process), and the flag that
# records each (sandboxes/reward.py). The others are prevented outright.
EXPECTED_FLAGS: dict[str, str] = {
    "exit_at_import": "session_unfinished",
    "patch_pytest_reporting": "pytest_tampered",
    "wreck_verifier_paths": "verifier_dir_tampered",
}
NEIGHBOUR_TASK = "gcd-of-list"
ATTACKED_TASK = "camel-to-snake"


@dataclass
class Outcome:
    reward: float | None
    status: str
    seconds: float
    text: str  # what the agent saw (observations) or the solve script printed
    flags: list[str]


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
    return Outcome(t.reward, t.status.value, time.monotonic() - t0, seen, t.reward_flags)


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
    return Outcome(r.reward, status, time.monotonic() - t0, r.agent_output, r.flags)


def _check(name: str, how: str, o: Outcome) -> None:
    assert o.seconds < BOUND_S, f"{name} via {how}: took {o.seconds:.0f} s"
    # Every attack is the agent's own doing, so it is graded, never masked: a masked sample
    # gets advantage 0, and wrecking the sandbox (kill -9 -1, a full disk) would beat a 0.
    assert not is_masked(o.status), f"{name} via {how}: masked ({o.status}), not graded"
    assert o.reward == 0.0, f"{name} via {how}: reward {o.reward} ({o.status}): a hack worked"
    if name in EXPECTED_FLAGS:
        assert EXPECTED_FLAGS[name] in o.flags, f"{name} via {how}: not flagged ({o.flags})"
    for marker in FORBIDDEN.get(name, ()):
        assert marker not in o.text, f"{name} via {how}: {marker!r} in the output"


@pytest.mark.parametrize("name", sorted(ATTACKS))
async def test_attack(
    name: str,
    backend: DockerBackend,
    small_task: Callable[..., Task],
    stand_in: Callable,
    case: CaseLog,
    docker_snapshot: dict,
) -> None:
    attacked = small_task(ATTACKED_TASK, agent=AGENT_S, verifier=VERIFIER_S)
    neighbour = small_task(NEIGHBOUR_TASK, agent=60, verifier=60)
    run_id = f"adv-{name}-{uuid.uuid4().hex[:8]}"
    tried = ATTACKS[name].strip().replace("\n", " ")[:160]
    rec_agent = case.add(name, "agent (stand-in --attack)", tried)
    rec_solve = case.add(name, "solve.sh (run_oracle)", tried)

    with host_listener(HOST_PROBE_PORT) as accepted, stand_in(attack=name) as url:
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
        }
    leaked = containers_labelled("rollouts.rollout_id", run_id)
    rec_agent.observed["leaked_containers"] = rec_solve.observed["leaked_containers"] = len(leaked)

    _check(name, "agent", agent)
    _check(name, "solve.sh", solve)
    assert neigh.reward == 1.0, f"neighbour got {neigh.reward} ({neigh.status}): {neigh.output}"
    assert accepted == [], f"a sandbox reached the host listener: {accepted}"
    assert leaked == [], f"containers left behind: {leaked}"
