"""Configuration, each default defined once.

`Settings` nests one group per part of the service:
- `service`: HTTP (host, port, API key, body limits), the store folder, admission, leasing;
- `policy`: the policy client (servers, model, timeouts, retries);
- `sandboxes`: the Docker backend (image override, warm pool);
- `agent`: the agent harnesses (the default one, profile files).

Where a lower layer declares a knob's default itself (PolicyClient's keyword arguments,
sandboxes.pool.PoolSettings), the field reads it from there instead of restating it. The flags
of `serve` and `collect` take their defaults from these fields (`default_of`). Request defaults
(sampling, agent limits, samples per task) are service/sample.py's.
"""

from __future__ import annotations

import inspect
import ipaddress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandboxes.calibration import CALIBRATION_FILE
from sandboxes.images import BuildSettings
from sandboxes.pool import PoolSettings
from service.agent.harnesses import Harness, ProfileError, build_harnesses
from service.agent_clock import MAX_HOLD_S
from service.policy.allowlist import PolicyAllowList
from service.policy.client import PolicyClient
from service.policy.named import IDLE_S
from service.sample import RETRY_MASKED
from service.store.leases import MAX_STALE_REQUEUES
from service.wire import MAX_RETRY_MASKED, check_chat_template_kwargs

# Host names that reach this machine only (the web guard's default allowlist).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

_CLIENT = inspect.signature(PolicyClient).parameters  # the client's own keyword defaults


