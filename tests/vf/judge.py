"""verifiers' own code judging `rollouts serve-env`, run in the verifiers venv (tests/vf/vf_venv.py)
with the repository on PYTHONPATH. Prints one JSON object on its last stdout line.

  judge.py branches             stdin {trajectory, task_data, model}: the trace clients/
                                verifiers_trace.py builds, streamed through verifiers'
                                DeltaStreamer into its EpisodeAssembly and validated as a
                                WireEpisode: each branch's training sample
  judge.py run ADDRESS          stdin {task_data, base_url, model, sampling}: EnvClient.health,
                                then EnvClient.run: the episode's branches, rewards and record
  judge.py cancel ADDRESS       as run, but prints {"started": true}, waits for a line on stdin,
                                then cancels the run as an orchestrator does (cancelling the
                                awaiting task: the client sends `cancel`) and closes the client
"""

from __future__ import annotations

import asyncio
import json
import sys

from verifiers.v1.configs.client import TrainClientConfig
from verifiers.v1.episode import WireEpisode
from verifiers.v1.serve.client import EnvClient
from verifiers.v1.serve.delta import (
    DeltaStreamer,
    EpisodeAssembly,
    TraceSummary,
    dump,
    pack,
    unpack,
)
from verifiers.v1.types import SamplingConfig


def samples(episode: WireEpisode) -> dict:
    """The orchestrator's view: one training sample per branch of each trace."""
    out = []
    for trace in episode.traces:
        for branch in trace.branches:
            out.append(
                {
                    "token_ids": branch.token_ids,
                    "sampled_mask": branch.sampled_mask,
                    "logprobs": branch.logprobs,
                    "trainable": branch.trainable,
                }
            )
    trace = episode.traces[0] if episode.traces else None
    return {
        "ok": episode.ok,
        "samples": out,
        "reward": trace.reward if trace else None,
        "rewards": {k: (v.score if v else None) for k, v in trace.rewards.items()} if trace else {},
        "info": trace.info if trace else {},
        "errors": [e.message for e in (trace.errors if trace else episode.errors)],
        "record": trace.to_record() if trace else None,
        "num_turns": trace.num_turns if trace else 0,
    }


async def branches(spec: dict) -> dict:
    from clients.verifiers_trace import load_verifiers, to_episode, to_trace
    from service.trajectory import Trajectory

    vf = load_verifiers()
    trace = to_trace(
        vf, Trajectory.model_validate(spec["trajectory"]), spec["task_data"], spec["model"]
    )
    episode = to_episode(vf, spec["task_data"], [trace], [])
    assembly = EpisodeAssembly()

    async def send(delta: dict) -> None:
        assembly.apply(unpack(pack(delta)))

    await DeltaStreamer(lambda: [trace], send).flush()
    head = unpack(pack(dump(episode, exclude={"traces"})))
    summary = [TraceSummary(id=trace.id, nodes=len(trace.nodes), calls=len(trace.calls))]
    return samples(WireEpisode.model_validate(assembly.finish(head, summary)))


def _run_args(spec: dict) -> dict:
    return {
        "client": TrainClientConfig(base_url=spec["base_url"], api_key_var="ROLLOUTS_NO_KEY"),
        "model": spec["model"],
        "sampling": SamplingConfig.model_validate(spec.get("sampling") or {}),
        "task_data": spec["task_data"],
    }


async def run(address: str, spec: dict) -> dict:
    client = EnvClient(address)
    try:
        assert await client.health(timeout=30), "health: no answer"
        return samples(await client.run(**_run_args(spec)))
    finally:
        await client.close()


async def cancel(address: str, spec: dict) -> dict:
    client = EnvClient(address)
    try:
        assert await client.health(timeout=30), "health: no answer"
        task = asyncio.create_task(client.run(**_run_args(spec)))
        print(json.dumps({"started": True}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return {"cancelled": True}
        return {"cancelled": False}
    finally:
        await client.close()  # lets the fire-and-forget `cancel` reach the socket


def main() -> None:
    what = sys.argv[1]
    if what == "branches":
        result = asyncio.run(branches(json.loads(sys.stdin.read())))
    elif what == "run":
        result = asyncio.run(run(sys.argv[2], json.loads(sys.stdin.readline())))
    else:
        result = asyncio.run(cancel(sys.argv[2], json.loads(sys.stdin.readline())))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
