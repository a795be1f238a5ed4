"""EpisodeRunner without Docker and without a policy server: a fake sandbox backend
(tests/fakes.py) and a scripted vLLM behind `httpx.MockTransport`, speaking the same HTTP
shapes as the recordings in tests/fixtures/vllm-wire."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandboxes.backend import SandboxExited, Verdict, VerifyResult
from sandboxes.task import Task, TaskConfig
from sandboxes.tasks import load_tasks
from service.agent.prompt import SYSTEM_PROMPT, first_user_message
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.policy.servers import ServerState
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import RETRYABLE_STATUSES, Status, Trajectory
from standin.background import BackgroundServer
from standin.engine import StubSettings
from standin.server import build_app
from tests.fakes import FakeBackend, FakeSandbox

# ---------------------------------------------------------------- a scripted vLLM

# The recordings' tokenizer has <|endoftext|>=0, <|im_start|>=1, <|im_end|>=2 (EOS); here every
# other byte of UTF-8 is one token (byte + 3), so any text round-trips.
SPECIAL = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
EOS = 2
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL) + ")")


def encode(text: str) -> list[int]:
    ids: list[int] = []
    for part in _SPECIAL_RE.split(text):
        ids += [SPECIAL[part]] if part in SPECIAL else [b + 3 for b in part.encode()]
    return ids


def decode(ids: list[int]) -> str:
    names = {v: k for k, v in SPECIAL.items()}
    out, buf = [], bytearray()
    for i in ids:
        if i in names:
            out += [buf.decode(errors="replace"), names[i]]
            buf.clear()
        else:
            buf.append(i - 3)
    return "".join(out) + buf.decode(errors="replace")


def chatml(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + ("<|im_start|>assistant\n" if add_generation_prompt else "")


@dataclass
class Gen:
    """One scripted generation. `stop`: the stop string that ends it (vLLM's text excludes it,
    its token ids include it); otherwise it ends on EOS, or on `length` when cut off."""

    text: str
    stop: str | None = None


# What the model says: script(sample, turn) -> reply text, a Gen, or an HTTP response to send
# instead (a fault). `sample` is the index of the group's first-turn choice it descends from.
Script = Callable[[int, int], "str | Gen | httpx.Response"]


@dataclass
class EngineCall:
    host: str
    sample: int
    turn: int
    prompt: list[int]
    token_ids: list[int]
    logprobs: list[float]


@dataclass
class FakeVLLM:
    script: Script
    max_model_len: int = 4096
    down: set[str] = field(default_factory=set)  # hosts that refuse connections
    requests: list[tuple[str, str, Any]] = field(default_factory=list)  # (host, path, body)
    calls: list[EngineCall] = field(default_factory=list)  # every generated choice
    _lineage: list[tuple[list[int], int]] = field(default_factory=list)  # (prefix, sample)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # a network round trip: other samples get to run meanwhile
        host = request.url.host
        if host in self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if request.url.path in ("/inference/v1/generate", "/weight_info", "/is_paused"):
            # A vLLM without --enable-scale-out and dev mode: the client uses /v1/completions.
            status = 403 if request.url.path.startswith("/inference") else 404
            return httpx.Response(status, json={"detail": "Not available"})
        body = json.loads(request.content) if request.content else None
        self.requests.append((host, request.url.path, body))
        if request.url.path == "/v1/models":
            card = {"id": "tiny", "object": "model", "created": 1, "owned_by": "vllm"}
            return httpx.Response(
                200,
                json={"object": "list", "data": [{**card, "max_model_len": self.max_model_len}]},
            )
        if request.url.path == "/tokenize":
            if "messages" in body:
                text = chatml(body["messages"], body.get("add_generation_prompt", True))
            else:
                text = body["prompt"]
            ids = encode(text)
            return httpx.Response(
                200, json={"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}
            )
        if request.url.path == "/detokenize":
            return httpx.Response(200, json={"prompt": decode(body["tokens"])})
        assert request.url.path == "/v1/completions", request.url.path
        return self.complete(host, body)

    def _error(self, param: str, message: str) -> httpx.Response:
        error = {"message": message, "type": "BadRequestError", "param": param, "code": 400}
        return httpx.Response(400, json={"error": error})

    def _sample_of(self, prompt: list[int]) -> int | None:
        found = [(len(p), s) for p, s in self._lineage if prompt[: len(p)] == p]
        return max(found)[1] if found else None

    def complete(self, host: str, body: dict[str, Any]) -> httpx.Response:
        assert body["logprobs"] == 1 and body["return_token_ids"] is True
        assert body["model"] == "tiny" and all(isinstance(t, int) for t in body["prompt"])
        prompt: list[int] = body["prompt"]
        if len(prompt) >= self.max_model_len:
            return self._error("input_tokens", f"your prompt contains {len(prompt)} tokens")
        if len(prompt) + body["max_tokens"] > self.max_model_len:
            return self._error("max_tokens", "max_tokens is too large")
        parent = self._sample_of(prompt)
        turn = decode(prompt).count("<|im_start|>assistant") - 1
        stops: list[str] = body.get("stop") or []
        choices = []
        for index in range(body["n"]):
            sample = index if parent is None else parent
            reply = self.script(sample, turn)
            if isinstance(reply, httpx.Response):
                return reply
            gen = reply if isinstance(reply, Gen) else Gen(reply)
            text, stop_reason, ids = gen.text, None, encode(gen.text) + [EOS]
            if gen.stop is not None:
                assert gen.stop in stops, f"stop string {gen.stop!r} was not asked for"
                text, stop_reason, ids = gen.text, gen.stop, encode(gen.text + gen.stop)
            finish = "stop"
            if len(ids) > body["max_tokens"]:
                ids, finish, stop_reason = ids[: body["max_tokens"]], "length", None
                text = decode(ids)
            logprobs = [-0.5 - 0.001 * k - 0.1 * sample for k in range(len(ids))]
            if parent is None:
                clash = [s for p, s in self._lineage if p == prompt + ids and s != sample]
                assert not clash, "first-turn replies of a group must differ to tell samples apart"
                self._lineage.append((prompt + ids, sample))
            self.calls.append(EngineCall(host, sample, turn, prompt, ids, logprobs))
            choices.append(
                {
                    "index": index,
                    "text": text,
                    "logprobs": {
                        "text_offset": list(range(len(ids))),
                        "token_logprobs": logprobs,
                        "tokens": [f"token_id:{t}" for t in ids],
                        "top_logprobs": [
                            {f"token_id:{t}": lp} for t, lp in zip(ids, logprobs, strict=True)
                        ],
                    },
                    "finish_reason": finish,
                    "stop_reason": stop_reason,
                    "token_ids": ids,
                    "prompt_logprobs": None,
                    "prompt_token_ids": prompt,
                }
            )
        completion_tokens = sum(len(c["token_ids"]) for c in choices)
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": completion_tokens,
            "total_tokens": len(prompt) + completion_tokens,
        }
        return httpx.Response(
            200,
            json={
                "id": "cmpl-fake",
                "object": "text_completion",
                "created": 1,
                "model": "tiny",
                "choices": choices,
                "usage": usage,
            },
        )

    # ------------------------------------------------------------ what the tests look at

    def completions(self) -> list[dict[str, Any]]:
        return [b for _, path, b in self.requests if path == "/v1/completions"]

    def calls_of(self, sample: int) -> list[EngineCall]:
        return [c for c in self.calls if c.sample == sample]


def reply(*keystrokes: str, done: bool = False, note: str = "") -> str:
    commands = [{"keystrokes": k, "duration": 0.1} for k in keystrokes]
    body = {"analysis": note, "plan": "", "commands": commands, "task_complete": done}
    return json.dumps(body)


def solves(sample: int, turn: int) -> str:
    """Runs a command, says it is done, confirms: three turns."""
    if turn == 0:
        return reply("echo solved > /app/out.txt\n", note=f"sample {sample}")
    return reply(done=True)


# ---------------------------------------------------------------- the harness

TASK = Task(
    id="t1",
    path="memory://t1",
    instruction="Write out.txt.",
    config=TaskConfig(agent_timeout_sec=30),
    environment_files={},
    test_files={"test.sh": b"#!/bin/sh\n"},
)
FIRST_PROMPT_LEN = len(
    encode(
        chatml(
            [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": first_user_message(TASK.instruction)},
            ]
        )
    )
)
A, B = "http://a:8000", "http://b:8000"


@dataclass
class Rig:
    vllm: FakeVLLM
    backend: FakeBackend
    policy: PolicyClient
    runner: EpisodeRunner

    async def run(
        self,
        n: int = 2,
        *,
        rollout_id: str = "r1",
        sampling: SamplingParams | None = None,
        **limits: Any,
    ) -> list[Trajectory]:
        got: list[Trajectory] = []

        async def on_trajectory(t: Trajectory) -> None:
            got.append(t)

        limits.setdefault("max_turns", 8)
        specs = sample_specs(
            TASK, rollout_id, n, sampling or SamplingParams(seed=1), AgentLimits(**limits)
        )
        await self.runner.run_group(TASK, specs, on_trajectory)
        assert sorted(t.sample_index for t in got) == list(range(n))
        assert self.backend.live == [], "a sandbox was never destroyed"
        return sorted(got, key=lambda t: t.sample_index)


@pytest.fixture
async def make_rig() -> AsyncIterator[Callable[..., Rig]]:
    clients: list[PolicyClient] = []

    def make(
        script: Script = solves, *, urls: tuple[str, ...] = (A,), max_model_len: int = 4096
    ) -> Rig:
        vllm = FakeVLLM(script, max_model_len=max_model_len)
        policy = PolicyClient(
            list(urls), backoff_s=0.001, max_retries=2, cooldown_s=60, transport=vllm.transport
        )
        clients.append(policy)
        backend = FakeBackend()
        return Rig(vllm, backend, policy, EpisodeRunner(policy, backend))

    yield make
    for policy in clients:
        await policy.aclose()


def check_tokens(t: Trajectory, vllm: FakeVLLM) -> None:
    """Prompt + response is exactly what the engine saw on its last turn plus what it generated
    then; loss 1 and the engine's logprobs exactly on generated tokens, 0 elsewhere."""
    calls = vllm.calls_of(t.sample_index)
    last = calls[-1]
    assert t.prompt_token_ids + t.response_token_ids == last.prompt + last.token_ids
    mask, logprobs = [0] * len(t.response_token_ids), [0.0] * len(t.response_token_ids)
    for call in calls:
        start = len(call.prompt) - len(t.prompt_token_ids)
        end = start + len(call.token_ids)
        assert t.response_token_ids[start:end] == call.token_ids
        mask[start:end] = [1] * len(call.token_ids)
        logprobs[start:end] = call.logprobs
    assert t.loss_mask == mask
    assert t.rollout_logprobs == pytest.approx(logprobs)


