"""Many-rank jobs: parallel import on Dask against aiprof's serial import and against
Holistic Trace Analysis's multi-rank load, cluster views on the index, and the scaling
curve, all in one run on fleets written by bench/make_fleet.py.

Prints, per fleet size:
1. import, what ``aiprof import DIR -o OUT --workers 2`` runs (a LocalCluster of 2
   processes, its start-up and shut-down and the cluster index included) against the
   same per-rank work (import, summaries, derived tables) done one rank after another
   in one process, and against HTA 0.5.0's
   ``TraceAnalysis(trace_dir=DIR)`` (its own process pool) on the same files: seconds
   and both ratios, each timed in its own process after its module imports (the
   parallel import's whole process, imports included, is printed beside); the
   client's peak RSS as the import reports it;
2. time per rank of the parallel import (the scaling curve) and its spread;
3. on the largest fleet: each cluster view (``ranks``, ``stragglers``, ``collectives``,
   ``links``, ``exposed_comm``) and ``aiprof advise`` answered from the index, seconds
   each, and that process's peak RSS.

HTA runs from bench/.venv-hta (see bench/hta_compare.py); a timeout bounds it. Each size
also prints the machine's load average and the CPU seconds of each tool's process tree:
wall-clock ratios only mean something when the load stays below the core count.

    .venv/bin/python bench/scale.py [--sizes 8,64,256,1024] [--compare 64,256] [--hta-timeout 900]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from make_fleet import SMALL_TEMPLATE, make_fleet  # noqa: E402

VIEWS = ("ranks", "stragglers", "collectives", "links", "exposed_comm")

_SERIAL = r"""
from aiprof.allocators import use_lean; use_lean(importing=True)  # as `aiprof import` (aiprof/allocators.py)
import json, sys, time
from pathlib import Path
import aiprof.importers.kineto  # module imports are not timed (HTA's are not either)
from aiprof.cluster.job import expand, plan
from aiprof.cluster.parallel import import_rank
t0 = time.perf_counter()
job = plan(expand([Path(sys.argv[1])]))
for rf in job.files:
    import_rank(rf, sys.argv[2], None, None)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

_PARALLEL = r"""
from aiprof.allocators import use_lean; use_lean(importing=True)  # as `aiprof import` (aiprof/allocators.py)
import json, sys, time
from pathlib import Path
import aiprof.importers.kineto, distributed  # module imports are not timed (as for the others)
from aiprof.cluster.engine import Where
from aiprof.cluster.job import expand
from aiprof.cluster.parallel import run_import
t0 = time.perf_counter()
rep = run_import(expand([Path(sys.argv[1])]), sys.argv[2], Where("local", None, int(sys.argv[3])))
print(json.dumps({"seconds": time.perf_counter() - t0, "rss": rep.client_peak_rss, "ranks": len(rep.imported)}))
"""

_HTA = r"""
import json, logging, resource, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "ranks": len(a.t.traces), "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_VIEWS = r"""
from aiprof.allocators import use_lean; use_lean()  # as `aiprof report` (aiprof/allocators.py)
import json, resource, sys, time
from aiprof.analysis import Query, run
from aiprof.advise import advise
from aiprof.cluster.opened import open_job
t0 = time.perf_counter()
p = open_job(sys.argv[1])
out = {"open": time.perf_counter() - t0}
for v in sys.argv[2].split(","):
    t = time.perf_counter()
    res = run(p, v, Query(limit=30))
    out[v] = time.perf_counter() - t
    out[v + "_rows"] = res.total
t = time.perf_counter()
items = advise(p)
out["advise"] = time.perf_counter() - t
out["advice"] = [a.rule for a in items]
out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def autogroup_note(load: float) -> str:
    """Why a loaded machine hides the parallel speedup, when it does: with the kernel's
    autogroup scheduling on, CPU time is shared fairly between sessions, so the Dask
    workers (one session with the bench) get no more CPU together than the serial
    import alone once other sessions keep every core busy; the wall-clock ratio is then
    about the inverse of the CPU ratio."""
    try:
        on = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return ""
    cores = os.cpu_count() or 1
    if not on or load <= cores:
        return ""
    return (
        f"  (load {load:.1f} > {cores} cores with autogroup scheduling: this session's processes share one "
        "session's CPU share, so the wall-clock ratio is bounded by serial CPU / Dask CPU)"
    )


