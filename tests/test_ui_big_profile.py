"""A big profile's advice and operators in the web UI and the HTML report (issue 18):
past analysis.operators.big_profile's bound they take minutes and GiBs, so the overview
and the Advice page say so and compute the advice when the user asks (a real ``aiprof
serve`` and Chromium), and the HTML report leaves both out saying why. The bound is
lowered here with ``AIPROF_BIG_PROFILE_SPANS`` on a real rank of 3,606 host spans."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ui_support import checked_page, open_view

RANK = "kineto/sampled-128-ranks/sampled_rank-0.json.gz"
MEM = "kineto/V100/df_index_resolver.json.gz"  # allocator records (101,088 host spans)
PID = "api"
PID_UI = "ui"  # the same profile, its advice first asked for by the pages
PID_MEM = "mem"  # its operators and allocations asked for by the API
PID_MEM_UI = "memui"  # the same profile, its allocations first asked for by the memory page


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("big")
    # Two folders of each: one rank-0 profile each (two in one folder would be a job's ranks).
    for rel, (first, second) in ((RANK, ("api", "ui")), (MEM, ("mem", "memui"))):
        _cli("import", str(shared_data / rel), "-o", str(root / first / "rank0.aiprof"))
        shutil.copytree(root / first, root / second)
    with pytest.MonkeyPatch.context() as mp:  # the server (the base fixture) starts with it
        mp.setenv("AIPROF_BIG_PROFILE_SPANS", "1000")
        yield root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def _cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "aiprof", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _cli_advice(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_cli("advise", str(path), "--format", "json"))
    return doc


def test_the_api_defers_a_big_profiles_advice_until_asked(base: str, served: Path) -> None:
    ids = [p["id"] for p in httpx.get(f"{base}api/v1/profiles", timeout=60).json()["profiles"]]
    assert sorted(ids) == sorted([PID, PID_MEM, PID_MEM_UI, PID_UI])
    url = f"{base}api/v1/profiles/{PID}/advice"
    first = httpx.get(url, timeout=60)
    assert first.status_code == 200 and first.headers["cache-control"] == "no-store"
    doc = first.json()
    assert doc["available"] is False and doc["deferred"] is True and doc["advice"] == []
    assert "(3,606 host spans)" in doc["reason"] and "Advice page" in doc["reason"]
    # Not kept: asked again, it is computed again (still deferred), not sent from kept bytes.
    again = httpx.get(url, timeout=60)
    assert again.json() == doc and "x-aiprof-answer" not in again.headers
    computed = httpx.get(url, params={"compute": "true"}, timeout=600).json()
    cli = _cli_advice(served / "api" / "rank0.aiprof")
    assert computed.pop("available") is True and "deferred" not in computed
    assert computed == cli and cli["advice"]
    # Once computed, the plain address answers it.
    after = httpx.get(url, timeout=60).json()
    assert after["available"] is True and len(after["advice"]) == len(cli["advice"])


def test_the_pages_say_so_and_compute_the_advice_when_asked(page: Any, base: str, served: Path) -> None:
    open_view(page, base, PID_UI, "overview")
    page.wait_for_selector("text=Not computed yet", timeout=60_000)
    assert "3,606 host spans" in page.inner_text("body")
    page.click("a.advice-link:has-text('Compute it on the Advice page')")
    page.wait_for_selector("#advice-compute", timeout=60_000)
    assert "minutes and GiBs" in page.locator("#advice-deferred").inner_text()
    page.click("#advice-compute")
    page.wait_for_selector("#advice .advice", timeout=600_000)
    cli = _cli_advice(served / "ui" / "rank0.aiprof")
    cards = page.locator("#advice .advice")
    assert cards.count() == len(cli["advice"]) > 0
    assert [cards.nth(i).get_attribute("data-rule") for i in range(cards.count())] == [a["rule"] for a in cli["advice"]]
    # The overview now shows the computed advice.
    open_view(page, base, PID_UI, "overview")
    page.wait_for_selector("a.advice-link:has-text('Advice page')", timeout=60_000)
    assert "Not computed yet" not in page.inner_text("body")


def test_the_html_report_leaves_out_the_advice_and_operators(
    served: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiprof.render.html import REPORT_ID, report_data
    from aiprof.store import open_profile

    with open_profile(served / "api" / "rank0.aiprof") as p:
        monkeypatch.delenv("AIPROF_BIG_PROFILE_SPANS")
        whole = report_data(p)
        monkeypatch.setenv("AIPROF_BIG_PROFILE_SPANS", "1000")
        bounded = report_data(p)
    base = f"/profiles/{REPORT_ID}"
    assert whole[f"{base}/advice"]["available"] is True and whole[f"{base}/advice"]["advice"]
    assert whole[f"{base}/views/operators"]["rows"]
    advice, ops = bounded[f"{base}/advice"], bounded[f"{base}/views/operators"]
    assert advice["available"] is False and advice["deferred"] is False
    assert "aiprof advise PROFILE computes it" in advice["reason"] and "3,606 host spans" in advice["reason"]
    assert ops["rows"] == [] and "--view operators" in ops["error"]
    allocs = bounded[f"{base}/views/allocations"]
    assert allocs["rows"] == [] and "--view allocations" in allocs["error"]
    # Everything else is the same report.
    left = {f"{base}/advice", f"{base}/views/operators", f"{base}/views/allocations"}
    same = set(whole) - left - {"__generated"}
    assert {k: bounded[k] for k in same} == {k: whole[k] for k in same}


@pytest.mark.parametrize(
    "rel",
    [
        RANK,
        "kineto/V100/df_index_resolver.json.gz",  # allocator records, and its timeline kept at import
        "kineto/cupti-counters/benchmark_result_924719_1679055439_trace.json.gz",
        "nvidia-smi/dmon_pucvmet_DT_idle.txt",  # counters only
    ],
)
def test_describing_a_profile_does_not_index_its_timeline(shared_data: Path, tmp_path: Path, rel: str) -> None:
    """The metadata's span is the timeline's (store/spans.py's rule in one query), without
    building the timeline's index of every event, unless the profile keeps it."""
    from aiprof.importers import import_paths
    from aiprof.store import open_profile
    from aiprof.web.routes import describe
    from aiprof.web.timeline import Timeline
    from aiprof.web.timeline_store import FOLDER

    path, _ = import_paths([shared_data / rel], tmp_path / "p.aiprof")
    with open_profile(path) as p:
        tl = Timeline(p)
        got = describe(p, "p", "p", tl)["span_ns"]
        kept = (path / FOLDER).is_dir()
        assert tl.built == kept
        fresh = Timeline(p)
        fresh.build()
        assert got == list(fresh.span) and got[1] > got[0]


def test_the_html_report_pages_say_what_was_left_out(browser: Any, served: Path, tmp_path: Path) -> None:
    from aiprof.render.html import write_report
    from aiprof.store import open_profile

    with open_profile(served / "api" / "rank0.aiprof") as p:  # the bound is lowered (served)
        out = write_report(p, tmp_path / "report.html")
    url = out.resolve().as_uri()
    with checked_page(browser, "file://") as pg:
        pg.goto(url + "#/report/overview")
        pg.wait_for_selector("text=aiprof advise PROFILE computes it", timeout=60_000)
        assert "3,606 host spans" in pg.inner_text("body")
        assert pg.locator("#advice-compute").count() == 0  # no server to ask
        pg.goto(url + "#/report/operators")
        pg.wait_for_selector("text=--view operators computes it", timeout=60_000)


def _report_json(path: Path, view: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_cli("report", str(path), "--view", view, "--format", "json"))
    return doc


@pytest.mark.parametrize("view", ["operators", "allocations"])
def test_the_api_defers_the_views_that_nest_every_host_span(base: str, served: Path, view: str) -> None:
    url = f"{base}api/v1/profiles/{PID_MEM}/views/{view}"
    first = httpx.get(url, params={"limit": 5}, timeout=60)
    assert first.status_code == 200 and first.headers["cache-control"] == "no-store"
    doc = first.json()
    assert doc["deferred"] is True and doc["rows"] == [] and doc["total"] == 0
    assert "(101,088 host spans)" in doc["reason"] and f"--view {view}" in doc["reason"]
    assert httpx.post(url, json={"limit": 5}, timeout=60).json()["deferred"] is True
    # A view that does not nest host spans answers at once.
    kernels = httpx.get(f"{base}api/v1/profiles/{PID_MEM}/views/kernels", timeout=60).json()
    assert "deferred" not in kernels and kernels["rows"]
    computed = httpx.get(url, params={"limit": 5, "compute": "true"}, timeout=600).json()
    cli = _report_json(served / "mem" / "rank0.aiprof", view)  # the CLI computes what it is asked
    assert "deferred" not in computed and computed["total"] == cli["total"] > 0
    assert computed["rows"] == cli["rows"][:5]
    # Once computed it is kept: the plain address pages it (POST too).
    after = httpx.post(url, json={"limit": 3, "offset": 2}, timeout=60).json()
    assert "deferred" not in after and after["rows"] == cli["rows"][2:5]


def test_the_operators_page_computes_its_table_when_asked(page: Any, base: str, served: Path) -> None:
    open_view(page, base, PID_UI, "operators")
    page.wait_for_selector(".view-deferred", timeout=60_000)
    assert "3,606 host spans" in page.locator(".view-deferred").inner_text()
    assert page.locator("table.data tbody tr").count() == 0
    # Nothing to filter or export yet (an export would be an empty file).
    for sel in ("button.export-csv", "button.export-json", "input[aria-label=filters]"):
        assert page.locator(sel).is_disabled(), sel
    page.click("button.view-compute")
    page.wait_for_selector("table.data tbody tr", timeout=600_000)
    cli = _report_json(served / "ui" / "rank0.aiprof", "operators")
    info = page.locator(".pageinfo")
    assert info.get_attribute("data-total") == str(cli["total"])
    names = page.locator("table.data tbody tr td[title]").all_inner_texts()
    assert cli["rows"][0]["name"] in names
    # Computed: the export holds every row of the view.
    assert page.locator("button.export-csv").is_enabled()
    with page.expect_download() as d:
        page.click("button.export-csv")
    lines = Path(d.value.path()).read_text().splitlines()
    assert len(lines) == 1 + min(cli["total"], 10_000)
    assert cli["rows"][0]["name"].replace('"', '""') in lines[1]
    # The next page is asked for the same way (kept now): no notice again.
    page.click("text=next ›")
    page.wait_for_function("document.querySelector('.pageinfo').textContent.startsWith('rows 51')", timeout=60_000)
    assert page.locator(".view-deferred").count() == 0


def test_the_memory_page_lists_the_live_allocations_when_asked(page: Any, base: str, served: Path) -> None:
    from aiprof.analysis import Query, run
    from aiprof.store import open_profile

    open_view(page, base, PID_MEM_UI, "memory")
    page.wait_for_selector("#mem-chart", timeout=60_000)  # the curves come at once
    page.wait_for_selector("#live-deferred", timeout=60_000)
    assert "101,088 host spans" in page.locator("#live-deferred").first.inner_text()
    assert page.locator(".table[data-view=allocations] .view-deferred").count() == 1
    page.locator("#live-compute").first.click()
    page.wait_for_selector("#live-at-peak table.data tbody tr", timeout=600_000)
    with open_profile(served / "memui" / "rank0.aiprof") as p:
        live = run(p, "allocations", Query.parse(["live_at_peak=true", "device_type!=cpu"], [], None, 0)).rows
        total = run(p, "allocations", Query()).total
    held = [t for t in page.locator(".live-at-peak .muted.small").all_inner_texts() if " blocks hold " in t]
    assert len(held) == page.locator(".mem-device").count() >= 1  # one line per device
    assert sum(int(t.split(" blocks hold ")[0].replace(",", "")) for t in held) == len(live) > 0
    # The page drawn again: the largest allocations' table has its rows too.
    page.wait_for_function(
        f"document.querySelector('.table[data-view=allocations] .pageinfo').dataset.total === '{total}'",
        timeout=60_000,
    )
    assert page.locator(".view-deferred").count() == 0


def test_the_html_reports_memory_page_says_the_live_allocations_were_left_out(
    browser: Any, served: Path, tmp_path: Path
) -> None:
    from aiprof.render.html import write_report
    from aiprof.store import open_profile

    with open_profile(served / "mem" / "rank0.aiprof") as p:  # the bound is lowered (served)
        out = write_report(p, tmp_path / "report.html")
    with checked_page(browser, "file://") as pg:
        pg.goto(out.resolve().as_uri() + "#/report/memory")
        pg.wait_for_selector("#mem-chart", timeout=60_000)
        pg.wait_for_selector("#live-deferred", timeout=60_000)
        assert "--view allocations computes it" in pg.locator("#live-deferred").first.inner_text()
        assert pg.locator("#live-compute").count() == 0  # no server to ask
        assert pg.locator("#live-at-peak table").count() == 0
