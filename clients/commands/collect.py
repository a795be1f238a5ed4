"""`rollouts collect`: run tasks x n samples end to end and write Parquet."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from clients.commands import options
from clients.commands.agent import agent_settings, describe
from clients.commands.doctor import refuse_unknown_runtime
from clients.commands.policy_stub import stand_in_policy
from clients.commands.shared_settings import invalid, policy_settings, sandbox_settings
from sandboxes.calibration import default_cache_path
from sandboxes.images import ensure_base_image
from sandboxes.tasks import TaskLoadError, load_tasks
from service.advantages import AdvantageConfig
from service.collect import CONCURRENCY, CollectSummary, collect
from service.components import build_components
from service.policy.client import PolicyError
from service.sample import (
    N_SAMPLES,
    TRAIN_ALL_SEGMENTS,
    UNCALIBRATED_FALLBACK,
    AgentLimits,
    SamplingParams,
)
from service.settings import ServiceSettings, Settings
from service.wire import (
    AdvantageSpec,
    AgentSpec,
    RolloutRequest,
    SamplingSpec,
    TasksSpec,
    parse_chat_template_kwargs,
)

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


async def _run(settings: Settings, request: RolloutRequest, out_file: Path) -> CollectSummary:
    spec = request.tasks
    components = await build_components(settings, policy_must_answer=True)
    try:
        tasks = list(components.load_tasks(spec.path, spec.ids, spec.limit))
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            bar = progress.add_task("trajectories", total=len(tasks) * request.n_samples)
            return await collect(
                spec.path,
                tasks,
                components.runner,
                settings.service.data_dir,
                out_file,
                request,
                concurrency=settings.service.max_concurrent_samples,
                retry_masked=settings.service.retry_masked,
                ready=components.ready,
                keep_workspaces=settings.service.keep_workspaces,
                task_loader=components.load_tasks,
                on_trajectory=lambda _event: progress.advance(bar),
            )
    finally:
        if components.aclose is not None:
            await components.aclose()


def _announce_build(tag: str) -> None:
    typer.echo(f"Building the sandbox base image {tag} (once, about a minute)...", err=True)


def register(app: typer.Typer) -> None:
    @app.command("collect")
    def collect_command(
        tasks: str = typer.Option(..., "--tasks", help="Task folder, folder of tasks, or Parquet."),
        policy_url: list[str] = options.POLICY_URL,
        model: str = options.MODEL,
        n_samples: int = typer.Option(N_SAMPLES, "--n-samples", min=1),
        min_group_size: int = typer.Option(
            AdvantageConfig.min_group_size,
            "--min-group-size",
            min=1,
            help="rloo_n: groups with fewer unmasked samples get advantage 0 (<= --n-samples).",
        ),
        concurrency: int = typer.Option(
            CONCURRENCY, "--concurrency", min=1, help="Samples in flight."
        ),
        retry_masked: int = options.RETRY_MASKED,
        uncalibrated: str = typer.Option(
            UNCALIBRATED_FALLBACK,
            "--uncalibrated",
            help="Samples of a task whose oracle does not score 1 unflagged through the grader: "
            "'fallback' (graded with the tests and the code in one process, flagged "
            "unguarded) or 'drop' (not run, masked).",
        ),
        train_segments: str = typer.Option(
            TRAIN_ALL_SEGMENTS,
            "--train-segments",
            help="A summarized episode's segments to keep: 'all' (summary calls included) or "
            "'last' (the graded conversation only); docs/trajectory.md#segments.",
        ),
        keep_workspaces: bool = options.KEEP_WORKSPACES,
        max_turns: int = typer.Option(AgentLimits.max_turns, "--max-turns", min=1),
        agent: str = options.AGENT,
        agent_profile: list[Path] = options.AGENT_PROFILE,
        max_tokens: int = typer.Option(
            SamplingParams.max_tokens, "--max-tokens", min=1, help="Per turn."
        ),
        temperature: float = typer.Option(SamplingParams.temperature, "--temperature", min=0.0),
        top_p: float = typer.Option(SamplingParams.top_p, "--top-p", min=0.0, max=1.0),
        top_k: int = typer.Option(SamplingParams.top_k, "--top-k", min=-1, help="-1: off."),
        min_p: float = typer.Option(SamplingParams.min_p, "--min-p", min=0.0, max=1.0),
        seed: int = typer.Option(None, "--seed"),
        chat_template_kwargs: str = options.CHAT_TEMPLATE_KWARGS,
        limit: int = typer.Option(None, "--limit", min=1, help="Only the first N tasks."),
        image: str = options.IMAGE,
        runtime: str = options.RUNTIME,
        p_correct: float = typer.Option(
            0.5, "--p-correct", min=0.0, max=1.0, help="Stand-in only: chance of the oracle."
        ),
        out: Path = typer.Option(Path("out"), "--out", help="Output folder."),
        policy_timeout_s: float = options.POLICY_TIMEOUT,
        policy_retries: int = options.POLICY_RETRIES,
        policy_backoff_s: float = options.POLICY_BACKOFF,
        policy_cooldown_s: float = options.POLICY_COOLDOWN,
        policy_pause_poll_s: float = options.POLICY_PAUSE_POLL,
        policy_update_retries: int = options.POLICY_UPDATE_RETRIES,
        policy_max_hold_s: float = options.POLICY_MAX_HOLD,
        lora: str = options.LORA,
        warm_containers: int = options.WARM_CONTAINERS,
        create_rate: float = options.CREATE_RATE,
        max_concurrent_creates: int = options.MAX_CONCURRENT_CREATES,
        warm_ttl_s: float = options.WARM_TTL,
        build_network: bool = options.BUILD_NETWORK,
        allow_pull: bool = options.ALLOW_PULL,
        build_cpus: float = options.BUILD_CPUS,
        build_memory_mb: int = options.BUILD_MEMORY,
        build_timeout_s: float = options.BUILD_TIMEOUT,
        image_budget_gb: float = options.IMAGE_BUDGET,
        ray_address: str = options.RAY_ADDRESS,
    ) -> None:
        """Collect rollouts for every task x n samples and write them as Parquet."""
        try:
            load_tasks(tasks, limit=limit)  # fail on bad input before any work starts
        except (TaskLoadError, FileNotFoundError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        try:
            policy = policy_settings(
                policy_url=policy_url, model=model, policy_timeout_s=policy_timeout_s,
                policy_retries=policy_retries, policy_backoff_s=policy_backoff_s,
                policy_cooldown_s=policy_cooldown_s, policy_pause_poll_s=policy_pause_poll_s,
                policy_update_retries=policy_update_retries, lora=lora,
                policy_max_hold_s=policy_max_hold_s,
            )  # fmt: skip
            sandboxes = sandbox_settings(
                image=image, runtime=runtime, warm_containers=warm_containers,
                create_rate=create_rate, max_concurrent_creates=max_concurrent_creates,
                warm_ttl_s=warm_ttl_s, build_network=build_network, allow_pull=allow_pull,
                build_cpus=build_cpus, build_memory_mb=build_memory_mb,
                build_timeout_s=build_timeout_s, image_budget_gb=image_budget_gb,
                ray_address=ray_address,
            )  # fmt: skip
        except ValidationError as e:
            invalid(e)
        try:
            agent_config = agent_settings(agent, agent_profile or [])
        except ValueError as e:
            typer.echo(f"error: --agent / --agent-profile: {e}", err=True)
            raise typer.Exit(2) from None
        try:
            template_kwargs = parse_chat_template_kwargs(chat_template_kwargs)
        except ValueError as e:
            typer.echo(f"error: --chat-template-kwargs: {e}", err=True)
            raise typer.Exit(2) from None
        try:
            sampling = SamplingSpec(
                temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                max_tokens=max_tokens, seed=seed,
            )  # fmt: skip
        except ValidationError as e:
            err = e.errors()[0]
            flag = "--" + str(err["loc"][0]).replace("_", "-")
            typer.echo(f"error: {flag}: {err['msg']}", err=True)
            raise typer.Exit(2) from None
        try:
            request = RolloutRequest(
                tasks=TasksSpec(path=tasks, limit=limit),
                n_samples=n_samples,
                sampling=sampling,
                agent=AgentSpec(max_turns=max_turns),
                advantage=AdvantageSpec(min_group_size=min_group_size),
                chat_template_kwargs=template_kwargs,
                uncalibrated=uncalibrated,
                train_segments=train_segments,
            )
        except ValidationError as e:
            err = e.errors()[0]
            msg = err["msg"].removeprefix("Value error, ")
            field = err["loc"][0] if err["loc"] else None
            flags = {"uncalibrated": "--uncalibrated", "train_segments": "--train-segments"}.get(
                field, "--n-samples, --min-group-size"
            )
            typer.echo(f"error: {msg} ({flags})", err=True)
            raise typer.Exit(2) from None
        if not sandboxes.ray_address:  # on Ray, every node's executor sees to its own
            refuse_unknown_runtime(sandboxes.runtime)
            asyncio.run(ensure_base_image(on_build=_announce_build))
        out.mkdir(parents=True, exist_ok=True)
        out_file = out / f"rollouts-{time.strftime('%Y%m%d-%H%M%S')}.parquet"
        with contextlib.ExitStack() as stack:
            if not policy.urls:
                console.print(
                    "No --policy-url / ROLLOUTS_POLICY_URL: starting the stand-in policy."
                )
                stand_in = stack.enter_context(
                    stand_in_policy(tasks, p_correct=p_correct, seed=seed or 0)
                )
                policy = policy.model_copy(update={"urls": [stand_in.url]})
            settings = Settings(
                service=ServiceSettings(
                    data_dir=out_file.with_suffix(".store"),
                    max_concurrent_samples=concurrency,
                    retry_masked=retry_masked,
                    keep_workspaces=keep_workspaces,
                    tasks_roots=[Path(tasks)],  # the path on the command line is its own root
                    calibration_cache=default_cache_path(),  # kept across runs, as verify's
                ),
                policy=policy,
                sandboxes=sandboxes,
                agent=agent_config,
            )
            for line in describe(agent_config):
                console.print(line)
            try:
                summary = asyncio.run(_run(settings, request, out_file))
            except PolicyError as e:
                typer.echo(f"error: policy server: {e}", err=True)
                raise typer.Exit(1) from None
        Console().print(summary_table(summary, out_file))
        print(out_file)
