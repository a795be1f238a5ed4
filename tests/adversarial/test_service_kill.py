"""SIGKILL `rollouts serve` 10 times at random points of a 48-sample collection (6 task
copies x n=8, stand-in policy, real Docker), restarting it on the same data dir each time,
while a trainer pulls and acks over raw HTTP (no client-side dedupe, so duplicates are seen).

The points are drawn (seeded; the first three are one of each kind, mid-turn first) from three
kinds, each reached by an event, never by waiting a while: mid-turn (the stand-in holds its
requests once they have a drawn number of tokens, and the kill comes once one of them is held:
sandboxes, turns and verifications of the other samples are wherever they are), while the new
process resumes the groups the last one left (as soon as it answers), and after a commit (once
the trainer has been handed another group, which it may be acking). A point is drawn only where
it will come: mid-turn needs a group that has not started (a started one may be past its last
request, and the hold would wait for ever), after a commit a group still to be handed.

At the end: every expected trajectory id was delivered, none was delivered again after a
confirmed ack, and no container of any of the service processes survives.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from harness import EXAMPLES, CaseLog, containers_owned_by, copy_task, free_port
from service_process import (
    AUTH,
    ack,
    lease,
    start_service,
    stop_service,
    submit,
    trajectory_ids,
)

from clients.commands.policy_stub import stand_in_policy

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KILLS = 10
COPIES = 6
N = 8
SEED = 20261130
KINDS = ("mid-turn", "resuming", "after a commit")
CONCURRENCY = 8  # --max-concurrent-samples: episode slots, and as many finishing slots


class Trainer(threading.Thread):
    """Leases and acks until nothing is left, surviving the service's deaths. Every request is
    a fresh HTTP call, as a restarted trainer would make."""

    def __init__(self, url: str, rollout_id: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.rollout_id = rollout_id
        self.delivered: list[str] = []  # every id in every lease response, repeats included
        self.acked: set[str] = set()  # ids of batches whose ack answered 200
        self.after_ack: list[str] = []  # ids offered again after a confirmed ack: must be none
        self.acks: dict[int, int] = {}  # ack status -> count
        self.done = threading.Event()
        self.stop = threading.Event()
        self.more = threading.Condition()  # notified when `delivered` grows

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                r = lease(self.url, self.rollout_id, wait_s=2.0, lease_s=60.0)
                if r.status_code == 204:
                    if r.headers.get("X-Rollouts-Remaining") == "0":
                        self.done.set()
                        return
                    continue
                assert r.status_code == 200, r.text[:300]
                ids = trajectory_ids(r)
                self.after_ack += [i for i in ids if i in self.acked]
                with self.more:
                    self.delivered += ids
                    self.more.notify_all()
                a = ack(self.url, r.json()["batch_id"])
                self.acks[a.status_code] = self.acks.get(a.status_code, 0) + 1
                if a.status_code == 200:
                    self.acked.update(ids)
            except (httpx.TransportError, ValueError):
                time.sleep(0.2)  # the service is down (or died mid-response): try again


def unstarted_groups(url: str, rollout_id: str, total: int) -> int:
    """Groups of the rollout that certainly have not started, so each will make its first-turn
    request: beyond the finished samples, the episode and finishing slots, and the one started
    group whose samples may still wait for a slot (scheduler.py), in whole groups."""
    r = httpx.get(f"{url}/v1/rollouts/{rollout_id}", headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return max(0, total - r.json()["samples_completed"] - 2 * CONCURRENCY - N) // N


def reach_kill_point(
    kind: str, rng: random.Random, policy_url: str, trainer: Trainer, delivered: int,
    to_start: Callable[[], int],
) -> str:  # fmt: skip
    """Returns once the collection is at a point of `kind` (see the module's doc), or of
    "resuming" where a mid-turn point cannot come; returns the kind reached."""
    if kind == "mid-turn":
        after_tokens = rng.randint(0, 24)
        httpx.post(f"{policy_url}/standin/hold", params={"after_tokens": after_tokens}, timeout=30)
        # Counted with the hold in place: a group that has not started makes its shared first
        # turn's request once a slot frees, and the hold stops it. One request is all that is
        # certain: a held first turn may keep every slot, so no second request need come.
        if to_start() < 1:
            httpx.post(f"{policy_url}/standin/release", timeout=30)
            return "resuming"
        held = httpx.get(f"{policy_url}/standin/held", params={"count": 1}, timeout=300)
        assert held.status_code == 200, held.text
    elif kind == "after a commit":
        with trainer.more:
            handed = trainer.more.wait_for(lambda: len(trainer.delivered) > delivered, 300)
        assert handed, "no group was handed to the trainer after the restart"
    # "resuming": now (the process has just answered its health check).
    return kind


def test_sigkill_10_times_loses_and_repeats_nothing(tmp_path: Path, case: CaseLog) -> None:
    result = case.add(
        f"service_sigkill_x{KILLS}", "SIGKILL of rollouts serve",
        f"{KILLS} kills at random points (seed {SEED}: mid-turn, resuming, after a commit) of "
        f"{COPIES} tasks x n={N}, restart each time; trainer leases/acks over raw HTTP "
        "throughout",
    )  # fmt: skip
    rng = random.Random(SEED)
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "task.toml").exists())
    tasks = tmp_path / "tasks"
    for i in range(COPIES):
        copy_task(tasks, names[i % len(names)], agent_s=60, verifier_s=60)
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    extra = ("--max-concurrent-samples", str(CONCURRENCY), "--tasks-root", str(tasks))
    pids: list[int] = []
    started = time.monotonic()
    with stand_in_policy(str(EXAMPLES), p_correct=0.5, seed=3, tokens_per_s=5000) as policy:
        proc = start_service(data, policy.url, port, *extra, log=tmp_path / "serve.log")
        pids.append(proc.pid)
        rollout_id = submit(url, N, path=str(tasks))
        expected = {f"{rollout_id}.g{g}.s{s}" for g in range(COPIES) for s in range(N)}
        trainer = Trainer(url, rollout_id)
        trainer.start()
        kinds: list[str] = []
        try:
            # Mid-turn first, while every group is still to start; then the other two.
            first = ["mid-turn", *rng.sample(KINDS[1:], 2)]
            for k in range(KILLS):
                with trainer.more:
                    delivered = len(trainer.delivered)
                # After a commit needs a group still to be handed.
                left = len(expected) - len(set(trainer.delivered))
                kind = first[k] if k < len(first) else rng.choice(KINDS)
                if kind == "after a commit" and left <= N:
                    kind = "resuming"
                to_start = functools.partial(unstarted_groups, url, rollout_id, len(expected))
                kind = reach_kill_point(kind, rng, policy.url, trainer, delivered, to_start)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                kinds.append(kind)
                if kind == "mid-turn":  # the dead process's requests go nowhere now
                    httpx.post(f"{policy.url}/standin/release", timeout=30)
                proc = start_service(data, policy.url, port, *extra, log=tmp_path / "serve.log")
                pids.append(proc.pid)
            finished = trainer.done.wait(timeout=420)
        finally:
            trainer.stop.set()
            trainer.join(timeout=120)
            status = httpx.get(f"{url}/v1/rollouts/{rollout_id}", headers=AUTH, timeout=30)
            stop_service(proc)
    leaked = [c for pid in pids for c in containers_owned_by(pid)]
    delivered = set(trainer.delivered)
    result.observed = {
        "samples": len(expected),
        "delivered_unique": len(delivered & expected),
        "missing": len(expected - delivered),
        "unexpected_ids": sorted(delivered - expected)[:5],
        "redelivered_before_ack": len(trainer.delivered) - len(delivered),
        "redelivered_after_ack": len(trainer.after_ack),
        "acks": trainer.acks,
        "samples_completed": status.json().get("samples_completed"),
        "leaked_containers": len(leaked),
        "service_pids": len(pids),
        "kill_points": {k: kinds.count(k) for k in KINDS},
    }
    result.seconds = round(time.monotonic() - started, 2)
    assert finished, f"collection did not finish after the kills: {result.observed}"
    assert delivered == expected, result.observed
    assert trainer.after_ack == [], result.observed
    assert leaked == [], result.observed
    assert all(result.observed["kill_points"].values()), result.observed  # every kind, seeded
