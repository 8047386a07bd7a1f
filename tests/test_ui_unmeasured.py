"""The Steps page says "not measured" where the profile did not measure a phase (never a
zero), and the timeline draws no track for Kineto's placeholder processes: real
headless Chromium against a real ``aiprof serve`` of the real V100 trace and of a
recording made here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.analysis.phases import PHASES
from aiprof.importers import import_paths
from aiprof.store import open_profile
from record_support import record
from test_steps_unmeasured import MARKED_JOB, V100
from ui_support import checked_page, open_view

PHASE_COLS = [f"{p}_us" for p in PHASES]


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-unmeasured")
    import_paths([shared_data / V100], root / "r0.aiprof")
    rec = record(tmp_path_factory.mktemp("marked"), MARKED_JOB) / "rank0.aiprof"
    rec.rename(root / "rec.aiprof")
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        pg.set_viewport_size({"width": 1440, "height": 900})
        yield pg


def test_steps_page_names_the_phases_not_measured_apart_from_the_zeros(page: Any, base: str, tmp_path: Path) -> None:
    open_view(page, base, "r0.aiprof", "steps")
    page.wait_for_selector("table.data tbody tr")
    page.screenshot(path=str(tmp_path / "steps-v100.png"))
    assert page.locator("table.data tbody tr").count() == 5
    for c in PHASE_COLS:
        assert page.locator(f"th[data-col={c}]").count() == 0
    unmeasured = page.locator(".hidden-cols .unmeasured-cols")
    assert unmeasured.inner_text().strip() == (
        "Not measured in this profile, so left out: " + ", ".join(PHASE_COLS) + "."
    )
    assert unmeasured.get_attribute("title") == "not measured in this profile"
    zero = page.locator(".hidden-cols .zero-cols").inner_text()
    assert zero.startswith("Zero on every row shown, so left out: ") and "dataloader_us" in zero
    assert not any(c in zero for c in PHASE_COLS)
    # Every cell shown is a measured figure.
    assert page.locator("td.unmeasured").count() == 0 and page.locator(".unmeasured-key").count() == 0


def test_steps_page_shows_a_dash_where_a_step_has_no_sample(page: Any, base: str, served: Path, tmp_path: Path) -> None:
    with open_profile(served / "rec.aiprof") as p:
        rows = {r["step"]: r for r in run(p, "steps").rows}
    open_view(page, base, "rec.aiprof", "steps")
    page.wait_for_selector("table.data tbody tr")
    page.screenshot(path=str(tmp_path / "steps-recorded.png"))
    cols = page.evaluate("[...document.querySelectorAll('table.data thead th')].map(th => th.dataset.col || '')")
    assert "forward_us" in cols and "other_python_us" in cols
    cells = page.evaluate(
        """(cols) => [...document.querySelectorAll('table.data tbody tr')].map(tr => {
             const td = [...tr.children];
             return { step: td[cols.indexOf('step')].getAttribute('title'),
                      fwd: [td[cols.indexOf('forward_us')].textContent, td[cols.indexOf('forward_us')].getAttribute('title'),
                            td[cols.indexOf('forward_us')].className] }; })""",
        cols,
    )
    assert len(cells) == 16
    dashes = 0
    for c in cells:
        want = rows[int(c["step"])]["forward_us"]
        if want is None:
            assert c["fwd"] == ["—", "not measured in this profile", "num unmeasured"], c
            dashes += 1
        else:
            assert want == 0.0 and c["fwd"][0] == "0" and c["fwd"][1] == "0", c  # a measured zero
    assert dashes >= 1 and dashes <= 8
    assert page.locator(".unmeasured-key").inner_text() == "— not measured in this profile."


def test_timeline_draws_no_track_for_kinetos_placeholders(page: Any, base: str, tmp_path: Path) -> None:
    open_view(page, base, "r0.aiprof", "timeline")
    page.wait_for_function("window.__aiprof.painted >= 1", timeout=60000)
    page.screenshot(path=str(tmp_path / "timeline-v100.png"))
    tl = "window.__aiprof.timeline"
    names = page.evaluate(f"{tl}.tracks.map(t => t.name)")
    assert names == [
        "pid 1102 / thread -247463936",
        "pid 1102 / thread 1102 (pt_main_thread)",
        "pid 1102 / thread 1262 (pt_autograd_0)",
        "CUDA 0 stream 7",
    ]
    titles = [r["title"] for r in page.evaluate(f"{tl}.rows")]
    assert not [t for t in titles if t.startswith(("Spans", "Traces", "process 4294967299"))], titles
    assert "stream 7" in titles and "thread 1102 (pt_main_thread)" in titles
