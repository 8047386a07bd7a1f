"""aiprof vs Holistic Trace Analysis (HTA 0.5.0) on the same Kineto traces, same run.

Prints, per trace:
1. correctness side by side: device idle / compute / non-compute %, device operation
   count and total time in HTA's window (kernels, copies, sets, syncs launched before
   the last step), against HTA as shipped (which rounds float-µs traces inward to whole
   µs) and against HTA with that rounding off (HTA_DISABLE_NS_ROUNDING=1);
2. speed and memory: import seconds vs HTA's load seconds, their ratio, peak RSS of
   each (separate child processes, so RSS is per tool and file), and the CPU seconds of
   each (user + system, with waited-for children), which move less with the load of
   shared cores than wall time;
3. with --big: the same on a large trace made by repeating
   V100/df_index_resolver.json.gz N times in time (default 8, ~1.7M events), plus the
   time of each view against HTA's nearest analysis.

HTA runs from its own virtualenv (bench/.venv-hta, made on first use, or $HTA_PYTHON):
it is a benchmark-only dependency, never a runtime one.

    .venv/bin/python bench/hta_compare.py [--big] [--repeat 8] [FILES...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "kineto"
HTA_VENV = ROOT / "bench" / ".venv-hta"


def hta_python() -> str:
    env = os.environ.get("HTA_PYTHON")
    if env:
        return env
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        print("bench: creating bench/.venv-hta with holistictraceanalysis==0.5.0 (pandas<3)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "holistictraceanalysis==0.5.0", "pandas<3"], check=True)
    return str(py)


def run_hta(files: list[Path], no_rounding: bool) -> dict[str, dict[str, Any]]:
    env = dict(os.environ)
    if no_rounding:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    out = subprocess.run(
        [hta_python(), str(ROOT / "bench" / "hta_reference.py"), *map(str, files)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    res = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            res[d["file"]] = d
    return res


_OURS = r"""
from aiprof.allocators import use_lean; use_lean(importing=True)  # as `aiprof import` (aiprof/allocators.py)
import json, resource, sys, time
from pathlib import Path
from aiprof.importers import import_paths
# Module imports are not part of the timing (HTA's are not either): the importers the
# dispatcher asks, and the analysers that derive a large profile's tables.
import aiprof.importers, aiprof.analysis.derived
aiprof.importers.importers()
def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
t0, c0 = time.perf_counter(), cpu()
out, ctx = import_paths([Path(sys.argv[1])], Path(sys.argv[2]))
dt, dc = time.perf_counter() - t0, cpu() - c0
rss_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
from aiprof.analysis import Query, run
from aiprof.analysis.common import hta_device_window_sql
from aiprof.store import open_profile
p = open_profile(out)
dev = run(p, "overview", Query.parse(["section=device"])).rows
win = p.sql(f"SELECT rank, count(*) AS n, sum(dur) AS d FROM ({hta_device_window_sql()}) GROUP BY rank").to_pylist()
print(json.dumps({"seconds": dt, "cpu_seconds": dc, "events": sum(ctx.kinds.values()), "rss": rss_import,
  "device": dev, "window": [{k: (int(v) if v is not None else None) for k, v in r.items()} for r in win]}))
"""

_VIEWS = r"""
from aiprof.allocators import use_lean; use_lean()  # as `aiprof report` (aiprof/allocators.py)
import json, sys, time
from aiprof.analysis import Query, run
from aiprof.store import open_profile
view_s = {}
# Cold: each view on a freshly opened profile, so none reuses another's work.
for v in ("overview", "steps", "kernels", "operators", "idle", "memory", "counters", "events"):
    fresh = open_profile(sys.argv[1])
    t = time.perf_counter()
    run(fresh, v, Query.parse([], None, 50))
    view_s[v] = time.perf_counter() - t
    fresh.close()
