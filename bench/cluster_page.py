"""The Distributed page of a many-rank job, cold: the whole page in Chromium against a
fresh ``aiprof serve``, each view it requests answered from the cluster index, HTA's
nearest analysis on the same traces, and ``comm_overlap`` from the index against the
same view computed rank by rank.

Prints, for one job folder (``aiprof import`` of many ranks, or one this script builds
with bench/make_fleet.py):
1. the page in headless Chromium (Playwright, /usr/bin/chromium): a fresh server
   (``aiprof serve JOB``, its warm-up running as it does for a user) and a fresh browser,
   seconds from navigation to ``window.__aiprof.ready`` (every section drawn), and each
   API request's time from the browser's Resource Timing; then the same page reloaded
   on that server (warm);
2. each view the page requests (:data:`PAGE_VIEWS`) on a freshly opened job, seconds
   each and their sum: the server's share of the cold load (HTTP and drawing left out);
3. the peer, Holistic Trace Analysis 0.5.0 on the same traces (``--traces``, or the
   built fleet's): ``TraceAnalysis(trace_dir)`` (it parses every rank's trace on each
   start: it keeps no store), then its analyses nearest to the page,
   ``get_temporal_breakdown`` (per rank idle / compute / non-compute: the page's bars)
   and ``get_comm_comp_overlap`` (per rank); the ratios HTA / page, with and without
   HTA's parse;
4. ``comm_overlap`` from the index (one SQL pass over ``cluster_steps``) against the same
   view computed rank by rank on ``rank<N>.aiprof`` (all ranks, or ``--peer-sample K``
   of them, the time scaled by ranks / K and said so): seconds and the ratio, and
   whether the rows agree on the ranks computed.

The load average is printed beside each figure: on a shared machine they are noisy.

    .venv/bin/python bench/cluster_page.py JOB_DIR [--traces DIR] [--peer-sample K] [--no-hta]
    .venv/bin/python bench/cluster_page.py --build OUT --ranks 1024 [--workers 2]
HTA runs from bench/.venv-hta (bench/hta_compare.py) or $HTA_PYTHON, bounded by --hta-timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from aiprof.analysis import run  # noqa: E402
from aiprof.analysis.query import Query  # noqa: E402
from aiprof.cluster.opened import open_job  # noqa: E402
from aiprof.cluster.views import comm_overlap_from_index  # noqa: E402
from aiprof.store import open_profile  # noqa: E402

#: The views the Distributed page requests (web/ui/src/views/distributed.ts), in order,
#: with the query each is asked with.
PAGE_VIEWS: tuple[tuple[str, Query], ...] = (
    ("ranks", Query(limit=10_000)),
    ("stragglers", Query(limit=10_000)),
    ("rank_steps", Query(limit=10_000)),
    ("collectives", Query(sort=[("arrival_spread_us", True)], limit=15)),
    ("links", Query(limit=10_000)),
)
ALL = Query(limit=10_000_000)
COLS = ("step_us", "comm_us", "compute_us", "overlap_us", "exposed_us")
CHROMIUM = Path("/usr/bin/chromium")

#: HTA's nearest analyses to the page, timed after its load (it has no store: every
#: start parses every rank's trace).
_HTA = r"""
import json, logging, resource, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
out = {"load": time.perf_counter() - t0, "ranks": len(a.t.traces)}
for name, call in (("get_temporal_breakdown", lambda: a.get_temporal_breakdown(visualize=False)),
                   ("get_comm_comp_overlap", lambda: a.get_comm_comp_overlap(visualize=False))):
    t = time.perf_counter()
    rows = call()
    out[name] = time.perf_counter() - t
    out[name + "_rows"] = len(rows)
out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def build(out: Path, ranks: int, workers: int) -> Path:
    from make_fleet import SMALL_TEMPLATE, make_fleet

    traces = out / "traces"
    t0 = time.perf_counter()
    make_fleet(traces, ranks, template=SMALL_TEMPLATE, seed=3)
    t1 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    job = out / "job"
    subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(traces), "-o", str(job), "--workers", str(workers)],
        check=True,
        env=env,
    )
    print(f"built {ranks} ranks: traces {t1 - t0:.1f} s, import {time.perf_counter() - t1:.1f} s ({load()})")
    return job


