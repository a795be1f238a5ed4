"""verl 0.9.1's own code runs our agent loop on a live rollouts service (run in the verl venv,
tests/verl/verl_venv.py, by tests/e2e/test_real_vllm.py).

verl's AgentLoopWorker is built with its own constructor from verl's own trainer config, with
our agent loop's config entry as `agent.agent_loop_config_path` (how a user plugs it in) and a
router (verl's GlobalRequestLoadBalancer) that holds the vLLM replica's address, as verl's
server manager registers its replicas. Ray is not started: the router is called in process
through `.remote()`, the only Ray calling convention the agent loop uses. Then one batch, one
prompt repeated n times with a shared uid (as verl's trainer makes it), goes through the
worker's `generate_sequences`: the registry lookup, hydra's instantiation, our `run`, verl's
per-sample postprocessing (padding, masks, scores) and its batch assembly (TensorDict, the
extra fields). The report holds verl's output per sample, unpadded, next to the trajectories
the service delivered (captured on their way into the agent loop), for the test to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import traceback
import uuid
from pathlib import Path
from typing import Any


class _Remote:
    """One method of an in-process object, called like a Ray actor method (`.remote(...)`)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            return self.fn(*args, **kwargs)

        return call()


class InProcessHandle:
    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> _Remote:
        return _Remote(getattr(self.target, name))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--task-id", required=True)
    ap.add_argument("--model", required=True, help="the served model's folder (its tokenizer)")
    ap.add_argument("--replica", required=True, help="host:port, as verl's router holds it")
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32, help="per turn")
    ap.add_argument("--report", required=True)
    args = ap.parse_args()
    report: dict[str, Any] = {"ok": False}
    try:
        report.update(asyncio.run(judge(args)))
        report["ok"] = True
    except BaseException:  # noqa: BLE001 - the report says what failed
        report["error"] = traceback.format_exc()
    Path(args.report).write_text(json.dumps(report))
    return 0 if report["ok"] else 1


async def judge(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import verl
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop import agent_loop as al
    from verl.protocol import DataProto
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    import clients.verl as ours

    out: dict[str, Any] = {"verl": verl.__version__}
    # The registry finds ours once the module is imported (the class registers itself) ...
    cls = ours.RolloutsAgentLoop
    out["registered"] = dict(al._agent_loop_registry[ours.AGENT_NAME])
    assert issubclass(cls, al.AgentLoopBase)

    # ... and through an agent-loop config file, as a user's trainer config names it.
    entry = {
        "name": ours.AGENT_NAME,
        "_target_": "clients.verl.RolloutsAgentLoop",
        "url": args.url,
        "tasks_path": args.tasks,
        "agent": {"max_turns": args.max_turns},
        "sampling": {"max_tokens": args.max_tokens, "seed": 5},
    }
    os.environ["ROLLOUTS_API_KEY"] = args.api_key
    loops = Path(tempfile.mkdtemp()) / "agent_loops.yaml"
    OmegaConf.save(OmegaConf.create([entry]), loops)

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    cfg = OmegaConf.load(config_dir / "_generated_ppo_trainer.yaml")
    rollout = cfg.actor_rollout_ref.rollout
    cfg.actor_rollout_ref.model.path = args.model
    rollout.prompt_length = 2048
    rollout.response_length = 4096
    rollout.calculate_log_probs = True
    rollout.name = "vllm"  # the replica kind (its address is all the agent loop uses)
    rollout.n = args.n
    rollout.temperature = 1.0
    rollout.agent.agent_loop_config_path = str(loops)
    rollout.agent.default_agent_loop = ours.AGENT_NAME

    router = GlobalRequestLoadBalancer(servers={args.replica: None})
    client = LLMServerClient(cfg, load_balancer_handle=InProcessHandle(router))
    worker = al.AgentLoopWorker(cfg, client)
    out["registry_entry"] = OmegaConf.to_container(al._agent_loop_registry[ours.AGENT_NAME])

    # The trajectories the service delivers, on their way into the agent loop.
    delivered: list[dict[str, Any]] = []
    run_group = ours.run_group

    async def recording(*a: Any, **kw: Any) -> Any:
        group = await run_group(*a, **kw)
        delivered.extend(t.model_dump(mode="json") for t in group)
        return group

    ours.run_group = recording

    n = args.n
    uid = str(uuid.uuid4())
    non_tensor = {
        "raw_prompt": np.array(
            [[{"role": "user", "content": "(the task names the prompt)"}]] * n, dtype=object
        ),
        "uid": np.array([uid] * n, dtype=object),
        "index": np.array([0] * n, dtype=object),
        "task_id": np.array([args.task_id] * n, dtype=object),
        "data_source": np.array(["rollouts"] * n, dtype=object),
    }
    batch = DataProto(non_tensor_batch=non_tensor, meta_info={"global_steps": 1})
    result = await worker.generate_sequences(batch)

    b = result.batch
    prompt_width = b["prompts"].shape[1]
    samples = []
    for i in range(n):
        attention = b["attention_mask"][i]
        prompt_len = int(attention[:prompt_width].sum())
        response_len = int(attention[prompt_width:].sum())
        rm = b["rm_scores"][i]
        nonzero = [j for j in range(rm.shape[0]) if float(rm[j]) != 0.0]
        samples.append(
            {
                "prompt_ids": b["prompts"][i][prompt_width - prompt_len :].tolist(),
                "response_ids": b["responses"][i][:response_len].tolist(),
                "response_mask": b["response_mask"][i][:response_len].tolist(),
                "response_mask_padding": b["response_mask"][i][response_len:].tolist(),
                "rollout_log_probs": b["rollout_log_probs"][i][:response_len].tolist(),
                "input_ids_equal_prompt_plus_response": bool(
                    (
                        b["input_ids"][i]
                        == __import__("torch").cat([b["prompts"][i], b["responses"][i]])
                    ).all()
                ),
                "reward_at": nonzero,
                "reward": float(rm[response_len - 1]) if response_len else float(rm[-1]),
                "num_turns": int(result.non_tensor_batch["__num_turns__"][i]),
                "min_global_steps": result.non_tensor_batch["min_global_steps"][i],
                "max_global_steps": result.non_tensor_batch["max_global_steps"][i],
                "trajectory_id": result.non_tensor_batch["rollouts_trajectory_id"][i],
                "masked": bool(result.non_tensor_batch["rollouts_masked"][i]),
            }
        )
    out["samples"] = samples
    out["delivered"] = delivered
    out["batch_keys"] = sorted(b.keys())
    out["rm_scores_in_batch"] = "rm_scores" in b.keys()
    out["reward_extra_keys"] = result.meta_info.get("reward_extra_keys")
    return out


if __name__ == "__main__":
    sys.exit(main())