def default_of(model: type[BaseModel], name: str) -> Any:
    """The default of a settings (or request) field: what a command-line flag defaults to."""
    return model.model_fields[name].get_default(call_default_factory=True)


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServiceSettings(_Group):
    """The HTTP service: where it listens, its store, admission, leases, request limits."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    data_dir: Path = Path("./rollouts-data")
    api_key: str | None = None
    max_concurrent_samples: int = Field(default=64, ge=1)
    # Let the number of samples in their episode find its level under max_concurrent_samples
    # (a ceiling then, not a guess): service/concurrency.py.
    adaptive_concurrency: bool = False
    max_queued_samples: int = Field(default=100_000, ge=1)
    # Re-runs of a sample masked by an infrastructure fault, for requests that name none.
    retry_masked: int = Field(default=RETRY_MASKED, ge=0, le=MAX_RETRY_MASKED)
    datasets: dict[str, str] = Field(default_factory=dict, description="name -> path")
    stale_policy: Literal["drop", "requeue"] = "drop"
    # With stale_policy requeue: re-runs of a stale group before it is dropped instead.
    max_stale_requeues: int = Field(default=MAX_STALE_REQUEUES, ge=0)
    lease_ttl_s: float = Field(default=600.0, gt=0)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    # A request body must arrive within body_read_timeout_s, with no gap over
    # body_idle_timeout_s (else 408): uvicorn alone waits for a trickled body forever.
    body_read_timeout_s: float = Field(default=30.0, gt=0)
    body_idle_timeout_s: float = Field(default=10.0, gt=0)
    retry_after_s: int = Field(default=5, ge=1)
    # The trust boundary (docs/stack.md): requests may name only paths inside these folders
    # (or Parquet files), and the --dataset paths; nothing else on the host.
    tasks_roots: list[Path] = Field(default_factory=list, description="folders requests may name")
    # Acknowledged (and dropped) groups' payloads are deleted this long after; 0: at once.
    retention_s: float = Field(default=7 * 24 * 3600.0, ge=0)
    # New rollouts get a 503 while free space on the data disk, less what queued work will
    # commit, is under this: commits of admitted work never meet a full disk.
    disk_reserve_mb: int = Field(default=1024, ge=0)
    # Keep each verified sample's final workspace (its files stored once by content,
    # compressed, deleted with its payload) so its rollouts can be regraded; off: none kept.
    keep_workspaces: bool = True
    # Names a browser may reach the service by (the Host header; service/web_guard.py), beside
    # the loopback names and --host; "*": any. Listening beyond loopback (a key is required
    # there, which a page cannot send) any name is accepted unless some are given.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Open event streams (GET /v1/events and /v1/rollouts/{id}/events) at once; 429 past it.
    max_event_streams: int = Field(default=256, ge=1)
    # Where the oracle calibrations are kept (sandboxes/calibration.py); None: calibration.json
    # in the data dir (collect: the CLI's cache, its data dir being one per run).
    calibration_cache: Path | None = None

    @property
    def calibration_path(self) -> Path:
        return self.calibration_cache or self.data_dir / CALIBRATION_FILE

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def host_allowlist(self) -> list[str] | None:
        """The Host names requests may carry; None: any."""
        if "*" in self.allowed_hosts or (not self.is_loopback and not self.allowed_hosts):
            return None
        wildcard = self.host in ("0.0.0.0", "::", "")
        return [*LOOPBACK_NAMES, *([] if wildcard else [self.host]), *self.allowed_hosts]

    def check_exposure(self) -> None:
        """Raise ValueError when the service would listen beyond this host without a key."""
        if not self.is_loopback and not self.api_key:
            raise ValueError(
                f"refusing to listen on non-loopback host {self.host!r} without an API key "
                "(pass --api-key or set ROLLOUTS_API_KEY)"
            )

    def resolve_tasks_path(self, path: str) -> str:
        return self.datasets.get(path, path)

    def all_tasks_roots(self) -> list[str]:
        """--tasks-root folders, and the --dataset paths (the operator named both)."""
        return [str(p) for p in self.tasks_roots] + list(self.datasets.values())


class PolicySettings(_Group):
    """The policy client: PolicyClient's constructor arguments, and the weight-update control
    plane's (service/policy/fleet.py)."""

    urls: list[str] = Field(default_factory=list, description="vLLM base URLs")
    allow_urls: list[str] = Field(
        default_factory=list,
        description="prefixes of the policy servers rollout requests may name (`policy.urls`; "
        "scheme, host, port and path compared as parsed); empty: none",
    )
    named_idle_s: float = Field(
        default=IDLE_S, gt=0, description="seconds a request-named set of servers stays open unused"
    )
    model: str | None = Field(default=None, description="None: the server's only model")
    timeout_s: float = Field(
        default=_CLIENT["timeout_s"].default,
        gt=0,
        description="seconds per request; a generation held by a paused server is not timed out",
    )
    max_retries: int = Field(default=_CLIENT["max_retries"].default, ge=0)
    backoff_s: float = Field(default=_CLIENT["backoff_s"].default, ge=0)
    cooldown_s: float = Field(default=_CLIENT["cooldown_s"].default, ge=0)
    pause_poll_s: float = Field(
        default=_CLIENT["pause_poll_s"].default,
        gt=0,
        description="how often a request held by a paused server asks whether it still is",
    )
    update_retries: int = Field(
        default=_CLIENT["update_retries"].default,
        ge=0,
        description="retries of a server's weight update before it leaves rotation",
    )
    max_hold_s: float = Field(
        default=MAX_HOLD_S,
        gt=0,
        description="seconds a paused server may hold a sample's generation request (its agent "
        "clock stopped meanwhile) before the sample is masked policy_error and re-run",
    )
    reconcile_s: float = Field(
        default=30.0,
        gt=0,
        description="seconds between attempts to bring servers out of rotation back",
    )
    lora: str | None = Field(
        default=None,
        description="NAME=DIR: a LoRA adapter every server serves (loaded at start); "
        "generation names it, and POST /v1/policy lora_path updates it in place",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="the chat template's keyword arguments for requests that name none",
    )

    _check_kwargs = field_validator("chat_template_kwargs")(check_chat_template_kwargs)

    @field_validator("lora")
    @classmethod
    def _lora_form(cls, v: str | None) -> str | None:
        if v is not None:
            name, sep, path = v.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"expected NAME=DIR, got {v!r}")
        return v

    def lora_adapter(self) -> tuple[str, str] | None:
        """(name, dir) of the served LoRA adapter, if any."""
        if self.lora is None:
            return None
        name, _, path = self.lora.partition("=")
        return name.strip(), path.strip()

    @field_validator("allow_urls")
    @classmethod
    def _allow_form(cls, v: list[str]) -> list[str]:
        PolicyAllowList(v)  # each must be a plain http(s) URL (ValueError names it)
        return v

    @field_validator("urls")
    @classmethod
    def _split(cls, v: list[str]) -> list[str]:
        # ROLLOUTS_POLICY_URL may hold several comma-separated URLs.
        out: list[str] = []
        for item in v:
            out.extend(u.strip().rstrip("/") for u in item.split(",") if u.strip())
        return out


