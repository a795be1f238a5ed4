"""Flags that `serve` and `collect` share, declared once; their defaults are the settings'."""

from __future__ import annotations

from functools import partial

import typer

from clients.commands.agent import AGENT_HELP, PROFILE_HELP
from service.settings import PolicySettings, SandboxSettings, ServiceSettings, default_of
from service.wire import MAX_RETRY_MASKED

_policy = partial(default_of, PolicySettings)
_sandboxes = partial(default_of, SandboxSettings)
_service = partial(default_of, ServiceSettings)

AGENT = typer.Option(None, "--agent", help=AGENT_HELP + " serve: for requests that name none.")
AGENT_PROFILE = typer.Option(
    None, "--agent-profile", help=PROFILE_HELP + " Repeatable: one per harness."
)
ALLOW_PULL = typer.Option(
    _sandboxes("allow_pull"),
    "--allow-pull",
    help="Let builds pull FROM images that are not here and no alias maps.",
)
BUILD_NETWORK = typer.Option(
    _sandboxes("build_network"),
    "--build-network",
    help="Give task image builds (RUN steps) the network.",
)
BUILD_CPUS = typer.Option(
    _sandboxes("build_cpus"), "--build-cpus", help="CPUs of a task image build."
)
BUILD_MEMORY = typer.Option(
    _sandboxes("build_memory_mb"), "--build-memory", help="MiB of a task image build."
)
BUILD_TIMEOUT = typer.Option(
    _sandboxes("build_timeout_s"),
    "--build-timeout",
    help="Seconds a task image build may take at most (wall clock).",
)
CHAT_TEMPLATE_KWARGS = typer.Option(
    None,
    "--chat-template-kwargs",
    envvar="ROLLOUTS_CHAT_TEMPLATE_KWARGS",
    help="JSON object for the chat template (serve: for requests that name none) "
    "(e.g. '{\"enable_thinking\": false}').",
)
CREATE_RATE = typer.Option(
    _sandboxes("create_rate"), "--create-rate", help="Container creates per second."
)
IMAGE_BUDGET = typer.Option(
    _sandboxes("image_budget_gb"),
    "--image-budget",
    help="GiB of task images kept; least recently used pruned first.",
)
IMAGE = typer.Option(_sandboxes("image"), "--image", help="Use this image for every task.")
RUNTIME = typer.Option(
    _sandboxes("runtime"),
    "--runtime",
    envvar="ROLLOUTS_RUNTIME",
    help="OCI runtime of every sandbox and verifier container, e.g. runsc (gVisor; "
    "scripts/runsc_setup.sh registers it). Default: the engine's.",
)
MAX_CONCURRENT_CREATES = typer.Option(
    _sandboxes("max_concurrent_creates"), "--max-concurrent-creates", min=1
)
LORA = typer.Option(
    _policy("lora"),
    "--lora",
    help="NAME=DIR: a LoRA adapter every policy server serves (loaded where missing); "
    "generation names it, and POST /v1/policy {lora_path} updates it in place.",
)
MODEL = typer.Option(_policy("model"), "--model", help="Default: the server's only model.")
POLICY_BACKOFF = typer.Option(
    _policy("backoff_s"), "--policy-backoff", min=0.0, help="First retry delay, seconds."
)
POLICY_COOLDOWN = typer.Option(
    _policy("cooldown_s"),
    "--policy-cooldown",
    min=0.0,
    help="Seconds a failing policy server gets no new samples.",
)
POLICY_RETRIES = typer.Option(
    _policy("max_retries"), "--policy-retries", min=0, help="Retries of a failed request."
)
POLICY_TIMEOUT = typer.Option(
    _policy("timeout_s"), "--policy-timeout", help="Seconds per policy request."
)
POLICY_PAUSE_POLL = typer.Option(
    _policy("pause_poll_s"),
    "--policy-pause-poll",
    min=0.1,
    help="Seconds between checks of a paused policy server (a held request never times out).",
)
POLICY_MAX_HOLD = typer.Option(
    _policy("max_hold_s"),
    "--policy-max-hold",
    min=0.1,
    help="Seconds a paused policy server may hold a sample's request (not the agent's time) "
    "before the sample is masked and re-run.",
)
POLICY_UPDATE_RETRIES = typer.Option(
    _policy("update_retries"),
    "--policy-update-retries",
    min=0,
    help="Retries of a server's weight update before it leaves rotation.",
)
POLICY_URL = typer.Option(
    None,
    "--policy-url",
    envvar="ROLLOUTS_POLICY_URL",
    help="vLLM base URL (repeatable, or comma-separated). collect: without it the "
    "stand-in policy is started.",
)
RETRY_MASKED = typer.Option(
    _service("retry_masked"),
    "--retry-masked",
    min=0,
    max=MAX_RETRY_MASKED,
    help="Re-runs of a sample masked by an infrastructure fault (a removed container, a lost "
    "node, a policy server down), each in a fresh sandbox; 0: deliver it masked. serve: for "
    "requests that name none.",
)
KEEP_WORKSPACES = typer.Option(
    _service("keep_workspaces"),
    "--keep-workspaces/--no-keep-workspaces",
    envvar="ROLLOUTS_KEEP_WORKSPACES",
    help="Keep each verified sample's final workspace (files stored once by content, "
    "compressed, deleted with its payload) so `rollouts regrade` can grade it again.",
)
RAY_ADDRESS = typer.Option(
    _sandboxes("ray_address"),
    "--ray-address",
    envvar="ROLLOUTS_RAY_ADDRESS",
    help="Run sandboxes on the nodes of this Ray cluster that offer the "
    "rollouts_sandbox resource ('auto': the cluster this process runs in). "
    "Needs pip install 'rollouts[ray]'. See docs/scale-out.md.",
)
WARM_CONTAINERS = typer.Option(
    _sandboxes("warm_per_key"),
    "--warm-containers",
    min=0,
    help="Started containers kept idle per image (0: no warm pool).",
)
WARM_TTL = typer.Option(
    _sandboxes("warm_ttl_s"), "--warm-ttl", help="Seconds an idle warm container is kept."
)
