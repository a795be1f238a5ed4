"""The `rollouts` command. Each sub-command lives in clients/commands/; this file wires them."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="rollouts",
    help="Collect token-exact agentic rollouts for RL, with Docker sandboxes.",
    no_args_is_help=True,
    add_completion=False,
)

# Command groups (modules exposing `app`) and modules adding top-level commands (`register`).
_GROUPS = ["tasks", "images", "sandboxes"]
_TOP_LEVEL = ["verify", "collect", "serve", "pull", "export", "policy_stub"]

for _name in _GROUPS:
    try:
        _mod = importlib.import_module(f"clients.commands.{_name}")
    except ModuleNotFoundError as e:  # a sub-command still being built must not break the rest
        if e.name != f"clients.commands.{_name}":
            raise
        continue
    app.add_typer(_mod.app, name=_name)

for _name in _TOP_LEVEL:
    try:
        _mod = importlib.import_module(f"clients.commands.{_name}")
    except ModuleNotFoundError:
        continue
    _mod.register(app)

if __name__ == "__main__":
    app()
