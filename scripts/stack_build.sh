#!/usr/bin/env bash
# Build the rollouts service image for the compose stack without a registry or PyPI in the build:
# wheels are prepared on the host (scripts/prepare_wheels.py) for the Python inside the base image,
# then `docker build` installs them with --no-index. Wheels are re-prepared only when pyproject.toml
# or the base image changed.
#
# Environment:
#   ROLLOUTS_BASE_IMAGE  base image (default rollouts-base:bookworm; `rollouts images build` makes it)
#   ROLLOUTS_IMAGE       tag to build (default rollouts:local), the one docker-compose.yml runs
#   PYTHON               interpreter whose pip downloads the wheels (default .venv/bin/python)
set -euo pipefail

cd "$(dirname "$0")/.."
base="${ROLLOUTS_BASE_IMAGE:-rollouts-base:bookworm}"
image="${ROLLOUTS_IMAGE:-rollouts:local}"
python="${PYTHON:-.venv/bin/python}"
[[ -x "$python" ]] || python=python3

if ! base_id="$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null)"; then
    echo "stack_build: base image $base is missing; build it with 'rollouts images build'" >&2
    exit 2
fi

stamp="build/wheels/.stamp"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $base_id"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    echo "stack_build: preparing wheels for $base" >&2
    rm -rf build/wheels
    "$python" scripts/prepare_wheels.py --base-image "$base" --dest build/wheels
    echo "$want" >"$stamp"
fi

echo "stack_build: building $image FROM $base" >&2
docker build --quiet --build-arg "BASE_IMAGE=$base" \
    --label rollouts.managed=true --label rollouts.component=service-image \
    -t "$image" .
