#!/usr/bin/env bash
# gVisor for the sandboxes: install Debian's runsc and register it with the Docker Engine as
# runtime "runsc", so `--runtime runsc` (and ROLLOUTS_RUNTIME=runsc in the compose stack) can
# run agent and verifier containers under a user-space kernel. Idempotent: the engine's other
# settings are kept, and it is reloaded with SIGHUP (no restart: running containers stay; the
# engine reloads its runtimes on SIGHUP, and a container keeps the runtime it started with).
#
#   scripts/runsc_setup.sh               # needs root (or sudo) and Debian's package registry
#   scripts/runsc_setup.sh --candidates  # also the settings the benchmark compares, each as
#                                        # a runtime of its own (runsc-<setting>)
#
# The flags of each setting, and what each one changes in isolation and in speed, are in
# docs/performance.md ("gVisor settings"); benchmarks/gvisor_settings.py measures them side by
# side. `--network=none` is in every one: this runsc release refuses to start a container with
# networking in the root network namespace, and sandboxes have no network.
set -euo pipefail
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
CONFIG=${DOCKER_DAEMON_CONFIG:-/etc/docker/daemon.json}

# What `--runtime runsc` runs: the fastest setting that keeps the isolation suite green here.
RUNSC_ARGS='--network=none'
# Candidates, "name flags...": only registered with --candidates (never touching "runsc").
CANDIDATES=(
  "runsc-overlay --network=none --overlay2=root:memory"
  "runsc-dcache --network=none --dcache=20000"
  "runsc-quota --network=none --cpu-num-from-quota"
  "runsc-shared --network=none --file-access=shared"
)

wanted=("runsc $RUNSC_ARGS")
case "${1:-}" in
  --candidates) wanted+=("${CANDIDATES[@]}") ;;
  "") ;;
  *) echo "usage: $0 [--candidates]" >&2; exit 2 ;;
esac

if ! command -v runsc >/dev/null; then
  echo "+ apt-get install runsc" >&2
  "${as_root[@]}" apt-get update -q >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc >&2
fi
runsc=$(command -v runsc)

# Merge {"runtimes": {name: ...}} into the engine's config, keeping everything else.
changed=$(printf '%s\n' "${wanted[@]}" | "${as_root[@]}" python3 -c '
import json, os, sys

path, runsc = sys.argv[1], sys.argv[2]
config = {}
if os.path.exists(path):
    with open(path) as f:
        config = json.load(f)
runtimes = config.setdefault("runtimes", {})
changed = False
for line in sys.stdin.read().splitlines():
    name, *flags = line.split()
    wanted = {"path": runsc, "runtimeArgs": flags}
    if runtimes.get(name) != wanted:
        runtimes[name] = wanted
        changed = True
if changed:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".tmp", path)
print("yes" if changed else "no")
' "$CONFIG" "$runsc")
if [ "$changed" = yes ]; then
  echo "+ registered ${#wanted[@]} runsc runtime(s) in $CONFIG; reloading dockerd" >&2
  "${as_root[@]}" pkill -HUP -x dockerd
fi
# The reload is asynchronous: wait until the engine lists every runtime with its flags.
for _ in $(seq 50); do
  listed=$(docker info --format '{{json .Runtimes}}' 2>/dev/null || true)
  missing=0
  for line in "${wanted[@]}"; do
    name=${line%% *}
    flags=$(printf '%s' "${line#* }" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().split()))')
    printf '%s' "$listed" | python3 -c '
import json, sys
rt = json.loads(sys.stdin.read() or "{}").get(sys.argv[1], {})
sys.exit(0 if rt.get("runtimeArgs", []) == json.loads(sys.argv[2]) else 1)
' "$name" "$flags" || missing=1
  done
  if [ "$missing" = 0 ]; then
    echo "runsc is registered with the Docker Engine ($runsc: runsc $RUNSC_ARGS)" >&2
    exit 0
  fi
  sleep 0.2
done
echo "error: the Docker Engine does not list the runsc runtimes after reloading $CONFIG" >&2
exit 1
