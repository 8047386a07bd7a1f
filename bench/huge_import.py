"""A Kineto trace larger than the machine's memory budget: import and every view, peak RSS.

Issue 18 asks that a 10 GB uncompressed Kineto trace, made by repeating a real one in
time, imports with a peak RSS under 2 GiB and that every view answers. This writes
such a trace (V100/df_index_resolver.json.gz repeated, ids and steps shifted per copy,
as bench/hta_compare.py --big does), imports it in a child process, then runs each
view on the profile in a second child, and prints for each stage its wall time, CPU
time and peak RSS (the child's ``ru_maxrss``: Python, Arrow and DuckDB together).

HTA is not run here: it loads a whole trace into pandas, which on this 24 GiB machine
a 10 GB trace does not fit (issue 17 cites 950 GB of RAM for 200 GB of traces).

    .venv/bin/python bench/huge_import.py [--gib 10] [--keep DIR] [--reuse] [--only VIEW...]
        [--faces [--advise]]

``--faces`` then times what a user runs on the profile, each as a command: the first
``aiprof report`` (it computes and keeps the overview), the next one, ``aiprof report
--html``, and with ``--advise`` ``aiprof advise``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "kineto" / "V100" / "df_index_resolver.json.gz"

_IMPORT = """
from aiprof.allocators import use_lean; use_lean(importing=True)  # as `aiprof import` (aiprof/allocators.py)
import json, resource, sys, time
from pathlib import Path
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t0, c0 = time.perf_counter(), cpu()
from aiprof.importers import import_paths
out, ctx = import_paths([Path(sys.argv[1])], Path(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": cpu() - c0,
                  "events": sum(ctx.kinds.values()), "warnings": list(ctx.warnings),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_VIEW = """
from aiprof.allocators import use_lean; use_lean()  # as `aiprof report` (aiprof/allocators.py)
import json, resource, sys, time
from aiprof.analysis import Query, run
from aiprof.errors import AiprofError
from aiprof.store import open_profile
p = open_profile(sys.argv[1])
t = time.perf_counter()
try:
    rows, error = len(run(p, sys.argv[2], Query.parse([], None, 20)).rows), None
except AiprofError as e:  # a view that needs an argument, or has nothing to show
    rows, error = 0, str(e).splitlines()[0][:60]
print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows, "error": error,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def make_huge(gib: float, dest: Path) -> tuple[int, int]:
    """Write ``dest``: the source trace repeated in time until it holds ``gib`` GiB.
    Returns (copies, bytes)."""
    import orjson

    doc = orjson.loads(gzip.decompress(SOURCE.read_bytes()))
    evs = doc["traceEvents"]
    ts = [e["ts"] for e in evs if "ts" in e]
    span = max(ts) - min(ts) + 1000
    steps = [int(e["name"].split("#")[1]) for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")]
    step_gap = (max(steps) - min(steps) + 1) if steps else 0
    goal = int(gib * 2**30)
    copies = 0
    with dest.open("wb") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(orjson.dumps(head)[:-1] + b', "traceEvents": [\n')
        while f.tell() < goal:
            i = copies
            out = []
            for e in evs:
                if i and e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if "ts" in e2 and e.get("ph") != "M":
                    e2["ts"] = e["ts"] + i * span
                if i and isinstance(e2.get("id"), int):
                    e2["id"] += i * 10_000_000
                if i and isinstance(e2.get("args"), dict):
                    a = dict(e2["args"])
                    for k in ("correlation", "External id"):
                        if isinstance(a.get(k), int):
                            a[k] += i * 10_000_000
                    e2["args"] = a
                if i and str(e.get("name", "")).startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + step_gap * i}"
                out.append(e2)
            body = orjson.dumps(out)[1:-1]
            f.write((b",\n" if i else b"") + body)
            copies += 1
        f.write(b"\n]}\n")
        size = f.tell()
    return copies, size


def watch(p: subprocess.Popen, cap: int, timeout: float) -> tuple[int, str | None]:
    """Poll the child ``p`` until it ends: its peak RSS, and why it was killed (past
    ``cap`` bytes or ``timeout`` s) or None."""
    import psutil

    t = time.perf_counter()
    peak, why = 0, None
    while p.poll() is None:
        try:
            peak = max(peak, psutil.Process(p.pid).memory_info().rss)
        except psutil.NoSuchProcess:
            break
        if peak > cap or time.perf_counter() - t > timeout:
            why = f"killed past {cap / 2**30:.0f} GiB of RSS" if peak > cap else f"killed after {timeout:.0f} s"
            p.kill()
            break
        time.sleep(0.2)
    return peak, why


def child(code: str, *args: str, cap: int, timeout: float) -> dict:
    """Run ``code`` in a child; kill it past ``cap`` bytes of RSS or ``timeout`` s (then
    the answer says so instead of the child's)."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, why = watch(p, cap, timeout)
    out, err = p.communicate()
    if why or p.returncode:
        sys.stderr.write(err[-2000:])
        return {"seconds": time.perf_counter() - t, "rows": 0, "rss": peak, "error": why or f"exit {p.returncode}"}
    answer: dict = json.loads(out.strip().splitlines()[-1])
    return answer


def command(argv: list[str], cap: int, timeout: float) -> dict:
    """Run ``python -m aiprof ARGV`` as a user does: wall seconds, peak RSS (polled), and
    an error where it failed or was killed past ``cap`` bytes or ``timeout`` s."""
    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "aiprof", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    peak, why = watch(p, cap, timeout)
    _, err = p.communicate()
    seconds = time.perf_counter() - t
    if not why and p.returncode:
        why = f"exit {p.returncode}: {err.strip().splitlines()[-1:] or ''}"
    return {"seconds": seconds, "rss": peak, "error": why}


def faces(prof: Path, work: Path, cap: int, timeout: float, with_advise: bool) -> None:
    """What a user runs on the profile: the report (the first, which computes and keeps
    overview.json, and the next), the HTML report, and with ``with_advise`` the advice."""
    kept = prof / "overview.json"
    kept.unlink(missing_ok=True)
    runs = [
        ("aiprof report (first)", ["report", str(prof)]),
        ("aiprof report (again)", ["report", str(prof)]),
        ("aiprof report --html", ["report", str(prof), "--html", str(work / "huge.html")]),
    ]
    if with_advise:
        runs.append(("aiprof advise", ["advise", str(prof)]))
    print(f"{'command':24} {'seconds':>8} {'peak RSS GiB':>13}")
    for name, argv in runs:
        r = command(argv, cap, timeout)
        said = f"  ({r['error']})" if r.get("error") else ""
        print(f"{name:24} {r['seconds']:8.2f} {r['rss'] / 2**30:13.2f}{said}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=10.0, help="uncompressed size of the trace (GiB)")
    ap.add_argument("--keep", type=Path, help="write the trace and the profile here and keep them")
    ap.add_argument("--cap-gib", type=float, default=8.0, help="kill a child past this RSS")
    ap.add_argument("--view-timeout", type=float, default=300.0)
    ap.add_argument("--only", nargs="*", help="views to run (default: every view)")
    ap.add_argument("--reuse", action="store_true", help="with --keep: skip the import when the profile is there")
    ap.add_argument("--faces", action="store_true", help="also time aiprof report, report --html (and --advise)")
    ap.add_argument("--advise", action="store_true", help="with --faces: also aiprof advise (minutes, GiBs)")
    ap.add_argument("--face-timeout", type=float, default=1200.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiprof-huge-") as tmpdir:
        work = args.keep or Path(tmpdir)
        work.mkdir(parents=True, exist_ok=True)
        trace, prof = work / "huge.json", work / "huge.aiprof"
        t = time.perf_counter()
        if trace.exists() and args.keep:
            copies, size = -1, trace.stat().st_size
        else:
            copies, size = make_huge(args.gib, trace)
        made = time.perf_counter() - t
        made_how = f"x{copies}, written in {made:.0f} s" if copies >= 0 else "the one kept in --keep"
        print(f"trace: {SOURCE.name} repeated, {size / 2**30:.2f} GiB of JSON ({made_how})")
        print(f"load (/proc/loadavg): {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        cap = int(args.cap_gib * 2**30)
        if args.reuse and (prof / "profile.json").is_file():
            imp = {"seconds": float("nan"), "cpu_seconds": float("nan"), "events": 0, "warnings": [], "rss": 0}
        else:
            imp = child(_IMPORT, str(trace), str(prof), cap=cap, timeout=7200)
            if imp.get("error"):
                raise SystemExit(f"import: {imp['error']}")
        if imp["rss"] == 0:
            print("import: skipped (--reuse: the kept profile)")
        else:
            print(
                f"import: {imp['events']:,} events in {imp['seconds']:.1f} s ({size / 1e6 / imp['seconds']:.1f} MB/s, "
                f"CPU {imp['cpu_seconds']:.1f} s), peak RSS {imp['rss'] / 2**30:.2f} GiB "
                f"({imp['rss'] / size:.3f}x the JSON; goal < 2 GiB)"
            )
        for w in imp["warnings"]:
            print(f"  warning: {w}")
        store = sum(p.stat().st_size for p in prof.rglob("*") if p.is_file())
        print(f"profile: {store / 2**20:.0f} MiB on disk")
        from aiprof.analysis import views as all_views

        print(f"{'view':16} {'seconds':>8} {'rows':>5} {'peak RSS GiB':>13}")
        views = {}
        for v in args.only or sorted(all_views()):
            r = views[v] = child(_VIEW, str(prof), v, cap=cap, timeout=args.view_timeout)
            said = f"  ({r['error']})" if r.get("error") else ""
            print(f"{v:16} {r['seconds']:8.2f} {r['rows']:>5} {r['rss'] / 2**30:13.2f}{said}", flush=True)
        killed = [v for v, r in views.items() if str(r.get("error") or "").startswith(("killed", "exit"))]
        print(
            f"views answered: {len(views) - len(killed)} of {len(views)}"
            + (f" (not: {', '.join(killed)})" if killed else "")
        )
        worst = max([imp["rss"], *(r["rss"] for r in views.values())])
        print(f"peak RSS over import and views: {worst / 2**30:.2f} GiB ({'under' if worst < 2**31 else 'OVER'} 2 GiB)")
        if args.faces:
            faces(prof, work, max(cap, 16 << 30) if args.advise else cap, args.face_timeout, args.advise)
    return 0


if __name__ == "__main__":
    sys.exit(main())