print(json.dumps(view_s))
"""


def run_ours(path: Path, views: bool = False) -> dict[str, Any]:
    """The import (in a child process, as ``aiprof import`` runs it) and, with ``views``,
    each view timed in another child (as ``aiprof report`` runs them)."""
    with tempfile.TemporaryDirectory(prefix="aiprof-bench-") as tmp:
        prof = str(Path(tmp) / "p.aiprof")
        out = subprocess.run([sys.executable, "-c", _OURS, str(path), prof], capture_output=True, text=True, check=True)
        res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        res["views"] = {}
        if views:
            out = subprocess.run([sys.executable, "-c", _VIEWS, prof], capture_output=True, text=True, check=True)
            res["views"] = json.loads(out.stdout.strip().splitlines()[-1])
    return res


def make_big(repeat: int, dest: Path) -> Path:
    """df_index_resolver repeated in time: ids shifted so links stay unique per copy."""
    import orjson

    src = DATA / "V100" / "df_index_resolver.json.gz"
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"]
    ts = [e["ts"] for e in evs if "ts" in e]
    span = max(ts) - min(ts) + 1000
    with dest.open("wb") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(orjson.dumps(head)[:-1] + b', "traceEvents": [\n')
        first = True
        for i in range(repeat):
            for e in evs:
                e2 = dict(e)
                if "ts" in e2 and e.get("ph") != "M":
                    e2["ts"] = e["ts"] + i * span
                if i and "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] = e2["id"] + i * 10_000_000
                if i and isinstance(e2.get("args"), dict):
                    a = dict(e2["args"])
                    for k in ("correlation", "External id"):
                        if isinstance(a.get(k), int):
                            a[k] = a[k] + i * 10_000_000
                    e2["args"] = a
                if i and e.get("ph") == "M":
                    continue
                if i and str(e.get("name", "")).startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 10 * i}"
                f.write((b"" if first else b",\n") + orjson.dumps(e2))
                first = False
        f.write(b"\n]}\n")
    return dest


def fmt_pct(rows: list[dict[str, Any]], rank: int) -> str:
    d = {r["category"]: r["percent"] for r in rows if r["rank"] == rank}
    return "/".join(f"{d.get(c, float('nan')):.2f}" for c in ("idle", "compute", "non_compute"))


def hta_pct(h: dict[str, Any], rank: int) -> str:
    tb = (h.get("temporal_breakdown") or {}).get(str(rank))
    if not tb:
        return "n/a (" + str((h.get("errors") or {}).get("temporal_breakdown", h.get("error")) or "none")[:30] + ")"
    return "/".join(f"{tb[k]:.2f}" for k in ("idle_pct", "compute_pct", "non_compute_pct"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--big", action="store_true", help="also the repeated large trace")
    ap.add_argument("--repeat", type=int, default=8)
    args = ap.parse_args()
    files = args.files or sorted(DATA.glob("*/*.json.gz"))
    hta = run_hta(files, no_rounding=False)
    hta_exact = run_hta(files, no_rounding=True)
    print("## Correctness: device idle/compute/non-compute % and device ops in HTA's window")
    print(
        f"{'file':44} {'rank':>4} {'aiprof %':>20} {'HTA %':>20} {'HTA exact %':>20} {'ops ours':>9} {'ops HTA':>8} {'time ours ns':>14} {'HTA exact ns':>14}"
    )
    perf = []
    for f in files:
        ours = run_ours(f)
        h, hx = hta.get(str(f), {}), hta_exact.get(str(f), {})
        for w in ours["window"] or [{"rank": 0, "n": 0, "d": 0}]:
            r = w["rank"]
            gk = (hx.get("gpu_kernels") or {}).get(str(r)) or {}
            print(
                f"{f.parent.name + '/' + f.name[:30]:44} {r:>4} {fmt_pct(ours['device'], r):>20} {hta_pct(h, r):>20} "
                f"{hta_pct(hx, r):>20} {w['n']:>9} {gk.get('count', '-'):>8} {w['d'] or 0:>14} {gk.get('total_dur_ns', '-'):>14}"
            )
        perf.append((f, ours, h))
    print()
    print("## Speed and memory: import (aiprof) vs load (HTA), one child process each")
    print(f"load (/proc/loadavg): {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(
        f"{'file':44} {'events':>8} {'aiprof s':>9} {'HTA s':>8} {'ratio':>7} {'aiprof RSS MB':>14} {'HTA RSS MB':>11}"
        f" {'aiprof CPU s':>13} {'HTA CPU s':>10} {'CPU ratio':>9}"
    )
    for f, ours, h in perf:
        hs = h.get("load_seconds") or float("nan")
        hc = h.get("load_cpu_seconds") or float("nan")
        oc = ours.get("cpu_seconds") or float("nan")
        print(
            f"{f.parent.name + '/' + f.name[:30]:44} {ours['events']:>8} {ours['seconds']:>9.3f} {hs:>8.3f} {hs / ours['seconds']:>6.1f}x "
            f"{ours['rss'] / 2**20:>14.0f} {(h.get('peak_rss_bytes') or 0) / 2**20:>11.0f}"
            f" {oc:>13.3f} {hc:>10.3f} {hc / oc:>8.1f}x"
        )
    if args.big:
        with tempfile.TemporaryDirectory(prefix="aiprof-big-") as tmp:
            big = make_big(args.repeat, Path(tmp) / "big.json")
            size = big.stat().st_size
            ours = run_ours(big, views=True)
            h = run_hta([big], no_rounding=False).get(str(big), {})
            hs = h.get("load_seconds") or float("nan")
            print()
            print(f"## Large trace: df_index_resolver x{args.repeat}, {size / 2**20:.0f} MiB of JSON")
            print(
                f"{'events':>9} {'aiprof s':>9} {'HTA s':>8} {'ratio':>7} {'aiprof ev/s':>12} {'aiprof RSS MB':>14} {'RSS/JSON':>9} {'HTA RSS MB':>11} {'HTA RSS/JSON':>13}"
            )
            print(
                f"{ours['events']:>9} {ours['seconds']:>9.2f} {hs:>8.2f} {hs / ours['seconds']:>6.1f}x {ours['events'] / ours['seconds']:>12.0f} "
                f"{ours['rss'] / 2**20:>14.0f} {ours['rss'] / size:>9.2f} {(h.get('peak_rss_bytes') or 0) / 2**20:>11.0f} {(h.get('peak_rss_bytes') or 0) / size:>13.2f}"
            )
            print()
            print("views on the large trace (aiprof view vs HTA's nearest analysis):")
            pairs = {
                "overview": "temporal_breakdown",
                "idle": "idle_time_breakdown",
                "kernels": "gpu_kernels",
                "steps": "temporal_breakdown",
            }
            for v, s in ours["views"].items():
                hv = pairs.get(v)
                ht = (h.get("analysis_seconds") or {}).get(hv) if hv else None
                ratio = f"{ht / s:.1f}x" if ht else "-"
                print(
                    f"  {v:10} {s:8.3f} s   HTA {hv or '-':22} {ht if ht is not None else float('nan'):8.3f} s   ratio {ratio}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
