#!/usr/bin/env bash
# The main job: record an unmodified CPU training run whose DataLoader is its
# bottleneck, read the report and the advice, then run it with the fix and compare.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh torch
out="${1:-runs/slow_loader}"
py=.venv/bin/python
echo "== 1. record the job as written (no markers, no --ops; --force replaces the last run's recording)"
.venv/bin/aiprof record --force -o "$out" -- "$py" examples/slow_loader.py | tee /tmp/aiprof-demo-before.txt
echo "== 2. where the step time goes"
.venv/bin/aiprof report "$out"
echo "== 3. the advice (first item: data loading, with the line that costs most)"
.venv/bin/aiprof advise "$out" --min-severity medium
echo "== 4. the job with the advice applied (per-item augmentation vectorised over the batch)"
"$py" examples/slow_loader.py --batched | tee /tmp/aiprof-demo-after.txt
echo "== measured (by the example itself, no profiler):"
echo "   before: $("$py" examples/slow_loader.py | tail -1)"
echo "   after:  $(tail -1 /tmp/aiprof-demo-after.txt)"
