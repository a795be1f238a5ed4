"""Harbor 0.25 as a throughput baseline: its own CLI on the sandbox section's tasks and image.

One round is one whole `harbor run` (oracle agent, docker environment, `--n-concurrent C`) over
the given tasks, timed from starting the CLI to its exit: what a user of Harbor waits for. Every
trial must end with reward 1.0, or the round raises `TrialFailed` like the other systems do.

How the tasks reach Harbor (its contracts read from harbor/environments/docker/ in 0.25.0):
- each task is written out as a Harbor task folder whose task.toml names the image our resolver
  built for it as `[environment].docker_image`. Harbor then runs its "prebuilt" compose file
  (`image:` with no build), compose's default pull policy finds the image locally, and nothing
  is built or pulled (no registry is reachable here). `down --rmi local` at the end of a trial
  only removes images compose built, so the image is kept.
- our tasks' `network_mode = "none"` has no Harbor docker equivalent that works offline: its
  `no-network` mode starts an egress-control sidecar whose kernel probe and image need a
  registry. The same isolation is given by an `--extra-docker-compose` overlay setting the main
  service's `network_mode: none` (what Harbor's own overlay does for other providers).
- Harbor's default verifier runs in the agent's container (`environment_mode = "shared"`);
  `separate_verifier=True` asks for a fresh verifier environment from the same image, given
  the agent's /app as an artifact: closer to our fresh verifier, and about half as fast.

What a trial costs in Harbor (seen here, see `parse_trial_result` for the stages): about 10 s
of it is `compose down` stopping the main container, whose `sh -c "sleep infinity"` runs as
PID 1 without an init, ignores SIGTERM and is killed only when the stop timeout (10 s) ends.

The CLI comes from scripts/harbor_cli_env.sh (a pinned venv and the `docker compose` v2
plugin, cached); `harbor_available()` runs it and says why Harbor cannot run when it cannot.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.rounds import RoundResult, TrialFailed
from sandboxes.task import Task

HARBOR_VERSION = "0.25.0"
ENV_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "harbor_cli_env.sh"
JOB_NAME = "bench"
# Compose labels every container with the folder of its project: the task's environment/ in
# our temporary dataset, which is how leftovers of a killed run are found.
WORKING_DIR_LABEL = "com.docker.compose.project.working_dir"
PROJECT_LABEL = "com.docker.compose.project"
# No network is reachable here: Harbor's telemetry and LiteLLM's price-table download would
# only add timeouts and retries to every run, which is not Harbor's own cost.
HARBOR_ENV = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
WORKSPACE = "/app"  # the agent's working folder, the one our verifier grades
NO_NETWORK_OVERLAY = "services:\n  main:\n    network_mode: none\n"


class HarborUnavailable(RuntimeError):
    """Harbor's CLI cannot run on this machine; the message says why, on one line."""


@dataclass(frozen=True)
class HarborCli:
    harbor: str  # the venv's `harbor` executable
    docker_config: str  # DOCKER_CONFIG folder whose cli-plugins/ has `docker compose` v2


_cli: HarborCli | None = None


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no output")[:limit]


