#!/usr/bin/env bash
# The main job on the bundled example: record a small CPU training run, then report it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh torch
out="${1:-runs/example}"
.venv/bin/aiprof record -o "$out" -- .venv/bin/python examples/train_cpu.py
.venv/bin/aiprof report "$out"
.venv/bin/aiprof advise "$out"
