"""`rollouts verify`: the oracle agent. Runs each task's solve script in an agent container, then
the verifier, and prints one JSON line per task: the dataset sanity check. Each line carries
the grade's flags, so a suspected hack (with `--solve-script`) or a task whose tests the guard
cannot cover (`unguarded`) shows at once.

With the tasks' own oracles it is also their calibration (sandboxes/calibration.py): each
outcome goes to the calibration cache, which `collect` and `rollouts tasks list` read, and a
task whose oracle does not score 1 unflagged is reported, with its oracle graded once more in
the fallback, to tell a task the boundary cannot grade from a wrong oracle."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import typer

from clients.commands import options
from clients.commands.doctor import refuse_unknown_runtime
from sandboxes.backend import Verdict
from sandboxes.calibration import (
    CalibrationCache,
    calibration_key,
    default_cache_path,
    judge,
    sandbox_setting,
)
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.oracle import run_oracle
from sandboxes.reward import UNGUARDED
from sandboxes.task import Task
from sandboxes.tasks import TaskLoadError, load_tasks
from sandboxes.verifier import default_grader
from service.episode import status_of

CONCURRENCY = 2  # tasks verified at once: each runs an agent and a verifier container
UNCALIBRATED = "uncalibrated"  # in the summary's `flagged`: tasks whose oracle the grader fails


async def _verify_all(
    tasks: list[Task],
    solve_script: bytes | None,
    image: str | None,
    runtime: str | None,
    concurrency: int,
    as_json: bool,
    cache: CalibrationCache,
) -> tuple[int, int, float, dict[str, list[str]]]:
    backend = DockerBackend(BackendSettings(image_override=image, runtime=runtime))
    grader_version = default_grader().version
    setting = sandbox_setting(runtime, image)
    limit = asyncio.Semaphore(concurrency)
    run_id = uuid.uuid4().hex[:12]
    passed = 0
    started = time.monotonic()
    flagged: dict[str, list[str]] = {}

    async def one(task: Task) -> None:
        nonlocal passed
        async with limit:
            labels = {"rollouts.rollout_id": f"verify-{run_id}", "rollouts.task_id": task.id}
            result = await run_oracle(task, backend, solve_script=solve_script, labels=labels)
            cal = None
            if solve_script is None:  # the task's own oracle: its calibration
                key = calibration_key(task, grader_version, setting)
                cal = judge(task, key, result, grader_version, setting)
            fallback = None
            if cal is not None and not cal.calibrated:
                fallback = await run_oracle(
                    task, backend, solve_script=None, labels=labels, plain=True
                )
        if cal is not None:
            await asyncio.to_thread(cache.put, cal)
        passed += result.reward is not None and result.reward >= 1.0
        for flag in result.flags:
            flagged.setdefault(flag, []).append(task.id)
        line = {
            "task_id": task.id,
            "reward": result.reward,
            "status": status_of(result.verdict).value,
            "flags": result.flags,
            "durations": {k: round(v, 3) for k, v in result.durations.items()},
        }
        if solve_script is None:
            # null: the run hit an infrastructure fault and says nothing about the grader.
            line["calibration"] = cal.outcome if cal is not None else None
        if fallback is not None:
            flagged.setdefault(UNCALIBRATED, []).append(task.id)
            line["fallback"] = {
                "reward": fallback.reward,
                "status": status_of(fallback.verdict).value,
                "flags": fallback.flags,
            }
        if not as_json:
            line["verifier_output"] = (
                result.output[-400:] if result.verdict is not Verdict.graded else ""
            )
        print(json.dumps(line), flush=True)

    try:
        await asyncio.gather(*(one(t) for t in tasks))
    finally:
        await backend.aclose()
    return passed, len(tasks), time.monotonic() - started, flagged


def _announce_build(tag: str) -> None:
    typer.echo(f"Building the sandbox base image {tag} (once, about a minute)...", err=True)


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify_command(
        tasks: str = typer.Option(..., "--tasks", help="Task folder, folder of tasks, or Parquet."),
        solve_script: Path = typer.Option(
            None, "--solve-script", help="Run this script instead of each task's solution/solve.sh."
        ),
        image: str = typer.Option(None, "--image", help="Use this image for every task."),
        runtime: str = options.RUNTIME,
        concurrency: int = typer.Option(CONCURRENCY, "--concurrency", min=1),
        as_json: bool = typer.Option(False, "--json", help="Only JSON lines, summary as JSON."),
        skip_invalid: bool = typer.Option(False, "--skip-invalid"),
        calibration_cache: Path = typer.Option(
            None,
            "--calibration-cache",
            help="Where the oracles' calibrations are kept (default: "
            "$XDG_CACHE_HOME/rollouts/calibration.json).",
        ),
    ) -> None:
        """Run the oracle (or a given solve script) and the verifier on every task."""
        try:
            loaded = load_tasks(tasks, skip_invalid=skip_invalid)
        except (TaskLoadError, FileNotFoundError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        script = None
        if solve_script is not None:
            if not solve_script.is_file():
                typer.echo(f"error: --solve-script {solve_script} is not a file", err=True)
                raise typer.Exit(2)
            script = solve_script.read_bytes()
        else:
            missing = [t.id for t in loaded if not t.has_oracle]
            if missing:
                typer.echo(
                    f"error: no solution/solve.sh in {', '.join(missing[:5])}; "
                    "pass --solve-script FILE",
                    err=True,
                )
                raise typer.Exit(2)
        refuse_unknown_runtime(runtime)
        asyncio.run(ensure_base_image(on_build=_announce_build))
        passed, total, seconds, flagged = asyncio.run(
            _verify_all(
                loaded,
                script,
                image,
                runtime,
                concurrency,
                as_json,
                CalibrationCache(calibration_cache or default_cache_path()),
            )
        )
        per_min = 60.0 * total / seconds if seconds else 0.0
        summary = {"passed": passed, "total": total, "seconds": round(seconds, 2),
                   "trials_per_min": round(per_min, 1),
                   "flagged": {k: sorted(v) for k, v in sorted(flagged.items())}}  # fmt: skip
        if UNGUARDED in flagged:
            typer.echo(
                f"warning: the tests of {len(flagged[UNGUARDED])} task(s) never reached the "
                f"solution through the verifier's tested process, so their rewards were not "
                f"established out of the agent's reach (flag `unguarded`): "
                f"{', '.join(sorted(flagged[UNGUARDED])[:5])}",
                err=True,
            )
        if UNCALIBRATED in flagged:
            typer.echo(
                f"warning: the oracle of {len(flagged[UNCALIBRATED])} task(s) does not score 1 "
                f"unflagged through the grader (uncalibrated; `fallback` on their lines says how "
                f"the fallback grades it); their samples are graded in the fallback, flagged "
                f"`unguarded`, or dropped (request `uncalibrated`): "
                f"{', '.join(sorted(flagged[UNCALIBRATED])[:5])}",
                err=True,
            )
        if as_json:
            print(json.dumps({"summary": summary}))
        else:
            typer.echo(
                f"{passed}/{total} passed in {seconds:.1f} s ({per_min:.1f} trials/min)", err=True
            )
