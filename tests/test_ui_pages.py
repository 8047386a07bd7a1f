"""The overview and memory pages, the one-file report, and every page of every real
profile in ../shared/data, in real headless Chromium against a real ``aiprof serve``."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ui_support  # noqa: F401 (skips without Chromium and Playwright)
from aiprof.analysis import Query, run
from aiprof.cli.overview import _DEVICE_FIGURE, ACTIVE_SPAN_NOTE
from aiprof.importers import import_paths
from aiprof.store import open_profile
from kineto_builders import span, write_trace
from test_all_formats import CAPTURES

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
MEM = "kineto/V100/df_index_resolver.json.gz"
GIB = 1024**3
#: A number printed as 1.42e-11 (the UI writes 1.42×10⁻¹¹ or uses a unit prefix).
EXPONENT = re.compile(r"\b\d+(\.\d+)?e[-+]?\d+\b")


def _slug(rel: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", rel).strip("_") + ".aiprof"


def _bytes_only(src: Path, dst: Path) -> Path:
    """The real V100 memory trace with its allocator totals taken out: its [memory]
    events keep only Bytes, as tb-profiler's ResNet50 sample has them."""
    doc = json.loads(gzip.open(src).read())
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            for k in ("Total Allocated", "Total Reserved"):
                e.get("args", {}).pop(k, None)
    dst.write_text(json.dumps(doc))
    return dst


def _mtia(path: Path) -> Path:
    evs: list[dict[str, Any]] = []
    for i in range(2):
        t0 = 1000.0 * i
        evs.append(span(f"ProfilerStep#{i + 1}", "user_annotation", t0, 1000))
        for d in (0, 1):
            corr = 10 * i + d + 1
            evs.append(span("mtiaLaunchKernel", "runtime", t0 + 10 + d, 10, correlation=corr))
            evs.append(span("fused_mm", "mtia_ccp_events", t0 + 50, 600, pid=d, tid=7, correlation=corr, device=d))
    return write_trace(path, evs)


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pages")
    for rel in [*sorted(CAPTURES), MEM]:
        import_paths([shared_data / rel], root / _slug(rel))
    src = tmp_path_factory.mktemp("src")
    import_paths([_bytes_only(shared_data / MEM, src / "bytes_only.json")], root / "bytes_only.aiprof")
    import_paths([_mtia(src / "mtia.json")], root / "mtia.aiprof")
    return root


class Watch:
    """Console errors, page errors, failed and outside requests of one page."""

    def __init__(self, pg: Any, base: str) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        pg.on("pageerror", lambda e: self.errors.append(str(e)))
        pg.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        pg.on("request", lambda r: self.requests.append(r.url))
        pg.on("response", lambda r: self.errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.base = base

    def check(self) -> None:
        assert not self.errors, self.errors
        outside = [u for u in self.requests if not u.startswith((self.base, "data:", "file:"))]
        assert not outside, outside
        assert not [u for u in self.requests if "=null" in u or "=undefined" in u or "=NaN" in u]


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[tuple[Any, Watch]]:
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = ctx.new_page()
    w = Watch(pg, base)
    yield pg, w
    ctx.close()
    w.check()


def _open(pg: Any, base: str, pid: str, view: str) -> None:
    pg.goto(f"{base}#/{pid}/{view}")
    pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=60000)


def _download(pg: Any, selector: str) -> bytes:
    with pg.expect_download() as d:
        pg.click(selector)
    return Path(d.value.path()).read_bytes()


def _fmt_gib(b: int) -> str:
    return f"{b / GIB:.2f} GiB"


