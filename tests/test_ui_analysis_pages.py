"""The distributed, kernels, operators and compare pages in real Chromium, against a
real ``aiprof serve`` on real Kineto traces; every figure checked against the analysers
(the CLI's numbers)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.analysis.regression import step_series, verdicts
from aiprof.importers import import_paths
from aiprof.store import open_profile
from test_serve_support import running_server
from ui_support import import_kineto_profiles
from ui_support import open_view as _open

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from make_fleet import SMALL_TEMPLATE, make_fleet

SAMPLED = "kineto/sampled-128-ranks/sampled_rank-{}.json.gz"
#: Ranks of the generated job whose straggler the heatmap must show as its hottest row.
FLEET_RANKS = 8


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ui2")
    # A folder of ranks, as `aiprof import` writes it (one profile with ranks).
    ranks = [str(shared_data / SAMPLED.format(i)) for i in (0, 1)]
    subprocess.run(
        [sys.executable, "-m", "aiprof", "import", *ranks, "-o", str(root / "job"), "--workers", "1"],
        check=True,
        capture_output=True,
    )
    for i in (0, 1):  # the same job's ranks on their own: a related pair
        import_paths([shared_data / SAMPLED.format(i)], root / f"s{i}.aiprof")
    import_kineto_profiles(shared_data, root)
    fleet = make_fleet(root.parent / "fleet-traces", FLEET_RANKS, template=SMALL_TEMPLATE, seed=3)
    traces, out = str(root.parent / "fleet-traces"), str(root / "fleet")
    subprocess.run(
        [sys.executable, "-m", "aiprof", "import", traces, "-o", out, "--workers", "1"],
        check=True,
        capture_output=True,
    )
    (root / "fleet" / "planted.json").write_text(json.dumps({"straggler": fleet.straggler}))
    return root


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield pg
    ctx.close()
    assert not errors, errors


def _painted(page: Any, canvas_id: str) -> int:
    return int(
        page.evaluate(
            """(id) => { const c = document.getElementById(id); const d = c.getContext('2d')
              .getImageData(0, 0, c.width, c.height).data; let n = 0;
              for (let i = 0; i < d.length; i += 4) if (d[i+3] > 0 && (d[i] < 200 || d[i+2] < 200)) n++; return n; }""",
            canvas_id,
        )
    )


def test_distributed_page_on_a_folder_of_ranks(page: Any, base: str, served: Path, tmp_path: Path) -> None:
    with open_profile(served / "job") as prof:
        stragglers = run(prof, "stragglers").rows
        collectives = run(prof, "collectives").rows
        links = run(prof, "links").rows
    _open(page, base, "job", "distributed")
    page.wait_for_selector("#dist-heatmap")
    assert page.get_attribute("#dist-heatmap", "data-ranks") == "2"
    # Two ranks of a 128-rank job: the world size comes from the ranks view.
    assert page.locator("#dist-world .v").inner_text() == "128"
    top = stragglers[0]
    assert top["lost_pct"] > 0
    assert page.locator("#dist-straggler").inner_text().split("\n")[-1].startswith(f"rank {top['rank']}:")
    # The slowest-ranks list is in the stragglers view's order and marks the straggler.
    listed = [int(x) for x in page.locator("#dist-slowest tbody tr td:first-child").all_inner_texts()]
    assert listed == [r["rank"] for r in stragglers]
    assert page.locator("#dist-slowest tr.slow td:first-child").inner_text() == str(top["rank"])
    # Collective skew: the widest arrival spreads first, naming the last rank to arrive.
    widest = sorted(collectives, key=lambda r: -r["arrival_spread_us"])
    rows = page.locator("#dist-skew tbody tr")
    assert rows.count() == min(15, len(collectives))
    assert rows.nth(0).locator("td").nth(7).inner_text() == f"rank {widest[0]['last_rank']}"
    assert page.locator("#dist-links tbody tr").count() == len(links)
    assert f"{links[0]['busbw_gbps']:.2f} GB/s" in page.locator("#dist-links").inner_text()
    for canvas in ("dist-heatmap", "dist-bars", "dist-bw-ranks"):
        assert _painted(page, canvas) > 500, canvas
    # Another step redraws the bars from that step's rows.
    page.select_option("#dist-step", "551")
    page.screenshot(path=str(tmp_path / "distributed.png"), full_page=True)


#: Each heatmap row's colour at each step column, sampled at the cell's centre (rgb).
_CELLS = """() => { const c = document.getElementById('dist-heatmap'), d = c.dataset, k = window.devicePixelRatio || 1;
  const ctx = c.getContext('2d'), rows = +d.rows, steps = +d.steps, top = +d.top, left = +d.left, rh = +d.rowPx;
  const cw = (c.clientWidth - left) / steps, out = [];
  for (let r = 0; r < rows; r++) { const row = [];
    for (let s = 0; s < steps; s++) row.push([...ctx.getImageData(Math.round((left + (s + 0.5) * cw) * k),
      Math.round((top + (r + 0.5) * rh) * k), 1, 1).data].slice(0, 3));
    out.push(row); }
  return out; }"""


def _rgb(css: str) -> list[int]:
    return [int(x) for x in css.removeprefix("rgb(").removesuffix(")").split(",")]


def test_heatmap_draws_the_straggler_as_its_hottest_row(page: Any, base: str, served: Path) -> None:
    straggler = json.loads((served / "fleet" / "planted.json").read_text())["straggler"]
    with open_profile(served / "fleet") as prof:
        assert run(prof, "stragglers").rows[0]["rank"] == straggler
    _open(page, base, "fleet", "distributed")
    canvas = page.locator("#dist-heatmap")
    assert canvas.get_attribute("data-metric") == "own"
    assert canvas.get_attribute("data-rows") == str(FLEET_RANKS)  # one row per rank
    row = int(canvas.get_attribute("data-slow-rows") or "-1")
    assert row == straggler  # rows in rank order
    bar = page.locator("#dist-heat-legend .heat-bar i")
    slow, fast = _rgb(bar.get_attribute("data-slow") or ""), _rgb(bar.get_attribute("data-fast") or "")
    assert sum(slow) < sum(fast)  # the slow end is the dark one
    cells = page.evaluate(_CELLS)
    # The slowest cell of the grid is the straggler's, in the slow end's colour; at
    # every step its cell is darker than every other rank's.
    assert any(all(abs(a - b) <= 2 for a, b in zip(c, slow, strict=True)) for c in cells[row]), (cells[row], slow)
    for col in range(len(cells[0])):
        assert all(sum(cells[r][col]) > sum(cells[row][col]) + 30 for r in range(len(cells)) if r != row), col
    legend = page.locator("#dist-heat-legend").inner_text()
    assert "own work per step (compute + copies):" in legend and "fast" in legend and "slow" in legend
    assert re.search(r"\d ms .*\d ms", legend.replace("\n", " ")), legend  # the scale's ends with their unit
    # Coloured by the whole step, the legend says so.
    page.select_option("#dist-heat-metric", "step")
    page.wait_for_function("document.getElementById('dist-heatmap').dataset.metric === 'step'")
    assert "step time:" in page.locator("#dist-heat-legend").inner_text()


def test_distributed_page_of_one_rank_says_what_to_record(page: Any, base: str) -> None:
    _open(page, base, "r0.aiprof", "distributed")
    text = page.locator("#dist-empty").inner_text()
    assert "one rank" in text and "aiprof import" in text


def test_kernels_tensor_core_column_and_share(page: Any, base: str, served: Path) -> None:
    with open_profile(served / "nccl.aiprof") as prof:
        share = run(prof, "tensor-cores").rows[0]
        kernels = run(prof, "kernels").rows
    tc_names = [k["name"] for k in kernels if k["tensor_core"]]
    assert tc_names and all("s1688" in n for n in tc_names)  # cutlass tensorop s1688 GEMMs on the A100
    _open(page, base, "nccl.aiprof", "kernels")
    page.wait_for_selector("th[data-col=tensor_core]")
    assert f"{share['tensor_core_pct']:.1f} %" in page.locator("#tc-share").inner_text()
    assert f"{share['tensor_core_kernels']} of {share['kernels']} names" in page.locator("#tc-share").inner_text()
    for col in ("grid", "block", "registers_per_thread", "occupancy_pct"):
        assert page.locator(f"th[data-col={col}]").count() == 1
    page.fill(".tablebar input", "tensor_core=true")
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('.pageinfo').dataset.total == '{len(tc_names)}'")


def test_operators_grouped_by_shapes_and_expanded_to_kernels(page: Any, base: str, served: Path) -> None:
    with open_profile(served / "r0.aiprof") as prof:
        ops = run(prof, "operators").rows
    op = next(o for o in ops if o["kernels"] and o["device_self_us"] == o["device_total_us"])
    _open(page, base, "r0.aiprof", "operators")
    page.select_option("#op-group", "shapes")
    page.wait_for_selector("th[data-col=input_shapes]")
    assert "group=shapes" in page.url
    page.select_option("#op-group", "name")
    page.wait_for_function("!document.querySelector('th[data-col=input_shapes]')")
    page.fill(".tablebar input", f"name={op['name']}")
    page.keyboard.press("Enter")
    page.wait_for_function("document.querySelector('.pageinfo').dataset.total == '1'")
    page.click("tbody button.expand")
    sub = page.locator("table.sub[data-view=operator-kernels]")
    sub.wait_for()
    counts = [int(x.replace(",", "")) for x in sub.locator("tbody tr td:nth-child(3)").all_inner_texts()]
    assert sum(counts) == op["kernels"]


def test_compare_defaults_to_the_same_job_and_shows_the_chart(page: Any, base: str, tmp_path: Path) -> None:
    _open(page, base, "s0.aiprof", "compare")
    page.wait_for_selector("#cmp-chart")
    # B defaults to the other rank of the same job with as many ranks (not the run folder
    # of two ranks, nor a profile of another job).
    assert page.eval_on_selector("#cmp-b", "e => e.value") == "s1.aiprof"
    assert page.locator("#cmp-warning").count() == 0
    assert "a=s0.aiprof" in page.url and "b=s1.aiprof" in page.url
    assert _painted(page, "cmp-chart") > 500
    assert page.locator("#cmp-kernels tr").count() > 5
    assert "%" in page.locator("#cmp-kernels").inner_text()
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)


def test_compare_verdicts_equal_the_diff_and_warn_of_another_job(page: Any, base: str, served: Path) -> None:
    from aiprof.analysis.gate import judge

    with open_profile(served / "r0.aiprof") as a, open_profile(served / "mem.aiprof") as b:
        expected = verdicts(step_series([a]), step_series([b])).to_pylist()
        note = judge(step_series([a]), step_series([b]), [])["note"]
    page.goto(f"{base}#/r0.aiprof/compare?a=r0.aiprof&b=mem.aiprof")
    page.wait_for_selector("#cmp-verdicts")
    # Every figure was tested: no note of why one was not (tests/test_ui_compare_note.py).
    assert note is None and page.locator("#cmp-note").count() == 0
    warning = page.locator("#cmp-warning").inner_text()
    assert "different jobs" in warning and "world size differs: A 1, B 2" in warning
    rows = page.locator("#cmp-verdicts tbody tr")
    assert rows.count() == len(expected)
    shown = [
        (rows.nth(i).locator("td").nth(0).inner_text(), rows.nth(i).locator("td").nth(6).inner_text())
        for i in range(rows.count())
    ]
    assert shown == [(r["figure"], r["verdict"]) for r in expected]
    # Changes past +1000 % read as a factor of B over A.
    big = [(i, r) for i, r in enumerate(expected) if r["change_pct"] is not None and r["change_pct"] >= 1000]
    assert big  # B's communication and host time are many times A's
    for i, r in big:
        assert rows.nth(i).locator("td").nth(3).inner_text() == f"{1 + r['change_pct'] / 100:.0f} ×"
    assert any(r["verdict"] in ("slower", "faster") for r in expected)  # 5 steps a side: a real test ran


def test_compare_of_a_profile_with_itself_says_no_difference(page: Any, base: str) -> None:
    page.goto(f"{base}#/r0.aiprof/compare?a=r0.aiprof&b=r0.aiprof")
    page.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=60000)
    assert page.locator("#cmp-nodiff").inner_text().startswith("No difference")
    assert page.locator("#cmp-warning").count() == 0
    assert set(page.locator("#cmp-verdicts td.verdict").all_inner_texts()) == {"no significant change"}


#: Where the steps table's key cells and its last header are, after scrolling it to its right end.
_SCROLLED = """() => { const w = document.querySelector('.table[data-view=steps] .tablewrap');
  w.scrollLeft = w.scrollWidth; const box = w.getBoundingClientRect();
  const th = (c) => document.querySelector(`.table[data-view=steps] th[data-col=${c}]`).getBoundingClientRect();
  const ths = [...document.querySelectorAll('.table[data-view=steps] thead th')];
  const last = ths[ths.length - 1].getBoundingClientRect();
  return { wide: w.scrollWidth > w.clientWidth, left: box.left, right: box.right, rank: th('rank').left,
           step: th('step').left, stepRight: th('step').right, lastRight: last.right, order: ths.map((t) => t.dataset.col || '') }; }"""


@pytest.mark.parametrize("size", [(1440, 900), (1000, 700)])
def test_wide_steps_table_keeps_rank_and_step_in_view(
    browser: Any, base: str, size: tuple[int, int], tmp_path: Path
) -> None:
    """The steps table of a job scrolls sideways inside its box with its rank and step
    columns (and the row's button) pinned at the left, each header with its unit; the
    overview counts steps per rank."""
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    pg = ctx.new_page()
    _open(pg, base, "fleet", "steps")
    pg.wait_for_selector(".table[data-view=steps] th[data-col=rank]")
    pg.screenshot(path=str(tmp_path / f"steps-{size[0]}.png"))
    at = pg.evaluate(_SCROLLED)
    # At 1440 px every column with a value fits; at 1000 px the table scrolls in its box.
    assert at["wide"] == (size[0] < 1440), at
    assert at["order"][:3] == ["", "rank", "step"], at["order"]  # the row's button, then the keys
    assert abs(at["rank"] - at["left"]) < 80 and at["step"] < at["left"] + 160, at  # still at the left
    assert at["lastRight"] <= at["right"] + 1 and at["lastRight"] > at["stepRight"], at  # scrolled to the end
    assert pg.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    units = pg.locator(".table[data-view=steps] th[data-col=duration_us] .unit").inner_text()
    assert units == "µs"
    _open(pg, base, "fleet", "overview")
    cards = pg.locator(".cards").inner_text()
    assert f"2 × {FLEET_RANKS} ranks" in cards, cards
    ctx.close()


def test_pages_fit_a_1000px_window(browser: Any, base: str) -> None:
    ctx = browser.new_context(viewport={"width": 1000, "height": 700})
    pg = ctx.new_page()
    for path in (
        "job/distributed",
        "nccl.aiprof/kernels",
        "r0.aiprof/operators",
        "r0.aiprof/compare?a=r0.aiprof&b=mem.aiprof",
    ):
        pg.goto(f"{base}#/{path}")
        pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=60000)
        assert pg.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), path
    ctx.close()


def test_serving_a_folder_of_ranks_lists_one_profile(served: Path) -> None:
    import json
    import urllib.request

    with running_server(served / "job") as (url, _token):
        with urllib.request.urlopen(url + "api/v1/profiles") as r:
            profiles = json.loads(r.read())["profiles"]
        with urllib.request.urlopen(url + "api/v1/profiles/job") as r:
            meta = json.loads(r.read())
    assert [p["id"] for p in profiles] == ["job"]
    assert meta["ranks"] == [0, 1]
