#!/usr/bin/env bash
# Harbor's own CLI for the Harbor baseline in `python -m benchmarks` (benchmarks/harbor_baseline.py):
# a venv with harbor 0.25.0 and every dependency pinned, and the `docker compose` v2 plugin its
# docker environment drives. Both are cached; a second run only checks them.
#
#   scripts/harbor_cli_env.sh      # prints the harbor executable and the DOCKER_CONFIG folder
#
#   ROLLOUTS_HARBOR_CLI_CHECK=1 scripts/harbor_cli_env.sh   # only checks: fails if not built
#
# Environment: ROLLOUTS_CACHE (default ~/.cache/rollouts), ROLLOUTS_HARBOR_CLI_DIR (default
# $ROLLOUTS_CACHE/harbor-cli-0.25.0; the benchmark looks in the same place),
# ROLLOUTS_HARBOR_BASE_PYTHON (a Python >= 3.12, Harbor's floor; default python3.12/python3.13
# on PATH, else /root/.pyenv/versions/3.12+).
#
# The compose plugin: Debian bookworm's docker-compose is the 1.x Python tool, which Harbor does
# not use. Debian trixie's docker-compose package is the v2 Go plugin (a static binary), so it is
# fetched with apt from trixie into private lists (the machine's apt state is not touched), and
# only the binary is unpacked into $DIR/docker-config/cli-plugins. The benchmark runs Harbor with
# DOCKER_CONFIG pointing there, so the machine's own docker setup stays as it is. A `docker
# compose` v2 already installed system-wide is used instead.
set -euo pipefail
HARBOR_VERSION=0.25.0
CACHE=${ROLLOUTS_CACHE:-$HOME/.cache/rollouts}
DIR=${ROLLOUTS_HARBOR_CLI_DIR:-$CACHE/harbor-cli-$HARBOR_VERSION}
VENV=$DIR/venv
DOCKER_CONFIG_DIR=$DIR/docker-config
DEBIAN_MIRROR=${ROLLOUTS_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# `pip freeze` of `pip install harbor==0.25.0` on Python 3.12, installed with --no-deps so that
# nothing is resolved again on a later day.
PINS=(
  harbor==$HARBOR_VERSION
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
  annotated-types==0.8.0 anyio==4.16.0 attrs==26.1.0 boto3==1.44.8 botocore==1.44.8
  certifi==2026.10.19.post1 cffi==2.1.1 charset-normalizer==3.5.3 click==8.5.1
  cryptography==50.0.2 deprecation==2.1.0 dirhash==0.5.0 fastapi==0.165.0 fastuuid==0.14.0
  filelock==4.3.1 frozenlist==1.8.0 fsspec==2026.9.0 h11==0.16.0 h2==4.4.1 hf-xet==1.8.0
  hpack==4.2.0 httpcore==1.0.9 httpcore2==2.16.2 httpx==0.28.1 httpx2==2.16.2
  huggingface_hub==2.4.0 hyperframe==6.1.0 idna==3.20 importlib_metadata==8.9.0 Jinja2==3.1.6
  jiter==0.19.0 jmespath==1.1.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
  litellm==1.110.2 markdown-it-py==4.3.0 MarkupSafe==3.0.4 mdurl==0.1.2 multidict==7.2.1
  openai==3.57.0 opentelemetry-api==1.45.2 packaging==26.4 pathspec==1.1.1 platformdirs==4.14.9
  postgrest==2.34.1 propcache==0.5.4 pycparser==3.12 pydantic==2.14.4 pydantic-settings==2.16.3
  pydantic_core==2.50.5 Pygments==2.21.0 PyJWT==2.15.1 python-dateutil==2.9.0.post0
  python-dotenv==1.2.4 PyYAML==6.0.4 realtime==2.34.1 referencing==0.37.0 regex==2026.11.19
  requests==2.34.2 rich==15.0.0 rpds-py==2026.9.1 s3transfer==0.19.3 scantree==0.0.4
  semver==3.1.2 shellingham==1.5.4 shortuuid==1.0.13 six==1.17.0 sniffio==1.3.1
  starlette==1.10.0 storage3==2.34.1 supabase==2.34.1 supabase-auth==2.34.1
  supabase-functions==2.34.1 tenacity==9.2.1 tiktoken==0.14.0 tokenizers==0.23.3 toml==0.10.2
  tqdm==4.70.1 truststore==0.10.5 typer==0.29.2 typing-inspection==0.4.5
  typing_extensions==4.16.0 urllib3==2.8.0 uvicorn==0.54.0 websockets==15.0.1 yarl==1.25.1
  zipp==4.1.2
)

base_python() {
  if [ -n "${ROLLOUTS_HARBOR_BASE_PYTHON:-}" ]; then
    echo "$ROLLOUTS_HARBOR_BASE_PYTHON"
    return
  fi
  local c
  # A pyenv shim on PATH may name a version that is not installed: try each one.
  for c in $(command -v python3.12 python3.13 || true) \
    $(ls -d /root/.pyenv/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -r); do
    if "$c" -c 'import sys, venv; assert sys.version_info >= (3, 12)' 2>/dev/null; then
      echo "$c"
      return
    fi
  done
  echo "no Python >= 3.12 (python3.12 on PATH, /root/.pyenv/versions/3.12+," \
    "or ROLLOUTS_HARBOR_BASE_PYTHON)" >&2
  return 1
}

compose_works() {
  DOCKER_CONFIG=$DOCKER_CONFIG_DIR docker compose version >/dev/null 2>&1
}

mkdir -p "$DIR"
# One build at a time (two CI jobs, or a test and a benchmark, on one machine share the cache).
exec 9>"$DIR.lock"
flock 9

# The stamp names the pins it was built from: changing them rebuilds the venv.
stamp="$(printf '%s\n' "${PINS[@]}" | sha256sum | cut -c1-16)"
if [ ! -x "$VENV/bin/harbor" ] || [ "$(cat "$VENV/.complete" 2>/dev/null)" != "$stamp" ]; then
  if [ -n "${ROLLOUTS_HARBOR_CLI_CHECK:-}" ]; then
    echo "harbor $HARBOR_VERSION is not installed in $VENV (run scripts/harbor_cli_env.sh)" >&2
    exit 1
  fi
  echo "installing harbor $HARBOR_VERSION into $VENV (once, a minute or two)" >&2
  py=$(base_python)
  rm -rf "$VENV"
  "$py" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${PINS[@]}"
  "$VENV/bin/harbor" --version >/dev/null
  echo "$stamp" >"$VENV/.complete"
fi

if ! compose_works; then
  if [ -n "${ROLLOUTS_HARBOR_CLI_CHECK:-}" ]; then
    echo "no docker compose v2 plugin (run scripts/harbor_cli_env.sh)" >&2
    exit 1
  fi
  echo "fetching the docker compose v2 plugin from Debian trixie into $DOCKER_CONFIG_DIR" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  echo "deb $DEBIAN_MIRROR trixie main" >"$work/sources.list"
  : >"$work/status"
  apt_opts=(
    -q -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
    -o "Dir::State::status=$work/status" -o Debug::NoLocking=1
    -o APT::Sandbox::User=root
  )
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$work" && apt-get "${apt_opts[@]}" download docker-compose >/dev/null)
  dpkg-deb -x "$work"/docker-compose_*.deb "$work/root"
  mkdir -p "$DOCKER_CONFIG_DIR/cli-plugins"
  install -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" \
    "$DOCKER_CONFIG_DIR/cli-plugins/docker-compose.tmp"
  mv "$DOCKER_CONFIG_DIR/cli-plugins/docker-compose.tmp" \
    "$DOCKER_CONFIG_DIR/cli-plugins/docker-compose"
  compose_works || {
    echo "docker compose still fails with DOCKER_CONFIG=$DOCKER_CONFIG_DIR" >&2
    exit 1
  }
fi

echo "$VENV/bin/harbor"
echo "$DOCKER_CONFIG_DIR"
