"""Import throughput (events/s) of the vendor importers, next to the Kineto importer.

Each case builds an input of about ``--events`` events from a real capture in
``../shared/data`` (the rows of the sample repeated with shifted times and ids), imports it
through the registry with the importer forced, and reports the best of ``--repeat`` runs.
The ratio column compares each importer with the peer (Kineto) measured in the same run.

    .venv/bin/python bench/import_vendors.py [--events 400000] [--repeat 3] [--only nsys,kineto]

Adding an importer: write ``build_<name>(tmp, events) -> Path`` and append one
``Case(...)`` to :data:`CASES`.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from aiprof.allocators import use_lean

use_lean(importing=True)  # as `aiprof import`, before pyarrow loads (aiprof/allocators.py)

from aiprof.importers import import_paths  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PEER = "kineto"

NSYS_SAMPLE = DATA / "nsys" / "nsys_2022.4_vecadd_streams_T4_report1.sqlite"
KINETO_SAMPLE = DATA / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
ASCEND_SAMPLE = DATA / "ascend" / "torch_npu" / "trace_view.json"

#: nsys tables whose rows become events, with the columns that must stay unique per copy.
NSYS_EVENT_TABLES: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("correlationId", "gridId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("correlationId",),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("correlationId",),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("correlationId",),
    "OSRT_API": (),
}


@dataclass(frozen=True)
class Case:
    """One benchmark input: the importer (registry name) and how to build its file."""

    importer: str
    label: str
    build: Callable[[Path, int], Path]
    """(temporary folder, wanted event count) -> the file to import."""


def build_nsys(tmp: Path, events: int, *, cuda_only: bool = False) -> Path:
    """The 2022.4 vecAdd export with its event tables repeated, times and ids shifted.
    The sample is 96 % OS-runtime rows; ``cuda_only`` empties OSRT_API first, so only
    kernels, copies, CUDA API calls and syncs are left (the rows a GPU trace is made of)."""
    out = tmp / ("nsys_cuda_bench.sqlite" if cuda_only else "nsys_bench.sqlite")
    shutil.copy(NSYS_SAMPLE, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    if cuda_only:
        con.execute("DELETE FROM OSRT_API")
    tables = {
        t: c
        for t, c in NSYS_EVENT_TABLES.items()
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()
        and con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
    }
    per_copy = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables)
    copies = max(1, -(-events // per_copy))
    union = " UNION ALL ".join(f"SELECT start AS s, end AS e FROM {t}" for t in tables)
    lo, hi = con.execute(f"SELECT min(s), max(e) FROM ({union})").fetchone()
    span = int(hi - lo) + 1
    con.execute("CREATE TEMP TABLE reps (i INTEGER)")
    con.executemany("INSERT INTO reps VALUES (?)", [(i,) for i in range(1, copies)])
    id_step = 1 << 20
    for t, ids in tables.items():
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f'o."{c}" + r.i * {span}')
            elif c in ids:
                exprs.append(f'o."{c}" + r.i * {id_step}')
            else:
                exprs.append(f'o."{c}"')
        con.execute(f"CREATE TEMP TABLE orig AS SELECT * FROM {t}")
        con.execute(f"INSERT INTO {t} SELECT {', '.join(exprs)} FROM orig o CROSS JOIN reps r")
        con.execute("DROP TABLE orig")
    con.commit()
    con.execute("VACUUM")
    con.close()
    return out


def build_kineto(tmp: Path, events: int) -> Path:
    """The V100 rank-0 Kineto trace repeated in time (uncompressed JSON, as Kineto writes it)."""
    doc = orjson.loads(gzip.decompress(KINETO_SAMPLE.read_bytes()))
    evs = doc["traceEvents"]
    timed = [e for e in evs if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - min(e["ts"] for e in timed) + 1.0
    copies = max(1, -(-events // len(evs)))
    out_evs = []
    for i in range(copies):
        if len(out_evs) >= events:
            break
        for e in evs[: events - len(out_evs)] if i else evs:
            if i and e.get("ph") == "M":
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + i * span
            a = e2.get("args")
            if i and isinstance(a, dict) and "correlation" in a:
                e2["args"] = {**a, "correlation": a["correlation"] + i * (1 << 24)}
            out_evs.append(e2)
    doc["traceEvents"] = out_evs
    out = tmp / "kineto_bench.pt.trace.json"
    out.write_bytes(orjson.dumps(doc))
    return out


def _shift_us_text(ts: str, ns: int) -> str:
    """'1704161511420306.491' + ns, written back with the same three decimals (exact)."""
    whole, _, frac = ts.partition(".")
    t = int(whole) * 1000 + int((frac + "000")[:3]) + ns
    return f"{t // 1000}.{t % 1000:03d}"


def build_ascend_trace(tmp: Path, events: int) -> Path:
    """torch_npu's trace_view.json (string µs timestamps, flows) repeated in time; flow ids
    shifted per copy so every copy keeps its own host -> NPU links."""
    evs = orjson.loads(ASCEND_SAMPLE.read_bytes())
    starts = [int(e["ts"].replace(".", "")) for e in evs if isinstance(e.get("ts"), str)]
    span_ns = max(starts) - min(starts) + 10_000_000
    copies = max(1, -(-events // len(evs)))
    out_evs = []
    for i in range(copies):
        for e in evs:
            if len(out_evs) >= events:
                break
            if i and e.get("ph") == "M":
                continue
            e2 = dict(e)
            if i and isinstance(e2.get("ts"), str):
                e2["ts"] = _shift_us_text(e2["ts"], i * span_ns)
            if i and "id" in e2:
                fid = e2["id"]
                e2["id"] = fid + i * span_ns if isinstance(fid, int) else f"{fid}_{i}"
            out_evs.append(e2)
    out = tmp / "trace_view.json"
    out.write_bytes(orjson.dumps(out_evs))
    return out


CASES: list[Case] = [
    Case("nsys", "nsys 2022.4 vecAdd x N (SQLite)", build_nsys),
    Case("nsys", "nsys vecAdd CUDA rows only x N", lambda tmp, n: build_nsys(tmp, n, cuda_only=True)),
    Case("ascend-trace", "torch_npu trace_view.json x N", build_ascend_trace),
    Case(PEER, "Kineto V100 rank-0 x N (JSON)", build_kineto),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000, help="events per input file (about)")
    ap.add_argument("--repeat", type=int, default=3, help="imports per file; the best is reported")
    ap.add_argument("--only", default="", help="comma-separated importer names to run")
    args = ap.parse_args(argv)
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent", file=sys.stderr)
        return 0
    only = {s for s in args.only.split(",") if s}
    results: list[tuple[Case, float, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="aiprof-bench-") as d:
        tmp = Path(d)
        for case in CASES:
            if only and case.importer not in only:
                continue
            work = tmp / f"case{len(results)}"
            work.mkdir()
            src = case.build(work, args.events)
            best = float("inf")
            n = 0
            for r in range(args.repeat):
                t0 = time.perf_counter()
                _, ctx = import_paths([src], work / f"out{r}.aiprof", forced=case.importer)
                best = min(best, time.perf_counter() - t0)
                n = sum(ctx.kinds.values()) + sum(ctx.tables.values())
            mb = src.stat().st_size / 1e6
            results.append((case, mb, n, best))
            print(f"  {case.importer}: {mb:.1f} MB, {n:,} rows, best of {args.repeat}: {best:.2f} s", file=sys.stderr)
    peer = next((r for r in results if r[0].importer == PEER), None)
    peer_rate = peer[2] / peer[3] if peer else None
    print(f"{'importer':<10} {'file':<36} {'MB':>7} {'events':>10} {'seconds':>8} {'events/s':>11} {'vs ' + PEER:>10}")
    for case, mb, n, secs in results:
        rate = n / secs
        ratio = f"{rate / peer_rate:.2f}x" if peer_rate else "-"
        print(f"{case.importer:<10} {case.label:<36} {mb:>7.1f} {n:>10,} {secs:>8.2f} {rate:>11,.0f} {ratio:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
