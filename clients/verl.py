"""verl integration: the `rollouts` agent loop (docs/verl.md).

verl (0.9) runs an agent loop once per sample: `AgentLoopBase.run(sampling_params, **row)` must
return an `AgentLoopOutput`. `RolloutsAgentLoop` runs the sample on a rollouts service instead:
the dataset row names the task, and the service runs our agent in its sandbox against verl's own
vLLM replicas (their addresses come from verl's load balancer and travel as the request's
`policy.urls`, so the service's `--allow-policy-url` must cover them), grades it, and returns
the token-exact trajectory. The n samples of one prompt that start together (verl starts every
sample of a batch at once) go to the service as one group, one rollout request. What comes back
is verl's output, field for field:

- `prompt_ids`, `response_ids`: the trajectory's ids, exactly; `response_mask`: its loss mask
  (1 on generated tokens, 0 on observations); `response_logprobs`: the sampler's logprobs;
- `reward_score`: the service's reward; `num_turns`: the episode's turns;
- `extra_fields`: `min_global_steps` / `max_global_steps`, the oldest and newest weight version
  among the sample's tokens (the engine's own tags: verl's newer worker reads them for
  staleness), and `rollouts_*` facts (trajectory id, status, attempts, masked, truncated).

A sample masked by an infrastructure fault is run again by the service (`retry_masked`) before
verl sees it; one still masked after that reaches verl with an all-zero response mask (no token
of it is trained on) and its graded siblings' mean reward, never a 0.

verl is imported from the user's installation when `RolloutsAgentLoop` is first used (hydra's
`_target_: clients.verl.RolloutsAgentLoop` does so): this module imports without it.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import Any

from clients.trainer import AsyncTrainerClient
from service.trajectory import Trajectory
from service.wire import Group

AGENT_NAME = "rollouts"
TASK_KEY = "task_id"
_VERL_SAMPLING = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass
class LoopSettings:
    """Where the service is and how samples go there: the agent loop's config entry (its keys
    beside `name` and `_target_`), else ROLLOUTS_URL / ROLLOUTS_API_KEY / ROLLOUTS_TASKS."""

    url: str
    tasks_path: str
    api_key: str | None = None
    task_key: str = TASK_KEY  # the dataset column (or extra_info key) that names the task
    model: str | None = None  # the model verl's servers serve; None: their only one
    # verl's replica addresses as the service reaches them; None: asked from verl's router
    policy_urls: list[str] | None = None
    retry_masked: int | None = None  # None: the service's --retry-masked
    agent: dict[str, Any] = field(default_factory=dict)  # the request's `agent` (max_turns...)
    # The request's `sampling` fields that override verl's (e.g. max_tokens per turn, seed).
    sampling: dict[str, Any] = field(default_factory=dict)
    lease_wait_s: float = 30.0

    @classmethod
    def of(cls, kwargs: dict[str, Any]) -> LoopSettings:
        known = {k: kwargs[k] for k in cls.__dataclass_fields__ if k in kwargs}
        known.setdefault("url", os.environ.get("ROLLOUTS_URL", ""))
        known.setdefault("tasks_path", os.environ.get("ROLLOUTS_TASKS", ""))
        known.setdefault("api_key", os.environ.get("ROLLOUTS_API_KEY"))
        for name in ("url", "tasks_path"):
            if not known[name]:
                env = "ROLLOUTS_URL" if name == "url" else "ROLLOUTS_TASKS"
                raise ValueError(
                    f"rollouts agent loop: set `{name}` in its agent-loop config entry or {env}"
                )
        if known.get("policy_urls") is not None:
            known["policy_urls"] = [str(u) for u in known["policy_urls"]]
        for name in ("agent", "sampling"):  # OmegaConf containers as plain dicts
            if known.get(name) is not None:
                known[name] = dict(known[name])
        return cls(**known)


def task_of(row: dict[str, Any], key: str) -> str:
    """The task a dataset row names: its `key` column, else `extra_info[key]`."""
    value = row.get(key)
    if value is None and isinstance(row.get("extra_info"), dict):
        value = row["extra_info"].get(key)
    if value is None:
        raise ValueError(f"rollouts agent loop: the dataset row has no {key!r} (nor extra_info)")
    return str(value)


def sampling_of(verl_params: dict[str, Any], response_length: int | None) -> dict[str, Any]:
    """The request's sampling from verl's: its knobs as they are; each turn at most
    `response_length` tokens (the service also caps a turn by what the context has left)."""
    out = {k: verl_params[k] for k in _VERL_SAMPLING if verl_params.get(k) is not None}
    if "temperature" in out:
        out["temperature"] = float(out["temperature"])
    if "top_k" in out:
        out["top_k"] = int(out["top_k"])
    if response_length:
        out["max_tokens"] = int(response_length)
    return out


def neutral_reward(group: list[Trajectory]) -> float:
    """The reward a masked sample gets: its graded siblings' mean (0.0 if none is graded), so
    it moves no baseline of theirs; its response mask is all zero, so it is never trained on."""
    graded = [t.reward for t in group if not t.exclude_from_baseline and t.reward is not None]
    return sum(graded) / len(graded) if graded else 0.0


def output_fields(
    t: Trajectory, group: list[Trajectory], response_length: int | None = None
) -> dict[str, Any]:
    """verl's AgentLoopOutput fields for one trajectory (the caller builds the model)."""
    masked = t.exclude_from_baseline or t.reward is None
    response = list(t.response_token_ids)
    mask = [0] * len(response) if masked else list(t.loss_mask)
    logprobs = [float(x) for x in t.rollout_logprobs]
    truncated = response_length is not None and len(response) > response_length
    if truncated:  # as verl's own loops do: the response is cut at rollout.response_length
        response, mask, logprobs = (x[:response_length] for x in (response, mask, logprobs))
    return {
        "prompt_ids": list(t.prompt_token_ids),
        "response_ids": response,
        "response_mask": mask,
        "response_logprobs": logprobs,
        "reward_score": neutral_reward(group) if masked else float(t.reward or 0.0),
        "num_turns": t.num_turns,
        "extra_fields": {
            # The oldest and newest weights among its generated tokens.
            "min_global_steps": t.policy_version_start,
            "max_global_steps": t.policy_version_end,
            "turn_scores": [],
            "tool_rewards": [],
            "rollouts_trajectory_id": t.trajectory_id,
            "rollouts_status": t.status.value,
            "rollouts_attempts": t.attempts,
            "rollouts_masked": masked,
            "rollouts_truncated": truncated,
        },
    }


