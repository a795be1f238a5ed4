"""The default harness's prompts (kept for callers that render them directly). The texts live in
the default profile, service/agent/profiles/default.toml; service/agent/harnesses/default.py is
the harness that uses them."""

from __future__ import annotations

from service.agent.harnesses.default import default_profile

_PROFILE = default_profile()

SYSTEM_PROMPT = _PROFILE.text("system")
INITIAL_TERMINAL = _PROFILE.behaviour["initial_terminal"]


def first_user_message(instruction: str) -> str:
    return _PROFILE.text(
        "first_user", instruction=instruction.strip(), terminal_state=INITIAL_TERMINAL
    )


def observation_message(terminal_output: str) -> str:
    return _PROFILE.text("observation", output=terminal_output)


def confirm_message(terminal_output: str) -> str:
    return _PROFILE.text("confirm", output=terminal_output)


def error_message(problem: str) -> str:
    return _PROFILE.text("error", problem=problem)
