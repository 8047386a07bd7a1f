"""Two things the web UI now shows, in real Chromium against a real ``aiprof serve``:

- the rules that could not judge for lack of data (``not_judged``), per missing datum,
  on the Advice page (and counted on the Overview where there is no advice), as
  ``aiprof advise`` words them: on a telemetry-only capture (nvidia-smi dmon: no rule
  can fire) and on the V100 trace (advice, but no Python samples, collectives...);
- the timeline's first view: the extent of the events of the tracks it draws
  (0 .. 495.002392 ms on the V100 trace), not the whole span (from -95.3417 ms, where
  Kineto's hidden placeholder span starts, to its "Record Window End" at 502.5497 ms);
  on the same absolute axis, and a window named in the URL (the advice, steps and
  memory pages' "timeline" links) is still the one opened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aiprof.importers import import_paths
from test_cli import advise_doc
from ui_support import checked_page
from ui_support import open_view as _open

DMON = "nvidia-smi/dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt"
V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
SPAN = (-95_341_700, 502_549_700)
SHOWN = (0, 495_002_392)
SAMPLES = (
    "no Python stack samples in the profile (an imported trace has none; aiprof record takes them unless --no-python)"
)


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uinj")
    import_paths([shared_data / DMON], root / "dmon.aiprof")
    import_paths([shared_data / V100], root / "r0.aiprof")
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def _shown_groups(page: Any) -> list[dict[str, Any]]:
    return list(
        page.locator("#advice-not-judged li").evaluate_all(
            "ls => ls.map(l => ({missing: l.dataset.missing, rules: l.querySelector('.rules').textContent.split(', '),"
            " text: l.textContent}))"
        )
    )


def test_the_api_documents_not_judged(base: str, served: Path) -> None:
    doc = httpx.get(f"{base}api/v1/openapi.json", timeout=60).json()
    schemas = doc["components"]["schemas"]
    prop = schemas["AdviceResponse"]["properties"]["not_judged"]
    assert prop["items"]["$ref"].endswith("/NotJudged")
    assert set(schemas["NotJudged"]["required"]) == {"missing", "rules"}
    for pid in ("dmon.aiprof", "r0.aiprof"):
        api = httpx.get(f"{base}api/v1/profiles/{pid}/advice", timeout=120).json()
        assert api["not_judged"] == advise_doc(served / pid)["not_judged"] != []


def test_advice_page_lists_the_rules_that_could_not_judge(page: Any, base: str, served: Path) -> None:
    # No rule fired on a dmon capture: which data was missing, not "nothing stands out".
    cli = advise_doc(served / "dmon.aiprof")
    assert cli["advice"] == []
    n = sum(len(g["rules"]) for g in cli["not_judged"])
    _open(page, base, "dmon.aiprof", "advice")
    page.wait_for_selector("#advice-not-judged")
    assert page.locator("#advice .advice").count() == 0
    empty = page.locator("#advice .empty").inner_text()
    assert empty.startswith(
        "No advice: no rule fired on the data this profile holds: it has no trace events (it holds 300 rows of "
        "counters only). Record a trace with `aiprof record"
    )
    head = page.locator("#advice-not-judged summary").inner_text()
    assert head == f"Not judged · {n} rules could not judge for lack of data:"
    assert page.locator("#advice-not-judged").evaluate("d => d.open") is True
    shown = _shown_groups(page)
    assert [(g["missing"], g["rules"]) for g in shown] == [(g["missing"], g["rules"]) for g in cli["not_judged"]]
    # Each line as the CLI prints it: "- MISSING: rule, rule".
    assert (
        shown[0]["text"]
        == f"{SAMPLES}: python.data_loading, python.sync, python.logging, python.optimizer, python.preprocessing"
    )
    # The Overview's top advice counts them and points at the list.
    _open(page, base, "dmon.aiprof", "overview")
    page.wait_for_selector("#top-advice-none")
    assert page.locator("#top-advice-none").inner_text() == (
        f"No advice: no rule fired on the data this profile holds; {n} rules could not judge for lack of data "
        "(the Advice page lists them)."
    )
    # The V100 trace gives advice, and some rules still lacked their data: listed under it.
    cli = advise_doc(served / "r0.aiprof")
    assert cli["advice"] and cli["not_judged"]
    n = sum(len(g["rules"]) for g in cli["not_judged"])
    _open(page, base, "r0.aiprof", "advice")
    page.wait_for_selector("#advice-not-judged")
    assert page.locator("#advice .advice").count() == len(cli["advice"])
    assert page.locator("#advice-not-judged summary").inner_text() == (
        f"Not judged · {n} rules could not judge for lack of data:"
    )
    shown = _shown_groups(page)
    assert [(g["missing"], g["rules"]) for g in shown] == [(g["missing"], g["rules"]) for g in cli["not_judged"]]
    order = page.evaluate("[...document.querySelectorAll('#advice > *')].map(e => e.id || e.className.split(' ')[0])")
    assert order.index("advice-sum") < order.index("advice-not-judged") and order[0] == "advice"


def test_the_timeline_opens_at_the_drawn_events(page: Any, base: str) -> None:
    tl = "window.__aiprof.timeline"
    _open(page, base, "r0.aiprof", "timeline")
    page.wait_for_function("window.__aiprof.painted >= 1", timeout=60000)
    view = page.evaluate(f"({{t0: {tl}.view.t0, t1: {tl}.view.t1}})")
    assert (view["t0"], view["t1"]) == SHOWN
    page.wait_for_function(f"location.hash.includes('t0={SHOWN[0]}&t1={SHOWN[1]}')")
    # The first event sits at the left edge of the drawing, not 95 ms (16% of it) in.
    assert page.evaluate(f"{tl}.xOf({SHOWN[0]})") == 240  # LABEL_W: where the events start
    # Zoomed in, "0" goes back to the same first view.
    page.click("#tl-canvas", position={"x": 700, "y": 5})
    for _ in range(6):
        page.keyboard.press("w")
    page.wait_for_function(f"{tl}.view.t1 - {tl}.view.t0 < {(SHOWN[1] - SHOWN[0]) // 2}")
    page.keyboard.press("0")
    view = page.evaluate(f"({{t0: {tl}.view.t0, t1: {tl}.view.t1}})")
    assert (view["t0"], view["t1"]) == SHOWN
    # A window named in the URL is the one opened, on the same absolute axis, even one
    # reaching into the hidden start (what the "timeline" links of the other pages do).
    page.goto(f"{base}#/r0.aiprof/timeline?t0={SPAN[0]}&t1={SPAN[1]}")
    page.wait_for_function(f"window.__aiprof.ready === true && {tl} && {tl}.view.t0 === {SPAN[0]}", timeout=60000)
    assert page.evaluate(f"{tl}.view.t1") == SPAN[1]
    assert page.evaluate(f"{tl}.xOf(0)") > 240 + 0.15 * page.evaluate(f"{tl}.view.width")
    # What the page read: the track list's span and first view.
    tr = httpx.get(f"{base}api/v1/profiles/r0.aiprof/tracks", timeout=60).json()
    assert tr["span_ns"] == list(SPAN) and tr["shown_ns"] == list(SHOWN)
