"""`rollouts regrade`: grade stored samples again without re-running the agent.

Each selected sample's kept final workspace goes to a fresh verifier container with the task's
tests as they are now (its rollout's tasks path, or `--tasks`) and this code's grader
(service/regrade.py). Prints a table of what changed and exits 1 if any sample could not be
graded for an infrastructure reason (2: a usage error). Run it again to resume a regrade that
was cut short: samples already graded by this grader on these tests are not graded again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clients.commands import options
from clients.commands.doctor import refuse_unknown_runtime
from sandboxes.calibration import CALIBRATION_FILE, CalibrationCache, Calibrator, sandbox_setting
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.task import Task
from sandboxes.tasks import TaskLoadError, load_tasks
from service import regrade
from service.errors import ClientError, InvalidRequest
from service.store import DB_NAME, Store

console = Console()


def _task_source(override: str | None) -> regrade.TaskSource:
    """Tasks from `--tasks`, or from each rollout's own tasks path (a folder or Parquet file
    here; a dataset name of the service must be given with --tasks)."""

    async def tasks(rollout_id: str, path: str, ids: list[str]) -> dict[str, Task]:
        source = override or path
        flag = "--tasks" if override else f"rollout {rollout_id}'s tasks path"
        if override is None and not Path(path).exists():
            raise InvalidRequest(
                f"rollout {rollout_id}'s tasks path {path!r} is not a path here (a dataset "
                "name of the service?): pass --tasks PATH"
            )
        try:
            loaded = await asyncio.to_thread(load_tasks, source, ids=ids)
        except (TaskLoadError, OSError, ValueError) as e:
            raise InvalidRequest(f"{flag} {source!r}: {e}") from e
        return {t.id: t for t in loaded}

    return tasks


def change_table(report: regrade.RegradeReport) -> Table:
    table = Table(title="rollouts regrade: changes")
    for column in ("trajectory", "task", "change", "reward", "status", "flags"):
        table.add_column(column)
    for c in report.changes:
        flags = " ".join([*(f"+{f}" for f in c.added_flags), *(f"-{f}" for f in c.removed_flags)])
        status = c.after_status
        if c.before_status != c.after_status:
            status = f"{c.before_status} → {c.after_status}"
        reward = f"{_fmt(c.before_reward)} → {_fmt(c.after_reward)}"
        table.add_row(c.trajectory_id, c.task_id, c.kind, reward, status, flags)
    return table


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:g}"


def summary_line(report: regrade.RegradeReport) -> str:
    kinds: dict[str, int] = {}
    for c in report.changes:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    changed = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())) or "none"
    return (
        f"{report.selected} samples: {report.regraded} graded again, {report.already} already "
        f"graded by this grader on these tests, {report.no_workspace} without a kept "
        f"workspace, {len(report.failed)} failed; changes: {changed}; "
        f"{report.groups_offered} regraded groups offered to trainers"
    )


async def _regrade(
    data_dir: Path,
    rollout: str | None,
    tasks_path: str | None,
    task_ids: list[str] | None,
    backend_settings: BackendSettings,
    concurrency: int,
) -> regrade.RegradeReport:
    # A service may hold this store: leave its leases alone (recover=False).
    store = Store(data_dir, recover=False)
    store.open()
    try:
        if rollout is not None and not await store.rollout_exists(rollout):
            raise InvalidRequest(f"--rollout: no rollout {rollout!r} in {data_dir}")
        the_plan = await regrade.plan(
            store, _task_source(tasks_path), rollout_id=rollout, task_ids=task_ids
        )
        if task_ids and not the_plan.candidates:
            raise InvalidRequest(f"--task: no stored samples of {', '.join(task_ids)}")
        await ensure_base_image()
        backend = DockerBackend(backend_settings)
        version = regrade.grader_version_of(backend)
        # The service's calibrations (its data dir's file): an uncalibrated task's samples are
        # graded as collection grades them (docs/reliability.md#calibration).
        setting = sandbox_setting(backend_settings.runtime, backend_settings.image_override)
        cache = CalibrationCache(data_dir / CALIBRATION_FILE)
        calibrator = Calibrator(backend, cache, grader_version=version, setting=setting)
        try:
            return await regrade.run(
                store,
                backend,
                the_plan,
                grader_version=version,
                concurrency=concurrency,
                calibrator=calibrator,
            )
        finally:
            await calibrator.aclose()
            await backend.aclose()
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    @app.command("regrade")
    def regrade_command(
        data_dir: Path = typer.Option(..., "--data-dir", help="The store (--data-dir) to regrade."),
        rollout: str = typer.Option(None, "--rollout", help="Only this rollout id."),
        tasks: str = typer.Option(
            None,
            "--tasks",
            help="Task folder, folder of tasks, or Parquet with the tests to grade by. "
            "Default: each rollout's own tasks path, as it is now.",
        ),
        task: list[str] = typer.Option(None, "--task", help="Only this task id (repeatable)."),
        image: str = options.IMAGE,
        runtime: str = options.RUNTIME,
        concurrency: int = typer.Option(
            regrade.CONCURRENCY, "--concurrency", min=1, help="Verifications at once."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    ) -> None:
        """Grade stored samples again from their kept final workspaces (no agent re-run)."""
        if not (data_dir / DB_NAME).exists():
            typer.echo(f"error: --data-dir: no rollouts store at {data_dir}", err=True)
            raise typer.Exit(2)
        refuse_unknown_runtime(runtime)
        settings = BackendSettings(image_override=image, runtime=runtime)
        try:
            report = asyncio.run(
                _regrade(data_dir, rollout, tasks, task or None, settings, concurrency)
            )
        except ClientError as e:
            typer.echo(f"error: {e.message}", err=True)
            raise typer.Exit(2) from None
        if as_json:
            print(json.dumps(report.to_json()))
        else:
            if report.changes:
                console.print(change_table(report))
            typer.echo(summary_line(report))
            for tid, why in report.failed:
                last = (why.strip().splitlines() or ["?"])[-1]
                typer.echo(f"failed: {tid}: {last}", err=True)
        if report.failed:
            raise typer.Exit(1)
