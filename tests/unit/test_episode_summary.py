"""terminus-2's context summarization in the episode (service/episode_summary.py) over the
scripted vLLM of test_episode_runner: the proactive path, the passive one (full summary, short
summary, fallback), summarization off; every segment token-exact against what the engine saw and
generated, with logprobs and versions, parents and merging as service/trajectory.py defines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.noop_backend import NoopBackend
from sandboxes.tasks import load_tasks
from service.agent.harnesses import build_harness
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient
from service.sample import AgentLimits, SamplingParams, sample_specs
from service.trajectory import SegmentKind, Status, Trajectory
from standin.engine import StubSettings
from standin.server import build_app
from tests.fakes import FakeBackend
from tests.unit.test_episode_runner import TASK, EngineCall, FakeVLLM, chatml, decode, encode
from tests.unit.test_harnesses import synthetic_terminus_profile, write_profile

STAND_IN_TASKS = load_tasks(Path(__file__).resolve().parents[2] / "examples" / "tasks",
                            ids=["camel-to-snake"])  # fmt: skip
LONG = "x" * 200  # a long analysis: a few turns fill the small context


def main_reply(turn: int, done: bool = False) -> str:
    body = {
        "analysis": f"turn {turn} {LONG}",
        "plan": "p",
        "commands": [] if done else [{"keystrokes": f"echo {turn}\n", "duration": 0.1}],
    }
    if done:
        body["task_complete"] = True
    return json.dumps(body)


class ScriptedByPrompt(FakeVLLM):
    """Replies chosen by what the prompt's last user message asks (the synthetic profile's
    texts start with their name, e.g. `<summary.request>`)."""

    def __init__(self, replies: dict[str, Any], **kw: Any) -> None:
        super().__init__(self._reply, **kw)
        self.replies = replies
        self.asked: list[str] = []
        self.main_turns = 0
        self._prompt = ""

    def complete(self, host: str, body: dict[str, Any]) -> httpx.Response:
        self._prompt = decode(body["prompt"])
        return super().complete(host, body)

    def _reply(self, sample: int, turn: int) -> str | httpx.Response:
        last_user = self._prompt.rsplit("<|im_start|>user\n", 1)[-1]
        kind = re.match(r"<summary\.(\w+)>", last_user)
        name = kind.group(1) if kind else "main"
        self.asked.append(name)
        got = self.replies.get(name)
        if name in ("main", "handoff", "short_handoff", "fallback"):  # a main turn
            self.main_turns += 1
            got = self.replies["main"](self.main_turns - 1, name)
        if callable(got):
            got = got()
        return got


def too_long() -> httpx.Response:
    error = {"message": "too long", "type": "BadRequestError", "param": "input_tokens", "code": 400}
    return httpx.Response(400, json={"error": error})


async def run_one(
    tmp_path: Path, vllm: FakeVLLM, *, summarize: bool = True, threshold: int = 0, **beh: Any
) -> Trajectory:
    data = synthetic_terminus_profile("json")
    data["behaviour"].update(
        {
            "summarize": summarize,
            "summarize_below_free_tokens": threshold,
            "unwind_to_free_tokens": 0,
            **beh,
        }
    )
    harness = build_harness("terminus-2", write_profile(tmp_path, data))
    policy = PolicyClient(
        ["http://a:8000"], backoff_s=0.001, max_retries=1, transport=vllm.transport
    )
    backend = FakeBackend()
    runner = EpisodeRunner(
        policy, backend, harnesses={"terminus-2": harness}, default_harness="terminus-2"
    )
    got: list[Trajectory] = []

    async def on_trajectory(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(
        TASK, "r1", 1, SamplingParams(seed=1, max_tokens=400), AgentLimits(max_turns=12)
    )
    try:
        await runner.run_group(TASK, specs, on_trajectory)
    finally:
        await policy.aclose()
    [t] = got
    return t


def check_segments(t: Trajectory, calls: list[EngineCall]) -> None:
    """Every segment is what the engine saw and generated: its last call's prompt plus ids is
    the segment's sequence (or a prefix of a later one it was merged into), every generated
    token (mask 1) is an engine call's, in order, with its logprobs; the calls are all accounted
    for exactly once."""
    segments = t.all_segments()
    assert segments[-1].response_token_ids == t.response_token_ids
    used: set[int] = set()
    for s in segments:
        seq = s.prompt_token_ids + s.response_token_ids
        mine = []
        for i, call in enumerate(calls):
            start = len(call.prompt) - len(s.prompt_token_ids)
            if (
                start >= 0
                and seq[: len(call.prompt) + len(call.token_ids)] == call.prompt + call.token_ids
                and all(s.loss_mask[start : start + len(call.token_ids)])
                and len(call.token_ids) > 0
            ):
                mine.append((i, start, call))
        mask = [0] * len(s.response_token_ids)
        logprobs = [0.0] * len(s.response_token_ids)
        for _, start, call in mine:
            mask[start : start + len(call.token_ids)] = [1] * len(call.token_ids)
            logprobs[start : start + len(call.token_ids)] = call.logprobs
        assert s.loss_mask == mask, s.kind
        assert s.rollout_logprobs == pytest.approx(logprobs)
        assert [v >= 0 for v in s.response_policy_versions] == [m == 1 for m in mask]
        last = mine[-1][2]
        assert seq == last.prompt + last.token_ids, s.kind  # ends on its last generation
        used |= {i for i, _, _ in mine}
    assert used == set(range(len(calls)))  # (identical calls may match two segments)


async def test_proactive_summary_rewrites_the_conversation(tmp_path: Path) -> None:
    vllm = ScriptedByPrompt(
        {
            "main": lambda n, _: main_reply(n, done=n >= 4),
            "request": "SUMMARY of the work",
            "questions": "Q1? Q2?",
            "answers": "A1. A2.",
        },
        max_model_len=1500,
    )
    t = await run_one(tmp_path, vllm, threshold=800)
    assert t.status is Status.ok and t.reward == 1.0
    # Twice, two main turns each time: each summary continued the main conversation where it
    # stood and took those turns in; the restarted conversation's parent is the one before.
    kinds = [(s.kind, s.parent) for s in t.segments]
    assert kinds == [
        (SegmentKind.summary, None),
        (SegmentKind.questions, None),
        (SegmentKind.answers, 0),
        (SegmentKind.summary, 0),
        (SegmentKind.questions, None),
        (SegmentKind.answers, 3),
        (SegmentKind.main, 3),
    ]
    summarization = ["request", "questions", "answers", "handoff"]
    assert vllm.asked == ["main", "main", *summarization, "main", *summarization, "main"]
    check_segments(t, vllm.calls)
    summary, questions, answers = t.segments[:3]
    main = t.segments[-1]
    # The main turns before the summary are trained once, inside the summary segment.
    assert sum(summary.loss_mask) > len(encode("SUMMARY of the work")) + 1
    # The questions call is a fresh context: the questions request alone.
    q_text = decode(questions.prompt_token_ids)
    assert q_text.startswith("<|im_start|>user\n<summary.questions>")
    assert "SUMMARY of the work" in q_text
    # The answers call is the summary call's whole sequence, then the answers request.
    a_seq = answers.prompt_token_ids
    assert a_seq[: len(summary.prompt_token_ids) + len(summary.response_token_ids)] == (
        summary.prompt_token_ids + summary.response_token_ids
    )
    assert "<summary.answers>[questions=Q1? Q2?]" in decode(answers.response_token_ids)
    # The main conversation restarts: first message, questions request, the questions, hand-off.
    text = decode(main.prompt_token_ids)
    first = chatml([{"role": "user", "content": t.messages[0].content}], False)
    assert text.startswith(first + "<|im_start|>user\n<summary.questions>")
    assert "<|im_start|>assistant\nQ1? Q2?<|im_end|>" in text
    assert text.endswith("<summary.handoff>[answers=A1. A2.]<|im_end|>\n<|im_start|>assistant\n")
    versions = [v for s in t.segments for v in s.response_policy_versions if v >= 0]
    assert (t.policy_version_start, t.policy_version_end) == (min(versions), max(versions))


async def test_engine_context_error_unwinds_then_summarizes(tmp_path: Path) -> None:
    """No proactive threshold: a turn the engine refuses unwinds the history, then the full
    summary runs on what is left; the refused prompt's observation is dropped."""
    refused = []

    def main(n: int, name: str) -> Any:
        if n == 3 and not refused:
            refused.append(n)
            return too_long()
        return main_reply(n, done=n >= 5)

    vllm = ScriptedByPrompt(
        {"main": main, "request": "SUM", "questions": "Q?", "answers": "A."}, max_model_len=1500
    )
    t = await run_one(tmp_path, vllm, threshold=0, unwind_to_free_tokens=900)
    assert t.status is Status.ok
    assert [(s.kind, s.parent) for s in t.segments] == [
        (SegmentKind.main, None),
        (SegmentKind.summary, 0),
        (SegmentKind.questions, None),
        (SegmentKind.answers, 1),
        (SegmentKind.main, 0),
    ]
    check_segments(t, vllm.calls)
    # Unwound until 900 tokens were free: the summary saw the main conversation's exact tokens
    # up to the end of an earlier reply (a prefix of the main segment), then the request.
    main0, summary = t.segments[:2]
    seq0 = main0.prompt_token_ids + main0.response_token_ids
    cut = len(summary.prompt_token_ids)
    assert 0 < cut < len(seq0) and summary.prompt_token_ids == seq0[:cut]
    assert 1500 - cut >= 900 and decode(seq0[:cut]).endswith("<|im_end|>")
    assert decode(summary.response_token_ids).startswith("\n<|im_start|>user\n<summary.request>")