def test_memory_page_on_a_bytes_only_trace_shows_its_peak(page: tuple[Any, Watch], base: str, served: Path) -> None:
    pg, _ = page
    with open_profile(served / "bytes_only.aiprof") as prof:
        mem = [r for r in run(prof, "memory").rows if r["device_type"] == "cuda"]
        live = run(prof, "allocations", Query.parse(["live_at_peak=true", "device_type=cuda"], ["-bytes"])).rows
    peak = mem[0]["peak_allocated_bytes"]
    assert 2 * GIB < peak < 3 * GIB  # a real peak, not the flat 0-1 B of a trace read without totals
    assert sum(r["bytes"] for r in live) == peak  # every byte of the peak was allocated in the trace
    _open(pg, base, "bytes_only.aiprof", "memory")
    pg.wait_for_selector("#mem-chart")
    assert pg.locator("#mem-peak .v").inner_text() == _fmt_gib(peak)
    assert int(pg.locator("#mem-chart").get_attribute("data-peak")) == peak
    assert "derived from the running sum" in pg.locator("#mem-derived").inner_text()
    # Reserved is not in the trace: said, not drawn as a 0 or -1 B line.
    assert "not recorded" in pg.locator(".mem-device .cards").inner_text()
    assert "reserved" not in pg.locator(".mem-device .legend").inner_text()
    box = pg.locator("#live-at-peak").inner_text()
    assert f"{len(live):,} blocks hold {_fmt_gib(peak)}" in box
    first = pg.locator("#live-at-peak tbody tr").first.locator("td")
    assert first.nth(0).get_attribute("title") == str(live[0]["bytes"])
    assert first.nth(2).inner_text() == live[0]["operator"] != "(no operator)"
    assert live[0]["operator"] in first.nth(5).inner_text()  # the call stack ends in the operator
    # The table downloads: JSON holds every live block, CSV the rows shown, as shown.
    blocks = json.loads(_download(pg, "#live-at-peak .export-json"))
    assert len(blocks) == len(live) and sum(int(b["bytes"]) for b in blocks) == peak
    shown = list(csv.DictReader(io.StringIO(_download(pg, "#live-at-peak .export-csv").decode())))
    assert shown[0]["size"] == first.nth(0).inner_text() and shown[0]["operator"] == live[0]["operator"]
    # The largest allocations, from the same view, largest first.
    pg.wait_for_selector(".table[data-view=allocations] tbody tr")
    sizes = pg.evaluate(
        """[...document.querySelectorAll('.table[data-view=allocations] tbody tr')]
             .map(tr => Number(tr.querySelector('td[title]:nth-child(6)').getAttribute('title')))"""
    )
    assert sizes == sorted(sizes, reverse=True) and sizes[0] >= live[0]["bytes"]


def test_memory_page_says_what_to_record_without_allocator_events(page: tuple[Any, Watch], base: str) -> None:
    pg, _ = page
    _open(pg, base, _slug(V100), "memory")
    text = pg.locator(".empty").inner_text()
    assert "No allocator events" in text
    assert "profile_memory=True" in text and "aiprof record --ops --memory" in text


def test_overview_charts_carry_the_cli_numbers(page: tuple[Any, Watch], base: str, served: Path) -> None:
    pg, _ = page
    with open_profile(served / _slug(MEM)) as prof:
        steps = run(prof, "steps").rows
        ov = [r for r in run(prof, "overview", Query(limit=None)).rows if r["step"] is None]
        advice = run_advice(prof)
    cats = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"]
    _open(pg, base, _slug(MEM), "overview")
    # The rank used one of the two V100s its node reports.
    assert pg.locator(".cards").inner_text().count("1 × Tesla V100-SXM2-32GB") == 1
    assert "cuda:1 Tesla V100-SXM2-32GB" in pg.locator("#device-list").inner_text()
    pg.wait_for_selector("#steps-chart")
    totals = json.loads(pg.locator("#steps-chart").get_attribute("data-totals"))
    assert totals == pytest.approx([sum(r[c + "_us"] for c in cats) for r in steps])
    # Hovering the first bar lists its parts in the CLI's numbers.
    box = pg.locator("#steps-chart").bounding_box()
    pg.mouse.move(box["x"] + 64 + (box["width"] - 64) / len(steps) / 2, box["y"] + box["height"] - 40)
    tip = pg.locator("#tip").inner_text()
    assert str(steps[0]["step"]) in tip and "kernel" in tip
    # Breakdown and utilization: one bar per figure, its raw µs the CLI's.
    for sel, sections in (("#breakdown-table", {"breakdown"}), ("#util-table", {"utilization", "device"})):
        shown = pg.evaluate(
            f"[...document.querySelectorAll('{sel} tr')].map(tr => [tr.cells[0].innerText.trim(), tr.title])"
        )
        name = (lambda c: _DEVICE_FIGURE.get(c, f"{c} (of active span)")) if sel == "#util-table" else str
        want = [[name(r["category"]), f"{r['time_us']} µs"] for r in ov if r["section"] in sections]
        assert [[a, float(b.split()[0])] for a, b in shown] == [[a, float(b.split()[0])] for a, b in want]
    # The device figures read as the CLI's: busy of step time, the rest of the active
    # span, and (the rank has 5 steps) what the active span is.
    util = pg.locator("#util-table").inner_text()
    assert "busy (of step time)" in util and "idle (of active span)" in util and "device_busy" not in util
    assert pg.locator("#active-span-note").inner_text() == re.sub(r"\[/?dim\]", "", ACTIVE_SPAN_NOTE)
    # The bars download as the overview view's rows.
    got = json.loads(_download(pg, "#breakdown-table .export-json"))["rows"]
    assert [(r["category"], r["time_us"]) for r in got] == [
        (r["category"], r["time_us"]) for r in ov if r["section"] == "breakdown"
    ]
    # The top advice, in the CLI's order, linked to the advice page.
    titles = pg.locator("#top-advice .advice .t a").all_inner_texts()
    assert titles == [a.title for a in advice[: len(titles)]] and titles
    pg.locator("#top-advice .advice .t a").first.click()
    pg.wait_for_function("location.hash.endsWith('/advice') && window.__aiprof.ready === true")


