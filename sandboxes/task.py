"""The Task model: one Harbor-format task, loaded into memory (files as bytes)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EnvironmentConfig:
    """[environment] of task.toml. `extra` keeps unknown keys, never rejected."""

    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    cpus: float = 1.0
    memory_mb: int = 1024
    storage_mb: int = 1024
    network_mode: str = "none"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskConfig:
    """task.toml as a whole."""

    verifier_timeout_sec: float = 720.0
    agent_timeout_sec: float = 900.0
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    metadata: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One task. File maps are relative path -> bytes, so a task needs no folder on disk."""

    id: str
    path: str
    instruction: str
    config: TaskConfig
    environment_files: dict[str, bytes]  # environment/ contents, e.g. {"Dockerfile": b"..."}
    test_files: dict[str, bytes]  # tests/ contents, must include "test.sh"
    solution_files: dict[str, bytes] = field(default_factory=dict)  # solution/ contents

    @property
    def has_oracle(self) -> bool:
        return "solve.sh" in self.solution_files

    @property
    def env_hash(self) -> str:
        """Content hash of the environment: identical environments share one image."""
        h = hashlib.sha256()
        h.update((self.config.environment.docker_image or "").encode())
        h.update(b"\0")
        for name in sorted(self.environment_files):
            h.update(name.encode() + b"\0" + hashlib.sha256(self.environment_files[name]).digest())
        return h.hexdigest()[:16]

    @property
    def tests_digest(self) -> str:
        """sha256 of the tests (every file under tests/, by name and content): which version of
        a task's tests a grade used. Recorded with every trajectory and grading."""
        h = hashlib.sha256()
        for name in sorted(self.test_files):
            h.update(name.encode() + b"\0" + hashlib.sha256(self.test_files[name]).digest())
        return h.hexdigest()
