"""SkyRL's GeneratorOutput from the service's trajectories: the one conversion that both
`clients.skyrl.RolloutsGenerator` and `Batch.to_skyrl()` (clients/trainer.py) use, so both give
the same dict; and where SkyRL's own modules are found (docs/skyrl.md). SkyRL is imported only
when its `TrajectoryID` is first needed: the conversion works without it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from service.trajectory import Status, Trajectory

# SkyRL's generator module per package layout, newest first.
SKYRL_FLAVOURS: dict[str, str] = {
    "skyrl": "skyrl.train.generators.base",  # skyrl >= 0.4
    "skyrl_train": "skyrl_train.generators.base",  # skyrl-train 0.3
}


@functools.cache
def skyrl_base(flavour: str | None = None) -> ModuleType:
    """SkyRL's `generators.base` module (GeneratorInterface, TrajectoryID, GeneratorOutput)."""
    names = [flavour] if flavour else list(SKYRL_FLAVOURS)
    for name in names:
        if name not in SKYRL_FLAVOURS:
            raise ValueError(f"unknown SkyRL flavour {name!r}; one of {sorted(SKYRL_FLAVOURS)}")
        with contextlib.suppress(ImportError):
            return importlib.import_module(SKYRL_FLAVOURS[name])
    raise ImportError(
        "SkyRL is not installed (it needs Python >= 3.12): pip install 'rollouts[skyrl]'"
    )


@dataclass
class TrajectoryID:
    """SkyRL's TrajectoryID, field for field: used only where SkyRL is not installed."""

    instance_id: str
    repetition_id: int

    def to_string(self) -> str:
        return f"{self.instance_id}_{self.repetition_id}"


@functools.cache
def trajectory_id_class() -> type:
    """SkyRL's TrajectoryID class where SkyRL imports, else the look-alike above."""
    try:
        return skyrl_base().TrajectoryID
    except ImportError:
        return TrajectoryID


# --------------------------------------------------------------------------- conversion

# vLLM's finish reasons. SkyRL counts anything but "stop" as truncated.
STOP = "stop"
LENGTH = "length"
ABORT = "abort"


def skyrl_stop_reason(t: Trajectory) -> str:
    """The stop reason in vLLM's vocabulary. A sample ended by the context limit is "length"
    (SkyRL's own agent loop says so when the next prompt would not fit); one that never
    finished a turn (its first request failed, or it was cancelled) is vLLM's "abort"."""
    if t.status == Status.context_length:
        return LENGTH
    return t.stop_reason or ABORT