def _key(r: dict[str, Any]) -> tuple[int, int]:
    return (int(r["rank"]), -1 if r["step"] is None else int(r["step"]))


#: The API requests the page made, from the browser's Resource Timing (ms).
_REQUESTS = """() => performance.getEntriesByType('resource').filter(e => e.name.includes('/api/'))
  .map(e => [e.name.split('/api/v1/')[1], e.startTime, e.duration, e.transferSize])"""


def browser_page(job: Path) -> float | None:
    """The Distributed page in Chromium on a fresh server, cold then warm; the cold
    seconds (None without Chromium or Playwright)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("page in Chromium: skipped (Playwright for Python is not installed)")
        return None
    if not CHROMIUM.exists():
        print(f"page in Chromium: skipped (no {CHROMIUM})")
        return None
    from test_serve_support import running_server
    from ui_support import ARGS

    cold = 0.0
    with running_server(job) as (base, _token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        pg = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        errors: list[str] = []
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        url = f"{base}#/{job.name}/distributed"
        for label in ("cold (fresh server and browser)", "warm (reloaded)"):
            t0 = time.perf_counter()
            if label.startswith("cold"):
                pg.goto(url)
            else:
                pg.reload()
            pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=600_000)
            wall = time.perf_counter() - t0
            cold = cold or wall
            ranks = pg.get_attribute("#dist-heatmap", "data-ranks")
            print(f"page in Chromium, {label}: {wall:.2f} s to ready, {ranks} ranks drawn ({load()})")
            for name, start, dur, size in pg.evaluate(_REQUESTS):
                print(f"    {name[:70]:70s} at {start / 1e3:6.2f} s  {dur / 1e3:6.2f} s  {size / 1024:7.0f} KiB")
            pg.evaluate("performance.clearResourceTimings()")
        if errors:
            print(f"  console errors: {errors[:3]}")
        browser.close()
    return cold


#: The pages of a job timed cold one by one (main.ts's hash routes), each on a fresh server
#: and browser: what a user waits for when opening that page first.
PAGES = ("overview", "advice", "steps", "kernels", "distributed", "sql")


#: Every table on the page has its rows (table.ts sets the count once they came).
_TABLES_LOADED = """() => [...document.querySelectorAll('.table .pageinfo')].every((e) => e.dataset.total !== undefined
  || (e.parentElement.parentElement.querySelector('.error') || {}).textContent)"""


@contextlib.contextmanager
def served_from(src: Path | None) -> Iterator[None]:
    """Servers started meanwhile run ``src``'s aiprof (the peer checkout), else this one's."""
    old = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = str(src)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def each_page(job: Path, src: Path | None, label: str, pages: tuple[str, ...] = PAGES) -> dict[str, float]:
    """Each of :data:`PAGES` cold in Chromium (a fresh ``aiprof serve`` from ``src``'s
    aiprof, or this checkout's, and a fresh browser): seconds to ready, the slowest API
    request; returns {page: seconds}."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("pages in Chromium: skipped (Playwright for Python is not installed)")
        return {}
    if not CHROMIUM.exists():
        print(f"pages in Chromium: skipped (no {CHROMIUM})")
        return {}
    from test_serve_support import running_server
    from ui_support import ARGS

    out: dict[str, float] = {}
    with served_from(src):
        for page in pages:
            with running_server(job) as (base, _token), sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                pg = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
                errors: list[str] = []
                pg.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
                t0 = time.perf_counter()
                pg.goto(f"{base}#/{job.name}/{page}")
                pg.wait_for_function("window.__aiprof && window.__aiprof.ready === true", timeout=900_000)
                # A table page is ready before its rows come: wait for every table's rows too.
                pg.wait_for_function(_TABLES_LOADED, timeout=900_000)
                out[page] = wall = time.perf_counter() - t0
                reqs = pg.evaluate(_REQUESTS)
                slow = max(reqs, key=lambda x: x[2]) if reqs else ["-", 0, 0, 0]
                shown = pg.evaluate("document.querySelector('#main').innerText.slice(0, 60).replace(/\\s+/g, ' ')")
                print(
                    f"  {label:6s} {page:12s} {wall:7.2f} s to ready, {len(reqs)} requests, slowest "
                    f"{slow[0].split('?')[0][:40]} {slow[2] / 1e3:.2f} s ({load()}) | {shown}"
                )
                if errors:
                    print(f"         console errors: {errors[:2]}")
                browser.close()
    return out


def meta_request(job: Path, src: Path | None, label: str) -> float:
    """``GET /profiles/{pid}`` (the metadata every page but Distributed reads first) on a
    fresh server without its warm-up (``--no-warm``: nothing else competes for the
    cores), served from ``src``'s aiprof or this checkout's; seconds."""
    import httpx

    from test_serve_support import running_server

    with served_from(src), running_server(job, extra=("--no-warm",)) as (base, _token):
        t0 = time.perf_counter()
        r = httpx.get(f"{base}api/v1/profiles/{job.name}", timeout=3600)
        dt = time.perf_counter() - t0
    d = r.json()
    print(
        f"  {label:6s} GET /profiles/{job.name}: {dt:7.2f} s, {len(r.content) / 1024:.0f} KiB, span {d['span_ns']}, "
        f"{len(d['steps'])} step rows, {len(d['devices_used'])} devices, from_index {d.get('from_index')} ({load()})"
    )
    return dt


def server_views(job: Path) -> list[dict[str, Any]]:
    """Each view the page requests, on a freshly opened job; the comm_overlap rows."""
    total = 0.0
    with open_job(job) as prof:
        assert comm_overlap_from_index(prof) is not None, "the index lacks kernel_ns: re-import the job"
        for view, q in PAGE_VIEWS:
            t0 = time.perf_counter()
            res = run(prof, view, q)
            dt = time.perf_counter() - t0
            total += dt
            print(f"  {view:13s} {dt:8.2f} s  {res.total:7d} rows")
        print(f"page views, cold, from the index: {total:.2f} s ({load()})")
        t0 = time.perf_counter()
        rows: list[dict[str, Any]] = run(prof, "comm_overlap", ALL).rows
        print(f"  comm_overlap  {time.perf_counter() - t0:8.2f} s  {len(rows):7d} rows (not on the page)")
    return rows


def hta_peer(traces: Path, timeout: float, page_s: float | None) -> None:
    from hta_compare import hta_python

    try:
        r = subprocess.run(
            [hta_python(), "-c", _HTA, str(traces)], capture_output=True, text=True, timeout=timeout, check=True
        )
    except subprocess.TimeoutExpired:
        print(f"HTA: timed out after {timeout:.0f} s ({load()})")
        return
    except subprocess.CalledProcessError as e:
        print(f"HTA: failed: {(e.stderr or '').strip().splitlines()[-1:]}")
        return
    d = json.loads(r.stdout.strip().splitlines()[-1])
    analyses = d["get_temporal_breakdown"] + d["get_comm_comp_overlap"]
    print(
        f"HTA 0.5.0 on {d['ranks']} ranks: TraceAnalysis {d['load']:.1f} s, get_temporal_breakdown "
        f"{d['get_temporal_breakdown']:.2f} s, get_comm_comp_overlap {d['get_comm_comp_overlap']:.2f} s, "
        f"peak RSS {d['rss'] / 2**20:.0f} MiB ({load()})"
    )
    if page_s:
        print(f"ratio HTA (load + analyses) / page cold: {(d['load'] + analyses) / page_s:.1f}x")
        print(f"ratio HTA (analyses alone, after its load) / page cold: {analyses / page_s:.2f}x")


def peer_overlap(job: Path, ours: list[dict[str, Any]], sample_k: int) -> None:
    ours_s = 0.0
    with open_job(job) as prof:
        t0 = time.perf_counter()
        run(prof, "comm_overlap", ALL)
        ours_s = time.perf_counter() - t0
    ranks = sorted({int(r["rank"]) for r in ours})
    sample = ranks if not sample_k else ranks[:: max(1, len(ranks) // sample_k)][:sample_k]
    t0 = time.perf_counter()
    peer: list[dict[str, Any]] = []
    for r in sample:
        with open_profile(job / f"rank{r}.aiprof") as one:
            peer += run(one, "comm_overlap", ALL).rows
    peer_s = (time.perf_counter() - t0) * len(ranks) / len(sample)
    scaled = "" if len(sample) == len(ranks) else f" (measured on {len(sample)} ranks, scaled to {len(ranks)})"
    mine = sorted((r for r in ours if int(r["rank"]) in set(sample)), key=_key)
    agree = len(mine) == len(peer) and all(
        _key(x) == _key(y) and all(abs(x[c] - y[c]) <= 1e-6 + 1e-9 * abs(y[c]) for c in COLS)
        for x, y in zip(mine, sorted(peer, key=_key), strict=True)
    )
    print(f"comm_overlap, {len(ranks)} ranks: index {ours_s:.2f} s, rank by rank {peer_s:.2f} s{scaled} ({load()})")
    print(f"ratio (rank by rank / index): {peer_s / max(ours_s, 1e-9):.1f}x; rows agree: {agree}")


def main() -> None:
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", nargs="?", type=Path)
    ap.add_argument("--build", type=Path, help="write a fleet and import it here first")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--traces", type=Path, help="the job's Kineto traces, for HTA (default: the built fleet's)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--hta-timeout", type=float, default=600.0)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--pages", action="store_true", help="time each page of the job cold (PAGES)")
    ap.add_argument("--before", type=Path, help="with --pages: also serve from this checkout's src/ (the peer)")
    ap.add_argument("--only-pages", action="store_true", help="with --pages or --meta: nothing else")
    ap.add_argument("--page", action="append", choices=PAGES, help="with --pages: this page only (repeatable)")
    ap.add_argument("--meta", action="store_true", help="time GET /profiles/{pid} cold (with --before: both)")
    ap.add_argument("--peer-sample", type=int, default=0, help="compute the peer on K ranks only (0: all)")
    a = ap.parse_args()
    job = build(a.build, a.ranks, a.workers) if a.build else a.job
    if job is None:
        ap.error("give JOB_DIR or --build OUT")
    if not (job / "cluster").is_dir():
        ap.error(f"{job}: not a job folder (no cluster/ index): aiprof import RANKS -o {job}")
    traces = a.traces or (a.build / "traces" if a.build else None)

    print(f"job {job}")
    if a.meta:
        print("the profile metadata, cold (fresh server, no warm-up)")
        after = meta_request(job, None, "after")
        if a.before:
            before = meta_request(job, a.before, "before")
            print(f"  ratio before / after: {before / after:.0f}x")
        if a.only_pages:
            return
    if a.pages:
        print(f"each page cold in Chromium at 1440x900 (fresh server and browser per page; {load()})")
        pages = tuple(a.page or PAGES)
        before = each_page(job, a.before, "before", pages) if a.before else {}
        after = each_page(job, None, "after", pages)
        for page, s in after.items():
            if page in before:
                print(f"  {page:12s} before {before[page]:7.2f} s, after {s:6.2f} s: {before[page] / s:.1f}x")
        if a.only_pages:
            return
    page_s = None if a.no_browser else browser_page(job)
    ours = server_views(job)
    if a.no_hta:
        pass
    elif traces is None:
        print("HTA: skipped (give --traces DIR, the job's Kineto traces)")
    else:
        hta_peer(traces, a.hta_timeout, page_s)
    peer_overlap(job, ours, a.peer_sample)


if __name__ == "__main__":
    main()
