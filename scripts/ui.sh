#!/usr/bin/env bash
# Rebuild the web UI after changing src/aiprof/web/ui or the API's models:
# OpenAPI document -> TypeScript types -> type check -> unit tests -> bundle in static/.
# Usage: scripts/ui.sh   (PYTHON=path/to/python to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$PWD/.venv/bin/python}
cd src/aiprof/web/ui
[ -d node_modules ] || npm ci --no-audit --no-fund
PYTHONPATH=$PWD/../../.. "$PY" -c 'import json; from aiprof.web.server import openapi_document; print(json.dumps(openapi_document(), indent=1, sort_keys=True))' > openapi.json
npm run gen-api
npm run typecheck
npm test
npm run build
