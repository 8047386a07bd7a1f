"""The committed UI bundle and generated API types are not older than their sources.

``src/aiprof/web/static/app.js`` is built from ``src/aiprof/web/ui`` (``scripts/ui.sh``)
and committed, so ``pip install`` needs no Node. The build records the SHA-256 of its
sources in ``static/ui-build.json`` (``ui/scripts/stamp.mjs``); this test computes the
same hash (file contents, not mtimes, which a clone does not keep). The TypeScript
client types are generated from the server's OpenAPI document: both must match what
regenerating gives.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from aiprof.web.server import openapi_document

WEB = Path(__file__).resolve().parents[1] / "src" / "aiprof" / "web"
UI = WEB / "ui"
INPUTS = ("src", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts")
REBUILD = "rebuild it: scripts/ui.sh (then commit src/aiprof/web/static and ui/)"


def sources_hash() -> str:
    """The hash stamp.mjs records: sorted relative paths, each path and content NUL-ended."""
    files: list[str] = []
    for name in INPUTS:
        p = UI / name
        if p.is_dir():
            files += [
                f.relative_to(UI).as_posix() for f in p.rglob("*") if f.is_file() and not f.name.endswith(".test.ts")
            ]
        else:
            files.append(name)
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.encode() + b"\0")
        h.update((UI / f).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def test_bundle_is_built_from_the_current_sources() -> None:
    stamp = json.loads((WEB / "static" / "ui-build.json").read_text())
    assert stamp["sources_sha256"] == sources_hash(), f"static/app.js is older than web/ui: {REBUILD}"
    bundle = (WEB / "static" / "app.js").read_text()
    assert len(bundle) > 10_000 and "__aiprof" in bundle


def test_openapi_document_is_the_committed_one() -> None:
    committed = json.loads((UI / "openapi.json").read_text())
    assert committed == json.loads(json.dumps(openapi_document())), f"ui/openapi.json is stale: {REBUILD}"


def test_typescript_types_regenerate_to_the_committed_file(tmp_path: Path) -> None:
    tool = UI / "node_modules" / ".bin" / "openapi-typescript"
    assert tool.exists() and shutil.which("node"), "run `npm ci` in src/aiprof/web/ui first (scripts/test.sh does)"
    out = tmp_path / "api-types.ts"
    subprocess.run([str(tool), str(UI / "openapi.json"), "-o", str(out)], cwd=UI, check=True, capture_output=True)
    assert out.read_text() == (UI / "src" / "lib" / "api-types.ts").read_text(), f"api-types.ts is stale: {REBUILD}"
