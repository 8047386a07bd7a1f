from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the repo: real profiler output (absent for outside users)."""
    if not SHARED.is_dir():
        pytest.skip("../shared/data is absent (it is present in CI and for the developers)")
    return SHARED


@pytest.fixture(scope="module")
def base(served: Path) -> Iterator[str]:
    """UI tests: a real ``aiprof serve`` of the module's ``served`` folder (its URL)."""
    from test_serve_support import running_server

    with running_server(served) as (url, _token):
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """UI tests: headless Chromium (tests/ui_support.py; skipped without it)."""
    from ui_support import launch_browser

    yield from launch_browser()
