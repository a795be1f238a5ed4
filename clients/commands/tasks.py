"""`rollouts tasks ...`: inspect task sources (folders, Parquet releases) before using them."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from sandboxes.calibration import (
    CalibrationCache,
    calibration_key,
    default_cache_path,
    sandbox_setting,
)
from sandboxes.task import Task
from sandboxes.tasks import TaskLoadError, iter_tasks
from sandboxes.verifier import default_grader

app = typer.Typer(
    help="Inspect Harbor-format task sources (a task folder, a folder of them, or "
    "a Parquet file with path and task_binary columns).",
    no_args_is_help=True,
)

# Exit code for bad input (a task or source that fails validation), distinct from crashes (1).
EXIT_BAD_INPUT = 2


@app.command("list")
def list_tasks(
    path: Path = typer.Argument(..., help="Task folder, folder of task folders, or .parquet file."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Report bad tasks on stderr and list the rest."
    ),
    calibration_cache: Path = typer.Option(
        None,
        "--calibration-cache",
        help="The calibrations to show (default: $XDG_CACHE_HOME/rollouts/calibration.json, "
        "where `rollouts verify` and `collect` keep them; serve: DATA_DIR/calibration.json).",
    ),
    runtime: str = typer.Option(None, "--runtime", help="The runtime they were made under."),
    image: str = typer.Option(None, "--image", help="The image override they were made with."),
) -> None:
    """List tasks: id, instruction length, environment hash, whether an oracle exists, and its
    calibration with this grader: calibrated, uncalibrated (the oracle does not score 1
    unflagged through the grader: its samples are graded in the fallback), or unknown."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    skipped = 0
    cache = CalibrationCache(calibration_cache or default_cache_path())
    grader_version = default_grader().version
    setting = sandbox_setting(runtime, image)
    uncalibrated: list[str] = []

    def calibration(task: Task) -> str | None:
        cal = cache.get(calibration_key(task, grader_version, setting))
        if cal is not None and not cal.calibrated:
            uncalibrated.append(task.id)
        return cal.outcome if cal is not None else None

    def report_skipped(e: TaskLoadError) -> None:
        nonlocal skipped
        skipped += 1
        err.print(f"skipped: {e}", markup=False)

    table = Table("id", "instruction chars", "env hash", "oracle", "calibration")
    count = 0
    try:
        tasks = iter_tasks(path, skip_invalid=skip_invalid, on_invalid=report_skipped)
        for task in tasks:
            count += 1
            if as_json:
                # Streamed, so `tasks list big.parquet --json | head` starts printing at once.
                row = {
                    "id": task.id,
                    "instruction_chars": len(task.instruction),
                    "env_hash": task.env_hash,
                    "has_oracle": task.has_oracle,
                    "calibration": calibration(task),  # null: not calibrated yet
                }
                typer.echo(json.dumps(row))
            else:
                table.add_row(
                    task.id,
                    str(len(task.instruction)),
                    task.env_hash,
                    "yes" if task.has_oracle else "no",
                    calibration(task) or "unknown",
                )
    except TaskLoadError as e:
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if not as_json:
        Console(highlight=False).print(table)
    if skipped or not as_json:
        err.print(f"{count} tasks" + (f", {skipped} skipped" if skipped else ""), markup=False)
    if uncalibrated:
        err.print(
            f"warning: {len(uncalibrated)} uncalibrated task(s) (their oracle does not score 1 "
            f"unflagged through the grader; `rollouts verify` says how): "
            f"{', '.join(uncalibrated[:5])}",
            markup=False,
        )
