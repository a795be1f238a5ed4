"""`rollouts collect` end to end: real Docker, the stand-in policy over real HTTP, Parquet out."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
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
from tests.runtimes import usable_runtime

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples" / "tasks")


def run_collect(out: Path, *args: str) -> list[Trajectory]:
    return run_collect_cli(out, *args)[0]


def run_collect_cli(out: Path, *args: str) -> tuple[list[Trajectory], str, float]:
    """(trajectories of the Parquet file written, stdout, wall seconds of the command)."""
    cmd = [sys.executable, "-m", "clients.cli", "collect", "--tasks", TASKS, "--out", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.exists(), proc.stdout
    return from_arrow(pq.read_table(path)), proc.stdout, wall  # from_arrow validates every record


def summary_rows(stdout: str) -> dict[str, str]:
    """The summary table `collect` prints: metric -> value, as printed."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃|").split("│")]
        if len(cells) == 2 and cells[0] and cells[1]:
            rows[cells[0]] = cells[1]
    return rows


def by_group(trajs: list[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t)
    return groups


@pytest.mark.parametrize("p_correct", [1.0, 0.0])
def test_rewards_follow_the_stand_in(tmp_path: Path, p_correct: float) -> None:
    trajs = run_collect(
        tmp_path, "--limit", "2", "--n-samples", "4", "--p-correct", str(p_correct), "--seed", "3"
    )
    assert len(trajs) == 8
    groups = by_group(trajs)
    assert len(groups) == 2 and all(len(g) == 4 for g in groups.values())
    assert all(t.status is Status.ok for t in trajs), [t.status for t in trajs]
    assert {t.reward for t in trajs} == {p_correct}
    assert all(t.advantage == 0.0 for t in trajs)  # zero variance: no signal


def test_collect_under_gvisor(tmp_path: Path) -> None:
    """`collect --runtime runsc`: every agent and verifier container under gVisor, the same
    rewards as under runc (the stand-in half right: some 1s, some 0s), nothing masked."""
    usable_runtime("runsc")
    trajs = run_collect(
        tmp_path, "--limit", "1", "--n-samples", "4", "--p-correct", "0.5", "--seed", "11",
        "--runtime", "runsc",
    )  # fmt: skip
    assert len(trajs) == 4 and all(t.status is Status.ok for t in trajs), [t.status for t in trajs]
    assert {t.reward for t in trajs} == {0.0, 1.0}
    assert all(t.reward_flags == [] for t in trajs), [t.reward_flags for t in trajs]


def test_an_unknown_runtime_is_refused_at_start(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "clients.cli", "collect", "--tasks", TASKS, "--out", str(tmp_path)]
    proc = subprocess.run([*cmd, "--runtime", "no-such-runtime"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "no runtime 'no-such-runtime'" in line and "daemon.json" in line


def test_half_correct_varies_within_groups_and_the_summary_is_true(tmp_path: Path) -> None:
    trajs, stdout, wall = run_collect_cli(
        tmp_path, "--limit", "3", "--n-samples", "4", "--p-correct", "0.5", "--seed", "11"
    )  # seeded: two groups hold both rewards, the third none right (pass@n below 1)
    groups = by_group(trajs)
    mixed = [g for g in groups.values() if {t.reward for t in g} == {0.0, 1.0}]
    assert mixed, "with p_correct 0.5 some group should hold both rewards"
    for g in mixed:
        # RLOO: a passing sample's advantage is positive, a failing one's negative.
        assert all((t.advantage > 0) == (t.reward == 1.0) for t in g)

    # The printed summary against the stored trajectories, recomputed here from the records.
    rows = summary_rows(stdout)
    graded = [t for t in trajs if not t.exclude_from_baseline]
    pass1 = sum(t.reward for t in graded) / len(graded)
    passn = sum(any(t.reward >= 1.0 for t in g if not t.exclude_from_baseline)
                for g in groups.values()) / len(groups)  # fmt: skip
    assert 0.0 < pass1 < 1.0 and pass1 <= passn  # a mix: neither figure is trivially 0 or 1
    assert int(rows["groups"]) == len(groups) == 3
    assert int(rows["trajectories"]) == len(trajs) == 12
    assert int(rows["masked"]) == len(trajs) - len(graded)
    assert float(rows["pass@1"]) == pytest.approx(pass1, abs=5e-4)
    assert float(rows["mean reward"]) == pytest.approx(pass1, abs=5e-4)
    assert float(rows["pass@n"]) == pytest.approx(passn, abs=5e-4)
    for status in {t.status for t in trajs}:
        assert int(rows[f"status {status.value}"]) == sum(t.status is status for t in trajs)
    # Rates: over the same run time, which lies within the command's wall time.
    per_min, tokens_per_s = float(rows["trajectories / min"]), float(rows["generated tokens / s"])
    seconds = 60 * len(trajs) / per_min
    assert 0 < seconds <= wall
    generated = sum(sum(t.loss_mask) for t in trajs)  # mask 1: the generated tokens
    assert tokens_per_s * seconds == pytest.approx(generated, rel=0.01)


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
        # Mid-episode, for certain: the stand-in dies as soon as the group's first turn (one
        # request for all 4 samples) has come back, before any sample's second turn.
        first_turn_back = asyncio.Event()
        complete = policy.complete

        async def complete_and_tell(*a, **kw):  # type: ignore[no-untyped-def]
            result = await complete(*a, **kw)
            first_turn_back.set()
            return result

        policy.complete = complete_and_tell  # type: ignore[method-assign]
        run = asyncio.create_task(
            # No re-runs: this is what a masked sample looks like (tests/e2e/test_reruns.py
            # has them run again).
            collect(TASKS, tasks, runner, tmp_path / "store", out, request, retry_masked=0)
        )
        await asyncio.wait_for(first_turn_back.wait(), timeout=180)
        stand_in.kill()
        summary = await asyncio.wait_for(run, timeout=180)
        await backend.aclose()
        await policy.aclose()
    trajs = from_arrow(pq.read_table(out))
    assert summary.trajectories == 4 and summary.masked == 4
    assert all(t.status is Status.policy_error for t in trajs), [t.status for t in trajs]
    assert all(t.reward is None and t.exclude_from_baseline for t in trajs)
    assert all(t.advantage == 0.0 for t in trajs)
    # Each sample had its first turn (kept, mask 1) when the policy server died.
    assert all(t.num_turns == 1 and set(t.loss_mask) == {1} for t in trajs), [
        (t.num_turns, len(t.loss_mask)) for t in trajs
    ]


def _generated_spans(t: Trajectory) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate([*t.loss_mask, 0]):
        if m == 1 and start is None:
            start = i
        elif m == 0 and start is not None:
            spans.append((start, i))
            start = None
    return spans
