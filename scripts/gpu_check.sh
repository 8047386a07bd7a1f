#!/usr/bin/env bash
# Every CUDA path of aiprof on a real GPU, in one run (see scripts/gpu_check.py):
# recording (default, --ops) against plain python and torch.profiler alone, the
# monitor beside nvidia-smi dmon, an Nsight Compute import, and the reports, advice
# and timechart of each profile.
#
#   scripts/gpu_check.sh --make-wheels   # here: fill .gpu-wheels/ with what the GPU machine lacks
#   scripts/gpu_check.sh OUT             # on the GPU machine (Python 3.12, torch with CUDA)
#   scripts/gpu_check.sh --cpu OUT       # here: every step that can run without a GPU
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu-wheels
# What the GPU machine has already (Python 3.12 with torch, pyarrow, psutil, rich,
# click, nvidia-ml-py); everything else aiprof depends on travels as wheels.
PRESENT="pyarrow psutil rich click nvidia-ml-py torch"
WHEEL_LIMIT_MIB=60

needed() {
  python3 - "$PRESENT" <<'EOF'
import re, sys, tomllib
present = set(sys.argv[1].split())
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(" ".join(d for d in deps if re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0] not in present))
EOF
}

mode=gpu
out=out/gpu_check
for arg in "$@"; do
  case "$arg" in
    --cpu) mode=cpu ;;
    --make-wheels) mode=wheels ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    -*) echo "gpu_check.sh: unknown option $arg" >&2; exit 2 ;;
    *) out="$arg" ;;
  esac
done

if [ "$mode" = wheels ]; then
  rm -rf "$WHEELS"; mkdir -p "$WHEELS"
  # shellcheck disable=SC2046
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$WHEELS" $(needed)
  # Dependencies of dependencies that the machine has are not sent twice.
  for p in $PRESENT; do rm -f "$WHEELS"/"${p//-/_}"-*.whl "$WHEELS"/"$p"-*.whl; done
  size=$(du -sm "$WHEELS" | cut -f1)
  ls "$WHEELS"
  echo "gpu_check.sh: $size MiB of wheels in $WHEELS (limit $WHEEL_LIMIT_MIB)"
  [ "$size" -le "$WHEEL_LIMIT_MIB" ] || { echo "gpu_check.sh: too large to travel" >&2; exit 1; }
  exit 0
fi

export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ "$mode" = cpu ]; then
  # The dry run uses $PYTHON when given (the test command's interpreter), else .venv.
  if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"; else
    [ -x .venv/bin/python ] || scripts/setup-venv.sh torch
    PY="$PWD/.venv/bin/python"
  fi
else
  [ -d "$WHEELS" ] || { echo "gpu_check.sh: no $WHEELS folder; run scripts/gpu_check.sh --make-wheels first and carry it" >&2; exit 2; }
  venv="${TMPDIR:-/tmp}/aiprof-gpu-venv"
  python3 -m venv --system-site-packages "$venv"
  # shellcheck disable=SC2046
  "$venv/bin/python" -m pip install -q --no-index --find-links "$WHEELS" $(needed)
  PY="$venv/bin/python"
fi
exec "$PY" scripts/gpu_check.py --mode "$mode" --out "$out"