# ---------------------------------------------------------------- the happy path, shared turn


async def test_group_shares_one_first_turn_then_samples_go_alone(make_rig) -> None:
    rig = make_rig()
    trajs = await rig.run(n=4)
    assert [(t.status, t.reward, t.num_turns) for t in trajs] == [(Status.ok, 1.0, 3)] * 4
    renders = [b for _, p, b in rig.vllm.requests if p == "/tokenize" and "messages" in b]
    first_tokenize = [b for b in renders if b["messages"][0]["content"] == SYSTEM_PROMPT]
    assert len(first_tokenize) == 1  # the first prompt is rendered once for the group
    # The template's frame once (three renderings), then one rendering per observation.
    assert len(renders) == 1 + 3 + 4 * 2
    completions = rig.vllm.completions()
    assert completions[0]["n"] == 4 and all(c["n"] == 1 for c in completions[1:])
    assert len(completions) == 1 + 4 * 2  # then two more turns per sample
    assert all(c["cache_salt"].startswith("policy-v0-") for c in completions)
    assert len({tuple(t.prompt_token_ids) for t in trajs}) == 1
    assert len(trajs[0].prompt_token_ids) == FIRST_PROMPT_LEN
    for t in trajs:
        first = rig.vllm.calls_of(t.sample_index)[0]
        assert first.turn == 0 and t.response_token_ids[: len(first.token_ids)] == first.token_ids
        check_tokens(t, rig.vllm)
        roles = [m.role for m in t.messages]
        assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
        sandbox = rig.backend.sandbox_of(t.trajectory_id)
        assert sandbox.typed == [("echo solved > /app/out.txt\n", 0.1)]
    assert len(rig.backend.verified) == 4


