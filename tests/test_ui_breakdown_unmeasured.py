"""The web UI says "not measured" where a recording lacks the breakdown's sources (no
operators, no device), never a bar of 0 or an idle device: real headless Chromium
against a real ``aiprof serve`` of two recordings of a small torch job made here (the
default mode and ``--ops``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from record_support import record
from test_breakdown_unmeasured import JOB
from ui_support import checked_page, open_view


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui-breakdown")
    for name, options in (("plain", ()), ("ops", ("--ops",))):
        rec = record(tmp_path_factory.mktemp(name), JOB, *options, args=("8", "2", "20")) / "rank0.aiprof"
        rec.rename(root / f"{name}.aiprof")
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def test_overview_of_a_default_recording_says_not_measured(page: Any, base: str, tmp_path: Path) -> None:
    open_view(page, base, "plain.aiprof", "overview")
    page.wait_for_selector("#breakdown-none")
    page.wait_for_selector("#steps-chart")
    page.screenshot(path=str(tmp_path / "overview-plain.png"), full_page=True)
    assert (
        page.locator("#breakdown-none")
        .inner_text()
        .startswith("Not measured in this profile: it has no operators or device work to split the step time by")
    )
    # No device bars (the device's busy share was a 0 bar, the steps' idle the whole step).
    assert page.locator("#util-table").count() == 0 and page.locator("#breakdown-table").count() == 0
    assert "No device activity recorded." in page.locator("main").inner_text()
    # The step chart draws the steps, not split, and says why.
    assert "Not split" in page.locator("#steps-chart-unsplit").inner_text()
    painted = page.evaluate(
        """() => { const c = document.getElementById('steps-chart'); const d = c.getContext('2d')
              .getImageData(0, 0, c.width, c.height).data; let n = 0;
              for (let i = 0; i < d.length; i += 4) if (d[i+3] > 0 && (d[i] < 200 || d[i+2] < 200)) n++; return n; }"""
    )
    assert painted > 500


def test_overview_of_an_ops_recording_names_the_device_categories(page: Any, base: str) -> None:
    open_view(page, base, "ops.aiprof", "overview")
    page.wait_for_selector("#breakdown-table")
    bars = page.locator("#breakdown-table").inner_text()
    assert "cpu_exec" in bars and "dataloader" in bars and "kernel" not in bars
    assert page.locator("#breakdown-unmeasured").inner_text() == (
        "Not measured in this profile, so left out: kernel, memcpy, memset."
    )
    assert page.locator("#util-table").count() == 0


def test_compare_names_the_figures_not_compared(page: Any, base: str, tmp_path: Path) -> None:
    open_view(page, base, "plain.aiprof", "compare")
    page.select_option("#cmp-b", "ops.aiprof")
    page.wait_for_selector("#cmp-not-measured")
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
    text = page.locator("#cmp-not-measured").inner_text()
    assert text.startswith("Not compared, not measured in A and B: kernel_us, memcpy_us, memset_us, device_busy_us")
    assert "; in A: communication_us, runtime_us, dataloader_us, cpu_exec_us, other_us." in text
    assert "exact Poisson test" in page.locator("#cmp-phase-rule").inner_text()
    verdicts = page.locator("#cmp-verdicts").inner_text()
    assert "idle_us" not in verdicts and "step_time_us" in verdicts
    # The breakdown table: A's cpu_exec is not measured, B's is.
    row = page.locator("#cmp-steps tr", has_text="cpu_exec").inner_text()
    assert "not measured" in row
