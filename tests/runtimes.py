"""The OCI runtimes the isolation suite runs under: the engine's default (runc) and gVisor
(runsc, registered by scripts/runsc_setup.sh, which .ci/run calls). A test marked
`@both_runtimes` runs once under each; without runsc its runsc case skips, or fails where
CI=true."""

from __future__ import annotations

import functools
import subprocess

import pytest

from tests.ci import unavailable

RUNTIMES = ("runc", "runsc")
both_runtimes = pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)


@functools.cache
def registered() -> frozenset[str]:
    out = subprocess.run(
        ["docker", "info", "--format", "{{range $k, $v := .Runtimes}}{{$k}} {{end}}"],
        capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    return frozenset(out.split())


def usable_runtime(name: str) -> str:
    """`name`, or skip (fail in CI) when the engine does not offer it."""
    if name not in registered():
        why = f"runtime {name} is not registered with the Docker Engine (scripts/runsc_setup.sh)"
        unavailable(why)
    return name
