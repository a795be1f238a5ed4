"""SkyRL (skyrl >= 0.4, Python 3.12) training on rollouts that a rollouts service collects.

SkyRL's dataset names the tasks (examples/skyrl/make_dataset.py writes one); for each prompt
RolloutsGenerator runs the task's group of n samples on the service, which drives the agent in
its sandboxes against the same vLLM servers SkyRL updates with new weights (README.md here).

    export ROLLOUTS_URL=http://rollouts-host:8080 ROLLOUTS_API_KEY=... ROLLOUTS_TASKS=/data/tasks
    python examples/skyrl/main_rollouts.py \\
        data.train_data="['$HOME/data/rollouts/train.parquet']" \\
        trainer.policy.model.path=Qwen/Qwen3-8B \\
        trainer.algorithm.advantage_estimator=rloo \\
        generator.n_samples_per_prompt=8 \\
        generator.sampling_params.max_generate_length=4096 \\
        generator.inference_engine.run_engines_locally=false \\
        generator.inference_engine.external_server_urls="['http://gpu-box:8000']"
"""

from __future__ import annotations

import os
import sys

import ray
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils import validate_cfg
from skyrl.train.utils.utils import initialize_ray

from clients.skyrl import RolloutsGenerator, ServiceAdvantagesMixin


class RolloutsTrainer(ServiceAdvantagesMixin, RayPPOTrainer):
    """SkyRL's trainer, its `rloo` estimator giving the service's rloo_n advantages."""


class RolloutsFullyAsyncTrainer(ServiceAdvantagesMixin, FullyAsyncRayPPOTrainer):
    """The same for the fully asynchronous trainer (trainer.fully_async.enabled=true)."""


def trainer_class(cfg: SkyRLTrainConfig) -> type:
    return RolloutsFullyAsyncTrainer if cfg.trainer.fully_async.enabled else RolloutsTrainer


class RolloutsPPOExp(BasePPOExp):
    def get_generator(self, cfg, tokenizer, inference_engine_client):
        return RolloutsGenerator(
            os.environ["ROLLOUTS_URL"],
            tasks_path=os.environ["ROLLOUTS_TASKS"],  # the task source as the service sees it
            api_key=os.environ.get("ROLLOUTS_API_KEY"),
            task_id_key="task_id",  # the dataset column with the service's task ids
            pad_token_id=tokenizer.pad_token_id or 0,
            agent={"max_turns": 32},
            # generator.step_wise_trajectories=true: every segment of a summarized episode is
            # trained, one step each (docs/skyrl.md#summarized-episodes-step-wise).
            step_wise=bool(cfg.generator.step_wise_trajectories),
        )

    def get_trainer(
        self,
        cfg,
        tracker,
        tokenizer,
        train_dataset,
        eval_dataset,
        inference_engine_client,
        generator,
        colocate_pg,
    ):
        return trainer_class(cfg)(
            cfg=cfg,
            tracker=tracker,
            tokenizer=tokenizer,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            inference_engine_client=inference_engine_client,
            generator=generator,
            colocate_pg=colocate_pg,
        )


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: SkyRLTrainConfig) -> None:
    RolloutsPPOExp(cfg).run()


def main() -> None:
    cfg = SkyRLTrainConfig.from_cli_overrides(sys.argv[1:])
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
