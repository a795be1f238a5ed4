"""`rollouts serve-env`: a verifiers environment server (prime-rl's orchestrator talks to it)
whose runs are samples collected by a rollouts service. Needs verifiers installed next to
rollouts; see docs/prime-rl.md."""

from __future__ import annotations

import asyncio
import json
import logging

import typer

from clients.verifiers_env import DEFAULT_ADDRESS, DEFAULT_POLICY


def _agent(max_turns: int | None, timeout_s: float | None, harness: str | None) -> dict:
    agent: dict = {}
    for key, value in (("max_turns", max_turns), ("timeout_s", timeout_s), ("harness", harness)):
        if value is not None:
            agent[key] = value
    return agent


def register(app: typer.Typer) -> None:
    @app.command("serve-env")
    def serve_env(
        service_url: str = typer.Option(..., "--service-url", help="The rollouts service."),
        tasks: str = typer.Option(
            ...,
            "--tasks",
            help="The task source as the service names it; a run's "
            "task_data.name (or .id) picks one of its tasks.",
        ),
        address: str = typer.Option(
            DEFAULT_ADDRESS,
            "--address",
            help="ZMQ address to bind: a source's serve.address.",
        ),
        api_key: str = typer.Option(None, "--api-key", envvar="ROLLOUTS_API_KEY"),
        policy: str = typer.Option(
            DEFAULT_POLICY,
            "--policy",
            help="request: generate on the inference server each run names (the service must "
            "allow it, serve --allow-policy-url); service: on the service's own policy servers.",
        ),
        max_turns: int = typer.Option(None, "--max-turns", min=1),
        agent_timeout_s: float = typer.Option(None, "--agent-timeout-s"),
        harness: str = typer.Option(None, "--harness", help="The agent harness (serve's names)."),
        retry_masked: int = typer.Option(None, "--retry-masked", min=0),
        log_level: str = typer.Option("info", "--log-level"),
    ) -> None:
        """Serve a verifiers environment whose runs are rollouts samples."""
        from clients.verifiers_env import EnvServer, EnvSettings  # zmq and verifiers: here

        if policy not in ("request", "service"):
            raise typer.BadParameter("request or service", param_hint="--policy")
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
        settings = EnvSettings(
            service_url=service_url,
            tasks=tasks,
            api_key=api_key,
            address=address,
            policy=policy,  # type: ignore[arg-type]
            agent=_agent(max_turns, agent_timeout_s, harness),
            retry_masked=retry_masked,
        )
        try:
            server = EnvServer(settings)
        except RuntimeError as e:  # verifiers missing: say how to install it
            typer.echo(str(e), err=True)
            raise typer.Exit(2) from None
        # The bound address (a port of 0 resolved), for whoever started us.
        typer.echo(json.dumps({"address": server.address}), nl=True)
        try:
            asyncio.run(server.serve_forever())
        except KeyboardInterrupt:
            pass


def main() -> None:
    """Run serve-env alone (`python -m clients.commands.serve_env`): the light import path, for
    a venv that holds verifiers and rollouts' client side only."""
    app = typer.Typer(add_completion=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