async def test_token_invariants_with_stop_strings_and_cut_off_turns(make_rig) -> None:
    def script(sample: int, turn: int) -> str | Gen:
        if turn == 0:  # ends on a stop string: the ids are decoded to see the whole reply
            return Gen(reply("ls\n", note=f"s{sample}") + "\n", stop="END")
        if turn == 1:  # cut off by max_tokens: the turn is closed with untrained template
            return reply("x" * 400)
        return reply(done=True)

    rig = make_rig(script)
    sampling = SamplingParams(seed=1, max_tokens=300, stop=["END"])
    trajs = await rig.run(n=2, sampling=sampling, max_turns=4)
    assert [t.status for t in trajs] == [Status.ok] * 2
    for t in trajs:
        check_tokens(t, rig.vllm)
        assert '"keystrokes": "ls\\n"' in t.messages[2].content  # decoded through the stop
        assert "could not be used" in t.messages[5].content  # the cut-off reply
    assert len([p for _, p, _ in rig.vllm.requests if p == "/detokenize"]) == 2
    assert [c["max_tokens"] for c in rig.vllm.completions()][:2] == [300, 300]


# ---------------------------------------------------------------- limits


async def test_turn_limit_ends_a_graded_episode(make_rig) -> None:
    rig = make_rig(lambda s, t: reply(f"echo turn {t}\n", note=f"s{s}"))  # never done
    trajs = await rig.run(n=2, max_turns=3)
    for t in trajs:
        assert (t.status, t.reward, t.num_turns, t.exclude_from_baseline) == (
            Status.ok,
            1.0,
            3,
            False,
        )
        check_tokens(t, rig.vllm)  # the last observation was never tokenized into the ledger
        assert t.messages[-1].role == "assistant"
        assert len(rig.backend.sandbox_of(t.trajectory_id).typed) == 3


