"""A service trajectory as a verifiers trace: the message graph prime-rl's orchestrator trains on.

Each linear segment of the episode (`Trajectory.all_segments()`: one today, several once a
context is summarized) becomes one root-to-leaf branch, so verifiers' own branch view
(`Trace.branches`, each branch one training sample) gives back the segment's tokens exactly:
`branch.token_ids == prompt_token_ids + response_token_ids`, `branch.sampled_mask` is the
segment's loss mask and `branch.logprobs` its rollout logprobs (0.0 off the mask, as ours).

A branch's nodes are: the prompt messages (the last one carries every prompt token: the
service tokenizes the prompt as one piece, so it has no per-message spans), then one node per
run of the response's loss mask, an assistant node (`sampled`, every token trainable) for each
run of generated tokens and a user node for each observation between them. Message texts come
from the trajectory's conversation where its turns line up one to one with those runs, and are
left empty where they do not (a turn that generated nothing, a summarization's calls).

The verifiers classes are imported from the user's installation when a trace is built; nothing
of verifiers is copied here.
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from service.trajectory import Segment, SegmentKind, Trajectory, is_masked

REWARD_NAME = "reward"  # the name of our one reward in `Trace.rewards`


@dataclass(frozen=True)
class Verifiers:
    """The verifiers modules a trace is built from (the user's installation)."""

    trace: ModuleType
    graph: ModuleType
    types: ModuleType
    task: ModuleType
    episode: ModuleType
    agent: ModuleType
    version: str


def load_verifiers() -> Verifiers:
    """Import verifiers (0.4's `verifiers.v1` layout), or say how to install it."""
    try:
        import verifiers

        names = ("trace", "graph", "types", "task", "episode", "configs.agent")
        mods = [importlib.import_module(f"verifiers.v1.{n}") for n in names]
    except ImportError as e:
        raise RuntimeError(
            f"verifiers is not importable here ({e}); install it next to rollouts: "
            "pip install 'verifiers>=0.4,<0.5'"
        ) from e
    return Verifiers(*mods, version=verifiers.__version__)


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, mask value) of each maximal run of equal mask values."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for value, group in itertools.groupby(mask):
        n = len(list(group))
        out.append((start, start + n, value))
        start += n
    return out


def _texts(t: Trajectory, seg: Segment, runs: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The prompt's messages and one text per run, where the conversation lines up with them."""
    blank = {"prompt": [("user", "")], "runs": [""] * len(runs)}
    if seg.kind != SegmentKind.main or not t.messages:
        return blank
    first_reply = next((i for i, m in enumerate(t.messages) if m.role == "assistant"), None)
    if first_reply is None:
        return blank
    prompt = [(m.role, m.content) for m in t.messages[:first_reply]] or blank["prompt"]
    rest = t.messages[first_reply:]
    replies = [m.content for m in rest if m.role == "assistant"]
    observations = [m.content for m in rest if m.role != "assistant"]
    generated = sum(1 for _, _, v in runs if v == 1)
    if len(replies) != generated or len(observations) < len(runs) - generated:
        return {"prompt": prompt, "runs": [""] * len(runs)}
    reply, obs = iter(replies), iter(observations)
    return {"prompt": prompt, "runs": [next(reply) if v else next(obs) for _, _, v in runs]}


def _message(vf: Verifiers, role: str, content: str) -> Any:
    if role == "assistant":
        return vf.types.AssistantMessage(content=content)
    if role == "system":
        return vf.types.SystemMessage(content=content)
    # Observations (tool results included) carry no tool-call id we could vouch for.
    return vf.types.UserMessage(content=content)


def _segment_nodes(
    vf: Verifiers, t: Trajectory, seg: Segment, first: int, model: str
) -> tuple[list, list]:
    """The nodes of one segment's branch (indices from `first`), and its model calls."""
    runs = _runs(seg.loss_mask)
    texts = _texts(t, seg, runs)
    node, call = vf.graph.MessageNode, vf.trace.ModelCall
    nodes: list[Any] = []
    calls: list[Any] = []
    prompt = texts["prompt"]
    for i, (role, content) in enumerate(prompt):
        ids = list(seg.prompt_token_ids) if i == len(prompt) - 1 else []
        nodes.append(
            node(
                parent=first + i - 1 if i else None,
                message=_message(vf, role, content),
                token_ids=ids,
                mask=[False] * len(ids),
            )
        )
    for (start, end, generated), text in zip(runs, texts["runs"], strict=True):
        ids = seg.response_token_ids[start:end]
        index = first + len(nodes)
        nodes.append(
            node(
                parent=index - 1,
                message=_message(vf, "assistant" if generated else "user", text),
                sampled=bool(generated),
                token_ids=ids,
                mask=[bool(generated)] * len(ids),
                logprobs=seg.rollout_logprobs[start:end] if generated else [],
            )
        )
        if generated:
            calls.append(call(node=index, model=model))
    return nodes, calls


def to_trace(vf: Verifiers, t: Trajectory, task_data: dict[str, Any], model: str) -> Any:
    """The verifiers `Trace` (its wire form, `WireTrace`) of one service trajectory."""
    nodes: list[Any] = []
    calls: list[Any] = []
    for seg in t.all_segments():
        seg_nodes, seg_calls = _segment_nodes(vf, t, seg, len(nodes), model)
        nodes += seg_nodes
        calls += seg_calls
    masked = is_masked(t.status)
    errors = []
    if masked:
        errors.append(
            vf.trace.Error(
                type="RolloutMasked",
                message=f"{t.status}: an infrastructure fault, not the agent's; no reward "
                f"(the service re-ran it {t.attempts - 1} time(s))",
            )
        )
    reward = None if masked or t.reward is None else vf.trace.Reward(score=float(t.reward))
    data = vf.task.WireTaskData.model_validate(task_data)
    return vf.trace.WireTrace(
        task=task_of(vf, data),
        agent=vf.trace.AgentInfo[vf.agent.WireAgentConfig](
            config=vf.agent.WireAgentConfig(model=model), name="agent"
        ),
        nodes=nodes,
        calls=calls,
        rewards={REWARD_NAME: reward},
        metrics={"num_turns": float(t.num_turns), "attempts": float(t.attempts)},
        info={
            "rollouts": {
                "trajectory_id": t.trajectory_id,
                "rollout_id": t.rollout_id,
                "task_id": t.task_id,
                "status": str(t.status),
                "reward_flags": list(t.reward_flags),
                "policy_version_start": t.policy_version_start,
                "policy_version_end": t.policy_version_end,
                "segments": [str(s.kind) for s in t.all_segments()],
            }
        },
        is_completed=True,
        ok=not masked,
        stop_condition=t.stop_reason or str(t.status),
        errors=errors,
    )


def task_of(vf: Verifiers, data: Any) -> Any:
    return vf.trace.TraceTask[vf.task.WireTaskData](type="RolloutsTask", data=data)


def to_episode(vf: Verifiers, task_data: dict[str, Any], traces: list[Any], errors: list) -> Any:
    """The `WireEpisode` a served run answers with (its traces stream separately)."""
    data = vf.task.WireTaskData.model_validate(task_data)
    return vf.episode.WireEpisode(
        env=vf.episode.EnvInfo(id="rollouts"),
        task=task_of(vf, data),
        ok=bool(traces) and all(tr.ok for tr in traces),
        errors=errors,
        traces=traces,
    )
