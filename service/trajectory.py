"""The trajectory record: defined once, used by the store, the API, Parquet export and clients.

A trajectory is one sample of one task: the token-exact prompt and response, the loss mask and
the sampler's logprobs (TIS needs them), the policy version of the weights behind every response
token, the reward and how the episode ended.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

import pyarrow as pa
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    field_serializer,
    field_validator,
    model_validator,
)

from service.sample import SamplingParams


class Status(StrEnum):
    ok = "ok"
    agent_timeout = "agent_timeout"
    context_length = "context_length"
    verifier_timeout = "verifier_timeout"
    verifier_error = "verifier_error"
    sandbox_error = "sandbox_error"
    policy_error = "policy_error"
    cancelled = "cancelled"


# Infrastructure faults: the model did nothing wrong, so a reward of 0 would bias training.
# `exclude_from_baseline` is derived from this set and never stored independently.
MASKED_STATUSES: frozenset[Status] = frozenset(
    {Status.verifier_error, Status.sandbox_error, Status.policy_error, Status.cancelled}
)


def is_masked(status: Status | str) -> bool:
    return Status(status) in MASKED_STATUSES


# Masked statuses a re-run in a fresh sandbox can cure (the scheduler re-runs them, up to
# --retry-masked times): faults of the sandboxes' or the policy servers' side. Not `cancelled`
# (it was asked for) nor `verifier_error` (the task's own tests gave no reward: they would again).
RETRYABLE_STATUSES: frozenset[Status] = frozenset({Status.sandbox_error, Status.policy_error})


class Timings(BaseModel):
    """Seconds spent per stage of one sample."""

    create_s: float = 0.0
    generate_s: float = 0.0
    agent_s: float = 0.0
    # Of total_s: seconds its generation requests were held by paused policy servers (weight
    # updates), which the agent's time budget does not count.
    held_s: float = 0.0
    verify_s: float = 0.0
    teardown_s: float = 0.0
    total_s: float = 0.0


class Message(BaseModel):
    role: str
    content: str


class VerifierFile(BaseModel):
    """A file the tests left under /logs/verifier (the reward among them), capped at 16 KiB."""

    path: str
    content: str


class Grading(BaseModel):
    """One verification of a sample's final workspace: the first when it was collected, one
    more per regrade (service/regrade.py). The latest is what the trajectory serves."""

    reward: float | None
    status: Status  # what this grading makes of the sample (masked ones carry no reward)
    reward_flags: list[str] = Field(default_factory=list)
    verifier_files: list[VerifierFile] = Field(default_factory=list)
    # The grading rules and verifier runtime (sandboxes/verifier.py Grader.version; "" when no
    # verifier ran, e.g. a workspace the agent made impossible to take out) and the sha256 of
    # the task's tests (sandboxes/task.py Task.tests_digest).
    grader_version: str = ""
    tests_digest: str = ""
    graded_at: float = 0.0  # unix time

    @model_validator(mode="after")
    def _masked_has_no_reward(self) -> Grading:
        if is_masked(self.status):
            self.reward = None
        return self


class SegmentKind(StrEnum):
    """What produced a segment: the agent's own turns, or one of the three calls of a context
    summarization (terminus-2: the summary, the questions a fresh context asks, the answers)."""

    main = "main"
    summary = "summary"
    questions = "questions"
    answers = "answers"


class Segment(BaseModel):
    """One linear, token-exact piece of an episode: a prompt and the response generated after
    it (observations inside the response carry loss_mask 0, as in a trajectory). An episode
    whose context was never rewritten is one segment; each summarization adds segments, since
    the conversation after it is no longer an extension of the tokens before it."""

    kind: SegmentKind
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    response_policy_versions: list[int]
    # The index (in Trajectory.segments) of the segment whose conversation this one's prompt
    # was built from, None for the first and for a call made in a fresh context. An earlier
    # segment, or the last one: a summarization that failed part-way leaves calls that branched
    # from the main conversation, which then went on to be graded (always the last segment).
    parent: int | None = None

    @model_validator(mode="after")
    def _check(self) -> Segment:
        _check_response(
            self.response_token_ids,
            self.loss_mask,
            self.rollout_logprobs,
            self.response_policy_versions,
        )
        return self


def _check_response(
    ids: list[int], mask: list[int], logprobs: list[float], versions: list[int]
) -> None:
    n = len(ids)
    if len(mask) != n or len(logprobs) != n:
        raise ValueError(
            "response_token_ids, loss_mask and rollout_logprobs must have equal lengths "
            f"({n}, {len(mask)}, {len(logprobs)})"
        )
    if len(versions) != n:
        raise ValueError(
            f"response_policy_versions must have one entry per response token ({n}), "
            f"got {len(versions)}"
        )
    for m, lp, v in zip(mask, logprobs, versions, strict=True):
        if m not in (0, 1):
            raise ValueError("loss_mask entries must be 0 or 1")
        if m == 0 and lp != 0.0:
            raise ValueError("rollout_logprobs must be 0.0 where loss_mask is 0")
        if (v < 0) != (m == 0) or v < -1:
            raise ValueError(
                "response_policy_versions must be -1 exactly where loss_mask is 0 and a "
                "version (>= 0) where it is 1"
            )


class Trajectory(BaseModel):
    trajectory_id: str
    rollout_id: str
    group_id: str
    task_id: str
    sample_index: int
    policy_version_start: int = 0
    policy_version_end: int = 0
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    # One entry per response token: the policy version of the weights that generated it (from
    # the engine's own weight_versions where it reports them), -1 on tokens it did not generate
    # (observations, template tokens). A turn that spans a weight update changes version at the
    # exact token. Records written before this field: derived (see _versions_of_old_records).
    response_policy_versions: list[int] = Field(default_factory=list)
    # An episode whose context was summarized, in order, when it has more than one segment
    # (service/agent/harnesses/terminus2.py); [] when it is one segment. The fields above are
    # always the last segment, the main conversation whose workspace was graded, so a trainer
    # that reads one linear sequence per sample reads what it read before segments existed.
    segments: list[Segment] = Field(default_factory=list)
    reward: float | None
    status: Status
    exclude_from_baseline: bool = False
    stop_reason: str | None = None
    num_turns: int = 0
    messages: list[Message] = Field(default_factory=list)
    verifier_output: str = ""
    # Why the reward is what it is: the grading flags (sandboxes/reward.py) and the files the
    # tests left behind. A flag in SUSPECTED_HACKS means the tested code tried to forge a pass.
    reward_flags: list[str] = Field(default_factory=list)
    verifier_files: list[VerifierFile] = Field(default_factory=list)
    timings: Timings = Field(default_factory=Timings)
    # How the tokens were sampled: the parameters every completion request carried (None for a
    # sample that never reached the policy), and the chat template's keyword arguments (in JSON
    # and Arrow a JSON object as a string).
    sampling: SamplingParams | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    # The conversation format the agent spoke (service/agent/harnesses) and the sha256 of its
    # profile (the texts and settings it used). Records written before harnesses: "default", "".
    harness: str = "default"
    harness_profile_hash: str = ""
    advantage: float | None = None
    # The tests the served reward came from (Task.tests_digest; for a sample never graded, the
    # task's tests when it was collected), and every grading it received, oldest first: the
    # served reward, status, flags and files are the latest one's. Older records: "", [].
    tests_digest: str = ""
    gradings: list[Grading] = Field(default_factory=list)
    # How many times the sample ran: 1, or more when runs masked by an infrastructure fault were
    # re-run (service/outcomes.py). The sample's seed, derived from the request's
    # sampling.seed, its task id and its index (service.sample.sample_seed); None: unseeded.
    attempts: int = 1
    sample_seed: int | None = None
    # The final workspace, kept for regrading: committed with the trajectory
    # (service/store/workspaces.py), never serialized.
    _workspace: Any = PrivateAttr(default=None)

    @field_validator("tests_digest", "gradings", mode="before")
    @classmethod
    def _grading_defaults(cls, v: Any, info: Any) -> Any:
        # Files written before gradings existed have no such columns (or nulls).
        if v is None:
            return "" if info.field_name == "tests_digest" else []
        return v

    @field_validator("segments", mode="before")
    @classmethod
    def _segments_default(cls, v: Any) -> Any:
        return [] if v is None else v  # records and files written before segments

    @field_validator("harness", "harness_profile_hash", mode="before")
    @classmethod
    def _harness_default(cls, v: Any, info: Any) -> Any:
        if v is None:
            return "default" if info.field_name == "harness" else ""
        return v

    @field_validator("attempts", mode="before")
    @classmethod
    def _attempts_default(cls, v: Any) -> Any:
        return 1 if v is None else v  # records and files written before re-runs

    @model_validator(mode="before")
    @classmethod
    def _versions_of_old_records(cls, data: Any) -> Any:
        # Before per-token versions were recorded, a trajectory kept its first turn's version:
        # every generated token gets it (exact for the trajectories whose turns all ran under
        # one version, policy_version_start == policy_version_end).
        if isinstance(data, dict) and data.get("response_policy_versions") is None:
            mask = data.get("loss_mask") or []
            start = data.get("policy_version_start") or 0
            data = {**data, "response_policy_versions": [start if m else -1 for m in mask]}
        return data

    @field_validator("chat_template_kwargs", mode="before")
    @classmethod
    def _kwargs_from_json(cls, v: Any) -> Any:
        return json.loads(v) if isinstance(v, str) else v

    @field_serializer("chat_template_kwargs", when_used="json")
    def _kwargs_to_json(self, v: dict[str, Any]) -> str:
        return json.dumps(v, sort_keys=True, separators=(",", ":"))

    @model_validator(mode="after")
    def _check(self) -> Trajectory:
        # exclude_from_baseline is a function of status: keep the two from disagreeing.
        self.exclude_from_baseline = is_masked(self.status)
        if self.exclude_from_baseline:
            self.reward = None
        _check_response(
            self.response_token_ids,
            self.loss_mask,
            self.rollout_logprobs,
            self.response_policy_versions,
        )
        last_index = len(self.segments) - 1
        for i, seg in enumerate(self.segments):
            if seg.parent is not None and not (0 <= seg.parent < i or seg.parent == last_index > i):
                raise ValueError(
                    f"segments[{i}].parent must name an earlier segment or the last, got "
                    f"{seg.parent}"
                )
        if self.segments:
            last = self.segments[-1]
            if last.kind != SegmentKind.main or any(
                getattr(last, f) != getattr(self, f) for f in _SEGMENT_TOKEN_FIELDS
            ):
                raise ValueError(
                    "the last segment must be a main one equal to the trajectory's own "
                    "prompt_token_ids, response_token_ids, loss_mask, rollout_logprobs and "
                    "response_policy_versions"
                )
        return self

    def total_tokens(self) -> int:
        """Prompt and response tokens over every segment: what a trainer that takes every
        segment processes (each segment's prompt is its own)."""
        return sum(len(s.prompt_token_ids) + len(s.response_token_ids) for s in self._tokens())

    def generated_tokens(self) -> int:
        """Tokens the policy generated (loss mask 1), over every segment."""
        return sum(sum(s.loss_mask) for s in self._tokens())

    def oldest_version(self) -> int | None:
        """The oldest weights behind any generated token of any segment (what staleness counts
        from); None when the sample generated nothing."""
        return min(
            (v for s in self._tokens() for v in s.response_policy_versions if v >= 0),
            default=None,
        )

    def _tokens(self) -> list[Any]:
        # The trajectory itself stands for its one segment (no copy of the token lists).
        return list(self.segments) if self.segments else [self]

    def all_segments(self) -> list[Segment]:
        """The episode as segments: `segments`, or the trajectory itself when it is one."""
        if self.segments:
            return list(self.segments)
        return [
            Segment(kind=SegmentKind.main, **{f: getattr(self, f) for f in _SEGMENT_TOKEN_FIELDS})
        ]


_SEGMENT_TOKEN_FIELDS = (
    "prompt_token_ids",
    "response_token_ids",
    "loss_mask",
    "rollout_logprobs",
    "response_policy_versions",
)


def only_last_segment(t: Trajectory) -> Trajectory:
    """The trajectory as its last segment alone (a request's `train_segments: "last"`): the
    top-level fields already are it; the versions then span only its tokens, so staleness
    counts only what is trained."""
    versions = [v for v in t.response_policy_versions if v >= 0]
    update: dict[str, Any] = {"segments": []}
    if versions:
        update.update(policy_version_start=min(versions), policy_version_end=max(versions))
    return t.model_copy(update=update)


def segment_outline(t: Trajectory) -> list[dict[str, Any]]:
    """Each segment's kind, parent and sizes, without its tokens: what the live event stream
    says about an episode (one entry for an episode never summarized)."""
    out = []
    for s in t._tokens():  # no Segment built for a one-segment episode: this runs per commit
        versions = [v for v in s.response_policy_versions if v >= 0]
        out.append(
            {
                "kind": getattr(s, "kind", SegmentKind.main).value,
                "parent": getattr(s, "parent", None),
                "prompt_tokens": len(s.prompt_token_ids),
                "response_tokens": len(s.response_token_ids),
                "generated_tokens": sum(s.loss_mask),
                "versions": [min(versions), max(versions)] if versions else None,
            }
        )
    return out


# How a group runner hands each finished trajectory back (the scheduler commits it).
OnTrajectory = Callable[[Trajectory], Awaitable[None]]
# How a group runner says a sample's episode is over (by trajectory id): only its verification
# and its report remain, so the scheduler can start the next sample's episode meanwhile.
OnEpisodeEnd = Callable[[str], Awaitable[None]]
# How a group runner waits, by trajectory id, until the scheduler gives a sample its slot: the
# samples of a group share their first turn, and each begins its episode once it holds a slot.
OnStart = Callable[[str], Awaitable[None]]


def empty_trajectory(
    trajectory_id: str,
    rollout_id: str,
    group_id: str,
    task_id: str,
    sample_index: int,
    policy_version: int,
    status: Status,
    why: str = "",
) -> Trajectory:
    """A sample that produced no tokens (cancelled, or its runner failed): `why` is kept in
    `verifier_output`. Its status should be a masked one: it carries no reward."""
    return Trajectory(
        trajectory_id=trajectory_id,
        rollout_id=rollout_id,
        group_id=group_id,
        task_id=task_id,
        sample_index=sample_index,
        policy_version_start=policy_version,
        policy_version_end=policy_version,
        prompt_token_ids=[],
        response_token_ids=[],
        loss_mask=[],
        rollout_logprobs=[],
        response_policy_versions=[],
        reward=None,
        status=status,
        verifier_output=why,
    )


TIMINGS_TYPE = pa.struct([(name, pa.float64()) for name in Timings.model_fields])
MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])
VERIFIER_FILE_TYPE = pa.struct([("path", pa.string()), ("content", pa.string())])
GRADING_TYPE = pa.struct(
    [
        ("reward", pa.float64()),
        ("status", pa.string()),
        ("reward_flags", pa.list_(pa.string())),
        ("verifier_files", pa.list_(VERIFIER_FILE_TYPE)),
        ("grader_version", pa.string()),
        ("tests_digest", pa.string()),
        ("graded_at", pa.float64()),
    ]
)
assert GRADING_TYPE.names == list(Grading.model_fields), "GRADING_TYPE and Grading disagree"
SEGMENT_TYPE = pa.struct(
    [
        ("kind", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("response_token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("rollout_logprobs", pa.list_(pa.float32())),
        ("response_policy_versions", pa.list_(pa.int64())),
        ("parent", pa.int32()),
    ]
)
assert SEGMENT_TYPE.names == list(Segment.model_fields), "SEGMENT_TYPE and Segment disagree"
SAMPLING_TYPE = pa.struct(
    [
        ("temperature", pa.float64()),
        ("top_p", pa.float64()),
        ("top_k", pa.int32()),
        ("min_p", pa.float64()),
        ("repetition_penalty", pa.float64()),
        ("presence_penalty", pa.float64()),
        ("frequency_penalty", pa.float64()),
        ("max_tokens", pa.int32()),
        ("seed", pa.int64()),
        ("stop", pa.list_(pa.string())),
    ]
)
assert SAMPLING_TYPE.names == [f.name for f in dataclasses.fields(SamplingParams)], (
    "SAMPLING_TYPE and SamplingParams disagree"
)

ARROW_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("rollout_id", pa.string()),
        ("group_id", pa.string()),
        ("task_id", pa.string()),
        ("sample_index", pa.int32()),
        ("policy_version_start", pa.int64()),
        ("policy_version_end", pa.int64()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("response_token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("rollout_logprobs", pa.list_(pa.float32())),
        ("response_policy_versions", pa.list_(pa.int64())),
        ("segments", pa.list_(SEGMENT_TYPE)),
        ("reward", pa.float64()),
        ("status", pa.string()),
        ("exclude_from_baseline", pa.bool_()),
        ("stop_reason", pa.string()),
        ("num_turns", pa.int32()),
        ("messages", pa.list_(MESSAGE_TYPE)),
        ("verifier_output", pa.string()),
        ("reward_flags", pa.list_(pa.string())),
        ("verifier_files", pa.list_(VERIFIER_FILE_TYPE)),
        ("timings", TIMINGS_TYPE),
        ("sampling", SAMPLING_TYPE),
        ("chat_template_kwargs", pa.string()),
        ("harness", pa.string()),
        ("harness_profile_hash", pa.string()),
        ("advantage", pa.float64()),
        ("tests_digest", pa.string()),
        ("gradings", pa.list_(GRADING_TYPE)),
        ("attempts", pa.int32()),
        ("sample_seed", pa.int64()),
    ]
)

assert set(ARROW_SCHEMA.names) == set(Trajectory.model_fields), "schema and model disagree"


def to_arrow(trajectories: list[Trajectory]) -> pa.Table:
    rows: list[dict[str, Any]] = [t.model_dump(mode="json") for t in trajectories]
    return pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)


def from_arrow(table: pa.Table) -> list[Trajectory]:
    return [Trajectory.model_validate(row) for row in table.to_pylist()]