async def test_nothing_unwound_merges_the_summary_into_the_main_segment(tmp_path: Path) -> None:
    refused = []

    def main(n: int, name: str) -> Any:
        if n == 2 and not refused:
            refused.append(n)
            return too_long()
        return main_reply(n, done=n >= 3)

    vllm = ScriptedByPrompt(
        {"main": main, "request": "SUM", "questions": "Q?", "answers": "A."}, max_model_len=1500
    )
    t = await run_one(tmp_path, vllm)
    assert [(s.kind, s.parent) for s in t.segments] == [
        (SegmentKind.summary, None),
        (SegmentKind.questions, None),
        (SegmentKind.answers, 0),
        (SegmentKind.main, 0),
    ]
    check_segments(t, vllm.calls)


async def test_short_summary_then_fallback_when_calls_do_not_fit(tmp_path: Path) -> None:
    """The full summary's first call is refused: the short summary in a fresh context; then,
    with that refused too, the fallback without the model."""
    state = {"refuse_short": False}

    def main(n: int, name: str) -> Any:
        if n == 2:
            return too_long()
        return main_reply(n, done=n >= 4)

    def short() -> Any:
        return too_long() if state["refuse_short"] else "SHORT summary"

    vllm = ScriptedByPrompt({"main": main, "request": too_long, "short": short}, max_model_len=1500)
    t = await run_one(tmp_path, vllm, unwind_to_free_tokens=900)
    assert t.status is Status.ok
    assert [(s.kind, s.parent) for s in t.segments] == [
        (SegmentKind.main, None),
        (SegmentKind.summary, None),  # the short summary: a fresh context
        (SegmentKind.main, 0),
    ]
    check_segments(t, vllm.calls)
    assert "<summary.short_handoff>" in decode(t.prompt_token_ids)
    assert "[summary=SHORT summary]" in decode(t.prompt_token_ids)

    state["refuse_short"] = True
    vllm2 = ScriptedByPrompt(
        {"main": main, "request": too_long, "short": short}, max_model_len=1500
    )
    t2 = await run_one(tmp_path, vllm2, unwind_to_free_tokens=900)
    assert t2.status is Status.ok, t2.messages[-1].content
    # The summarization generated nothing: the main conversation before the rewrite, and the
    # one restarted from its history with the fallback.
    assert [(s.kind, s.parent) for s in t2.segments] == [
        (SegmentKind.main, None),
        (SegmentKind.main, 0),
    ]
    assert "<summary.fallback>" in decode(t2.prompt_token_ids)
    check_segments(t2, vllm2.calls)