def prepare_harbor_cli(build: bool = True, timeout_s: float = 1200.0) -> HarborCli:
    """Find Harbor's CLI (cached), building it first when `build` and it is missing (a minute
    or two); HarborUnavailable says why there is none."""
    global _cli
    if _cli is not None:
        return _cli
    try:
        subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise HarborUnavailable(f"no Docker engine reachable: {_one_line(str(e))}") from e
    try:
        r = subprocess.run(
            ["bash", str(ENV_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "ROLLOUTS_HARBOR_CLI_CHECK": "" if build else "1"},
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise HarborUnavailable(f"{ENV_SCRIPT.name}: {_one_line(str(e))}") from e
    if r.returncode != 0:
        raise HarborUnavailable(f"{ENV_SCRIPT.name} failed: {_one_line(r.stderr)}")
    harbor, docker_config = r.stdout.strip().splitlines()[-2:]
    _cli = HarborCli(harbor, docker_config)
    return _cli


def harbor_available(build: bool = True) -> str | None:
    """None when Harbor's CLI can run here, else a one-line reason to skip with. With `build`
    a missing CLI is built first (a minute or two, once); without, it is only looked for."""
    try:
        prepare_harbor_cli(build)
    except HarborUnavailable as e:
        return str(e)
    return None


# ---------------------------------------------------------------- tasks as Harbor sees them


def harbor_task_toml(task: Task, image: str, *, separate_verifier: bool = False) -> str:
    """task.toml for Harbor: our task's timeouts and resources, run in `image`. The network is
    left to the compose overlay (see the module's docstring)."""
    env = task.config.environment
    # A separate verifier starts from the image again: Harbor carries over only the task's
    # declared artifacts, so the workspace (/app, as in our verifier) is declared as one.
    lines = [f"artifacts = {json.dumps([WORKSPACE])}", ""] if separate_verifier else []
    lines += [
        "[agent]",
        f"timeout_sec = {float(task.config.agent_timeout_sec)}",
        "",
        "[verifier]",
        f"timeout_sec = {float(task.config.verifier_timeout_sec)}",
    ]
    if separate_verifier:
        lines.append('environment_mode = "separate"')
    lines += [
        "",
        "[environment]",
        f"docker_image = {json.dumps(image)}",  # a JSON string is a TOML basic string
        f"build_timeout_sec = {float(env.build_timeout_sec)}",
        f"cpus = {float(env.cpus)}",
        f"memory_mb = {int(env.memory_mb)}",
        f"storage_mb = {int(env.storage_mb)}",
    ]
    return "\n".join(lines) + "\n"


def _write_files(root: Path, files: Mapping[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        # Our tasks keep bytes, not modes; scripts are run as programs by some harnesses.
        path.chmod(0o755 if rel.endswith(".sh") else 0o644)


def write_harbor_dataset(
    tasks: Iterable[Task], images: Mapping[str, str], root: Path, *, separate_verifier: bool
) -> None:
    """One Harbor task folder per task, named by its id (Harbor's task name)."""
    for task in tasks:
        folder = root / task.id
        folder.mkdir(parents=True)
        (folder / "instruction.md").write_text(task.instruction)
        (folder / "task.toml").write_text(
            harbor_task_toml(task, images[task.id], separate_verifier=separate_verifier)
        )
        _write_files(folder / "environment", task.environment_files)
        _write_files(folder / "tests", task.test_files)
        _write_files(folder / "solution", task.solution_files)


def network_overlay(tasks: Iterable[Task]) -> bool:
    """Whether the run needs the no-network overlay. It applies to a whole run, so a mix of
    network modes cannot be given to one Harbor run."""
    modes = {t.config.environment.network_mode for t in tasks}
    if len(modes) > 1:
        raise ValueError(f"one Harbor run takes one network mode, these tasks have {modes}")
    return modes == {"none"}


# ---------------------------------------------------------------- Harbor's results


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _span(timing: Mapping[str, Any] | None) -> float | None:
    if not timing:
        return None
    start, end = _time(timing.get("started_at")), _time(timing.get("finished_at"))
    return (end - start).total_seconds() if start and end else None


@dataclass(frozen=True)
class HarborTrial:
    """One trial's outcome from its result.json in Harbor's job folder."""

    task: str
    reward: float | None
    error: str | None  # Harbor's recorded exception, type and message
    stages: dict[str, float] = field(default_factory=dict)


def parse_trial_result(data: Mapping[str, Any]) -> HarborTrial:
    """Harbor's per-trial result.json: the reward the verifier read (rewards["reward"]), the
    exception if one ended the trial, and where the trial's time went: setup (compose up),
    agent (the oracle's solve.sh), verify (tests uploaded and run, reward read; with a separate
    verifier also that environment's start and stop), teardown (the verifier's end to the
    trial's: compose down of a shared environment), total (the whole trial)."""
    rewards = (data.get("verifier_result") or {}).get("rewards") or {}
    reward = rewards.get("reward")
    exc = data.get("exception_info")
    error = f"{exc.get('exception_type')}: {exc.get('exception_message')}" if exc else None
    stages: dict[str, float] = {}
    for name, key in (("setup", "environment_setup"), ("verify", "verifier")):
        span = _span(data.get(key))
        if span is not None:
            stages[name] = span
    agent = [s for s in (_span(data.get("agent_setup")), _span(data.get("agent_execution"))) if s]
    if agent:
        stages["agent"] = sum(agent)
    finished = _time(data.get("finished_at"))
    verifier_end = _time((data.get("verifier") or {}).get("finished_at"))
    if finished and verifier_end:
        stages["teardown"] = (finished - verifier_end).total_seconds()
    total = _span(data)
    if total is not None:
        stages["total"] = total
    return HarborTrial(
        task=str(data.get("task_name")),
        reward=None if reward is None else float(reward),
        error=error,
        stages=stages,
    )


def read_job(job_dir: Path) -> list[HarborTrial]:
    """Every trial of a job: each subfolder of the job folder that has a result.json."""
    return [
        parse_trial_result(json.loads(p.read_text())) for p in sorted(job_dir.glob("*/result.json"))
    ]


def job_seconds(job_dir: Path) -> float | None:
    """The job's own span from its result.json (Harbor's process start-up and exit excluded)."""
    path = job_dir / "result.json"
    return _span(json.loads(path.read_text())) if path.exists() else None


def check_trials(trials: list[HarborTrial], task_ids: list[str]) -> None:
    """TrialFailed unless each task ran exactly once, without error, to reward 1.0."""
    ran = sorted(t.task for t in trials)
    if ran != sorted(task_ids):
        raise TrialFailed(f"harbor: expected one trial of each of {sorted(task_ids)}, got {ran}")
    for t in trials:
        if t.error or t.reward != 1.0:
            raise TrialFailed(f"harbor: {t.task}: reward {t.reward}, {t.error or 'no error'}")


# ---------------------------------------------------------------- one round


def _docker(*args: str) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    return r.stdout


def remove_leftovers(root: Path) -> int:
    """Remove containers and networks of compose projects under `root` (a run that failed or
    was killed leaves its trials' projects up). Returns how many containers were removed."""
    rows = _docker(
        "ps", "-a", "--filter", f"label={WORKING_DIR_LABEL}",
        "--format", f'{{{{.ID}}}} {{{{.Label "{PROJECT_LABEL}"}}}} '
        f'{{{{.Label "{WORKING_DIR_LABEL}"}}}}',
    )  # fmt: skip
    ids, projects = [], set()
    for row in rows.splitlines():
        cid, project, working_dir = (row.split(" ", 2) + ["", ""])[:3]
        if working_dir.startswith(str(root)):
            ids.append(cid)
            projects.add(project)
    if ids:
        _docker("rm", "-f", "-v", *ids)
    for project in projects:
        nets = _docker("network", "ls", "-q", "--filter", f"label={PROJECT_LABEL}={project}")
        if nets.split():
            _docker("network", "rm", *nets.split())
    return len(ids)


async def _resolve_images(tasks: list[Task]) -> dict[str, str]:
    from sandboxes.images import ImageResolver

    resolver = ImageResolver()
    return {t.id: await resolver.resolve(t) for t in tasks}


async def harbor_round(
    tasks: list[Task],
    concurrency: int,
    images: Mapping[str, str] | None = None,
    *,
    separate_verifier: bool = False,
    timeout_s: float = 900.0,
    log: Callable[[str], None] | None = None,
) -> RoundResult:
    """One whole `harbor run` of `tasks` at `concurrency`. `images` maps task id to the local
    image to run it in (default: what our ImageResolver builds for it, as the sandbox section
    uses). Returns the CLI's wall time and trial count, with per-trial stage seconds from
    Harbor's results, the job's own span ("job") and the CLI's start-up and exit ("cli": wall
    time minus the job's span). TrialFailed if any trial fails or the CLI exits non-zero,
    TimeoutError past `timeout_s`, HarborUnavailable if the CLI cannot be prepared. Whatever
    Harbor leaves running is removed, and its task and job folders are deleted."""
    cli = prepare_harbor_cli()
    images = images if images is not None else await _resolve_images(tasks)
    overlay = network_overlay(tasks)
    with tempfile.TemporaryDirectory(prefix="rollouts-harbor-") as tmp:
        root = Path(tmp)
        write_harbor_dataset(tasks, images, root / "tasks", separate_verifier=separate_verifier)
        cmd = [
            cli.harbor, "run", "--path", str(root / "tasks"), "--agent", "oracle",
            "--env", "docker", "--n-concurrent", str(concurrency), "--jobs-dir",
            str(root / "jobs"), "--job-name", JOB_NAME, "--yes", "--quiet",
        ]  # fmt: skip
        if overlay:
            (root / "no-network.yaml").write_text(NO_NETWORK_OVERLAY)
            cmd += ["--extra-docker-compose", str(root / "no-network.yaml")]
        env = {**os.environ, **HARBOR_ENV, "DOCKER_CONFIG": cli.docker_config}
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            env=env,
            cwd=tmp,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout ends compose too
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            await asyncio.to_thread(remove_leftovers, root)
            raise
        seconds = time.monotonic() - t0
        left = await asyncio.to_thread(remove_leftovers, root)
        if proc.returncode != 0:
            raise TrialFailed(
                f"harbor run exited {proc.returncode}: {out.decode(errors='replace')[-500:]}"
            )
        trials = read_job(root / "jobs" / JOB_NAME)
        check_trials(trials, [t.id for t in tasks])
        job_s = job_seconds(root / "jobs" / JOB_NAME)
        if left and log:
            log(f"  harbor: removed {left} containers its run left behind")
    stages: dict[str, list[float]] = {}
    for t in trials:
        for name, value in t.stages.items():
            stages.setdefault(name, []).append(value)
    if job_s is not None:
        stages["job"] = [job_s]
        stages["cli"] = [seconds - job_s]
    return RoundResult(len(trials), seconds, stages)
