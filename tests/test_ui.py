"""The web UI in real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright), against a real ``aiprof serve`` on real Kineto profiles."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ui_support import checked_page, import_kineto_profiles
from ui_support import open_view as _open


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui")
    import_kineto_profiles(shared_data, root)
    return root


@pytest.fixture
def page(browser: Any, base: str) -> Iterator[Any]:
    with checked_page(browser, base) as pg:
        yield pg


def test_overview(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "mem.aiprof", "overview")
    assert page.locator("nav a.active").inner_text() == "Overview"
    page.wait_for_selector("#steps-chart")
    assert "Tesla V100-SXM2-32GB" in page.locator(".cards").inner_text()
    util = page.locator("#util-table").inner_text()
    assert "busy (of step time)" in util and "idle (of active span)" in util
    assert "communication" in page.locator("#breakdown-table").inner_text()
    page.wait_for_selector("#top-advice .advice")
    page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
    # The step chart drew stacked bars (non-white pixels in the plot area).
    painted = page.evaluate(
        """() => { const c = document.getElementById('steps-chart'); const d = c.getContext('2d')
              .getImageData(0, 0, c.width, c.height).data; let n = 0;
              for (let i = 0; i < d.length; i += 4) if (d[i+3] > 0 && (d[i] < 200 || d[i+2] < 200)) n++; return n; }"""
    )
    assert painted > 1000


def test_kernels_table_sort_filter_page(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "r0.aiprof", "kernels")
    info = page.locator(".pageinfo")
    page.wait_for_function("document.querySelector('.pageinfo') && document.querySelector('.pageinfo').dataset.total")
    total = int(info.get_attribute("data-total"))
    assert total > 50
    # Default: sorted by total_us descending, as the server says.
    assert "sorted-desc" in (page.locator("th[data-col=total_us]").get_attribute("class") or "")
    # Sort by count (server side): click once for descending.
    with page.expect_response(re.compile(r"/views/kernels\?.*sort=-count")):
        page.click("th[data-col=count]")
    page.wait_for_selector("th[data-col=count].sorted-desc")
    counts = _column(page, "count")
    assert counts == sorted(counts, reverse=True) and len(counts) == 50
    # Filter with the CLI's syntax.
    page.fill(".tablebar input", "name~gemm; count>=2")
    with page.expect_response(re.compile(r"/views/kernels\?.*filter=name")):
        page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('.pageinfo').dataset.total < {total}")
    names = _column(page, "name", numeric=False)
    assert names and all("gemm" in n.lower() for n in names)
    assert all(c >= 2 for c in _column(page, "count"))
    page.screenshot(path=str(tmp_path / "kernels.png"))
    # Next page.
    page.fill(".tablebar input", "")
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('.pageinfo').dataset.total == {total}")
    page.click("text=next ›")
    page.wait_for_function("document.querySelector('.pageinfo').textContent.startsWith('rows 51')")


def _column(page: Any, col: str, numeric: bool = True) -> list[Any]:
    idx = page.evaluate(f"[...document.querySelectorAll('table.data th')].findIndex(th => th.dataset.col === '{col}')")
    cells = page.evaluate(
        f"[...document.querySelectorAll('table.data tbody tr')].map(tr => tr.children[{idx}].getAttribute('title'))"
    )
    return [float(c) for c in cells] if numeric else cells


def test_tables_open(page: Any, base: str) -> None:
    for view in ("operators", "steps", "memory", "counters"):
        _open(page, base, "mem.aiprof", view)
        if view == "memory":
            page.wait_for_selector("#mem-chart")
            assert "Allocations live at the peak" in page.locator("#live-at-peak").inner_text()
        page.wait_for_function(
            "document.querySelector('.pageinfo') && document.querySelector('.pageinfo').dataset.total"
        )
        if view != "counters":  # Kineto files carry no counter samples
            assert int(page.locator(".pageinfo").first.get_attribute("data-total")) > 0


def test_timeline_zoom_click_select(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "r0.aiprof", "timeline")
    page.wait_for_function("window.__aiprof.painted >= 1", timeout=60000)
    page.screenshot(path=str(tmp_path / "timeline.png"))
    tl = "window.__aiprof.timeline"
    w0 = page.evaluate(f"{tl}.view.t1 - {tl}.view.t0")
    labels = page.evaluate(f"{tl}.tracks.map(t => t.name)")
    assert any("stream 7" in n for n in labels) and any("pt_main_thread" in n for n in labels)
    # Zoom with the keyboard (W), as in Perfetto; then pan (D).
    page.click("#tl-canvas", position={"x": 5, "y": 5})
    painted = page.evaluate("window.__aiprof.painted")
    for _ in range(12):
        page.keyboard.press("w")
    page.keyboard.press("d")
    page.wait_for_function(f"window.__aiprof.painted > {painted}")
    w1 = page.evaluate(f"{tl}.view.t1 - {tl}.view.t0")
    assert w1 < w0 * 0.1
    # Ctrl+wheel zooms out at the mouse; Shift+wheel pans.
    page.mouse.move(700, 200)
    page.keyboard.down("Control")
    page.mouse.wheel(0, 300)
    page.keyboard.up("Control")
    page.wait_for_function(f"{tl}.view.t1 - {tl}.view.t0 > {w1}")
    t0 = page.evaluate(f"{tl}.view.t0")
    page.keyboard.down("Shift")
    page.mouse.wheel(0, 300)
    page.keyboard.up("Shift")
    page.wait_for_function(f"{tl}.view.t0 > {t0}")
    # Zoom onto a single kernel and click it.
    target = page.evaluate(
        """async () => {
            const r = await fetch('/api/v1/profiles/r0.aiprof/tracks').then(r => r.json());
            const dev = r.tracks.find(t => t.is_device);
            const mid = Math.floor((r.span_ns[0] + r.span_ns[1]) / 2);
            const w = await fetch(`/api/v1/profiles/r0.aiprof/timeline?t0=${mid}&t1=${mid + 20000000}&width=2000&tracks=${dev.track}`).then(r => r.json());
            const i = w.items.kind.findIndex((k, j) => k === 'kernel' && w.items.n[j] === 1 && w.items.dur[j] > 2000);
            return {track: dev.track, ts: w.items.ts[i], dur: w.items.dur[i], depth: w.items.depth[i], name: w.names[w.items.name[i]]};
        }"""
    )
    page.evaluate(
        f"""() => {{ const tl = window.__aiprof.timeline; const v = tl.view;
             v.t0 = {target["ts"]} - {target["dur"]} * 2; v.t1 = {target["ts"]} + {target["dur"]} * 3; tl.draw(); }}"""
    )
    painted = page.evaluate("window.__aiprof.painted")
    page.keyboard.press("a")
    page.keyboard.press("d")  # back where it was; fetches the new window
    page.wait_for_function(f"window.__aiprof.painted > {painted}")
    box = page.evaluate(
        f"""() => {{ const tl = window.__aiprof.timeline; const L = tl.layout.get({target["track"]});
             return {{x: tl.xOf({target["ts"]} + {target["dur"]} / 2),
                     y: L.y + {target["depth"]} * 18 + 9 - tl.scrollY()}}; }}"""
    )
    page.click("#tl-canvas", position={"x": box["x"], "y": box["y"]})
    page.wait_for_selector("#tl-details .ev-name")
    details = page.locator("#tl-details").inner_text()
    assert target["name"] in details and "kernel" in details
    assert "Linked by correlation" in details and "runtime" in details
    # Flow arrows were part of that window.
    assert page.evaluate("window.__aiprof.timeline && window.__aiprof.items") > 0
    page.screenshot(path=str(tmp_path / "timeline-zoomed.png"))
    # A selection shows the totals of what it covers.
    page.evaluate(f"() => window.__aiprof.timeline.selectRange({target['ts']} - 1000000, {target['ts']} + 1000000)")
    page.wait_for_selector("#sel-kinds")
    text = page.locator("#tl-summary").inner_text()
    assert "kernel" in text and "events" in text
    # Mouse: shift+drag selects too.
    page.mouse.move(600, 300)
    page.keyboard.down("Shift")
    page.mouse.down()
    page.mouse.move(900, 300)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_function(
        "(document.querySelector('#tl-summary b') || {textContent: ''}).textContent.includes('Selection')"
    )
    page.screenshot(path=str(tmp_path / "timeline-selection.png"))


def test_timeline_counter_track(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "mem.aiprof", "timeline")
    page.wait_for_function("window.__aiprof.painted >= 1", timeout=60000)
    labels = page.evaluate("window.__aiprof.timeline.counterTracks.map(c => c.label)")
    assert any(lab.startswith("memory allocated (cuda 1)") for lab in labels)
    assert page.evaluate("window.__aiprof.timeline.counterSamples()") > 10
    page.screenshot(path=str(tmp_path / "timeline-memory.png"))


def test_compare(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "r0.aiprof", "compare")
    # No profile here is of r0's job: nothing is compared until B is picked.
    assert "Pick B" in page.locator("#cmp-pick").inner_text()
    assert page.locator("#cmp-steps").count() == 0
    page.select_option("#cmp-b", "mem.aiprof")
    page.wait_for_selector("#cmp-steps")
    page.wait_for_selector("#cmp-kernels")
    assert "step" in page.locator("#cmp-steps").inner_text()
    assert page.locator("#cmp-kernels tr").count() > 5
    assert page.locator("#cmp-ops tr").count() > 5
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)


def test_html_report_opens_without_server(browser: Any, served: Path, tmp_path: Path) -> None:
    from aiprof.render.html import write_report
    from aiprof.store import open_profile

    out = tmp_path / "report.html"
    with open_profile(served / "mem.aiprof") as p:
        write_report(p, out)
    html = out.read_text()
    assert "<script src=" not in html and '<link rel="stylesheet"' not in html
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    requests: list[str] = []
    pg.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    pg.goto(out.as_uri())
    pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true")
    assert "Tesla V100-SXM2-32GB" in pg.locator(".cards").inner_text()
    pg.wait_for_selector("#top-advice .advice")
    pg.goto(out.as_uri() + "#/report/kernels")
    pg.wait_for_selector("table.data td")
    pg.click("th[data-col=count]")
    pg.wait_for_selector("th[data-col=count].sorted-desc")
    pg.screenshot(path=str(tmp_path / "report-kernels.png"))
    assert not requests
    ctx.close()


def _timeline(page: Any, base: str, pid: str, query: str = "") -> None:
    page.goto(f"{base}#/{pid}/timeline{query}")
    page.wait_for_function(
        "window.__aiprof && window.__aiprof.ready === true && window.__aiprof.painted >= 1", timeout=60000
    )


def test_search_finds_and_selects_an_nccl_kernel(page: Any, base: str, tmp_path: Path) -> None:
    _timeline(page, base, "nccl.aiprof")
    total = page.evaluate(
        "fetch('/api/v1/profiles/nccl.aiprof/timeline/search?q=ncclKernel').then(r => r.json()).then(j => j.total)"
    )
    assert total > 1
    page.keyboard.press("/")  # the search box from the keyboard
    assert page.evaluate("document.activeElement.id") == "tl-search"
    page.keyboard.type("ncclKernel")
    page.keyboard.press("Enter")
    page.wait_for_selector("#tl-details .ev-name")
    assert page.locator("#tl-count").get_attribute("data-total") == str(total)
    first = page.locator("#tl-details .ev-name").inner_text()
    assert first.startswith("ncclKernel") and "collective" in page.locator("#tl-details").inner_text()
    picked = page.evaluate("window.__aiprof.timeline.picked()")
    v = page.evaluate("window.__aiprof.timeline.view")
    assert v["t0"] <= picked["ts"] and picked["ts"] + picked["dur"] <= v["t1"]  # centred and in view
    # The first match after the window's centre, counted among all of them.
    shown = page.locator("#tl-count").inner_text()
    n = int(shown.split(" / ")[0])
    assert shown.split(" / ")[1].startswith(str(total)) and 1 <= n <= total
    # Next match: another event, still an NCCL kernel; the URL holds the search and the selection.
    page.click("#tl-next")
    page.wait_for_function(f"window.__aiprof.timeline.picked().ts !== {picked['ts']}")
    page.wait_for_function(f"document.querySelector('#tl-count').textContent.startsWith('{n % total + 1} / ')")
    assert "q=ncclKernel" in page.url and "sel=" in page.url
    page.screenshot(path=str(tmp_path / "search.png"))


def test_url_state_survives_a_reload(page: Any, base: str) -> None:
    _timeline(page, base, "r0.aiprof")
    page.click("#tl-canvas", position={"x": 600, "y": 5})
    page.mouse.move(700, 200)
    for _ in range(6):
        page.keyboard.press("w")
    page.wait_for_function("location.hash.includes('t0=')")
    top = page.evaluate(
        "fetch('/api/v1/profiles/r0.aiprof/timeline/search?q=gemm&order=-dur&limit=1').then(r => r.json()).then(j => j.matches[0])"
    )
    page.evaluate("window.__aiprof.timeline.search('gemm', false)")
    page.wait_for_selector("#tl-details .ev-name")
    page.wait_for_function("location.hash.includes('sel=')")
    before = page.evaluate(
        "({v: {...window.__aiprof.timeline.view}, p: window.__aiprof.timeline.picked(), h: location.hash})"
    )
    page.reload()
    page.wait_for_function("window.__aiprof && window.__aiprof.ready === true && window.__aiprof.painted >= 1")
    page.wait_for_selector("#tl-details .ev-name")
    after = page.evaluate("({v: {...window.__aiprof.timeline.view}, p: window.__aiprof.timeline.picked()})")
    assert abs(after["v"]["t0"] - before["v"]["t0"]) <= 1 and abs(after["v"]["t1"] - before["v"]["t1"]) <= 1
    assert after["p"]["ts"] == before["p"]["ts"] and after["p"]["track"] == before["p"]["track"]
    assert page.locator("#tl-search").input_value() == "gemm"
    assert top["name"]  # the server's longest gemm exists; the search ran against the same server
    # A table's filter, sort and page survive a reload, and Back returns to the timeline.
    page.goto(f"{base}#/r0.aiprof/kernels")
    page.wait_for_function("document.querySelector('.pageinfo') && document.querySelector('.pageinfo').dataset.total")
    page.fill(".tablebar input", "name~gemm")
    page.keyboard.press("Enter")
    page.wait_for_function("location.hash.includes('filter=')")
    page.click("th[data-col=count]")
    page.wait_for_function("location.hash.includes('sort=-count')")
    page.reload()
    page.wait_for_selector("th[data-col=count].sorted-desc")
    assert page.locator(".tablebar input").input_value() == "name~gemm"
    names = _column(page, "name", numeric=False)
    assert names and all("gemm" in n.lower() for n in names)
    page.go_back()
    page.wait_for_function("location.hash.includes('/timeline')")
    page.wait_for_function(
        "window.__aiprof.ready === true && window.__aiprof.timeline && window.__aiprof.timeline.picked()"
    )
    assert page.evaluate("window.__aiprof.timeline.picked().ts") == before["p"]["ts"]


def test_show_on_timeline_from_the_kernels_table(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "nccl.aiprof", "kernels")
    page.wait_for_selector("table.data tbody tr button.show-tl")
    first_name = _column(page, "name", numeric=False)[0]
    longest = page.evaluate(
        f"fetch('/api/v1/profiles/nccl.aiprof/timeline/search?exact=true&order=-dur&limit=1&q=' + encodeURIComponent({first_name!r})).then(r => r.json()).then(j => j.matches[0])"
    )
    page.locator("table.data tbody tr").first.locator("button.show-tl").click()
    page.wait_for_function("location.hash.includes('/timeline') && window.__aiprof.ready === true")
    page.wait_for_selector("#tl-details .ev-name")
    assert page.locator("#tl-details .ev-name").inner_text() == first_name
    picked = page.evaluate("window.__aiprof.timeline.picked()")
    assert picked["ts"] == longest["ts"] and picked["dur"] == longest["dur"]
    page.screenshot(path=str(tmp_path / "show-on-timeline.png"))


def test_track_groups_collapse_and_expand(page: Any, base: str) -> None:
    _timeline(page, base, "nccl.aiprof")
    rows = page.evaluate("window.__aiprof.timeline.rows")
    groups = [r for r in rows if r["group"]]
    assert groups and groups[0]["title"].startswith("CUDA")  # device tracks first on an accelerator trace
    dev = groups[0]
    n_open = len(rows)
    # Click the group's label: it collapses to one summary row.
    page.click("#tl-canvas", position={"x": 40, "y": dev["y"] + 5})
    rows2 = page.evaluate("window.__aiprof.timeline.rows")
    assert len(rows2) < n_open and next(r for r in rows2 if r["id"] == dev["id"])["collapsed"]
    page.click("#tl-canvas", position={"x": 40, "y": dev["y"] + 5})
    assert len(page.evaluate("window.__aiprof.timeline.rows")) == n_open
    # Pin a stream: it moves to the top, above the groups.
    stream = next(r for r in rows if not r["group"] and r["y"] > dev["y"])
    page.click("#tl-canvas", position={"x": 240 - 8, "y": stream["y"] + 5})
    rows3 = page.evaluate("window.__aiprof.timeline.rows")
    assert rows3[0]["id"] == stream["id"] and rows3[0]["pinned"]
    # The tooltip gives a track's full name.
    box = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(box["x"] + 60, box["y"] + rows3[0]["y"] + 5)
    page.wait_for_selector("#tip", state="visible")
    assert page.locator("#tip").inner_text().startswith(stream["full"])


def test_unknown_profile_or_page_is_not_found(page: Any, base: str) -> None:
    _open(page, base, "does_not_exist.aiprof", "kernels")
    assert "Profile not found: does_not_exist.aiprof" in page.locator("#not-found").inner_text()
    assert page.locator("table.data").count() == 0
    _open(page, base, "r0.aiprof", "nosuchpage")
    assert "Page not found: nosuchpage" in page.locator("#not-found").inner_text()


def test_every_page_opens_without_console_errors_in_both_themes(browser: Any, base: str, tmp_path: Path) -> None:
    for scheme in ("light", "dark"):
        ctx = browser.new_context(viewport={"width": 1000, "height": 700}, color_scheme=scheme)
        pg = ctx.new_page()
        errors: list[str] = []
        pg.on("pageerror", lambda e, out=errors: out.append(str(e)))
        pg.on("console", lambda m, out=errors: out.append(m.text) if m.type == "error" else None)
        for view in (
            "overview",
            "timeline",
            "operators",
            "kernels",
            "steps",
            "memory",
            "counters",
            "distributed",
            "compare",
            "advice",
            "sql",
        ):
            _open(pg, base, "mem.aiprof", view)
            # Nothing wider than the window (no horizontal overflow of the page).
            assert pg.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), (scheme, view)
        bg = pg.evaluate("getComputedStyle(document.body).backgroundColor")
        assert (bg == "rgb(15, 17, 21)") == (scheme == "dark")
        pg.screenshot(path=str(tmp_path / f"advice-{scheme}.png"))
        ctx.close()
        assert not errors, (scheme, errors)


def test_flame_graph_of_a_recording_made_here(page: Any, base: str, served: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "work.py"
    script.write_text(
        "def leaf(n):\n    return sum(i * i for i in range(n))\n"
        "def middle(n):\n    return leaf(n) + leaf(n // 2)\n"
        "for _ in range(100):\n    middle(30000)\n"
    )
    rec = subprocess.run(
        [sys.executable, "-m", "aiprof", "record", "-o", str(served / "rec.aiprof"), "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rec.returncode == 0, rec.stderr
    from aiprof.store import open_profile

    with open_profile(served / "rec.aiprof") as p:
        ((n,),) = p.con.execute("SELECT count(*) FROM samples").fetchall()
    page.goto(f"{base}#/r0.aiprof/overview")  # the library lists the new profile
    page.wait_for_function("window.__aiprof && window.__aiprof.ready === true")
    _open(page, base, "rec.aiprof", "flame")
    page.wait_for_function("window.__aiprof.flame && window.__aiprof.flame.bars > 3")
    assert page.locator("#flame-info").get_attribute("data-samples") == str(n)
    page.screenshot(path=str(tmp_path / "flame.png"))
    # Click the bar of `middle`: the graph zooms into it.
    target = page.evaluate(
        "(() => { const c = document.getElementById('flame-canvas'); return {w: c.clientWidth, h: c.clientHeight}; })()"
    )
    assert target["h"] > 18 * 4
    # Walk down the graph's middle column until the bar clicked is `middle`.
    clicked = False
    for depth in range(target["h"] // 18):
        page.click("#flame-canvas", position={"x": target["w"] // 2, "y": depth * 18 + 9})
        if page.evaluate("window.__aiprof.flame.top") == "middle":
            clicked = True
            break
        if page.evaluate("window.__aiprof.flame.top") != "all":
            page.click("#flame-crumbs a")  # back to the whole graph
    assert clicked, page.evaluate("window.__aiprof.flame")
    assert page.evaluate("window.__aiprof.flame.focus").count("middle") == 1
    assert "focus=" in page.url
    # The sandwich of `leaf`: its callers (middle) and callees.
    page.click("#flame-functions a.fn:text-is('leaf')")
    page.wait_for_selector("#flame-callers")
    assert page.evaluate("window.__aiprof.flame.fn") == "leaf" and "fn=leaf" in page.url
    # Reload: the zoom and the sandwich come back from the URL.
    page.reload()
    page.wait_for_function("window.__aiprof && window.__aiprof.flame && window.__aiprof.flame.bars > 0")
    assert (
        page.evaluate("window.__aiprof.flame.top") == "middle" and page.evaluate("window.__aiprof.flame.fn") == "leaf"
    )
    # The same samples as a flame chart track on the timeline.
    _timeline(page, base, "rec.aiprof")
    rows = page.evaluate("window.__aiprof.timeline.rows")
    assert any(r["title"].startswith("Python samples") for r in rows)
    assert 0 < page.evaluate("window.__aiprof.timeline.pythonSamples()") <= n


def test_show_on_timeline_from_the_steps_table(page: Any, base: str) -> None:
    _open(page, base, "r0.aiprof", "steps")
    page.wait_for_selector("table.data tbody tr button.show-tl")
    step = _column(page, "step")[1]
    page.locator("table.data tbody tr").nth(1).locator("button.show-tl").click()
    page.wait_for_function("location.hash.includes('/timeline') && window.__aiprof.ready === true")
    page.wait_for_selector("#tl-details .ev-name")
    details = page.locator("#tl-details").inner_text()
    assert "step" in details and page.locator("#tl-details .ev-name").inner_text().endswith(str(int(step)))
    picked = page.evaluate("window.__aiprof.timeline.picked()")
    v = page.evaluate("window.__aiprof.timeline.view")
    assert v["t0"] <= picked["ts"] and picked["ts"] + picked["dur"] <= v["t1"]
