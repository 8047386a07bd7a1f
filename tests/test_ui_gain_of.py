"""The web UI says what the advice's gains are shares of, as ``aiprof advise`` does
(``gain_of``): "profiled time" for a profile without steps. On the Nsight Systems
vecadd report (no steps; context creation takes nearly all of the run) the Advice
page's cards and the Overview's top advice said "% of step time", in real Chromium
against a real ``aiprof serve``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import import_paths
from test_cli import advise_doc
from ui_support import checked_page
from ui_support import open_view as _open

NSYS = "nsys/nsys_2022.4_vecadd_streams_T4_report1.sqlite"


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uigain")
    import_paths([shared_data / NSYS], root / "vecadd.aiprof")
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def test_the_gains_are_shares_of_the_profiled_time_without_steps(page: Any, base: str, served: Path) -> None:
    cli = advise_doc(served / "vecadd.aiprof")
    assert cli["gain_of"] == "profiled time"
    top = cli["advice"][0]
    assert top["rule"] == "runtime.context_init" and top["gain_pct"] > 90
    _open(page, base, "vecadd.aiprof", "advice")
    page.wait_for_selector("#advice-sum")
    card = page.locator(f'#advice .advice[data-rule="{top["rule"]}"]')
    assert card.locator(".gain").get_attribute("title") == f"expected gain: {top['gain_pct']}% of profiled time"
    assert (
        page.locator("#advice-sum")
        .inner_text()
        .startswith(f"Sum of the gains: {cli['gain_sum_pct']:.1f}% of profiled time")
    )
    _open(page, base, "vecadd.aiprof", "overview")
    page.wait_for_selector("#top-advice .advice")
    line = page.locator("#top-advice .advice .t").first.inner_text()
    assert line.endswith(" of profiled time") and "step time" not in line, line