async def test_a_turn_asks_only_for_the_room_left_and_fills_the_context(make_rig) -> None:
    room = 60
    rig = make_rig(lambda s, t: reply("y" * 500), max_model_len=FIRST_PROMPT_LEN + room)
    trajs = await rig.run(n=1, sampling=SamplingParams(seed=1, max_tokens=1000))
    [t] = trajs
    assert rig.vllm.completions()[0]["max_tokens"] == room  # the turn budget, not 1000
    assert (t.status, t.stop_reason, t.num_turns) == (Status.context_length, "length", 1)
    assert not t.exclude_from_baseline and t.reward == 1.0  # graded: the model ran long
    assert len(t.response_token_ids) == room and t.loss_mask == [1] * room
    check_tokens(t, rig.vllm)


async def test_an_observation_that_would_overflow_ends_the_episode(make_rig) -> None:
    rig = make_rig(max_model_len=FIRST_PROMPT_LEN + 300)
    rig.backend.terminal = lambda sandbox, keys: "z" * 2000  # a huge terminal output
    [t] = await rig.run(n=1)
    assert (t.status, t.stop_reason, t.num_turns) == (Status.context_length, "length", 1)
    assert not t.exclude_from_baseline and rig.backend.verified
    assert len(rig.vllm.completions()) == 1  # the overflowing prompt never went out
    assert t.loss_mask == [1] * len(t.response_token_ids)  # the observation was not appended
    check_tokens(t, rig.vllm)


async def test_the_engine_refusing_a_long_prompt_is_context_length(make_rig) -> None:
    def script(sample: int, turn: int) -> str | httpx.Response:
        if turn == 1 and sample == 0:
            error = {"message": "too long", "type": "BadRequestError", "param": "input_tokens"}
            return httpx.Response(400, json={"error": {**error, "code": 400}})
        return solves(sample, turn)

    rig = make_rig(script)
    trajs = await rig.run(n=2)
    assert [t.status for t in trajs] == [Status.context_length, Status.ok]
    assert trajs[0].reward == 1.0 and trajs[0].num_turns == 1  # graded, not masked
    check_tokens(trajs[0], rig.vllm)  # the unseen observation was rewound


async def test_a_first_prompt_that_does_not_fit_is_context_length(make_rig) -> None:
    rig = make_rig(max_model_len=FIRST_PROMPT_LEN)
    trajs = await rig.run(n=2)
    assert [(t.status, t.num_turns, t.response_token_ids) for t in trajs] == [
        (Status.context_length, 0, [])
    ] * 2
    assert rig.vllm.completions() == []  # refused before sending
    assert len(rig.backend.verified) == 2  # graded like any episode the model ended


async def test_agent_timeout_is_graded(make_rig) -> None:
    rig = make_rig()
    rig.backend.send_keys_delay_s = 30
    trajs = await rig.run(n=2, timeout_s=0.2)
    for t in trajs:
        assert (t.status, t.reward, t.exclude_from_baseline) == (Status.agent_timeout, 1.0, False)
        assert t.num_turns == 1
        check_tokens(t, rig.vllm)
    assert len(rig.backend.verified) == 2


async def test_agent_timeout_masked_on_request_becomes_cancelled(make_rig) -> None:
    rig = make_rig()
    rig.backend.send_keys_delay_s = 30
    trajs = await rig.run(n=1, timeout_s=0.2, mask_agent_timeout=True)
    assert [(t.status, t.reward, t.exclude_from_baseline) for t in trajs] == [
        (Status.cancelled, None, True)
    ]


# ---------------------------------------------------------------- replies and policy faults


async def test_malformed_reply_is_fed_back_and_the_episode_goes_on(make_rig) -> None:
    def script(sample: int, turn: int) -> str:
        if turn == 0:
            return f"I will now solve it, sample {sample}."  # no JSON at all
        if turn == 1:
            return '{"commands": "not a list"}'
        return solves(sample, turn - 2)

    rig = make_rig(script)
    trajs = await rig.run(n=2)
    for t in trajs:
        assert (t.status, t.reward, t.num_turns) == (Status.ok, 1.0, 5)
        assert "could not be used: No JSON object found" in t.messages[3].content
        assert "Invalid reply field 'commands'" in t.messages[5].content
        assert len(rig.backend.sandbox_of(t.trajectory_id).typed) == 1  # only the good turn
        check_tokens(t, rig.vllm)


