from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the repo: real profiler output (absent for outside users)."""
    if not SHARED.is_dir():
        pytest.skip("../shared/data is absent (it is present in CI and for the developers)")
    return SHARED