@dataclass
class _Gathering:
    """Samples of one prompt waiting to go to the service together."""

    futures: list[asyncio.Future] = field(default_factory=list)


class GroupGatherer:
    """Coalesces the samples of one prompt that start together into one rollout request.

    verl starts every sample of its batch as a task at once; each reaches `run` before any of
    them waits on I/O. The first sample of a prompt (verl's `uid`) waits one turn of the event
    loop, by which time its siblings have joined, then sends them as one group; each sibling
    gets its own trajectory back (by sample index). A sibling that starts later makes a group
    of its own."""

    def __init__(self) -> None:
        self._open: dict[tuple[Any, ...], _Gathering] = {}

    async def join(self, key: tuple[Any, ...], send: Any) -> tuple[Trajectory, list[Trajectory]]:
        """This sample's trajectory and its group's, once `send(n)` returned the group."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        gathering = self._open.get(key)
        if gathering is not None:
            gathering.futures.append(future)
            return await future
        gathering = self._open[key] = _Gathering([future])
        await asyncio.sleep(0)  # the siblings started with this one join meanwhile
        del self._open[key]
        futures = gathering.futures
        try:
            group = sorted(await send(len(futures)), key=lambda t: t.sample_index)
            if len(group) != len(futures):
                raise RuntimeError(f"the service returned {len(group)} of {len(futures)} samples")
        except BaseException as e:
            for f in futures[1:]:
                if not f.done():
                    f.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            raise
        for f, t in zip(futures[1:], group[1:], strict=True):
            f.set_result((t, group))
        return group[0], group


_GATHERER = GroupGatherer()


async def replica_urls(server_manager: Any) -> list[str]:
    """verl's vLLM replicas as base URLs: the server ids its router holds are their HTTP
    addresses (`host:port`, `[v6]:port`)."""
    balancer = getattr(server_manager, "_load_balancer", None)
    if balancer is None:
        raise ValueError(
            "rollouts agent loop: verl's server manager has no load balancer to ask for the "
            "replica addresses; set `policy_urls` in the agent loop's config entry"
        )
    addresses = await balancer.get_all_servers.remote()
    return [a if a.startswith(("http://", "https://")) else f"http://{a}" for a in addresses]


async def run_group(
    settings: LoopSettings,
    task_id: str,
    n: int,
    sampling: dict[str, Any],
    policy_urls: list[str],
) -> list[Trajectory]:
    """One rollout of `n` samples of `task_id` on verl's servers; its group, acknowledged."""
    policy: dict[str, Any] = {"urls": policy_urls}
    if settings.model is not None:
        policy["model"] = settings.model
    async with AsyncTrainerClient(settings.url, settings.api_key) as client:
        rollout_id = await client.submit(
            settings.tasks_path,
            n,
            ids=[task_id],
            sampling=sampling,
            agent=settings.agent or None,
            # verl computes its own advantages; any group size is a group for the service.
            advantage={"min_group_size": 1},
            policy=policy,
            retry_masked=settings.retry_masked,
        )
        try:
            groups: list[Group] = []
            async for batch in client.batches(
                max_groups=1, rollout_id=rollout_id, wait_s=settings.lease_wait_s
            ):
                groups.extend(batch.groups)
                await batch.ack()
        except BaseException:
            await asyncio.shield(client.cancel(rollout_id))
            raise
    trajectories = [t for g in groups for t in g.trajectories]
    if len(trajectories) != n:
        raise RuntimeError(
            f"rollout {rollout_id}: the service delivered {len(trajectories)} of {n} samples "
            "(cancelled, or dropped as stale)"
        )
    return trajectories