async def test_policy_failure_mid_episode_is_masked_and_rewound(make_rig) -> None:
    def script(sample: int, turn: int) -> str | httpx.Response:
        if sample == 1 and turn == 1:
            return httpx.Response(
                500, json={"error": {"message": "boom", "type": "x", "code": 500}}
            )
        return solves(sample, turn)

    rig = make_rig(script)
    ok, failed = await rig.run(n=2)
    assert (ok.status, ok.reward) == (Status.ok, 1.0)
    assert (failed.status, failed.reward, failed.exclude_from_baseline) == (
        Status.policy_error,
        None,
        True,
    )
    assert "boom" in failed.messages[-1].content
    # The observation the engine never saw is gone: the response ends on the first turn.
    [first] = rig.vllm.calls_of(1)
    assert failed.response_token_ids == first.token_ids and failed.num_turns == 1
    assert [v["rollouts.trajectory_id"] for v in rig.backend.verified] == [ok.trajectory_id]
    # The first turn, two more for sample 0, and three tries (max_retries 2) for sample 1.
    assert len(rig.vllm.completions()) == 1 + 2 + 3


async def test_policy_down_for_the_first_turn_masks_the_group(make_rig) -> None:
    rig = make_rig()
    rig.vllm.down.add("a")
    trajs = await rig.run(n=3)
    assert [(t.status, t.reward, t.response_token_ids) for t in trajs] == [
        (Status.policy_error, None, [])
    ] * 3
    assert rig.backend.verified == [] and len(rig.backend.destroyed) == 3


# ---------------------------------------------------------------- sandbox faults and verdicts


@pytest.mark.parametrize(
    ("verdict", "reward", "status", "final_reward", "masked"),
    [
        (Verdict.graded, 0.5, Status.ok, 0.5, False),
        (Verdict.tests_timeout, 0.0, Status.verifier_timeout, 0.0, False),
        (Verdict.tests_broken, None, Status.verifier_error, None, True),
        (Verdict.infrastructure, None, Status.sandbox_error, None, True),
    ],
)
async def test_verdicts_become_statuses(
    make_rig,
    verdict: Verdict,
    reward: float | None,
    status: Status,
    final_reward: float | None,
    masked: bool,
) -> None:
    rig = make_rig()
    rig.backend.verify_result = VerifyResult(reward, verdict, "verifier says")
    [t] = await rig.run(n=1)
    assert (t.status, t.reward, t.exclude_from_baseline) == (status, final_reward, masked)
    assert t.verifier_output == "verifier says"
    check_tokens(t, rig.vllm)


async def test_verifier_verdict_outranks_an_agent_timeout(make_rig) -> None:
    rig = make_rig()
    rig.backend.send_keys_delay_s = 30
    rig.backend.verify_result = VerifyResult(None, Verdict.infrastructure, "engine gone")
    [t] = await rig.run(n=1, timeout_s=0.2, mask_agent_timeout=True)
    assert (t.status, t.reward) == (Status.sandbox_error, None)


async def test_agent_wrecking_its_sandbox_is_graded_not_masked(make_rig) -> None:
    def terminal(sandbox: FakeSandbox, keystrokes: str) -> str:
        raise SandboxExited("the container exited (kill -9 -1)")

    rig = make_rig()
    rig.backend.terminal = terminal
    trajs = await rig.run(n=2)
    for t in trajs:
        assert (t.status, t.reward, t.exclude_from_baseline) == (Status.ok, 0.0, False)
        assert "sandbox broken by the agent" in t.messages[-1].content
        assert t.verifier_output.startswith("[rollouts] graded 0")
        check_tokens(t, rig.vllm)
    assert rig.backend.verified == []  # nothing left to verify: graded 0 on the spot


async def test_sandbox_fault_from_outside_is_masked(make_rig) -> None:
    def terminal(sandbox: FakeSandbox, keystrokes: str) -> str:
        raise RuntimeError("container removed by someone else")

    rig = make_rig()
    rig.backend.terminal = terminal
    [t] = await rig.run(n=1)
    assert (t.status, t.reward, t.exclude_from_baseline) == (Status.sandbox_error, None, True)
    assert "container removed" in t.messages[-1].content
    check_tokens(t, rig.vllm)


