"""Realistic synthetic trajectories for the data-path and memory benchmarks.

Shaped like a multi-turn terminal episode of Qwen3-8B: a 1k-token prompt, a 7k-token response
alternating generated turns (mask 1, float32-valued logprobs as vLLM returns them) and
observation deltas (mask 0, logprob 0.0), and the chat messages as text (~4 characters/token).
"""

from __future__ import annotations

import random
import struct

from sandboxes.task import Task, TaskConfig
from service.trajectory import Message, Status, Timings, Trajectory

VOCAB = 151_936  # Qwen3's vocabulary size
_WORDS = "the of to and a in is it you that for on with as this def return import self".split()


def _f32(x: float) -> float:
    """The float32 value as Python float (vLLM's logprobs are float32 tensors)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def make_trajectory(
    seed: int, prompt_tokens: int = 1024, response_tokens: int = 7168, turns: int = 8
) -> Trajectory:
    rng = random.Random(seed)
    prompt = [rng.randrange(VOCAB) for _ in range(prompt_tokens)]
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    per_turn = response_tokens // turns
    messages = [Message(role="system", content=" ".join(rng.choices(_WORDS, k=600)))]
    for turn in range(turns):
        n = per_turn if turn < turns - 1 else response_tokens - len(response)
        generated = int(n * 0.7)
        for i in range(n):
            response.append(rng.randrange(VOCAB))
            is_gen = i < generated
            mask.append(1 if is_gen else 0)
            logprobs.append(_f32(-rng.expovariate(3.0)) if is_gen else 0.0)
        said = " ".join(rng.choices(_WORDS, k=generated))
        seen = " ".join(rng.choices(_WORDS, k=n - generated))
        messages += [Message(role="assistant", content=said), Message(role="user", content=seen)]
    return Trajectory(
        trajectory_id="template",
        rollout_id="template",
        group_id="template",
        task_id="template",
        sample_index=0,
        prompt_token_ids=prompt,
        response_token_ids=response,
        loss_mask=mask,
        rollout_logprobs=logprobs,
        reward=float(seed % 2),
        status=Status.ok,
        stop_reason="stop",
        num_turns=turns,
        messages=messages,
        verifier_output="1 passed in 0.05s\n",
        timings=Timings(generate_s=12.5, agent_s=3.2, verify_s=1.1, total_s=17.0),
    )


def synthetic_tasks(count: int) -> list[Task]:
    """Tasks that exist only to name groups: the synthetic runner never opens a sandbox."""
    return [
        Task(
            id=f"synthetic-{i:06d}",
            path="synthetic",
            instruction="synthetic",
            config=TaskConfig(),
            environment_files={},
            test_files={"test.sh": b"exit 0\n"},
        )
        for i in range(count)
    ]