def test_timeline_memory_tracks_name_what_they_plot(page: tuple[Any, Watch], base: str) -> None:
    pg, _ = page
    # The Memory page's peaks: allocated 6.17 GiB, reserved 11.9 GiB.
    _open(pg, base, _slug(MEM), "memory")
    pg.wait_for_selector("#mem-peak")
    peak = {k: v for k, v in (c.split("\n") for c in pg.locator(".mem-device .cards .card").all_inner_texts())}
    assert peak["peak allocated"] == "6.17 GiB" and peak["peak reserved"] == "11.9 GiB"
    _open(pg, base, _slug(MEM), "timeline")
    pg.wait_for_function("window.__aiprof.painted >= 1 && window.__aiprof.timeline.counterSamples() > 0", timeout=60000)
    tracks = pg.evaluate("window.__aiprof.timeline.counterTracks")
    assert [t["label"] for t in tracks] == ["memory allocated (cuda 1)", "memory reserved (cuda 1)"]
    for t in tracks:
        pg.evaluate(f"window.__aiprof.timeline.pin({t['id']!r})")
    rows = {r["id"]: r for r in pg.evaluate("window.__aiprof.timeline.rows")}
    box = pg.locator("#tl-canvas").bounding_box()
    for t, what in zip(tracks, ("allocated", "reserved"), strict=True):
        r = rows[t["id"]]
        assert r["title"] == f"memory {what} (B)"
        pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + r["y"] + r["h"] / 2)
        pg.wait_for_selector("#tip", state="visible")
        tip = pg.locator("#tip").inner_text().split("\n")
        assert tip[0] == f"memory {what} · rank 1 CUDA 1 · B"
        # Its value and max are of what it plots: the max is the Memory page's peak.
        assert " ".join(tip[-1].split()) == f"peak {what} {peak['peak ' + what]}"
        value, unit = tip[-2].split()[1:]
        assert (
            tip[-2].startswith("value")
            and float(value) * {"GiB": GIB, "MiB": 1024**2}[unit]
            <= {"allocated": 6.17, "reserved": 11.9}[what] * GIB * 1.005
        )


def test_kernel_metrics_named_by_their_source_without_empty_columns(
    page: tuple[Any, Watch], base: str, served: Path
) -> None:
    pg, _ = page
    for rel, heading in (
        ("ascend/torch_npu", "Ascend kernel details (kernel_details.csv)"),
        ("ncu/ncu_details_csv_cublaslt_sm100_superbench.log", "Nsight Compute launches"),
    ):
        with open_profile(served / _slug(rel)) as prof:
            rows = run(prof, "kernel-metrics", Query(limit=25)).rows
        empty = {c for c in rows[0] if all(r[c] in (None, "") for r in rows)}
        _open(pg, base, _slug(rel), "kernels")
        pg.wait_for_selector(".table[data-view=kernel-metrics] tbody tr")
        assert pg.locator("#kernel-metrics-heading").inner_text() == heading
        cols = pg.evaluate(
            "[...document.querySelectorAll('.table[data-view=kernel-metrics] th[data-col]')].map(t => t.dataset.col)"
        )
        assert cols == [c for c in rows[0] if c not in empty]
        if rel.startswith("ascend"):
            # kernel_details.csv has no Nsight Compute figures: their columns are left out, and named.
            assert {"bound", "sm_pct", "dram_pct", "achieved_occupancy_pct"} <= empty
            assert "duration_us" in cols and "bound" not in cols
            assert "left out: bound, sm_pct" in pg.locator("#ncu-box .hidden-cols").inner_text()
            assert "Speed-of-Light" not in pg.locator("#ncu-box").inner_text()
        else:
            assert "bound" in cols and "Speed-of-Light" in pg.locator("#ncu-box").inner_text()


def test_one_step_rank_has_no_active_span_note(page: tuple[Any, Watch], base: str) -> None:
    pg, _ = page
    _open(pg, base, _slug("ascend/torch_npu"), "overview")
    pg.wait_for_selector("#util-table")
    assert "busy (of step time)" in pg.locator("#util-table").inner_text()
    assert pg.locator("#active-span-note").count() == 0


def run_advice(prof: Any) -> list[Any]:
    from aiprof.advise import advise

    return list(advise(prof))


def test_overview_lists_mtia_devices(page: tuple[Any, Watch], base: str) -> None:
    pg, _ = page
    _open(pg, base, "mtia.aiprof", "overview")
    assert "2 × MTIA" in pg.locator(".cards").inner_text()
    devs = pg.locator("#device-list").inner_text()
    assert "mtia:0" in devs and "mtia:1" in devs


