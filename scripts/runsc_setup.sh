#!/usr/bin/env bash
# gVisor for the sandboxes: install Debian's runsc and register it with the Docker Engine as
# runtime "runsc", so `--runtime runsc` (and ROLLOUTS_RUNTIME=runsc in the compose stack) can
# run agent and verifier containers under a user-space kernel. Idempotent: the engine's other
# settings are kept, and it is reloaded with SIGHUP (no restart: running containers stay; the
# engine reloads its runtimes on SIGHUP, and a container keeps the runtime it started with). An
# engine that is not running is started (CI machines start theirs before the session, but one
# may not be up yet, or may have ended).
#
#   scripts/runsc_setup.sh               # needs root (or sudo) and Debian's package registry
#   scripts/runsc_setup.sh --candidates  # also the settings the benchmark compares, each as
#                                        # a runtime of its own (runsc-<setting>)
#
# The flags of each setting, and what each one changes in isolation and in speed, are in
# docs/performance.md ("gVisor settings"); benchmarks/gvisor_settings.py measures them side by
# side. `--network=none` is in every one: sandboxes have no network, so the sentry needs no
# network stack.
set -euo pipefail
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
CONFIG=${DOCKER_DAEMON_CONFIG:-/etc/docker/daemon.json}
case "${1:-}" in
  --candidates | "") ;;
  *) echo "usage: $0 [--candidates]" >&2; exit 2 ;;
esac

# The release: Debian trixie's (0.0~20240729), for directfs (`runsc` below relies on it: the
# sentry opens files itself, no gofer round trip per open) and the systrap platform (a
# candidate); bookworm's 0.0~20221219 has neither. A runsc on PATH that lists systrap (that
# release or a later one) is kept as it is.
# (The flags are read whole first: `grep -q` stops at the first match, and under pipefail the
# runsc it leaves writing into a closed pipe would fail the check on a fast machine.)
has_systrap() {
  local flags
  flags=$("$1" flags 2>&1) || true
  [[ $flags == *systrap* ]]
}
runsc=$(command -v runsc || true)
if [ -z "$runsc" ] || ! has_systrap "$runsc"; then
  # apt against trixie alone, named on the command line: its signed Release is checked with
  # Debian's archive keyring (bookworm's debian-archive-keyring holds trixie's keys), and the
  # machine's own sources and pins are never changed, so nothing else can come from trixie,
  # then or at a later upgrade. runsc is one static binary with no Depends.
  echo "+ apt-get install runsc/trixie" >&2
  apt_dir=$(mktemp -d)
  trap 'rm -rf "$apt_dir"' EXIT
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
    "${ROLLOUTS_DEBIAN_MIRROR:-http://deb.debian.org/debian} trixie main" >"$apt_dir/trixie.list"
  trixie_only=(-o "Dir::Etc::sourcelist=$apt_dir/trixie.list" -o Dir::Etc::sourceparts=-
    -o APT::Get::List-Cleanup=0)
  "${as_root[@]}" apt-get "${trixie_only[@]}" update -q >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get "${trixie_only[@]}" install -y -q --no-install-recommends runsc >&2
  runsc=/usr/bin/runsc
  if ! has_systrap "$runsc"; then
    echo "error: $runsc ($("$runsc" --version | head -1)) has no systrap platform" >&2
    exit 1
  fi
fi

# What `--runtime runsc` runs: the fastest setting that keeps the isolation suite green here
# (docs/performance.md, "gVisor settings"): this release's ptrace platform, cheaper in CPU per
# trial than its default, systrap, on this 2-core machine in every run, with its directfs.
RUNSC_ARGS='--network=none --platform=ptrace'
# Candidates, "name binary flags...": only registered with --candidates (never touching "runsc").
# Each differs from RUNSC_ARGS in one setting.
CANDIDATES=(
  "runsc-systrap $runsc --network=none --platform=systrap"
  "runsc-gofer $runsc --network=none --platform=ptrace --directfs=false"
  "runsc-dcache $runsc --network=none --platform=ptrace --dcache=20000"
)