async def test_sandbox_that_cannot_start_is_masked(make_rig) -> None:
    rig = make_rig()
    rig.backend.create_error = RuntimeError("image missing")
    trajs = await rig.run(n=2)
    assert [(t.status, t.reward) for t in trajs] == [(Status.sandbox_error, None)] * 2
    assert len(rig.vllm.completions()) == 1  # the shared first turn still ran


# ---------------------------------------------------------------- routing over replicas


def hosts_of(vllm: FakeVLLM, sample: int) -> list[str]:
    return [c.host for c in vllm.calls_of(sample)]


async def test_later_turns_stay_on_the_server_of_the_first_turn(make_rig) -> None:
    rig = make_rig(urls=(A, B))
    await rig.run(n=3)
    assert {c.host for c in rig.vllm.calls} == {"a"}  # least loaded (a tie): the first listed
    # Nothing stays counted in flight: the next group lands on the same least-loaded server.
    await rig.run(n=1, rollout_id="r2")
    assert {c.host for c in rig.vllm.calls} == {"a"}


async def test_a_sample_moves_when_its_server_fails(make_rig) -> None:
    rig: Rig

    def script(sample: int, turn: int) -> str:
        if sample == 0 and turn == 1:
            rig.vllm.down.add("a")  # a dies after answering this
        return solves(sample, turn)

    rig = make_rig(script, urls=(A, B))
    trajs = await rig.run(n=2)
    assert [(t.status, t.reward) for t in trajs] == [(Status.ok, 1.0)] * 2
    assert hosts_of(rig.vllm, 0) == ["a", "a", "b"]
    died = next(i for i, c in enumerate(rig.vllm.calls) if (c.sample, c.turn) == (0, 1))
    assert {c.host for c in rig.vllm.calls[died + 1 :]} == {"b"}  # both samples moved
    for t in trajs:
        check_tokens(t, rig.vllm)


async def test_first_turn_failover_pins_the_group_where_it_ran(make_rig) -> None:
    # a is down: the first turn moves to b, and every sample follows it there (where its
    # prefix is cached) rather than spreading over b and c.
    rig = make_rig(urls=(A, B, "http://c:8000"))
    rig.vllm.down.add("a")
    trajs = await rig.run(n=2)
    assert [t.status for t in trajs] == [Status.ok] * 2
    assert {c.host for c in rig.vllm.calls} == {"b"}
    assert [h for h, p, _ in rig.vllm.requests if p == "/v1/completions"] == ["b"] * 5


async def test_a_failing_report_does_not_cost_the_siblings_their_results(make_rig) -> None:
    """One sample's report raises (a store or metrics fault): the other samples still run to
    their end and report their real results; the error surfaces once they are all done."""
    rig = make_rig()
    rig.backend.verify_result = VerifyResult(-2.5, Verdict.graded, "negative reward")
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        if t.sample_index == 0:
            raise RuntimeError("report failed")
        got.append(t)

    specs = sample_specs(TASK, "r-sib", 4, SamplingParams(seed=1), AgentLimits(max_turns=8))
    with pytest.raises(RuntimeError, match="report failed"):
        await rig.runner.run_group(TASK, specs, on_trajectory)
    assert sorted(t.sample_index for t in got) == [1, 2, 3]
    assert all((t.status, t.reward) == (Status.ok, -2.5) for t in got)


def test_metrics_take_any_finite_reward() -> None:
    from service.metrics import Metrics

    m = Metrics()
    t = Trajectory(
        trajectory_id="t", rollout_id="r", group_id="g", task_id="x", sample_index=0,
        prompt_token_ids=[1], response_token_ids=[], loss_mask=[], rollout_logprobs=[],
        reward=-3.0, status=Status.ok, reward_flags=["pytest_tampered"],
    )  # fmt: skip
    m.observe_trajectory(t, sum(t.loss_mask))
    m.observe_trajectory(t.model_copy(update={"reward": 1.0}), sum(t.loss_mask))
    assert m.registry.get_sample_value("rollouts_reward_sum", {"policy_version": "0"}) == -2.0
    flags = m.registry.get_sample_value("rollouts_reward_flags_total", {"flag": "pytest_tampered"})
    assert flags == 2.0


# ---------------------------------------------------------------- pauses and the agent's clock
#
# Against the stand-in (real HTTP, in this process; it pauses like vLLM in dev mode, and
# answers requests sent while it is paused only once resumed). A pause is not the agent's time.
# Each test holds its pause and ends it once it has seen the sample held, or once the sample
# has ended; where the pause must outlast the agent's budget it is held at least that long.

EXAMPLE = load_tasks(str(Path(__file__).resolve().parents[2] / "examples" / "tasks"), limit=1)[0]
AGENT_S = 2.0  # the samples' agent timeout (the stand-in decodes instantly: the agent needs ms)


