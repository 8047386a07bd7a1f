"""The Compare page says why a figure was not tested, in ``aiprof diff``'s words (the
API's ``note``), in real Chromium against a real ``aiprof serve``: too few steps on a
side; or, with steps enough, too few that did not wait for a CPU (the steady step), which
the page used to word as "Too few steps for a statistical test" or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis.gate import judge
from aiprof.analysis.regression import step_series
from aiprof.store import open_profile
from diff_builders import build_run
from ui_support import checked_page

N = 40


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uicmpnote")
    # Every step of "loaded" waited for a CPU; "quiet" never did; "short" has 3 steps.
    build_run(root / "loaded.aiprof", [1000.0 + i % 7 for i in range(N)], runq_us=[400.0] * N)
    build_run(root / "quiet.aiprof", [1010.0 + i % 5 for i in range(N)], runq_us=[0.0] * N)
    build_run(root / "short.aiprof", [1000.0, 1003.0, 998.0], runq_us=[0.0] * 3)
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def _note(served: Path, a: str, b: str) -> str | None:
    with open_profile(served / a) as pa, open_profile(served / b) as pb:
        return judge(step_series([pa]), step_series([pb]), [])["note"]


@pytest.mark.parametrize(
    ("b", "starts"),
    [
        ("quiet.aiprof", f"steady_step_us not tested: too few steps that did not wait for a CPU (0 in A, {N - 1} in B"),
        ("short.aiprof", "too few steps for a statistical test (fewer than 4 on a side"),
    ],
)
def test_the_compare_page_says_why_a_figure_was_not_tested(
    page: Any, base: str, served: Path, b: str, starts: str
) -> None:
    note = _note(served, "loaded.aiprof", b)
    assert note is not None and note.startswith(starts), note
    page.goto(f"{base}#/loaded.aiprof/compare?a=loaded.aiprof&b={b}")
    page.wait_for_selector("#cmp-verdicts")
    assert page.locator("#cmp-note").inner_text() == note[0].upper() + note[1:] + "."
