"""Episodes that span a weight update, without vLLM and without Docker: the real episode runner
and policy client against the stand-in (real HTTP, in this process; it pauses, reloads other
deterministic weights and reports per-token weight versions like vLLM 0.32), with the sandboxes
faked (tests/fakes.py).

What must hold whatever the update: every token the engine generated is in a trajectory (the
engine's own count equals the trajectories' generated tokens), no sample is masked, and each
token's recorded version names the weights its logprob came from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sandboxes.tasks import load_tasks
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Trajectory
from standin.background import BackgroundServer
from standin.decoding import WEIGHTS_FILE, SamplingKnobs, logprob_of
from standin.engine import StubSettings
from standin.server import build_app
from standin.tokenizer import StubTokenizer
from tests.fakes import FakeBackend

ROOT = Path(__file__).resolve().parents[2]
TASK = load_tasks(str(ROOT / "examples" / "tasks"), limit=1)[0]
KNOBS = SamplingKnobs(StubTokenizer().vocab_size, 1.0, 1.0, -1, "processed")
BASE_LOGIT = 24.0


def version_of_salt(salt: str) -> str:
    """`policy-v<N>` of a cache salt `policy-v<N>-<run>`."""
    return salt.rsplit("-", 1)[0]


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.record = tmp / "served.jsonl"
        settings = StubSettings(
            p_malformed=0.0, record=str(self.record), tokens_per_s=150.0, max_model_len=8192
        )
        self.server = BackgroundServer(build_app(settings, tasks=[TASK]))
        self.policy: PolicyClient | None = None

    async def run(self, n: int, during) -> list[Trajectory]:  # type: ignore[no-untyped-def]
        """A group of `n` samples of the task (two turns each), with `during()` run meanwhile."""
        assert self.policy is not None
        runner = EpisodeRunner(self.policy, FakeBackend())
        got: list[Trajectory] = []

        async def keep(t: Trajectory) -> None:
            got.append(t)

        specs = sample_specs(TASK, "r", n, SamplingParams(seed=3), AgentLimits(max_turns=2))
        await asyncio.gather(runner.run_group(TASK, specs, keep), during())
        return sorted(got, key=lambda t: t.sample_index)

    def served(self) -> list[dict]:
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def generation_tokens(self) -> float:
        for line in httpx.get(self.server.url + "/metrics").text.splitlines():
            if line.startswith("vllm:generation_tokens_total{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("no vllm:generation_tokens_total")

    async def until_generating(self) -> None:
        async with httpx.AsyncClient() as h:
            while True:
                text = (await h.get(self.server.url + "/metrics")).text
                running = [ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_run")]
                if float(running[0].rsplit(" ", 1)[1]) >= 1:
                    break
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)


@pytest.fixture
async def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    with r.server:
        r.policy = PolicyClient([r.server.url], backoff_s=0.05)
        await r.policy.start()
        try:
            yield r
        finally:
            await r.policy.aclose()


def checkpoint(tmp: Path, logit: float) -> str:
    folder = tmp / f"ckpt-{logit:g}"
    folder.mkdir(exist_ok=True)
    (folder / WEIGHTS_FILE).write_text(json.dumps({"script_logit": logit}))
    return str(folder)


def turns(t: Trajectory) -> list[tuple[int, int]]:
    """(start, end) of each run of generated tokens in the response: a turn, however many
    requests it took."""
    out: list[tuple[int, int]] = []
    for i, m in enumerate(t.loss_mask):
        if m and out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        elif m:
            out.append((i, i + 1))
    return out


def check(trajs: list[Trajectory], rig: Rig, logit_of: dict[int, float]) -> None:
    generated = 0
    for t in trajs:
        assert t.status.value == "ok" and not t.exclude_from_baseline, t.status
        rows = zip(t.loss_mask, t.rollout_logprobs, t.response_policy_versions, strict=True)
        for m, lp, v in rows:
            if not m:
                assert v == -1 and lp == 0.0
                continue
            own = {logprob_of(KNOBS, logit_of[v], s) for s in (True, False)}
            others = {
                logprob_of(KNOBS, x, s) for w, x in logit_of.items() if w != v for s in (1, 0)
            }
            assert lp in own and lp not in others, (t.trajectory_id, lp, v)
        generated += sum(t.loss_mask)
    # Nothing the engine generated was lost on the way (partials included).
    assert generated == rig.generation_tokens() == sum(len(s["token_ids"]) for s in rig.served())
    assert rig.policy is not None and rig.policy.stats.discarded_tokens == 0


async def test_an_update_from_a_checkpoint_lands_mid_turn(rig: Rig, tmp_path: Path) -> None:
    new = checkpoint(tmp_path, 8.0)
    assert rig.policy is not None

    async def update() -> None:
        await rig.until_generating()  # the group's shared first turn is being generated
        await rig.policy.fleet.update(1, weights_path=new)

    trajs = await rig.run(2, update)
    check(trajs, rig, {0: BASE_LOGIT, 1: 8.0})
    first_turns = [t.response_policy_versions[slice(*turns(t)[0])] for t in trajs]
    for versions in first_turns:  # the first turn switched weights at one token, mid-turn
        k = versions.index(1)
        assert 0 < k and versions == [0] * k + [1] * (len(versions) - k)
    for t in trajs:
        assert (t.policy_version_start, t.policy_version_end) == (0, 1)
    later = [s for s in rig.served()[2:]]
    assert later and all(version_of_salt(s["cache_salt"]) == "policy-v1" for s in later)


async def test_trainer_driven_abort_continues_the_turn_from_its_partial(
    rig: Rig, tmp_path: Path
) -> None:
    new = checkpoint(tmp_path, 12.0)
    assert rig.policy is not None
    fleet = rig.policy.fleet

    async def trainer() -> None:
        await rig.until_generating()
        await fleet.pause("abort")
        await asyncio.sleep(0.3)  # the trainer moves its weights (straight to the server)
        async with httpx.AsyncClient() as h:
            body = {"method": "reload_weights", "kwargs": {"weights_path": new}}
            assert (await h.post(rig.server.url + "/collective_rpc", json=body)).is_success
        await fleet.tag(1)

    trajs = await rig.run(2, trainer)
    check(trajs, rig, {0: BASE_LOGIT, 1: 12.0})
    served = rig.served()
    partials = [s for s in served if s["finish_reason"] == "abort"]
    assert len(partials) == 2  # both choices of the shared first turn
    for t in trajs:
        first = t.response_policy_versions[slice(*turns(t)[0])]
        k = first.index(1)
        assert 0 < k and first == [0] * k + [1] * (len(first) - k)  # one turn, two requests
        seq = t.prompt_token_ids + t.response_token_ids
        part = next(
            p
            for p in partials
            if seq[: len(p["prompt_token_ids"]) + k] == p["prompt_token_ids"] + p["token_ids"]
        )
        cont = next(
            s
            for s in served
            if s["prompt_token_ids"] == part["prompt_token_ids"] + part["token_ids"]
        )
        assert (
            version_of_salt(cont["cache_salt"]) == "policy-v1" and cont["finish_reason"] != "abort"
        )