class GatedSandbox(FakeSandbox):
    """Its first command waits for the backend's `gate`: the agent's clock runs, no request is
    out, and the test can pause the servers before the sample asks for its next turn."""

    async def send_keys(self, keystrokes: str, wait_s: float) -> str:
        backend = self.backend
        assert isinstance(backend, GatedBackend)
        if not backend.stepping.is_set():
            backend.stepping.set()
            await backend.gate.wait()
        return await super().send_keys(keystrokes, wait_s)


@dataclass
class GatedBackend(FakeBackend):
    stepping: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        # The verifier passes a sample whose agent ran to its end: it wrote the solution
        # (its first command) and checked it (its second); a timed-out agent scores 0.
        def grade(labels: dict[str, str]) -> VerifyResult:
            typed = self.sandbox_of(labels["rollouts.trajectory_id"]).typed
            return VerifyResult(float(len(typed) >= 2), Verdict.graded, f"{len(typed)} commands")

        self.verify_result = grade

    async def create(self, task: Task, labels: dict[str, str]) -> FakeSandbox:
        sandbox = GatedSandbox(self, dict(labels))
        self.created.append(sandbox)
        return sandbox


class PauseRig:
    def __init__(self, url: str, *, max_hold_s: float) -> None:
        self.url = url
        self.policy = PolicyClient([url], backoff_s=0.01, pause_poll_s=0.02)
        self.fleet = self.policy.fleet
        self.backend = GatedBackend()
        self.runner = EpisodeRunner(self.policy, self.backend, max_hold_s=max_hold_s)
        self.held = asyncio.Event()  # a generation request was seen held by a pause
        self.reported = asyncio.Event()  # every sample of the group has ended
        admit, is_paused = self.fleet.admit, self.fleet.is_paused

        async def admit_seen(url: str) -> ServerState:
            if self.fleet.servers[url].held:  # held by the service's pause
                self.held.set()
            return await admit(url)

        async def is_paused_seen(server: ServerState) -> bool:
            paused = await is_paused(server)  # asked only while a request is out
            if paused:
                self.held.set()
            return paused

        self.fleet.admit = admit_seen  # type: ignore[method-assign]
        self.fleet.is_paused = is_paused_seen  # type: ignore[method-assign]

    async def pause_outside(self) -> None:
        """A trainer pauses the engine behind the service's back."""
        async with httpx.AsyncClient() as h:
            (await h.post(self.url + "/pause", params={"mode": "keep"})).raise_for_status()

    async def resume_outside(self) -> None:
        async with httpx.AsyncClient() as h:
            (await h.post(self.url + "/resume")).raise_for_status()

    async def run(
        self,
        during: Callable[[], Awaitable[None]] | None = None,
        *,
        n: int = 1,
        timeout_s: float = AGENT_S,
        rollout_id: str = "r-pause",
    ) -> list[Trajectory]:
        got: list[Trajectory] = []

        async def on_trajectory(t: Trajectory) -> None:
            got.append(t)
            if len(got) == n:
                self.reported.set()

        limits = AgentLimits(max_turns=4, timeout_s=timeout_s)
        specs = sample_specs(EXAMPLE, rollout_id, n, SamplingParams(seed=5), limits)
        await asyncio.gather(
            self.runner.run_group(EXAMPLE, specs, on_trajectory),
            *([during()] if during is not None else []),
        )
        assert self.backend.live == []
        return sorted(got, key=lambda t: t.sample_index)


@pytest.fixture
async def pause_rig() -> AsyncIterator[Callable[..., PauseRig]]:
    server = BackgroundServer(build_app(StubSettings(p_malformed=0.0), tasks=[EXAMPLE])).start()
    rigs: list[PauseRig] = []

    def make(*, max_hold_s: float = 300.0) -> PauseRig:
        rigs.append(PauseRig(server.url, max_hold_s=max_hold_s))
        return rigs[-1]

    try:
        yield make
    finally:
        for rig in rigs:
            await rig.policy.aclose()
        server.stop()


def record(t: Trajectory) -> dict[str, Any]:
    """What the trainer sees of a sample, and its time."""
    return {
        "status": t.status.value,
        "reward": t.reward,
        "masked": t.exclude_from_baseline,
        "turns": t.num_turns,
        "agent_s": round(t.timings.agent_s, 3),
        "generate_s": round(t.timings.generate_s, 3),
        "held_s": round(t.timings.held_s, 3),
        "total_s": round(t.timings.total_s, 3),
    }


