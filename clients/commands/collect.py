"""`rollouts collect`: run tasks x n samples end to end and write Parquet."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from sandboxes.docker_backend import BackendSettings, DockerBackend
from sandboxes.images import ensure_base_image
from sandboxes.tasks import TaskLoadError, load_tasks
from service.collect import CollectSummary, collect
from service.episode import EpisodeRunner
from service.policy.client import PolicyClient, PolicyError
from service.policy.stub.process import stand_in_policy
from service.wire import AgentSpec, RolloutRequest, SamplingSpec, TasksSpec

console = Console(stderr=True)


def summary_table(summary: CollectSummary, out: Path) -> Table:
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    table = Table(title="rollouts collect")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("groups", str(summary.groups))
    table.add_row("trajectories", str(summary.trajectories))
    for status, n in sorted(summary.counts.items()):
        table.add_row(f"  status {status}", str(n))
    table.add_row("masked", str(summary.masked))
    table.add_row("mean reward", fmt(summary.mean_reward))
    table.add_row("pass@1", fmt(summary.pass_at_1))
    table.add_row("pass@n", fmt(summary.pass_at_n))
    table.add_row("trajectories / min", f"{summary.trajectories_per_min:.1f}")
    table.add_row("generated tokens / s", f"{summary.tokens_per_s:.1f}")
    table.add_row("parquet", str(out))
    table.add_row("store (rollouts export --data-dir)", str(out.with_suffix(".store")))
    return table


async def _run(
    tasks_path: str,
    policy_urls: list[str],
    model: str | None,
    request: RolloutRequest,
    concurrency: int,
    image: str | None,
    out_file: Path,
    limit: int | None,
) -> CollectSummary:
    tasks = load_tasks(tasks_path, limit=limit)
    policy = PolicyClient(policy_urls, model)
    await policy.start()
    backend = DockerBackend(BackendSettings(image_override=image))
    runner = EpisodeRunner(policy, backend)
    try:
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            bar = progress.add_task("trajectories", total=len(tasks) * request.n_samples)
            return await collect(
                tasks_path,
                tasks,
                runner,
                out_file.with_suffix(".store"),
                out_file,
                request,
                concurrency=concurrency,
                on_trajectory=lambda _event: progress.advance(bar),
            )
    finally:
        await backend.aclose()
        await policy.aclose()


def _announce_build(tag: str) -> None:
    typer.echo(f"Building the sandbox base image {tag} (once, about a minute)...", err=True)


def register(app: typer.Typer) -> None:
    @app.command("collect")
    def collect_command(
        tasks: str = typer.Option(..., "--tasks", help="Task folder, folder of tasks, or Parquet."),
        policy_url: list[str] = typer.Option(
            None,
            "--policy-url",
            envvar="ROLLOUTS_POLICY_URL",
            help="vLLM base URL (repeatable). Without it the stand-in policy is started.",
        ),
        model: str = typer.Option(None, "--model", help="Default: the server's only model."),
        n_samples: int = typer.Option(8, "--n-samples", min=1),
        concurrency: int = typer.Option(8, "--concurrency", min=1, help="Samples in flight."),
        max_turns: int = typer.Option(32, "--max-turns", min=1),
        max_tokens: int = typer.Option(4096, "--max-tokens", min=1, help="Per turn."),
        temperature: float = typer.Option(1.0, "--temperature", min=0.0),
        seed: int = typer.Option(None, "--seed"),
        limit: int = typer.Option(None, "--limit", min=1, help="Only the first N tasks."),
        image: str = typer.Option(None, "--image", help="Use this image for every task."),
        p_correct: float = typer.Option(
            0.5, "--p-correct", min=0.0, max=1.0, help="Stand-in only: chance of the oracle."
        ),
        out: Path = typer.Option(Path("out"), "--out", help="Output folder."),
    ) -> None:
        """Collect rollouts for every task x n samples and write them as Parquet."""
        try:
            load_tasks(tasks, limit=limit)  # fail on bad input before any work starts
        except (TaskLoadError, FileNotFoundError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        asyncio.run(ensure_base_image(on_build=_announce_build))
        out.mkdir(parents=True, exist_ok=True)
        out_file = out / f"rollouts-{time.strftime('%Y%m%d-%H%M%S')}.parquet"
        request = RolloutRequest(
            tasks=TasksSpec(path=tasks, limit=limit),
            n_samples=n_samples,
            sampling=SamplingSpec(temperature=temperature, max_tokens=max_tokens, seed=seed),
            agent=AgentSpec(max_turns=max_turns),
        )
        urls = [u for item in (policy_url or []) for u in item.split(",") if u.strip()]
        with contextlib.ExitStack() as stack:
            if not urls:
                console.print(
                    "No --policy-url / ROLLOUTS_POLICY_URL: starting the stand-in policy."
                )
                stand_in = stack.enter_context(
                    stand_in_policy(tasks, p_correct=p_correct, seed=seed or 0)
                )
                urls = [stand_in.url]
            try:
                summary = asyncio.run(
                    _run(tasks, urls, model, request, concurrency, image, out_file, limit)
                )  # fmt: skip
            except PolicyError as e:
                typer.echo(f"error: policy server: {e}", err=True)
                raise typer.Exit(1) from None
        Console().print(summary_table(summary, out_file))
        print(out_file)
