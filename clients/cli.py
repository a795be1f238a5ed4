"""The `rollouts` command. Each sub-command lives in clients/commands/; this file wires them."""

from __future__ import annotations

import typer

from clients.commands import (
    agent,
    collect,
    doctor,
    export,
    images,
    policy_stub,
    pull,
    regrade,
    sandboxes,
    serve,
    serve_env,
    tasks,
    verify,
    view,
)

app = typer.Typer(
    name="rollouts",
    help="Collect token-exact agentic rollouts for RL, with Docker sandboxes.",
    no_args_is_help=True,
    add_completion=False,
)

for _group, _name in (
    (tasks, "tasks"),
    (images, "images"),
    (sandboxes, "sandboxes"),
    (agent, "agent"),
):
    app.add_typer(_group.app, name=_name)

for _module in (
    verify,
    collect,
    regrade,
    serve,
    serve_env,
    pull,
    export,
    view,
    policy_stub,
    doctor,
):
    _module.register(app)

if __name__ == "__main__":
    app()
