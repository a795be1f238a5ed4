#!/usr/bin/env bash
# gVisor for the sandboxes: install Debian's runsc and register it with the Docker Engine as
# runtime "runsc", so `--runtime runsc` (and ROLLOUTS_RUNTIME=runsc in the compose stack) can
# run agent and verifier containers under a user-space kernel. Idempotent: the engine's other
# settings are kept, and it is reloaded with SIGHUP (no restart: running containers stay).
#
#   scripts/runsc_setup.sh          # needs root (or sudo) and Debian's package registry
#
# `--network=none` is part of the registration: this runsc release refuses to start a
# container with networking in the root network namespace, and sandboxes have no network.
set -euo pipefail
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
CONFIG=${DOCKER_DAEMON_CONFIG:-/etc/docker/daemon.json}

if ! command -v runsc >/dev/null; then
  echo "+ apt-get install runsc" >&2
  "${as_root[@]}" apt-get update -q >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc >&2
fi
runsc=$(command -v runsc)

# Merge {"runtimes": {"runsc": ...}} into the engine's config, keeping everything else.
changed=$("${as_root[@]}" python3 - "$CONFIG" "$runsc" <<'PY'
import json, os, sys

path, runsc = sys.argv[1], sys.argv[2]
config = {}
if os.path.exists(path):
    with open(path) as f:
        config = json.load(f)
wanted = {"path": runsc, "runtimeArgs": ["--network=none"]}
if config.get("runtimes", {}).get("runsc") == wanted:
    print("no")
else:
    config.setdefault("runtimes", {})["runsc"] = wanted
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".tmp", path)
    print("yes")
PY
)
if [ "$changed" = yes ]; then
  echo "+ registered runsc in $CONFIG; reloading dockerd" >&2
  "${as_root[@]}" pkill -HUP -x dockerd
fi
# The reload is asynchronous: wait until the engine lists the runtime.
for _ in $(seq 50); do
  if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    echo "runsc is registered with the Docker Engine ($runsc)" >&2
    exit 0
  fi
  sleep 0.2
done
echo "error: the Docker Engine does not list runtime runsc after reloading $CONFIG" >&2
exit 1
