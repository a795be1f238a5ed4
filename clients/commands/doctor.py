"""`rollouts doctor`: what this machine's Docker Engine offers the sandboxes, and whether each
runtime passes a smoke sandbox: the oracle of a task through an agent container and the
verifier, graded 1, with the layers that kept the tested code from the verdict. Also the
check `serve`, `collect` and `verify` make at start: a runtime the engine does not know is
refused with one line that says how to register it."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import typer

from sandboxes.docker_adapter import default_adapter
from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.oracle import run_oracle
from sandboxes.pool import PoolSettings
from sandboxes.runtimes import UnknownRuntime, engine_runtimes, require_runtime
from sandboxes.tasks import iter_tasks

SMOKE_TASK = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "camel-to-snake"


def refuse_unknown_runtime(runtime: str | None) -> None:
    """Exit 2 with one line when the engine has no runtime `runtime`."""
    try:
        asyncio.run(require_runtime(default_adapter(), runtime))
    except UnknownRuntime as e:
        typer.echo(f"error: --runtime: {e}", err=True)
        raise typer.Exit(2) from None


def describe_layers(isolation: dict) -> str:
    """The tested process's separation from the tests, in words."""
    user = isolation.get("user")
    landlock = isolation.get("landlock")
    parts = [f"user {user}" if user is not None else "same user as the tests (no uid switch)"]
    if isinstance(landlock, int) and landlock > 0:
        parts.append(f"Landlock ABI {landlock}")
    else:
        parts.append(f"no Landlock ({landlock or 'not reported'})")
    return ", ".join(parts)


async def _smoke(runtime: str, task_dir: Path) -> tuple[bool, str]:
    task = next(iter_tasks(task_dir))
    settings = BackendSettings(pool=PoolSettings(warm_per_key=0), runtime=runtime)
    backend = DockerBackend(settings)
    labels = {"rollouts.rollout_id": f"doctor-{uuid.uuid4().hex[:8]}"}
    t0 = time.monotonic()
    try:
        result = await run_oracle(task, backend, solve_script=None, labels=labels)
    finally:
        await backend.aclose()
    seconds = time.monotonic() - t0
    if result.reward != 1.0 or result.flags:
        why = result.output.strip().splitlines()[-1:] or [""]
        return False, f"oracle graded {result.reward} {result.flags} ({result.verdict}): {why[0]}"
    return True, f"oracle graded 1.0 in {seconds:.1f} s; tested code: " + describe_layers(
        result.isolation
    )


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor_command(
        runtime: list[str] = typer.Option(
            None, "--runtime", help="Check this runtime (repeatable). Default: every one offered."
        ),
        tasks: Path = typer.Option(
            SMOKE_TASK, "--task", help="The task whose oracle is the smoke sandbox."
        ),
    ) -> None:
        """Which OCI runtimes the engine offers, and a smoke sandbox under each."""
        offered, default = asyncio.run(engine_runtimes(default_adapter()))
        typer.echo(f"engine runtimes: {', '.join(offered)} (default {default})")
        wanted = runtime or offered
        for name in wanted:
            if name not in offered:
                refuse_unknown_runtime(name)
        asyncio.run(ensure_base_image())
        failed = 0
        for name in wanted:
            ok, line = asyncio.run(_smoke(name, tasks))
            failed += not ok
            typer.echo(f"{name}: {'ok' if ok else 'FAILED'}: {line}")
        raise typer.Exit(1 if failed else 0)
