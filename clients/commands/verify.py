"""`rollouts verify`: the oracle agent. Runs each task's solve script in an agent container, then
the verifier, and prints one JSON line per task: the dataset sanity check. Each line carries
the grade's flags, so a suspected hack (with `--solve-script`) or a task whose tests the guard
cannot cover (`unguarded`) shows at once."""

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
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.oracle import run_oracle
from sandboxes.reward import UNGUARDED
from sandboxes.task import Task
from sandboxes.tasks import TaskLoadError, load_tasks
from service.episode import status_of

CONCURRENCY = 2  # tasks verified at once: each runs an agent and a verifier container


async def _verify_all(
    tasks: list[Task],
    solve_script: bytes | None,
    image: str | None,
    runtime: str | None,
    concurrency: int,
    as_json: bool,
) -> tuple[int, int, float]:
    backend = DockerBackend(BackendSettings(image_override=image, runtime=runtime))
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
            _verify_all(loaded, script, image, runtime, concurrency, as_json)
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
        if as_json:
            print(json.dumps({"summary": summary}))
        else:
            typer.echo(
                f"{passed}/{total} passed in {seconds:.1f} s ({per_min:.1f} trials/min)", err=True
            )
