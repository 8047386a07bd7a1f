#!/usr/bin/env bash
# The test command (README, CI): installs what the tests need, then lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh dev,torch,notebook,cluster,fast
# UI tests drive Debian's Chromium through Playwright; install it when we can.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "test.sh: could not install chromium; UI tests will say so"
fi
# The web UI: exact dependencies from package-lock.json (npm registry), type check,
# unit tests; tests/test_ui_bundle.py (in pytest below) checks the committed bundle
# and the generated API types against their sources.
echo "== web UI: npm ci, tsc, vitest"
(cd src/aiprof/web/ui && npm ci --no-audit --no-fund --loglevel=error && npm run -s typecheck && npm test -s)
echo "== ruff"
.venv/bin/ruff check src tests bench
.venv/bin/ruff format --check src tests bench
echo "== mypy (strict)"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"
