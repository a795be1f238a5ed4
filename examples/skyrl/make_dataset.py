"""Write SkyRL's dataset for a task source: one row per task, `task_id` naming it.

    python examples/skyrl/make_dataset.py --tasks examples/tasks --out ~/data/rollouts

The `prompt` column is only what SkyRL logs and length-filters: the service renders the real
prompt from the task itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sandboxes.tasks import iter_tasks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", required=True, help="task folder, folder of tasks or Parquet")
    p.add_argument("--out", required=True, type=Path, help="folder for train.parquet")
    p.add_argument("--max-prompt-chars", type=int, default=2000)
    args = p.parse_args()
    rows = [
        {
            "prompt": [{"role": "user", "content": task.instruction[: args.max_prompt_chars]}],
            "env_class": "rollouts",
            "task_id": task.id,
        }
        for task in iter_tasks(args.tasks)
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), args.out / "train.parquet")
    print(f"{len(rows)} tasks -> {args.out / 'train.parquet'}")


if __name__ == "__main__":
    main()