def _build_agent_loop() -> type:
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )

    class RolloutsAgentLoop(AgentLoopBase):
        """verl's agent loop on a rollouts service (clients/verl.py, docs/verl.md)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            settings = LoopSettings.of(kwargs)
            known = set(LoopSettings.__dataclass_fields__) | {"name"}
            super().__init__(*args, **{k: v for k, v in kwargs.items() if k not in known})
            self.settings = settings
            self.response_length = self.rollout_config.response_length

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            task_id = task_of(kwargs, self.settings.task_key)
            sampling = sampling_of(sampling_params, self.response_length)
            sampling.update(self.settings.sampling)
            uid = kwargs.get("uid", kwargs.get("index"))
            key = (str(uid), task_id, json.dumps(sampling, sort_keys=True))

            async def send(n: int) -> list[Trajectory]:
                urls = self.settings.policy_urls or await replica_urls(self.server_manager)
                return await run_group(self.settings, task_id, n, sampling, urls)

            trajectory, group = await _GATHERER.join(key, send)
            fields = output_fields(trajectory, group, self.response_length)
            prompt = self._cap_text_prompt_length(fields["prompt_ids"])  # verl's rule, and log
            if len(prompt) < len(fields["prompt_ids"]):
                fields["prompt_ids"] = prompt
                fields["extra_fields"]["rollouts_truncated"] = True
            seconds = trajectory.timings
            metrics = AgentLoopMetrics(
                generate_sequences=seconds.generate_s, tool_calls=seconds.agent_s
            )
            return AgentLoopOutput(**fields, metrics=metrics)

    # verl's registry names the class by where it can be imported from: here, not the builder.
    RolloutsAgentLoop.__module__ = __name__
    RolloutsAgentLoop.__qualname__ = RolloutsAgentLoop.__name__
    return register(AGENT_NAME)(RolloutsAgentLoop)


def __getattr__(name: str) -> Any:
    if name == "RolloutsAgentLoop":  # built (and registered with verl) on first use
        cls = _build_agent_loop()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
