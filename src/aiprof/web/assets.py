"""The UI's files, a fixed table read from the package (aiprof/web/static) at start:
no request value is ever joined to a path. ``static/app.js`` is the bundle built from
``web/ui`` (``npm run build``), committed so that ``pip install`` needs no Node."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def load_assets() -> dict[str, bytes]:
    """The UI files shipped in the package, by file name."""
    out: dict[str, bytes] = {}
    for f in resources.files("aiprof.web").joinpath("static").iterdir():
        if f.is_file() and Path(f.name).suffix in TYPES:
            out[f.name] = f.read_bytes()
    return out


def read_asset(name: str) -> str:
    return resources.files("aiprof.web").joinpath("static").joinpath(name).read_text(encoding="utf-8")
