"""`rollouts collect` end to end: real Docker, the stand-in policy over real HTTP, Parquet out."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from clients.commands.policy_stub import stand_in_policy
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.tasks import load_tasks
from service.collect import collect
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.trajectory import Status, Trajectory, from_arrow
from service.wire import RolloutRequest, SamplingSpec, TasksSpec

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")


def run_collect(out: Path, *args: str) -> list[Trajectory]:
    cmd = [sys.executable, "-m", "clients.cli", "collect", "--tasks", TASKS, "--out", str(out)]
    proc = subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.exists(), proc.stdout
    return from_arrow(pq.read_table(path))  # from_arrow validates every record


def by_group(trajs: list[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t)
    return groups


@pytest.mark.parametrize("p_correct", [1.0, 0.0])
def test_rewards_follow_the_stand_in(tmp_path: Path, p_correct: float) -> None:
    trajs = run_collect(
        tmp_path, "--limit", "3", "--n-samples", "8", "--p-correct", str(p_correct), "--seed", "3"
    )
    assert len(trajs) == 24
    groups = by_group(trajs)
    assert len(groups) == 3 and all(len(g) == 8 for g in groups.values())
    assert all(t.status is Status.ok for t in trajs), [t.status for t in trajs]
    assert {t.reward for t in trajs} == {p_correct}
    assert all(t.advantage == 0.0 for t in trajs)  # zero variance: no signal


def test_half_correct_varies_within_groups(tmp_path: Path) -> None:
    trajs = run_collect(
        tmp_path, "--limit", "3", "--n-samples", "8", "--p-correct", "0.5", "--seed", "11"
    )
    groups = by_group(trajs)
    mixed = [g for g in groups.values() if {t.reward for t in g} == {0.0, 1.0}]
    assert mixed, "with p_correct 0.5 some group should hold both rewards"
    for g in mixed:
        # RLOO: a passing sample's advantage is positive, a failing one's negative.
        assert all((t.advantage > 0) == (t.reward == 1.0) for t in g)


def test_stored_tokens_are_exactly_what_the_engine_served(tmp_path: Path) -> None:
    """Nothing is re-tokenized: every generated span, its logprobs and the prompt it was sampled
    from match the stand-in's own record of what it served, token for token."""
    record = tmp_path / "served.jsonl"
    with stand_in_policy(TASKS, p_correct=0.5, record=str(record)) as stand_in:
        trajs = run_collect(
            tmp_path / "out", "--limit", "2", "--n-samples", "4",
            "--policy-url", f"{stand_in.url}/v1",
        )  # fmt: skip
    served: dict[tuple[int, ...], list[dict]] = defaultdict(list)
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        served[tuple(entry["prompt_token_ids"])].append(entry)

    assert len(trajs) == 8
    for t in trajs:
        assert t.num_turns >= 3
        seq = t.prompt_token_ids + t.response_token_ids
        offset = len(t.prompt_token_ids)
        spans = _generated_spans(t)
        assert len(spans) == t.num_turns
        last = None
        for start, end in spans:
            prompt = tuple(seq[: offset + start])
            candidates = served.get(prompt, [])
            match = [c for c in candidates if c["token_ids"] == seq[offset + start : offset + end]]
            assert match, f"{t.trajectory_id}: generated span {start}:{end} was never served"
            assert match[0]["logprobs"] == t.rollout_logprobs[start:end]
            last = match[0]
        # prompt + response is exactly the last engine prompt plus what it generated
        assert list(prompt) + last["token_ids"] == seq


def test_policy_server_dying_masks_samples(tmp_path: Path) -> None:
    asyncio.run(_policy_dies(tmp_path))


async def _policy_dies(tmp_path: Path) -> None:
    await ensure_base_image()
    tasks = load_tasks(TASKS, limit=1)
    request = RolloutRequest(
        tasks=TasksSpec(path=TASKS, limit=1), n_samples=4, sampling=SamplingSpec(seed=1)
    )
    out = tmp_path / "out.parquet"
    with stand_in_policy(TASKS, p_correct=1.0, tokens_per_s=150) as stand_in:
        policy = PolicyClient([stand_in.url], timeout_s=5, max_retries=2, backoff_s=0.1)
        await policy.start()
        backend = DockerBackend(BackendSettings(reap_at_start=False))
        runner = EpisodeRunner(policy, backend)
        run = asyncio.create_task(
            collect(TASKS, tasks, runner, tmp_path / "store", out, request, concurrency=4)
        )
        await asyncio.sleep(2.5)  # mid-episode: the first turns are decoding or done
        stand_in.kill()
        summary = await asyncio.wait_for(run, timeout=180)
        await backend.aclose()
        await policy.aclose()
    trajs = from_arrow(pq.read_table(out))
    assert summary.trajectories == 4 and summary.masked == 4
    assert all(t.status is Status.policy_error for t in trajs), [t.status for t in trajs]
    assert all(t.reward is None and t.exclude_from_baseline for t in trajs)
    assert all(t.advantage == 0.0 for t in trajs)


def _generated_spans(t: Trajectory) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate([*t.loss_mask, 0]):
        if m == 1 and start is None:
            start = i
        elif m == 0 and start is not None:
            spans.append((start, i))
            start = None
    return spans