async def test_summarize_off_ends_with_context_length(tmp_path: Path) -> None:
    vllm = ScriptedByPrompt(
        {"main": lambda n, _: main_reply(n), "request": "SUM"}, max_model_len=1500
    )
    t = await run_one(tmp_path, vllm, summarize=False, threshold=800)
    assert t.status is Status.context_length and t.segments == []
    assert "request" not in vllm.asked


async def test_stand_in_episode_summarizes_and_still_solves(tmp_path: Path) -> None:
    """The stand-in's long replies (verbose_words) fill a small context in a few turns: the
    episode summarizes, the stand-in picks its script up again after the rewrite, and the
    oracle solution is typed in the sandbox it kept."""
    task = STAND_IN_TASKS[0]
    app = build_app(
        StubSettings(p_malformed=0.0, verbose_words=60, max_model_len=4000), tasks=[task]
    )
    data = synthetic_terminus_profile("json")
    data["behaviour"].update(summarize_below_free_tokens=2400, unwind_to_free_tokens=1000)
    harness = build_harness("terminus-2", write_profile(tmp_path, data))
    policy = PolicyClient(["http://stub"], transport=httpx.ASGITransport(app=app))
    got: list[Trajectory] = []

    async def keep(t: Trajectory) -> None:
        got.append(t)

    specs = sample_specs(task, "r", 2, SamplingParams(seed=3, max_tokens=1024),
                         AgentLimits(max_turns=16))  # fmt: skip
    runner = EpisodeRunner(
        policy, NoopBackend(), harnesses={"terminus-2": harness}, default_harness="terminus-2"
    )
    async with policy:
        await runner.run_group(task, specs, keep)
    for t in got:
        assert (t.status, t.reward) == (Status.ok, 1.0), t.messages[-1].content
        kinds = [s.kind for s in t.segments]
        assert SegmentKind.questions in kinds and kinds[-1] is SegmentKind.main, (
            kinds,
            t.num_turns,
            len(t.prompt_token_ids),
            len(t.response_token_ids),
        )
        assert all(len(s.prompt_token_ids) + len(s.response_token_ids) <= 4000 for s in t.segments)
