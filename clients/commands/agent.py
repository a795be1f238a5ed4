"""`rollouts agent ...`: agent harnesses and their profiles.

`rollouts agent import-harbor --out FILE` writes a terminus-2 profile from the user's own Harbor
installation: it runs clients/harbor_probe.py with the interpreter that has `harbor` installed
(Harbor needs Python >= 3.12; `--python PATH`, else the interpreter of the `harbor` command on
PATH), which asks Harbor's terminus-2 for each of its message forms. The project itself ships
none of Harbor's texts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import typer

from service.agent.harnesses import HARNESSES, ProfileError, build_harness, load_profile
from service.agent.harnesses.base import Profile, dump_profile
from service.agent.harnesses.terminus2 import VARIANTS
from service.settings import AgentSettings

app = typer.Typer(help="Agent harnesses and their profiles.", no_args_is_help=True)

PROBE = Path(__file__).resolve().parent.parent / "harbor_probe.py"
EXIT_NO_HARBOR = 3
EXIT_BAD_PROFILE = 2


def _can_import_harbor(python: str) -> bool:
    try:
        r = subprocess.run(
            [python, "-c", "import harbor.agents.terminus_2"],
            capture_output=True,
            timeout=120,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def find_harbor_python() -> str | None:
    """An interpreter that imports Harbor: this one, or the one the `harbor` command runs on."""
    candidates = [sys.executable]
    script = shutil.which("harbor")
    if script:
        try:
            first = Path(script).read_bytes()[:512].split(b"\n", 1)[0].decode()
        except OSError:
            first = ""
        if first.startswith("#!"):
            candidates.append(first[2:].strip().split()[0])
    for python in candidates:
        if python and _can_import_harbor(python):
            return python
    return None


def probe(python: str, variant: str) -> dict:
    """The profile data, as the probe prints it from the given interpreter."""
    r = subprocess.run(
        [python, str(PROBE), "--variant", variant],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        raise ProfileError(
            "the Harbor probe failed: " + (lines[-1] if lines else f"exit {r.returncode}")
        )
    return json.loads(r.stdout)


AGENT_HELP = (
    f"Agent harness (conversation format): {', '.join(HARNESSES)}. Default: the profile's "
    "harness with --agent-profile, else default."
)
PROFILE_HELP = (
    "Harness profile (TOML); terminus-2 needs one: make it with `rollouts agent import-harbor`."
)


def agent_settings(agent: str | None, profiles: list[Path]) -> AgentSettings:
    """The --agent and --agent-profile flags, checked (ProfileError, a ValueError)."""
    if agent is None:
        agent = load_profile(profiles[0]).harness if profiles else "default"
    settings = AgentSettings(harness=agent, profiles=list(profiles))
    settings.harnesses()  # load and check every profile now
    return settings


def describe(settings: AgentSettings) -> list[str]:
    """What to say at start: the harness, its profile, and how it summarizes its context."""
    harness = settings.harnesses()[settings.harness]
    profile = harness.profile
    lines = [
        f"Agent harness: {harness.name} (profile {profile.path or 'shipped'}, "
        f"hash {profile.hash[:16]})."
    ]
    summarizer = harness.summarizer
    if summarizer is not None:
        lines.append(
            f"{harness.name} summarizes its context as Harbor's agent does: before a turn once "
            f"fewer than {summarizer.threshold} tokens are free (0: never before a turn), and "
            "when the engine's context is full; each summarization adds segments to the "
            "trajectory."
        )
    elif harness.name == "terminus-2":
        lines.append(
            f"{harness.name}: summarization is off (summarize = false): an episode whose context "
            "is full ends with status context_length."
        )
    return lines


@app.command("import-harbor")
def import_harbor(
    out: Path = typer.Option(..., "--out", help="Where to write the profile (TOML)."),
    variant: str = typer.Option(
        VARIANTS[0], "--variant", help="terminus-2's reply format: json or xml."
    ),
    python: str | None = typer.Option(
        None,
        "--python",
        help="Python interpreter with harbor installed (default: the `harbor` command's).",
    ),
) -> None:
    """Write a terminus-2 profile from your own Harbor installation."""
    if variant not in VARIANTS:
        raise typer.BadParameter("must be json or xml", param_hint="--variant")
    python = python or find_harbor_python()
    if python is None:
        typer.echo(
            "No Python with Harbor found: install it (`pip install harbor`, Python >= 3.12) and "
            "pass that interpreter with --python PATH.",
            err=True,
        )
        raise typer.Exit(EXIT_NO_HARBOR)
    try:
        data = probe(python, variant)
        profile = Profile.from_data(data, path=str(out))
        build_harness("terminus-2", profile)  # checks every text the harness needs
        header = (
            f"A terminus-2 profile from {data['profile'].get('source', 'Harbor')}.\n"
            "Every text is a Python format string: {name} is filled in, {{ is a literal brace.\n"
            "Use: rollouts collect --agent terminus-2 --agent-profile THIS_FILE"
        )
        text = dump_profile(data, header)
    except ProfileError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(EXIT_BAD_PROFILE) from e
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {out} (terminus-2 {variant}, profile hash {profile.hash[:16]})")
