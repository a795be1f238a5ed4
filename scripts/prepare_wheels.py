#!/usr/bin/env python3
"""Download every runtime wheel the service image needs into build/wheels/, for an offline build.

The wheels must match the Python *inside the base image*, not the host's, so this asks the base
image for its interpreter version, libc and machine and passes those as pip's target tags. Only
binary wheels are accepted: the base image has no compiler and the build has no network.

Versions are pinned to the ones installed in the running environment when it has them, so the
image runs the exact versions the test suite ran against.

Usage: scripts/prepare_wheels.py [--base-image rollouts-base:bookworm] [--dest build/wheels]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Asked inside the base image; prints one JSON object.
_PROBE = (
    "import json, platform, sys; "
    "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
    "'impl': sys.implementation.name, 'libc': platform.libc_ver(), "
    "'machine': platform.machine()}))"
)
# Tools the image build needs besides the runtime dependencies: pip runs from its own wheel (the
# Debian base has no pip and no ensurepip); setuptools and wheel build the project in isolation.
_BUILD_TOOLS = ["pip", "setuptools>=68", "wheel"]


@dataclass(frozen=True)
class Target:
    """The interpreter a wheel must fit."""

    version: str  # "3.11"
    impl: str  # "cpython"
    libc: tuple[str, str]  # ("glibc", "2.36")
    machine: str  # "x86_64"

    def pip_args(self) -> list[str]:
        if self.impl != "cpython":
            raise SystemExit(f"base image runs {self.impl}; only CPython is supported")
        if self.libc[0] != "glibc":
            raise SystemExit(f"base image libc is {self.libc[0] or 'unknown'}; need glibc")
        minor_glibc = int(self.libc[1].split(".")[1])
        abi = "cp" + self.version.replace(".", "")
        args = ["--implementation", "cp", "--python-version", self.version]
        for a in (abi, "abi3", "none"):
            args += ["--abi", a]
        # Every manylinux tag whose glibc floor is at or below the image's glibc fits it.
        for m in range(minor_glibc, 16, -1):
            args += ["--platform", f"manylinux_2_{m}_{self.machine}"]
        args += ["--platform", f"manylinux2014_{self.machine}", "--platform", "any"]
        return args


def probe_base_image(image: str) -> Target:
    try:
        out = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", image, "python3", "-c", _PROBE],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"cannot run python3 in base image {image}: {e.stderr.strip()}") from e
    info = json.loads(out)
    return Target(info["version"], info["impl"], tuple(info["libc"]), info["machine"])


def runtime_requirements(pyproject: Path) -> list[str]:
    with pyproject.open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def pin_to_current_env(requirements: list[str]) -> list[str]:
    """Replace each requirement with the version installed here, when the names match."""
    pinned = []
    for req in requirements:
        name = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0]
        try:
            pinned.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pinned.append(req)
    return pinned


def constraints_from_current_env(dest: Path) -> Path:
    """Transitive dependencies get the versions installed here too (a pip constraints file)."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = dest / "constraints.txt"
    path.write_text("".join(line + "\n" for line in frozen.splitlines() if "==" in line))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", default="rollouts-base:bookworm")
    parser.add_argument("--dest", type=Path, default=ROOT / "build" / "wheels")
    parser.add_argument(
        "--no-pin", action="store_true", help="take the newest versions, not the installed ones"
    )
    args = parser.parse_args()

    target = probe_base_image(args.base_image)
    args.dest.mkdir(parents=True, exist_ok=True)
    reqs = runtime_requirements(ROOT / "pyproject.toml")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    cmd += ["--only-binary=:all:", "--dest", str(args.dest), *target.pip_args()]
    if not args.no_pin:
        reqs = pin_to_current_env(reqs)
        cmd += ["--constraint", str(constraints_from_current_env(args.dest))]
    result = subprocess.run([*cmd, *reqs, *_BUILD_TOOLS])
    if result.returncode != 0:
        raise SystemExit(f"pip download failed (exit {result.returncode}) for target {target}")
    wheels = sorted(p.name for p in args.dest.glob("*.whl"))
    print(f"{len(wheels)} wheels for CPython {target.version} {target.machine} in {args.dest}")


if __name__ == "__main__":
    main()
