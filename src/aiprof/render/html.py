"""``aiprof report PROFILE --html report.html``: one self-contained HTML file.

The file is the web UI itself (its CSS and JS inlined) plus the API responses it
needs, embedded as JSON: the overview, steps, operators, kernels, memory, allocations
and counters views, the memory curves and the advice. Its charts (step time, breakdown,
device utilization, memory) are drawn by the inlined UI code, the same as in
``aiprof serve``. It opens from disk with no server and loads nothing from the network.
Tables sort, filter and page in the browser over the embedded rows (the operators and
kernels tables hold their top ``TOP_ROWS`` rows; allocations, the ``TOP_ROWS`` largest
and those live at a peak). There is no timeline in the report: use ``aiprof serve`` or
``aiprof timechart`` for that.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..analysis import Query, run, views
from ..analysis.operators import NEST_HOST_SPANS, big_profile, not_computed
from ..errors import AiprofError
from ..store import Profile
from ..web.assets import read_asset
from ..web.jsonio import dumps
from ..web.routes import advice_deferred, advice_for, describe
from ..web.series import SeriesQuery
from ..web.timeline import MAX_ITEMS, Timeline, Window

TOP_ROWS = 500
#: view -> rows embedded (None = all).
REPORT_VIEWS: dict[str, int | None] = {
    "overview": None,
    "steps": None,
    "operators": TOP_ROWS,
    "kernels": TOP_ROWS,
    "memory": None,
    "counters": None,
}
REPORT_ID = "report"
#: Pixels the embedded memory curves are merged to (the page's chart width).
MEMORY_WIDTH = 1000
#: Allocations live at a peak embedded beside the largest ones, at most.
LIVE_ROWS = 5000


def _asset(name: str) -> str:
    return read_asset(name)


def _script_safe(text: str) -> str:
    # Nothing inside a <script> may close it.
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def report_data(profile: Profile) -> dict[str, Any]:
    """The embedded API responses, keyed by the API path the UI asks for."""
    name = profile.paths[0].name if len(profile.paths) == 1 else f"{len(profile.paths)} profiles"
    base = f"/profiles/{REPORT_ID}"
    timeline = Timeline(profile)
    data: dict[str, Any] = {
        "__generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "/profiles": {"profiles": [{"id": REPORT_ID, "name": name, "status": "ok"}]},
        base: describe(profile, REPORT_ID, name, timeline),
    }
    t0, t1 = data[base]["span_ns"]  # describe's span: the timeline is not built for it
    span = Window.parse(t0, t1, MEMORY_WIDTH, None, MAX_ITEMS)
    data[f"{base}/memory/series"] = SeriesQuery(profile, threading.RLock()).memory(span)
    spans = big_profile(profile.metas)
    data[f"{base}/views/allocations"] = _allocations(profile) if spans is None else _left_out("allocations", spans)
    known = views()
    for view, limit in REPORT_VIEWS.items():
        if view not in known:
            continue
        if view in NEST_HOST_SPANS and spans is not None:
            data[f"{base}/views/{view}"] = _left_out(view, spans)
            continue
        try:
            res = run(profile, view, Query(limit=limit))
        except AiprofError as e:
            data[f"{base}/views/{view}"] = {"view": view, "columns": [], "rows": [], "total": 0, "error": str(e)}
            continue
        out = res.to_json()
        out["query"] = res.query.to_json()
        data[f"{base}/views/{view}"] = out
    later = advice_deferred(profile, "aiprof advise PROFILE computes it")  # no server here to ask
    if later is not None:
        data[f"{base}/advice"] = later
        return data
    try:
        data[f"{base}/advice"] = advice_for(profile)
    except Exception as e:
        data[f"{base}/advice"] = {"available": False, "advice": [], "reason": f"the proposer failed: {e}"}
    return data


def _left_out(view: str, spans: int) -> dict[str, Any]:
    """A view left out of a big profile's report (analysis.operators.big_profile): what
    the page shows instead of its rows (there is no server to compute it: an error)."""
    out = not_computed(view, spans, f"aiprof report PROFILE --view {view} computes it")
    out["error"] = "left out of the report: " + out["reason"]
    return out


def _allocations(profile: Profile) -> dict[str, Any]:
    """The allocations view's ``TOP_ROWS`` largest rows and every row live at a peak
    (up to ``LIVE_ROWS``), largest first: what the report's memory page shows."""
    try:
        top = run(profile, "allocations", Query(limit=TOP_ROWS))
        live = run(profile, "allocations", Query.parse(["live_at_peak=true"], ["-bytes"], LIVE_ROWS, 0))
    except AiprofError as e:
        return {"view": "allocations", "columns": [], "rows": [], "total": 0, "error": str(e)}
    out = top.to_json()
    seen = Counter(tuple(r.values()) for r in out["rows"])
    extra = []
    for r in live.to_json()["rows"]:
        k = tuple(r.values())
        if seen[k]:
            seen[k] -= 1
        else:
            extra.append(r)
    out["rows"] = sorted(out["rows"] + extra, key=lambda r: -int(r["bytes"]))
    out["query"] = top.query.to_json()
    return out


def render_report(profile: Profile) -> str:
    """The report's HTML text."""
    page = _asset("index.html")
    css = _asset("style.css")
    js = _asset("app.js")
    data = dumps(report_data(profile)).decode("utf-8")
    page = page.replace('<link rel="stylesheet" href="/static/style.css">', f"<style>\n{css}\n</style>")
    page = page.replace(
        '<script src="/static/app.js"></script>',
        f"<script>window.AIPROF_EMBED = {_script_safe(data)};</script>\n<script>\n{_script_safe(js)}\n</script>",
    )
    page = page.replace("<title>aiprof</title>", "<title>aiprof report</title>")
    return page


def write_report(profile: Profile, path: str | os.PathLike[str]) -> Path:
    """Write the self-contained HTML report of ``profile`` to ``path`` (atomically)."""
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(render_report(profile), encoding="utf-8")
    os.replace(tmp, out)
    return out
