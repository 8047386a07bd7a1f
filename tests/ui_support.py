"""What the UI tests share: Chromium and its flags, Playwright (a module importing this
is skipped without them), the browser (its fixture and ``base``, the server, are in
conftest.py), a checked page, opening a
view, and the three Kineto profiles most pages are tested on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import import_paths

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

if not CHROMIUM.exists():
    pytest.skip("UI tests need Chromium at /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="UI tests need Playwright for Python (pip install playwright)"
)

#: The real traces the pages are drawn from: (path under ../shared/data, profile name).
KINETO_PROFILES = (
    ("kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "r0.aiprof"),
    ("kineto/V100/df_index_resolver.json.gz", "mem.aiprof"),
    ("kineto/A100-nccl-parser/nccl_data.json.gz", "nccl.aiprof"),
)


def import_kineto_profiles(shared_data: Path, root: Path) -> None:
    """Import :data:`KINETO_PROFILES` into ``root``."""
    for rel, name in KINETO_PROFILES:
        import_paths([shared_data / rel], root / name)


def launch_browser() -> Iterator[Any]:
    """Headless Chromium, for the ``browser`` fixture (tests/conftest.py)."""
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@contextmanager
def checked_page(browser: Any, base: str) -> Iterator[Any]:
    """A page that fails the test on a JavaScript error or a request outside the server."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    outside: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("request", lambda r: outside.append(r.url) if not r.url.startswith((base, "data:")) else None)
    yield pg
    ctx.close()
    assert not errors, errors
    assert not outside, f"the UI fetched from outside the server: {outside}"


def open_view(page: Any, base: str, pid: str, view: str) -> None:
    page.goto(f"{base}#/{pid}/{view}")
    page.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=60000)
