"""The advice, SQL and export parts of the web UI in real Chromium, against a real
``aiprof serve``: the advice page shows exactly what ``aiprof advise --format json``
prints on every capture in ../shared/data (each imported with the CLI here); tables,
query results and the timeline window download and parse; the SQL page refuses writes
and stops a query at its time limit, saying so."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from test_all_formats import CAPTURES
from ui_support import checked_page
from ui_support import open_view as _open

#: Every capture of test_all_formats, and the two Kineto traces it leaves out.
TRACES = sorted([*CAPTURES, "kineto/V100/df_index_resolver.json.gz", "kineto/sampled-128-ranks/sampled_rank-1.json.gz"])


def _pid(rel: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", rel).strip("_") + ".aiprof"


def _cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "aiprof", *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui2")
    for rel in TRACES:
        _cli("import", str(shared_data / rel), "-o", str(root / _pid(rel)))
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def _download(pg: Any, selector: str) -> bytes:
    with pg.expect_download() as d:
        pg.click(selector)
    return Path(d.value.path()).read_bytes()


def test_advice_page_equals_the_cli_on_every_capture(page: Any, base: str, served: Path) -> None:
    fired = 0
    for rel in TRACES:
        pid = _pid(rel)
        cli = json.loads(_cli("advise", str(served / pid), "--format", "json"))
        _open(page, base, pid, "advice")
        # The page's JSON download is the CLI's document, item for item.
        doc = json.loads(_download(page, ".pagehead .export-json"))
        assert doc.pop("available") is True
        assert doc == cli, rel
        # What the page shows: the same items, order, severities and gains...
        cards = page.locator("#advice .advice")
        assert cards.count() == len(cli["advice"]), rel
        for i, a in enumerate(cli["advice"]):
            c = cards.nth(i)
            assert c.get_attribute("data-rule") == a["rule"]
            assert c.locator(".sev").inner_text().lower() == a["severity"]
            assert c.locator(".gain-pct").inner_text() == f"{a['gain_pct']:.1f}%"
            width = c.locator(".gainbar i").evaluate("e => parseFloat(e.style.width)")
            assert width == pytest.approx(min(100.0, a["gain_pct"]), abs=0.01)
            # ...the evidence as a table (a row per number, in units, not raw JSON)...
            keys = c.locator("table.evidence tbody tr").evaluate_all("rs => rs.map(r => r.dataset.key)")
            assert keys == list(a["evidence"]), (rel, a["rule"])
            assert "{" not in c.locator("table.evidence").inner_text()
            # ...and the fix with each snippet.
            assert a["fix"] in c.locator(".fix").inner_text()
            names = c.locator(".snippet").evaluate_all("s => s.map(x => x.dataset.name)")
            assert names == list(a["snippets"])
            for name, code in a["snippets"].items():
                assert c.locator(f".snippet[data-name={name}] pre").inner_text() == code
        if not cli["advice"]:
            assert "No advice" in page.locator("#advice .empty").inner_text()
        # ...and under them the rules that could not judge, per missing datum, as the CLI lists them.
        shown = page.locator("#advice-not-judged li").evaluate_all(
            "ls => ls.map(l => [l.dataset.missing, l.querySelector('.rules').textContent])"
        )
        assert shown == [[g["missing"], ", ".join(g["rules"])] for g in cli["not_judged"]], rel
        fired += len(cli["advice"])
    assert fired >= 30


def test_evidence_units_copy_and_show_on_timeline(page: Any, base: str, served: Path, tmp_path: Path) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    pid = _pid("kineto/V100/df_index_resolver.json.gz")
    _open(page, base, pid, "advice")
    host = page.locator(".advice[data-rule='kernels.host_wait']")
    # µs become ms / s, percentages get %, counts stay plain.
    assert re.fullmatch(r"[\d.]+ (ms|s)", host.locator("tr[data-key=device_idle_us] td.num").inner_text())
    assert host.locator("tr[data-key=device_idle_pct] td.num").inner_text().endswith(" %")
    assert host.locator("tr[data-key=busiest_stream] td.num").inner_text() == "7"
    host.locator(".snippet .copy").first.click()
    page.wait_for_function("document.querySelector('.advice .snippet .copy').textContent === 'copied'")
    code = host.locator(".snippet pre").first.inner_text()
    assert page.evaluate("navigator.clipboard.readText()") == code
    page.set_viewport_size({"width": 1440, "height": 900})
    page.screenshot(path=str(tmp_path / "advice-1440.png"), full_page=True)
    # The items under 1% of step time show when asked (aiprof advise --all): msprof's
    # first step is its warm-up, an info note naming the step...
    pid = _pid("ascend/msprof-PROF_000001")
    _open(page, base, pid, "advice")
    assert page.locator(".advice[data-rule='steps.warmup']").count() == 0
    cli = json.loads(_cli("advise", str(served / pid), "--all", "--format", "json"))
    page.click("#advice-all")
    page.wait_for_selector(".advice[data-rule='steps.warmup']")
    shown = page.locator("#advice .advice").evaluate_all("cs => cs.map(c => c.dataset.rule)")
    assert shown == [a["rule"] for a in cli["advice"]] and "steps.warmup" in shown
    # ...and a step named in the evidence opens on the timeline, selected.
    out = page.locator(".advice[data-rule='steps.warmup']")
    assert out.locator("tr[data-key=step] td.num, tr[data-key=step] td").nth(1).inner_text() == str(
        next(a for a in cli["advice"] if a["rule"] == "steps.warmup")["evidence"]["step"]
    )
    out.locator("tr[data-key=step] button.show-tl").click()
    page.wait_for_function("location.hash.includes('/timeline') && location.hash.includes('sel=')", timeout=60000)


def test_table_exports_parse(page: Any, base: str) -> None:
    pid = _pid("kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    _open(page, base, pid, "kernels")
    page.fill(".tablebar input", "name~gemm")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('.pageinfo').textContent.includes('of')")
    api = httpx.get(
        f"{base}api/v1/profiles/{pid}/views/kernels", params={"filter": "name~gemm", "limit": 10000}, timeout=60
    ).json()
    doc = json.loads(_download(page, ".table .export-json"))
    assert doc["rows"] == api["rows"] and doc["total"] == api["total"] > 0
    assert [c["name"] for c in doc["columns"]] == [c["name"] for c in api["columns"]]
    rows = list(csv.DictReader(io.StringIO(_download(page, ".table .export-csv").decode())))
    assert len(rows) == api["total"]
    assert [r["name"] for r in rows] == [r["name"] for r in api["rows"]]
    assert [float(r["total_us"]) for r in rows] == pytest.approx([r["total_us"] for r in api["rows"]])


def test_timeline_window_exports_as_a_chrome_trace(page: Any, base: str) -> None:
    pid = _pid("kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    span = httpx.get(f"{base}api/v1/profiles/{pid}", timeout=60).json()["span_ns"]
    t0 = span[0] + (span[1] - span[0]) // 2
    t1 = t0 + 20_000_000
    _open(page, base, pid, f"timeline?t0={t0}&t1={t1}")
    page.wait_for_function("window.__aiprof.painted > 0", timeout=60000)
    url_t = page.evaluate("[...location.hash.matchAll(/t[01]=(-?\\d+)/g)].map(m => Number(m[1]))")
    doc = json.loads(_download(page, "a.button:text('Export trace')"))
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert len(spans) > 100
    lo, hi = url_t[0] - 1, url_t[1] + 1
    assert all(e["ts"] * 1000 <= hi and (e["ts"] + e["dur"]) * 1000 >= lo for e in spans)
    assert any(e.get("aiprof_kind") == "kernel" for e in spans)


def test_sql_page_queries_exports_and_refuses_writes(page: Any, base: str, tmp_path: Path) -> None:
    pid = _pid("kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    _open(page, base, pid, "sql")
    page.wait_for_selector("#sql-schema .sql-table[data-table=kernel_metrics]")
    page.wait_for_function("document.getElementById('sql-status').dataset.total")
    page.fill("#sql-query", "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY n DESC")
    with page.expect_response(re.compile(r"/sql$")):
        page.click("#sql-run")
    page.wait_for_function("document.getElementById('sql-status').dataset.total === '9'")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.screenshot(path=str(tmp_path / "sql-1440.png"))
    got = list(csv.DictReader(io.StringIO(_download(page, ".sql-main .export-csv").decode())))
    assert got[0] == {"kind": "cpu_op", "n": "23910"} and len(got) == 9
    doc = json.loads(_download(page, ".sql-main .export-json"))
    assert doc["rows"][0] == {"kind": "cpu_op", "n": 23910} and doc["truncated"] is False
    assert [c["type"] for c in doc["columns"]] == ["VARCHAR", "BIGINT"]
    # Writes are refused with the statement named; the profile is unchanged.
    for query, kind in (
        ("DROP VIEW events", "DROP"),
        (f"COPY (SELECT * FROM events) TO '{tmp_path / 'out.csv'}'", "COPY"),
        (f"ATTACH '{tmp_path / 'x.duckdb'}' AS x", "ATTACH"),
    ):
        page.fill("#sql-query", query)
        page.click("#sql-run")
        page.wait_for_function("document.getElementById('sql-error').textContent.length > 0")
        assert page.locator("#sql-error").inner_text() == (
            f"refused: {kind} statements are not allowed here; the profile is read-only (SELECT only)"
        )
        assert page.locator("#sql-result").inner_text() == ""
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "x.duckdb").exists()
    # A query past its time limit is stopped, and the page says so.
    page.fill("#sql-timeout", "1")
    page.fill("#sql-query", "SELECT count(*) FROM range(100000000000) a, range(1000) b WHERE a.range % 7 = b.range")
    page.click("#sql-run")
    page.wait_for_function("document.getElementById('sql-error').textContent.startsWith('Stopped')", timeout=30000)
    assert "ran past its time limit (1 s) and was stopped" in page.locator("#sql-error").inner_text()
    page.set_viewport_size({"width": 1000, "height": 700})
    page.screenshot(path=str(tmp_path / "sql-timeout-1000.png"))
    # The server still answers, with the profile as it was.
    page.fill("#sql-query", "SELECT count(*) AS n FROM events")
    page.click("#sql-run")
    page.wait_for_function("document.getElementById('sql-status').dataset.total === '1'")
    assert page.locator("#sql-result td").inner_text() == "68,656"