wanted=("runsc $runsc $RUNSC_ARGS")
case "${1:-}" in
  --candidates)
    wanted+=("${CANDIDATES[@]}")
    # And bookworm's release (ptrace only, a gofer round trip per open) as runsc-bookworm: the
    # release this one replaced, measured in the same run. Its package is fetched from the
    # machine's bookworm source (apt checks it against the signed index) and unpacked beside,
    # never installed.
    old=/usr/local/lib/rollouts-runsc-bookworm/runsc
    if [ ! -x "$old" ]; then
      echo "+ apt-get download runsc/bookworm into ${old%/*}" >&2
      deb_dir=$(mktemp -d)
      chmod 755 "$deb_dir" # apt downloads as its own user, _apt
      (cd "$deb_dir" && apt-get download -q runsc/bookworm >&2)
      "${as_root[@]}" mkdir -p "${old%/*}"
      dpkg-deb --fsys-tarfile "$deb_dir"/runsc_*.deb \
        | "${as_root[@]}" tar -x -C "${old%/*}" --strip-components=3 ./usr/bin/runsc
      rm -rf "$deb_dir"
    fi
    wanted+=("runsc-bookworm $old --network=none")
    ;;
esac

# The engine must answer before it is signalled: dockerd sets its SIGHUP handler only at the end
# of its start, and a SIGHUP before that ends it (Go's default for the signal). A CI machine's
# engine may still be starting when this runs; one that is not running at all is started here.
engine_answers() { docker info >/dev/null 2>&1; }
start_engine() {
  echo "+ dockerd is not running; starting it (log: /var/log/rollouts-dockerd.log)" >&2
  "${as_root[@]}" sh -c 'nohup dockerd >>/var/log/rollouts-dockerd.log 2>&1 &'
}
wait_for_engine() {
  for _ in $(seq 300); do
    engine_answers && return 0
    pgrep -x dockerd >/dev/null || start_engine
    sleep 0.2
  done
  echo "error: the Docker Engine did not answer in 60 s: $(docker info 2>&1 >/dev/null | tail -1)" >&2
  exit 1
}
wait_for_engine

# Merge {"runtimes": {name: ...}} into the engine's config, keeping everything else.
changed=$(printf '%s\n' "${wanted[@]}" | "${as_root[@]}" python3 -c '
import json, os, sys

path = sys.argv[1]
config = {}
if os.path.exists(path):
    with open(path) as f:
        config = json.load(f)
runtimes = config.setdefault("runtimes", {})
changed = False
names = set()
for line in sys.stdin.read().splitlines():
    name, binary, *flags = line.split()
    names.add(name)
    wanted = {"path": binary, "runtimeArgs": flags}
    if runtimes.get(name) != wanted:
        runtimes[name] = wanted
        changed = True
# With --candidates, exactly these: a candidate dropped from the list leaves the engine too.
for name in [n for n in runtimes if sys.argv[2] == "--candidates" and n.startswith("runsc-")]:
    if name not in names:
        del runtimes[name]
        changed = True
if changed:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".tmp", path)
print("yes" if changed else "no")
' "$CONFIG" "${1:-}")
[ "$changed" = yes ] && echo "+ registered ${#wanted[@]} runsc runtime(s) in $CONFIG" >&2
engine_lists_wanted() {
  local listed line name rest flags
  listed=$(docker info --format '{{json .Runtimes}}' 2>/dev/null || true)
  for line in "${wanted[@]}"; do
    name=${line%% *}
    rest=${line#* }
    flags=$(printf '%s' "${rest#* }" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().split()))')
    printf '%s' "$listed" | python3 -c '
import json, sys
rt = (json.loads(sys.stdin.read() or "null") or {}).get(sys.argv[1]) or {}
sys.exit(0 if rt.get("runtimeArgs", []) == json.loads(sys.argv[2]) else 1)
' "$name" "$flags" || return 1
  done
}
# The engine is reloaded whenever it does not list them yet, not only when the file changed: an
# earlier run may have written the file and signalled an engine that was still starting.
# The reload is asynchronous: wait until the engine lists every runtime with its flags. An engine
# that the reload ended is started again, and reads the file at its start.
reloaded=0
for _ in $(seq 150); do
  engine_answers || wait_for_engine
  if engine_lists_wanted; then
    echo "runsc is registered with the Docker Engine ($runsc: runsc $RUNSC_ARGS)" >&2
    exit 0
  fi
  if [ "$reloaded" = 0 ]; then
    echo "+ reloading dockerd" >&2
    "${as_root[@]}" pkill -HUP -x dockerd
    reloaded=1
  fi
  sleep 0.2
done
echo "error: the Docker Engine does not list the runsc runtimes after reloading $CONFIG" \
  "(it lists: $(docker info --format '{{json .Runtimes}}' 2>&1))" >&2
exit 1
