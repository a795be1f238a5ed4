"""Agent harnesses: the conversation formats the agent loop can speak (see base.py).

- `default`: rollouts' own JSON protocol (profiles/default.toml);
- `terminus-2`: Harbor's terminus-2, from a profile the user imports from their own Harbor
  installation (`rollouts agent import-harbor`); the project ships none of Harbor's texts;
- `tools`: the terminal as a native tool in the model's own tool-call format.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from service.agent.harnesses.base import (
    Command,
    Harness,
    HarnessSession,
    Profile,
    ProfileError,
    Step,
    Terminal,
    load_profile,
)

HARNESSES = ("default", "terminus-2", "tools")

__all__ = [
    "HARNESSES",
    "Command",
    "Harness",
    "HarnessSession",
    "Profile",
    "ProfileError",
    "Step",
    "Terminal",
    "build_harness",
    "build_harnesses",
    "load_profile",
]


def build_harness(name: str | None = None, profile: str | Path | Profile | None = None) -> Harness:
    """The harness `name` (default: the profile's own, else `default`) with its profile: the
    given file, else the one the project ships. terminus-2 has no shipped profile."""
    from service.agent.harnesses.default import DefaultHarness
    from service.agent.harnesses.terminus2 import Terminus2Harness
    from service.agent.harnesses.tools import ToolsHarness

    loaded = load_profile(profile) if isinstance(profile, str | Path) else profile
    if name is None:
        name = loaded.harness if loaded is not None else "default"
    if loaded is not None and loaded.harness != name:
        where = loaded.path or "the profile"
        raise ProfileError(f"{where} is a {loaded.harness!r} profile, not one for {name!r}")
    if name == "default":
        return DefaultHarness(loaded)
    if name == "tools":
        return ToolsHarness(loaded)
    if name == "terminus-2":
        if loaded is None:
            raise ProfileError(
                "the terminus-2 harness needs a profile: make one from your Harbor installation "
                "with `rollouts agent import-harbor --out FILE`, then pass --agent-profile FILE"
            )
        return Terminus2Harness(loaded)
    raise ProfileError(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")


def build_harnesses(profiles: Iterable[str | Path] = ()) -> dict[str, Harness]:
    """The harnesses a service offers: the shipped ones (`default`, `tools`), and one for each
    profile file (named by the profile; a profile for `default` or `tools` replaces the
    shipped texts)."""
    from service.agent.harnesses.default import DefaultHarness
    from service.agent.harnesses.tools import ToolsHarness

    out: dict[str, Harness] = {"default": DefaultHarness(), "tools": ToolsHarness()}
    for path in profiles:
        harness = build_harness(None, path)
        out[harness.name] = harness
    return out
