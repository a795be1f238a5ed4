"""The rollout service with a synthetic group runner, as its own process (for the data-path and
memory benchmarks): `python -m benchmarks.datapath_service --data-dir D --port P`.

Everything but the episode is real: POST /v1/rollouts, the scheduler, the store's commit path
(encode, compress, SQLite group commit, advantages), leasing and acks over HTTP. The runner hands
each sample a ready-made 8k-token trajectory at once, as if the episode had just finished, so
the service's own cost per trajectory is what gets measured.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path

from benchmarks.synthetic import make_trajectory, synthetic_tasks
from sandboxes.task import Task
from service.app import create_app
from service.components import Components
from service.sample import SampleSpec
from service.settings import PolicySettings, ServiceSettings, Settings
from service.trajectory import OnEpisodeEnd, OnStart, OnTrajectory, Trajectory

# Distinct payloads: one lease (16 groups x 8) never holds the same record twice, so Arrow's
# zstd buffers cannot shrink a batch by finding repeats. Costs ~75 MiB of the service's RSS.
TEMPLATES = 128
PROMPT_TOKENS, RESPONSE_TOKENS = 1024, 7168  # per trajectory, as in a long agentic episode
MAX_CONCURRENT_SAMPLES = 64


class SyntheticRunner:
    def __init__(self, prompt_tokens: int, response_tokens: int) -> None:
        self.served = 0
        self.templates = [
            make_trajectory(i, prompt_tokens, response_tokens) for i in range(TEMPLATES)
        ]

    async def run_group(
        self,
        task: Task,
        samples: list[SampleSpec],
        on_trajectory: OnTrajectory,
        on_episode_end: OnEpisodeEnd | None = None,
        on_start: OnStart | None = None,
    ) -> None:
        def one(spec: SampleSpec) -> Trajectory:
            self.served += 1
            template = self.templates[self.served % TEMPLATES]
            return template.model_copy(
                update={
                    "trajectory_id": spec.trajectory_id,
                    "rollout_id": spec.rollout_id,
                    "group_id": spec.group_id,
                    "task_id": task.id,
                    "sample_index": spec.sample_index,
                }
            )

        async def run(spec: SampleSpec) -> None:
            if on_start is not None:
                await on_start(spec.trajectory_id)
            await on_trajectory(one(spec))

        # The samples of a group finish together, as parallel episodes would.
        await asyncio.gather(*(run(s) for s in samples))


def components_factory(prompt_tokens: int, response_tokens: int) -> Callable:
    async def factory(settings: Settings, current_version: Callable[[], int]) -> Components:
        def load(path: str, ids: list[str] | None, limit: int | None) -> list[Task]:
            if path != "synthetic":
                raise ValueError("this benchmark service only knows tasks.path='synthetic'")
            return synthetic_tasks(limit or 1)

        return Components(runner=SyntheticRunner(prompt_tokens, response_tokens), load_tasks=load)

    return factory


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    parser.add_argument("--response-tokens", type=int, default=RESPONSE_TOKENS)
    parser.add_argument("--max-concurrent-samples", type=int, default=MAX_CONCURRENT_SAMPLES)
    ns = parser.parse_args()
    settings = Settings(
        service=ServiceSettings(
            port=ns.port, data_dir=ns.data_dir, max_concurrent_samples=ns.max_concurrent_samples
        ),
        policy=PolicySettings(urls=["http://127.0.0.1:9"]),  # never called: synthetic runner
    )
    app = create_app(settings, components_factory(ns.prompt_tokens, ns.response_tokens))
    uvicorn.run(app, host="127.0.0.1", port=ns.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
