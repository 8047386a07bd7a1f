"""The timeline's window fetch, server side: what one zoom or pan of the UI asks for.

bench/ui.py measures the fetch in Chromium (issue 14: p95 316 ms on 2.07M events,
target <= 100 ms). Here the same requests are made on the opened profile directly, so
that each part can be timed: the window (:meth:`Timeline.window`), one counter series
per metric and the memory series (:class:`SeriesQuery`), as ``fetchData`` in
web/ui/src/views/timeline.ts sends them for each refinement (25% margins, 1.5x the
width). The windows follow bench/ui.py's key presses: 12 zooms in (x0.8), pans, zooms
out, from the whole span. The UI sends the parts at once; the server answers them
one after the other under the profile's lock, so a fetch costs their sum.

The peer is another source tree on the same profile (``--baseline``: a copy of main
before the change), run in turn with this one, --repeat times each; each figure is
the p50 / p95 of every refinement of every round.

    .venv/bin/python bench/timeline_fetch.py PROFILE --baseline /path/to/tree [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1600
KEYS = ["w"] * 12 + ["d", "d", "a", "d"] * 3 + ["s"] * 6 + ["a"] * 4


def windows(span: tuple[int, int]) -> list[tuple[int, int]]:
    t0, t1 = float(span[0]), float(span[1])
    out = []
    for k in ("", *KEYS):
        dt = t1 - t0
        mid = (t0 + t1) / 2
        if k in ("w", "s"):
            f = 0.8 if k == "w" else 1 / 0.8
            t0, t1 = mid - dt * f / 2, mid + dt * f / 2
        elif k in ("a", "d"):
            s = dt * (0.1 if k == "d" else -0.1)
            t0, t1 = t0 + s, t1 + s
        dt = t1 - t0
        out.append((int(t0 - dt * 0.25), int(t1 + dt * 0.25)))
    return out


def worker(profile: Path) -> dict[str, list[float]]:
    """In the tree on PYTHONPATH: ms per refinement, per part."""
    from aiprof.store import open_profile
    from aiprof.web.series import SeriesQuery
    from aiprof.web.timeline import Timeline, Window

    prof = open_profile(profile)
    tl = Timeline(prof)
    tl.build()
    sq = SeriesQuery(prof, tl.lock, {})
    metrics = [(m["metric"], m["rank"], m["device"]) for m in sq.metrics()]
    has_memory = prof.tables.get("memory", 0) > 0
    parts: dict[str, list[float]] = {"window": [], "counters": [], "memory": [], "fetch": []}
    width = int(WIDTH * 1.5)
    sq.memory(Window(tl.span[0], tl.span[1], width))  # the first call caches the peaks, as the server does
    for a, b in windows(tl.span):
        w = Window(a, b, width)
        t = time.perf_counter()
        tl.window(w)
        t_w = time.perf_counter()
        for metric, rank, device in metrics:
            sq.counter(w, metric, rank, device)
        t_c = time.perf_counter()
        if has_memory:
            sq.memory(w)
        t_m = time.perf_counter()
        parts["window"].append((t_w - t) * 1e3)
        parts["counters"].append((t_c - t_w) * 1e3)
        parts["memory"].append((t_m - t_c) * 1e3)
        parts["fetch"].append((t_m - t) * 1e3)
    prof.close()
    return parts


def pct(v: list[float], p: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", type=Path)
    ap.add_argument("--baseline", type=Path, required=True, help="another source tree (with src/aiprof)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.profile)))
        return 0
    trees = {"baseline": args.baseline, "this tree": ROOT}
    res: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    for _ in range(args.repeat):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=str(tree / "src"))
            cmd = [sys.executable, __file__, str(args.profile), "--baseline", "-", "--worker"]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            for part, ms in json.loads(out.strip().splitlines()[-1]).items():
                res[name].setdefault(part, []).extend(ms)
    n = len(res["this tree"]["fetch"])
    print(f"{args.profile}: {n} refinements ({args.repeat} rounds of {n // args.repeat}); ms p50 / p95")
    print(f"{'part':10} {'baseline':>16} {'this tree':>16} {'p95 ratio':>9}")
    for part in ("window", "counters", "memory", "fetch"):
        b, o = res["baseline"][part], res["this tree"][part]
        print(
            f"{part:10} {statistics.median(b):7.1f} / {pct(b, 95):6.1f} {statistics.median(o):7.1f} / {pct(o, 95):6.1f}"
            f" {pct(b, 95) / max(pct(o, 95), 1e-6):8.2f}x"
        )
    print(f"target: fetch p95 <= 100 ms (issue 14); this tree {pct(res['this tree']['fetch'], 95):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
