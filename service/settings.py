"""Service configuration in one place. The `serve` command fills it from flags and env."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    policy_urls: list[str] = Field(default_factory=list)
    model: str | None = None
    data_dir: Path = Path("./rollouts-data")
    api_key: str | None = None
    max_concurrent_samples: int = Field(default=64, ge=1)
    max_queued_samples: int = Field(default=100_000, ge=1)
    image: str | None = Field(default=None, description="override every task's image")
    datasets: dict[str, str] = Field(default_factory=dict, description="name -> path")
    stale_policy: Literal["drop", "requeue"] = "drop"
    lease_ttl_s: float = Field(default=600.0, gt=0)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    # A request body must arrive within body_read_timeout_s, with no gap over
    # body_idle_timeout_s (else 408): uvicorn alone waits for a trickled body forever.
    body_read_timeout_s: float = Field(default=30.0, gt=0)
    body_idle_timeout_s: float = Field(default=10.0, gt=0)
    retry_after_s: int = Field(default=5, ge=1)

    @field_validator("policy_urls")
    @classmethod
    def _split(cls, v: list[str]) -> list[str]:
        # ROLLOUTS_POLICY_URL may hold several comma-separated URLs.
        out: list[str] = []
        for item in v:
            out.extend(u.strip().rstrip("/") for u in item.split(",") if u.strip())
        return out

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_exposure(self) -> None:
        """Raise ValueError when the service would listen beyond this host without a key."""
        if not self.is_loopback and not self.api_key:
            raise ValueError(
                f"refusing to listen on non-loopback host {self.host!r} without an API key "
                "(pass --api-key or set ROLLOUTS_API_KEY)"
            )

    def resolve_tasks_path(self, path: str) -> str:
        return self.datasets.get(path, path)