async def test_a_service_pause_longer_than_the_agent_timeout_is_not_the_agents_time(
    pause_rig,
) -> None:
    """A weight update holds the servers paused for longer than the sample's whole agent
    budget while it waits for its second turn: the clock stops meanwhile, and the sample
    finishes normally after the resume (it was agent_timeout, graded 0, unmasked)."""
    rig = pause_rig()

    async def update() -> None:
        await rig.backend.stepping.wait()  # the agent's clock runs; no request is out
        await rig.fleet.pause("keep")
        rig.backend.gate.set()
        await rig.held.wait()  # its next turn waits for the paused server
        await asyncio.sleep(2 * AGENT_S)  # the pause outlasts the agent's budget (at least)
        await rig.fleet.resume()

    [t] = await rig.run(update)
    got = record(t)
    assert (got["status"], got["reward"], got["masked"], got["turns"]) == ("ok", 1.0, False, 3), got
    assert t.timings.held_s > AGENT_S, got  # on record, and not the agent's


async def test_a_pause_from_outside_longer_than_the_agent_timeout_is_not_the_agents_time(
    pause_rig,
) -> None:
    """The same pause made behind the service's back (a trainer pausing the engine itself):
    the sample's request waits in the engine, the service asks the engine whether it is paused,
    and the clock stops while it is."""
    rig = pause_rig()

    async def trainer() -> None:
        await rig.backend.stepping.wait()
        await rig.pause_outside()
        rig.backend.gate.set()
        await rig.held.wait()  # the request is in the paused engine, and seen there
        await asyncio.sleep(2 * AGENT_S)
        await rig.resume_outside()

    [t] = await rig.run(trainer)
    got = record(t)
    assert (got["status"], got["reward"], got["masked"], got["turns"]) == ("ok", 1.0, False, 3), got
    assert t.timings.held_s > AGENT_S, got  # from the first answer that it is paused


async def test_a_sample_held_past_the_bound_is_masked_then_rerun_never_graded(pause_rig) -> None:
    """A server left paused (a trainer gone, an operator's mistake): a request held longer than
    the bound ends its sample masked as policy_error, which the scheduler re-runs; it is never
    verified. Its re-run, once the server serves again, is graded as usual."""
    rig = pause_rig(max_hold_s=0.2)

    async def left_paused() -> None:
        await rig.backend.stepping.wait()
        await rig.fleet.pause("keep")
        rig.backend.gate.set()
        await rig.reported.wait()  # held until the sample has ended
        await rig.fleet.resume()

    [t] = await rig.run(left_paused, timeout_s=300)
    assert (t.status, t.reward, t.exclude_from_baseline) == (Status.policy_error, None, True)
    assert t.status in RETRYABLE_STATUSES
    assert "held" in t.messages[-1].content and "paused policy server" in t.messages[-1].content
    assert rig.backend.verified == [] and t.num_turns == 1
    # The re-run (what the scheduler does with a retryable status), the server serving again.
    rig.backend.stepping.set()
    [again] = await rig.run(timeout_s=300, rollout_id="r-again")
    assert (again.status, again.reward, again.exclude_from_baseline) == (Status.ok, 1.0, False)


async def test_the_first_turn_has_the_same_bound(pause_rig) -> None:
    """The group's first turn, before any agent clock, waits in an engine paused from outside:
    past the bound every sample is masked policy_error (re-run), none is started or graded; it
    used to wait for as long as the pause lasted."""
    rig = pause_rig(max_hold_s=0.2)
    await rig.pause_outside()

    async def left_paused() -> None:
        await rig.reported.wait()
        await rig.resume_outside()

    trajs = await rig.run(left_paused, n=2, timeout_s=300)
    assert [(t.status, t.reward, t.exclude_from_baseline) for t in trajs] == [
        (Status.policy_error, None, True)
    ] * 2
    assert all("first turn: " in t.messages[-1].content for t in trajs)
    assert rig.backend.verified == []


async def test_the_first_turns_held_time_is_not_added_to_the_agents_clock(pause_rig) -> None:
    """The first turn is held by a pause for longer than the agent's budget; the agent then
    takes longer than its budget on its first command: it times out (it used to be given the
    first turn's held time on top of its budget, and finish)."""
    rig = pause_rig()
    rig.backend.stepping.set()  # no gate: the command only takes long
    rig.backend.send_keys_delay_s = 1.5 * AGENT_S
    await rig.policy.start()
    await rig.fleet.pause("keep")

    async def update() -> None:
        await rig.held.wait()
        await asyncio.sleep(2 * AGENT_S)
        await rig.fleet.resume()

    [t] = await rig.run(update)
    got = record(t)
    assert (got["status"], got["masked"], got["turns"]) == ("agent_timeout", False, 1), got
    assert t.timings.held_s > AGENT_S, got