def child_cpu() -> float:
    """CPU seconds (user + sys) of the waited-for child processes (and theirs) so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def last_json(stdout: str) -> dict[str, object]:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            d: dict[str, object] = json.loads(line)
            return d
    raise RuntimeError("no JSON result in:\n" + stdout[-2000:])


def parallel(traces: Path, out: Path, workers: int) -> tuple[float, float, float, float]:
    """What ``aiprof import DIR -o OUT --workers N`` does (cluster.parallel.run_import on a
    LocalCluster, its start-up and shut-down included), timed in its process after the
    module imports, as the serial import and HTA's load are: (seconds, client peak RSS
    MiB, CPU seconds of its process tree, wall seconds of the whole process)."""
    c0 = child_cpu()
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", _PARALLEL, str(traces), str(out), str(workers)],
        capture_output=True,
        text=True,
        env=env(),
        check=True,
    )
    wall = time.perf_counter() - t0
    d = last_json(r.stdout)
    return float(d["seconds"]), int(d["rss"]) / 2**20, child_cpu() - c0, wall  # type: ignore[call-overload]


def serial(traces: Path, out: Path) -> tuple[float, float]:
    c0 = child_cpu()
    r = subprocess.run(
        [sys.executable, "-c", _SERIAL, str(traces), str(out)], capture_output=True, text=True, env=env(), check=True
    )
    return float(last_json(r.stdout)["seconds"]), child_cpu() - c0  # type: ignore[arg-type]


def hta(traces: Path, timeout: float) -> tuple[float | None, str]:
    from hta_compare import hta_python

    c0 = child_cpu()
    try:
        r = subprocess.run(
            [hta_python(), "-c", _HTA, str(traces)], capture_output=True, text=True, timeout=timeout, check=True
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    except subprocess.CalledProcessError as e:
        return None, "failed: " + (e.stderr or "").strip().splitlines()[-1:][0] if e.stderr else "failed"
    d = last_json(r.stdout)
    cpu = child_cpu() - c0
    return float(d["seconds"]), f"{d['ranks']} ranks, peak RSS {int(d['rss']) / 2**20:.0f} MiB, CPU {cpu:.1f} s"  # type: ignore[arg-type]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,64,256,1024")
    ap.add_argument("--compare", default="64,256", help="sizes also imported serially and by HTA")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hta-timeout", type=float, default=900.0)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--work", type=Path, help="folder for the fleets (default: a temporary one, removed)")
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    compare = {int(s) for s in args.compare.split(",") if s}
    work = args.work or Path(tempfile.mkdtemp(prefix="aiprof-scale-"))
    print(f"template: {SMALL_TEMPLATE.relative_to(ROOT.parent)} (a real Kineto rank trace); cores: {os.cpu_count()}")
    per_rank: dict[int, float] = {}
    try:
        for n in sizes:
            t = time.perf_counter()
            fleet = make_fleet(work / f"traces{n}", n, template=SMALL_TEMPLATE)
            gen = time.perf_counter() - t
            size = sum(f.stat().st_size for f in fleet.files)
            out = work / f"job{n}"
            load = os.getloadavg()[0]
            par, rss, pcpu, wall = parallel(work / f"traces{n}", out, args.workers)
            per_rank[n] = par / n
            print(
                f"\n{n} ranks ({size / 2**20:.0f} MiB gz, generated in {gen:.0f} s; load average {load:.1f}): "
                f"Dask LocalCluster {args.workers} workers {par:.1f} s ({1000 * par / n:.0f} ms/rank, "
                f"CPU {pcpu:.1f} s; the process with its module imports {wall:.1f} s), client peak RSS {rss:.0f} MiB"
            )
            if n in compare:
                ser, scpu = serial(work / f"traces{n}", work / f"serial{n}")
                shutil.rmtree(work / f"serial{n}", ignore_errors=True)
                print(
                    f"  aiprof serial (one process): {ser:.1f} s (CPU {scpu:.1f} s) -> Dask is {ser / par:.2f}x faster"
                    f" (CPU seconds: Dask {pcpu / scpu:.2f}x the serial's)"
                )
                note = autogroup_note(max(load, os.getloadavg()[0]))
                if note:
                    print(note)
                if not args.no_hta:
                    h, note = hta(work / f"traces{n}", args.hta_timeout)
                    if h is None:
                        print(f"  HTA TraceAnalysis(trace_dir=...): {note}")
                    else:
                        print(
                            f"  HTA TraceAnalysis(trace_dir=...): {h:.1f} s ({note}) -> Dask is {h / par:.2f}x faster"
                        )
            if n != sizes[-1]:
                shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(work / f"traces{n}", ignore_errors=True)
        n = sizes[-1]
        r = subprocess.run(
            [sys.executable, "-c", _VIEWS, str(work / f"job{n}"), ",".join(VIEWS)],
            capture_output=True,
            text=True,
            env=env(),
            check=True,
        )
        v = last_json(r.stdout)
        print(f"\nviews on {n} ranks from the index (open {float(v['open']):.2f} s):")  # type: ignore[arg-type]
        for name in VIEWS:
            print(f"  {name:13s} {float(v[name]):.3f} s ({v[name + '_rows']} rows)")  # type: ignore[arg-type]
        print(f"  advise        {float(v['advise']):.3f} s: {', '.join(v['advice'])}")  # type: ignore[arg-type]
        print(f"  peak RSS of that process: {int(v['rss']) / 2**20:.0f} MiB")  # type: ignore[call-overload]
        print("\nscaling curve, parallel import time per rank:")
        for k, s in per_rank.items():
            print(f"  {k:5d} ranks: {1000 * s:.0f} ms/rank")
        big = [s for k, s in per_rank.items() if k >= 64] or list(per_rank.values())
        print(
            f"  spread over {min(k for k in per_rank if per_rank[k] in big)}+ ranks: {100 * (max(big) / min(big) - 1):.0f}%"
        )
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