def neutral_rewards(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per group: the mean reward of its graded (not masked) samples, or 0.0 when none was
    graded. A masked sample gets this neutral reward, never a 0 it did not earn: then SkyRL's
    group mean, pass@n, zero-variance filter and GRPO mean are those of the graded samples."""
    graded: dict[str, list[float]] = {}
    for t in trajectories:
        bucket = graded.setdefault(t.group_id, [])
        if not t.exclude_from_baseline and t.reward is not None:
            bucket.append(float(t.reward))
    return {g: (sum(rs) / len(rs) if rs else 0.0) for g, rs in graded.items()}


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs)) / len(xs)


def _std(xs: Sequence[float]) -> float:  # population std, as numpy's default
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def _p90(xs: Sequence[float]) -> float:  # numpy's default (linear) percentile
    s = sorted(xs)
    pos = 0.9 * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _turn_lengths(mask: Sequence[int]) -> list[int]:
    """Runs of consecutive 1s: the tokens generated in each turn."""
    runs: list[int] = []
    run = 0
    for m in mask:
        if m:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    if run:
        runs.append(run)
    return runs


def rollout_metrics(
    responses: Sequence[Sequence[int]],
    rewards: Sequence[float],
    loss_masks: Sequence[Sequence[int]],
    completion_times: Sequence[float] | None = None,
    num_masked: int = 0,
) -> dict[str, Any]:
    """The metrics SkyRL's own generators report (`get_rollout_metrics` of skyrl 0.4 with loss
    masks and trajectory times; skyrl-train 0.3 reports the first six keys), computed the same
    way, plus `rollouts/num_masked`."""
    lengths = [len(r) for r in responses]
    nonzero = [n for n, r in zip(lengths, rewards, strict=True) if r > 0.0]
    zero = [n for n, r in zip(lengths, rewards, strict=True) if r == 0.0]
    out: dict[str, Any] = {
        "generate/min_num_tokens": min(lengths),
        "generate/max_num_tokens": max(lengths),
        "generate/avg_num_tokens": _mean(lengths),
        "generate/std_num_tokens": _std(lengths),
        "generate/avg_tokens_non_zero_rewards": _mean(nonzero) if nonzero else 0.0,
        "generate/avg_tokens_zero_rewards": _mean(zero) if zero else 0.0,
    }
    assistant = [sum(m) for m in loss_masks]
    out.update(
        {
            "generate/avg_assistant_tokens": _mean(assistant),
            "generate/min_assistant_tokens": min(assistant),
            "generate/max_assistant_tokens": max(assistant),
            "generate/std_assistant_tokens": _std(assistant),
        }
    )
    turns = [n for m in loss_masks for n in _turn_lengths(m)]
    if turns:
        out.update(
            {
                "generate/tokens_per_turn_mean": _mean(turns),
                "generate/tokens_per_turn_std": _std(turns),
                "generate/tokens_per_turn_max": max(turns),
            }
        )
    if completion_times:
        out.update(
            {
                "generate/trajectory_time_completion_mean": _mean(completion_times),
                "generate/trajectory_time_completion_p90": _p90(completion_times),
                "generate/trajectory_time_completion_max": max(completion_times),
            }
        )
    out["rollouts/num_masked"] = num_masked
    return out


def generator_output(
    trajectories: Sequence[Trajectory],
    *,
    uids: Sequence[str] | None = None,
    trajectory_ids: Sequence[Any] | None = None,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """SkyRL's GeneratorOutput for these trajectories, in the order given, one sample each (a
    summarized episode gives its last segment, the trajectory's own token fields; every
    segment as a step: `step_wise_output`).

    SkyRL's fields (what its trainer, `validate_generator_output`,
    `postprocess_generator_output`, its zero-variance filter and `concatenate_generator_outputs`
    read): `prompt_token_ids`, `response_ids`, `rewards` (one float per sample),
    `loss_masks`, `stop_reasons` (vLLM's), `rollout_logprobs`, `trajectory_ids`
    (`TrajectoryID(instance_id=uid, repetition_id=k)`), `rollout_metrics` and
    `trajectory_generation_times`. Extra per-sample lists, which SkyRL carries along (its
    `concatenate_generator_outputs` keeps every extra list): `uids`, `advantages` (the
    service's), `exclude_from_baseline`, `policy_versions` (the oldest weights behind a sample's
    generated tokens: what staleness counts from) and `response_policy_versions` (one per
    response token, aligned with `response_ids`: the policy version of the weights that
    generated it, -1 where the mask is 0).

    - A masked sample (`exclude_from_baseline`) keeps its tokens but trains nothing: its loss
      mask and logprobs are all 0, and its reward is the neutral one (`neutral_rewards`).
    - An empty response (a sample whose first turn failed) becomes one `pad_token_id` with
      mask 0 and logprob 0: SkyRL puts the reward on the last response token. An empty prompt
      borrows the group's shared first prompt (or one pad token).
    - `uids` default to the service's group ids; `trajectory_ids` to `(uid, sample_index)`.
    """
    ts = list(trajectories)
    if not ts:
        raise ValueError("no trajectories: SkyRL needs at least one sample")
    uid_list, tid_list = _ids(ts, uids, trajectory_ids)
    neutral = neutral_rewards(ts)
    first_prompt = _first_prompts(ts)
    out: dict[str, list[Any]] = {k: [] for k in _PER_SAMPLE}
    for t, uid, tid in zip(ts, uid_list, tid_list, strict=True):
        _add_step(out, t, t, uid, tid, neutral, first_prompt, pad_token_id, last=True)
    return _finish(out, masked=sum(t.exclude_from_baseline for t in ts))


def step_wise_output(
    trajectories: Sequence[Trajectory],
    *,
    uids: Sequence[str] | None = None,
    trajectory_ids: Sequence[Any] | None = None,
    pad_token_id: int = 0,
) -> dict[str, Any]:
    """SkyRL's step-wise GeneratorOutput (`generator.step_wise_trajectories=true`): one step
    per segment of each trajectory (`Trajectory.all_segments()`: an episode never summarized is
    one step), the steps of a trajectory contiguous and in order, `is_last_step` true on its
    last segment (the main conversation whose workspace was graded).

    Per step, as `generator_output` per sample: the segment's own prompt, response, loss mask
    and logprobs (a masked sample's all 0), `response_policy_versions`, the trajectory's
    `TrajectoryID` and uid. The reward is on the last step only (0.0 on the others), as SkyRL's
    own step-wise generator gives it: SkyRL computes advantages from the last steps and
    broadcasts them to the trajectory's other steps; `advantages` and
    `exclude_from_baseline` (the service's, per trajectory) are broadcast the same way.
    `trajectory_generation_times` repeats the trajectory's time on each step (SkyRL keeps the
    last steps' for its metrics); `rollout_metrics` count every step.
    """
    ts = list(trajectories)
    if not ts:
        raise ValueError("no trajectories: SkyRL needs at least one sample")
    uid_list, tid_list = _ids(ts, uids, trajectory_ids)
    neutral = neutral_rewards(ts)
    first_prompt = _first_prompts(ts)
    out: dict[str, list[Any]] = {k: [] for k in (*_PER_SAMPLE, "is_last_step")}
    for t, uid, tid in zip(ts, uid_list, tid_list, strict=True):
        segments = t.all_segments()
        for i, seg in enumerate(segments):
            last = i == len(segments) - 1
            _add_step(out, t, seg, uid, tid, neutral, first_prompt, pad_token_id, last=last)
            out["is_last_step"].append(last)
    return _finish(out, masked=sum(t.exclude_from_baseline for t in ts))


_PER_SAMPLE = (
    "prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
    "rollout_logprobs", "trajectory_ids", "trajectory_generation_times", "uids", "advantages",
    "exclude_from_baseline", "policy_versions", "response_policy_versions",
)  # fmt: skip


def _add_step(
    out: dict[str, list[Any]],
    t: Trajectory,
    seg: Any,  # the trajectory itself, or one of its Segments (the same token fields)
    uid: str,
    tid: Any,
    neutral: dict[str, float],
    first_prompt: dict[str, list[int]],
    pad_token_id: int,
    *,
    last: bool,
) -> None:
    response = list(seg.response_token_ids)
    token_versions = list(seg.response_policy_versions)
    if t.exclude_from_baseline:
        mask, lps = [0] * len(response), [0.0] * len(response)
        reward = neutral[t.group_id]
    else:
        mask, lps = list(seg.loss_mask), [float(x) for x in seg.rollout_logprobs]
        reward = float(t.reward) if t.reward is not None else neutral[t.group_id]
    if not response:
        response, mask, lps, token_versions = [pad_token_id], [0], [0.0], [-1]
    prompt = list(seg.prompt_token_ids) or first_prompt.get(t.group_id) or [pad_token_id]
    out["prompt_token_ids"].append(prompt)
    out["response_ids"].append(response)
    out["rewards"].append(reward if last else 0.0)
    out["loss_masks"].append(mask)
    # A segment before the last ended as its call finished: the model stopped.
    out["stop_reasons"].append(skyrl_stop_reason(t) if last else STOP)
    out["rollout_logprobs"].append(lps)
    out["trajectory_ids"].append(tid)
    out["trajectory_generation_times"].append(float(t.timings.total_s))
    out["uids"].append(uid)
    out["advantages"].append(float(t.advantage or 0.0))
    out["exclude_from_baseline"].append(t.exclude_from_baseline)
    out["policy_versions"].append(t.policy_version_start)
    out["response_policy_versions"].append(token_versions)


def _finish(out: dict[str, list[Any]], masked: int) -> dict[str, Any]:
    metrics = rollout_metrics(
        out["response_ids"], out["rewards"], out["loss_masks"],
        out["trajectory_generation_times"], masked,
    )  # fmt: skip
    return {**out, "rollout_metrics": metrics}


def _first_prompts(ts: Sequence[Trajectory]) -> dict[str, list[int]]:
    first_prompt: dict[str, list[int]] = {}
    for t in ts:
        if t.prompt_token_ids:
            first_prompt.setdefault(t.group_id, list(t.prompt_token_ids))
    return first_prompt


def _ids(
    ts: Sequence[Trajectory], uids: Sequence[str] | None, trajectory_ids: Sequence[Any] | None
) -> tuple[list[str], list[Any]]:
    """Per trajectory: its uid (default: its group id) and SkyRL TrajectoryID (default:
    `(uid, sample_index)`)."""
    uid_list = list(uids) if uids is not None else [t.group_id for t in ts]
    if len(uid_list) != len(ts):
        raise ValueError(f"{len(uid_list)} uids for {len(ts)} trajectories")
    if trajectory_ids is None:
        cls = trajectory_id_class()
        tid_list = [
            cls(instance_id=u, repetition_id=t.sample_index)
            for u, t in zip(uid_list, ts, strict=True)
        ]
    else:
        tid_list = list(trajectory_ids)
        if len(tid_list) != len(ts):
            raise ValueError(f"{len(tid_list)} trajectory ids for {len(ts)} trajectories")
    return uid_list, tid_list


# --------------------------------------------------------------------------- advantages


def baseline_uids(
    uids: Sequence[str], exclude_from_baseline: Sequence[bool], advantages: Sequence[float]
) -> list[str]:
    """The uids to group samples by so that SkyRL's `rloo` estimator yields the service's
    advantages. A masked sample, and every sample of a group whose service advantages are all 0
    (fewer than `min_group_size` graded samples, or a dropped zero-variance group), gets a uid
    of its own: SkyRL gives a lone sample advantage 0. The rest stay grouped, and RLOO over a
    group's graded samples is what the service computed (rloo_n, and rloo alike)."""
    if not len(uids) == len(exclude_from_baseline) == len(advantages):
        raise ValueError("uids, exclude_from_baseline and advantages must have equal lengths")
    live: set[str] = set()
    for uid, ex, adv in zip(uids, exclude_from_baseline, advantages, strict=True):
        if not ex and adv != 0.0:
            live.add(uid)
    return [
        uid if (uid in live and not ex) else f"{uid}#alone{i}"
        for i, (uid, ex) in enumerate(zip(uids, exclude_from_baseline, strict=True))
    ]