class SandboxSettings(_Group):
    """The Docker backend: an image for every task, and the warm container pool."""

    image: str | None = Field(default=None, description="override every task's image")
    warm_per_key: int = Field(
        default=PoolSettings.warm_per_key,
        ge=0,
        description="idle containers per image, for agents and for verifiers each; 0: off",
    )
    create_rate: float = Field(default=PoolSettings.create_rate, gt=0, description="per second")
    create_burst: float = Field(default=PoolSettings.create_burst, ge=1)
    create_jitter_s: float = Field(default=PoolSettings.create_jitter_s, ge=0)
    max_concurrent_creates: int = Field(default=PoolSettings.max_concurrent_creates, ge=1)
    warm_ttl_s: float = Field(default=PoolSettings.idle_ttl_s, gt=0, description="idle expiry")
    build_network: bool = Field(default=BuildSettings.network, description="RUN steps online")
    allow_pull: bool = Field(default=BuildSettings.allow_pull, description="pull unaliased FROM")
    build_cpus: float = Field(default=BuildSettings.cpus, gt=0)
    build_memory_mb: int = Field(default=BuildSettings.memory_mb, ge=64)
    build_timeout_s: float = Field(default=BuildSettings.timeout_s, gt=0, description="at most")
    image_budget_gb: float | None = Field(
        default=(BuildSettings.budget_bytes or 0) / 2**30 or None,
        ge=0,
        description="rollouts-env images kept, GiB; least recently used pruned first",
    )
    runtime: str | None = Field(
        default=None,
        description="OCI runtime of every agent and verifier container (e.g. runsc for gVisor, "
        "see scripts/runsc_setup.sh); None: the engine's default",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster whose nodes offering the `rollouts_sandbox` resource run the "
        "sandboxes ('auto': the cluster this process runs in); None: this machine's engine",
    )

    def build(self) -> BuildSettings:
        budget = self.image_budget_gb
        return BuildSettings(
            network=self.build_network,
            allow_pull=self.allow_pull,
            cpus=self.build_cpus,
            memory_mb=self.build_memory_mb,
            timeout_s=self.build_timeout_s,
            budget_bytes=None if budget is None else int(budget * 2**30),
        )

    def pool(self) -> PoolSettings:
        return PoolSettings(
            warm_per_key=self.warm_per_key,
            idle_ttl_s=self.warm_ttl_s,
            create_rate=self.create_rate,
            create_burst=self.create_burst,
            create_jitter_s=self.create_jitter_s,
            max_concurrent_creates=self.max_concurrent_creates,
        )


class AgentSettings(_Group):
    """The agent harnesses (service/agent/harnesses): the one for requests that name none, and
    the profile files to load (each names its harness; terminus-2 has no shipped profile)."""

    harness: str = "default"
    profiles: list[Path] = Field(default_factory=list, description="harness profiles (TOML)")

    def harnesses(self) -> dict[str, Harness]:
        """Every harness this service offers, by name. ProfileError for a bad profile or a
        default harness that is not among them."""
        out = build_harnesses(self.profiles)
        if self.harness not in out:
            hint = (
                ": pass --agent-profile FILE (make one with `rollouts agent import-harbor`)"
                if self.harness == "terminus-2"
                else ""
            )
            raise ProfileError(
                f"harness {self.harness!r} is not available{hint} (have: {', '.join(sorted(out))})"
            )
        return out


class Settings(_Group):
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    sandboxes: SandboxSettings = Field(default_factory=SandboxSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