def test_steps_table_fits_at_1440_with_units(page: tuple[Any, Watch], base: str) -> None:
    pg, _ = page
    _open(pg, base, _slug(MEM), "steps")
    pg.wait_for_selector("table.data tbody tr")
    wrap = pg.evaluate(
        "(() => { const w = document.querySelector('.tablewrap'); return [w.scrollWidth, w.clientWidth]; })()"
    )
    assert wrap[0] <= wrap[1], wrap
    assert pg.locator("th[data-col=duration_us] .unit").inner_text() == "µs"
    assert "forward_us" in pg.locator(".hidden-cols").inner_text()  # all-zero phase columns, named


def test_counters_carry_their_units(page: tuple[Any, Watch], base: str, served: Path) -> None:
    pg, _ = page
    pid = _slug("nvidia-smi/dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt")
    with open_profile(served / pid) as prof:
        clock = next(r for r in run(prof, "counters").rows if r["metric"] == "sm_clock" and r["device"] == 0)
    assert clock["unit"] == "MHz"
    _open(pg, base, pid, "counters")
    pg.wait_for_selector("table.data tbody tr")
    row = pg.locator("table.data tbody tr", has_text="sm_clock").first
    idx = pg.evaluate("[...document.querySelectorAll('table.data th')].findIndex(th => th.dataset.col === 'max')")
    assert row.locator("td").nth(idx).inner_text() == f"{clock['max'] / 1000:.2f} GHz"
    assert float(row.locator("td").nth(idx).get_attribute("title")) == clock["max"]


def test_steps_page_says_what_to_record_without_steps(page: tuple[Any, Watch], base: str) -> None:
    pg, _ = page
    _open(pg, base, _slug("nvidia-smi/dmon_pucvmet_DT_idle.txt"), "steps")
    pg.wait_for_selector(".table .empty")
    assert "prof.step()" in pg.locator(".table .empty").inner_text()
    # The empty state stands alone: no header of 29 columns running off the page.
    assert pg.locator(".table table.data").count() == 0
    assert pg.evaluate(
        "document.querySelector('.tablewrap').scrollWidth <= document.querySelector('.tablewrap').clientWidth"
    )


def test_html_report_has_the_overview_and_memory_charts_offline(browser: Any, served: Path, tmp_path: Path) -> None:
    from aiprof.render.html import write_report

    out = tmp_path / "report.html"
    with open_profile(served / "bytes_only.aiprof") as prof:
        write_report(prof, out)
        peak = next(r for r in run(prof, "memory").rows if r["device_type"] == "cuda")["peak_allocated_bytes"]
    html = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # nothing loads from elsewhere
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = ctx.new_page()
    w = Watch(pg, "file:")
    pg.goto(out.as_uri())
    pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true")
    pg.wait_for_selector("#steps-chart")
    assert pg.locator("#breakdown-table tr").count() == 8
    assert pg.locator("#top-advice .advice").count() >= 1
    pg.screenshot(path=str(tmp_path / "report-overview.png"), full_page=True)
    pg.goto(out.as_uri() + "#/report/memory")
    pg.wait_for_function("window.__aiprof.ready === true")
    pg.wait_for_selector("#mem-chart")
    assert pg.locator("#mem-peak .v").inner_text() == _fmt_gib(peak)
    assert "blocks hold " + _fmt_gib(peak) in pg.locator("#live-at-peak").inner_text()
    pg.screenshot(path=str(tmp_path / "report-memory.png"), full_page=True)
    ctx.close()
    w.check()


def test_every_page_of_every_real_profile_opens_without_console_errors(browser: Any, base: str, served: Path) -> None:
    ctx = browser.new_context(viewport={"width": 1000, "height": 700})
    pg = ctx.new_page()
    w = Watch(pg, base)
    pg.goto(base)
    pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=60000)
    profiles = pg.evaluate("window.__aiprof.state.profiles.map(p => [p.id, p.status])")
    assert sorted(p for p, _ in profiles) == sorted(x.name for x in served.iterdir())
    assert all(s == "ok" for _, s in profiles), profiles
    pages = pg.evaluate("[...document.querySelectorAll('nav#nav a')].map(a => a.dataset.page)")
    assert {"overview", "memory", "steps", "advice"} <= set(pages)
    shown: list[str] = []
    for pid, _ in profiles:
        for view in pages:
            _open(pg, base, pid, view)
            err = pg.locator("main .error").all_inner_texts()
            assert not [e for e in err if e.strip()], (pid, view, err)
            text = pg.locator("main").inner_text()
            assert not EXPONENT.search(text), (pid, view, EXPONENT.findall(text)[:5])
            assert not w.errors, (pid, view, w.errors)
            shown.append(f"{pid}/{view}")
    ctx.close()
    w.check()
    assert len(shown) == len(profiles) * len(pages)
