#!/usr/bin/env bash
# Create .venv (if needed) and install aiprof into it with the given extras.
# Usage: scripts/setup-venv.sh [EXTRAS]   e.g. scripts/setup-venv.sh dev,torch
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install -q -e ".[$extras]"
else
  .venv/bin/python -m pip install -q -e .
fi
# Byte-compile the package: with PYTHONDONTWRITEBYTECODE set, every start would
# otherwise compile aiprof from source.
.venv/bin/python -m compileall -q -x "/node_modules/" src >/dev/null
