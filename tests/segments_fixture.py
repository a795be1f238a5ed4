"""Summarized episodes built directly (issue 36): a trajectory whose context was summarized
once, as terminus-2 does it (main, summary, questions, answers, then the main conversation the
workspace was graded on), for the tests of every way out. Also imported by
tests/skyrl/step_wise_judge.py in SkyRL's venv (standard library and the service's modules
only)."""

from __future__ import annotations

from service.trajectory import Segment, SegmentKind, Status, Trajectory


def segment(
    kind: SegmentKind, prompt: list[int], response: list[int], version: int, parent: int | None
) -> Segment:
    """A segment whose response alternates generated tokens (mask 1) and one observation token
    after every third; logprobs are distinct per position, so a shifted copy is caught."""
    mask = [0 if i % 4 == 3 else 1 for i in range(len(response))]
    return Segment(
        kind=kind,
        prompt_token_ids=prompt,
        response_token_ids=response,
        loss_mask=mask,
        rollout_logprobs=[-(i + 1) / 8 if m else 0.0 for i, m in enumerate(mask)],
        response_policy_versions=[version if m else -1 for m in mask],
        parent=parent,
    )


def summarized_segments(seed: int, version: int = 0) -> list[Segment]:
    """Five segments: the main chat up to the summary, the three summary calls (the questions
    in a fresh context), and the rewritten main chat, generated a version later."""
    base = 1000 * (seed + 1)
    main0 = segment(SegmentKind.main, [base, base + 1, base + 2], list(range(base + 10, base + 22)),
                    version, None)  # fmt: skip
    history = main0.prompt_token_ids + main0.response_token_ids
    summary = segment(SegmentKind.summary, [*history, 7], [base + 30 + i for i in range(6)],
                      version, 0)  # fmt: skip
    questions = segment(SegmentKind.questions, [base, 8, *summary.response_token_ids],
                        [base + 40 + i for i in range(5)], version, None)  # fmt: skip
    answers = segment(SegmentKind.answers, [*history, 9, *questions.response_token_ids],
                      [base + 50 + i for i in range(7)], version + 1, 0)  # fmt: skip
    main1 = segment(SegmentKind.main, [base, base + 1, 5, *answers.response_token_ids],
                    [base + 60 + i for i in range(9)], version + 1, 0)  # fmt: skip
    return [main0, summary, questions, answers, main1]


def summarized(
    trajectory_id: str,
    rollout_id: str,
    group_id: str,
    task_id: str,
    index: int,
    *,
    reward: float | None = 1.0,
    status: Status = Status.ok,
    version: int = 0,
) -> Trajectory:
    """A trajectory of five segments; its own token fields are the last one's."""
    segments = summarized_segments(index, version)
    last = segments[-1]
    return Trajectory(
        trajectory_id=trajectory_id,
        rollout_id=rollout_id,
        group_id=group_id,
        task_id=task_id,
        sample_index=index,
        policy_version_start=version,
        policy_version_end=version + 1,
        prompt_token_ids=last.prompt_token_ids,
        response_token_ids=last.response_token_ids,
        loss_mask=last.loss_mask,
        rollout_logprobs=last.rollout_logprobs,
        response_policy_versions=last.response_policy_versions,
        segments=segments,
        reward=reward,
        status=status,
        harness="terminus-2",
    )


def plain(
    trajectory_id: str,
    rollout_id: str,
    group_id: str,
    task_id: str,
    index: int,
    *,
    reward: float | None = 1.0,
    version: int = 0,
) -> Trajectory:
    """An episode never summarized: one segment, no `segments`."""
    only = segment(SegmentKind.main, [1, 2, 3], [4, 5, 6, 7, 8], version, None)
    return Trajectory(
        trajectory_id=trajectory_id,
        rollout_id=rollout_id,
        group_id=group_id,
        task_id=task_id,
        sample_index=index,
        policy_version_start=version,
        policy_version_end=version,
        **only.model_dump(exclude={"kind", "parent"}),
        reward=reward,
        status=Status.ok,
    )
