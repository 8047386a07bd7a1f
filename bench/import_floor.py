"""Where a Kineto import's time goes, and the floor of each stage with the fastest library
for it, against HTA's load in the same run.

Issue 18 asks for an import of at least 177 MB/s (Perfetto's trace processor's published
JSON rate) and 15x HTA's load. This prints, on the large trace (df_index_resolver
repeated in time, as ``bench/hta_compare.py --big`` makes it):

1. aiprof's import, stage by stage (wall and CPU seconds, the best of ``--repeat`` runs
   by total wall): copying the event list out (``spool``), DuckDB's parse with the
   conversion to store rows (``parse + rows``), the steps and the events table's write,
   the derived tables, the timeline's index;
2. the floor of each stage an importer writing aiprof's store cannot skip, each with the
   fastest library measured here for it:
   - gunzip (V100/df_index_resolver.json.gz): zlib, igzip (``isal``), libdeflate
     (``deflate``), where installed;
   - parse: DuckDB's JSON reader reading every field the import reads, from one file
     (one core: DuckDB parses one array file on one thread) and from the import's parts
     (``importers.jsonstream.ArrayParts``: every core);
   - write: the events table as Parquet with zstd (the store's codec), lz4 and none;
3. what the floors allow: the MB/s of parse + write alone on every core; the CPU
   budget the goal gives (its seconds times the cores) and what is left of it once the
   two floors are paid, beside what the import's other work costs now; and the MB/s of
   the import's own CPU seconds spread over every core (the bound on a CPU-bound machine).

HTA's load runs once, from its own venv (see bench/hta_compare.py); ``--no-hta`` skips it.

    .venv/bin/python bench/import_floor.py [--repeat 2] [--copies 8] [--no-hta]
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hta_compare import DATA, make_big, run_hta

GOAL_MB_S = 177.0
"""Perfetto trace processor's JSON import rate (google/perfetto PR #1641)."""


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of ``repeat`` calls."""
    runs = []
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu()
        fn()
        runs.append((time.perf_counter() - t, cpu() - c))
    return min(runs)


class Stages:
    """Wall and CPU seconds of the import's stage functions, patched in place."""

    NAMES: ClassVar[dict[tuple[str, str], str]] = {
        ("aiprof.importers.kineto.columnar", "spool_events"): "spool (copy the event list out)",
        ("aiprof.importers.kineto.columnar", "load"): "parse + rows",
        ("aiprof.store.writer", "ProfileWriter._flush_events"): "steps + events table write",
        ("aiprof.analysis.derived", "derive"): "derived tables",
        ("aiprof.web.timeline_store", "keep"): "timeline index",
    }

    def __init__(self) -> None:
        import importlib

        self.times: dict[str, list[float]] = {}
        for (module, attr), label in self.NAMES.items():
            owner: Any = importlib.import_module(module)
            *path, name = attr.split(".")
            for p in path:
                owner = getattr(owner, p)
            setattr(owner, name, self._timed(getattr(owner, name), label))

    def _timed(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*a: Any, **k: Any) -> Any:
            t, c = time.perf_counter(), cpu()
            try:
                return fn(*a, **k)
            finally:
                got = self.times.setdefault(label, [0.0, 0.0])
                got[0] += time.perf_counter() - t
                got[1] += cpu() - c

        return run


def import_stages(
    big: Path, tmp: Path, repeat: int
) -> tuple[float, float, dict[str, list[float]], Path, tuple[float, float]]:
    """(wall, CPU, {stage: [wall, CPU]}, profile) of the fastest of ``repeat`` imports,
    and (wall, CPU) of the fastest of as many with the event list read as one file
    (``PIECE_BYTES = 0``), run in turn with them."""
    from aiprof.importers import import_paths
    from aiprof.importers.kineto import columnar

    stages = Stages()
    runs = []
    one_file = []
    out = tmp / "p.aiprof"
    piece = columnar.PIECE_BYTES
    for _ in range(repeat):
        for parts in (True, False):
            shutil.rmtree(out, ignore_errors=True)
            columnar.PIECE_BYTES = piece if parts else 0
            stages.times = {}
            t, c = time.perf_counter(), cpu()
            import_paths([big], out)
            got = (time.perf_counter() - t, cpu() - c)
            if parts:
                runs.append((*got, stages.times))
            else:
                one_file.append(got)
    columnar.PIECE_BYTES = piece
    shutil.rmtree(out, ignore_errors=True)
    import_paths([big], out)
    wall, cpu_s, times = min(runs, key=lambda r: r[0])
    # The spool runs inside load: parse + rows is load without it.
    load, spool = times.get("parse + rows", [0.0, 0.0]), times.get("spool (copy the event list out)", [0.0, 0.0])
    times["parse + rows"] = [load[0] - spool[0], load[1] - spool[1]]
    return wall, cpu_s, times, out, min(one_file)


def gunzip_floors(raw: bytes, repeat: int) -> dict[str, float]:
    out = {"zlib": best(lambda: zlib.decompressobj(wbits=31).decompress(raw), repeat)[0]}
    try:
        from isal import isal_zlib

        out["igzip (isal)"] = best(lambda: isal_zlib.decompressobj(wbits=31).decompress(raw), repeat)[0]
    except ImportError:
        pass
    try:
        import deflate  # type: ignore[import-not-found,unused-ignore]

        out["libdeflate (deflate)"] = best(lambda: deflate.gzip_decompress(raw), repeat)[0]
    except ImportError:
        pass
    return out


def parse_floors(big: Path, tmp: Path, repeat: int) -> dict[str, tuple[float, float]]:
    """DuckDB reading every field the import reads, (wall, CPU) seconds: one file, and
    the import's parts."""
    from aiprof.importers.base import ImportContext
    from aiprof.importers.kineto import columnar
    from aiprof.store import duck

    class _Writer:
        def warn(self, _m: str) -> None:
            pass

    ctx = ImportContext(writer=_Writer())  # type: ignore[arg-type]
    out = {}
    con = duck.connect(threads=None, spill=tmp.as_posix())
    for label, piece in (("one file (one core)", 0), (f"{os.cpu_count()} cores, parts", columnar.PIECE_BYTES)):
        folder = tmp / f"parse-{piece}"
        folder.mkdir()
        _, files = columnar.spool_events(big, folder, ctx, piece)
        listed = "[" + ", ".join(f"'{f.as_posix()}'" for f in files) + "]"
        sql = f"SELECT * FROM read_json({listed}, format = 'array', columns = {columnar._COLUMNS})"

        def scan(sql: str = sql) -> None:
            for _ in con.sql(sql).to_arrow_reader(1 << 16):
                pass

        out[f"DuckDB, {label}, {len(files)} file(s)"] = best(scan, repeat)
        shutil.rmtree(folder)
    con.close()
    return out


def write_floors(profile: Path, tmp: Path, repeat: int) -> dict[str, tuple[float, float]]:
    import pyarrow.parquet as pq

    table = pq.read_table(profile / "events.parquet")
    out = {}
    for codec in ("zstd", "lz4", "none"):
        dest = tmp / f"w-{codec}.parquet"
        out[f"Parquet {codec}"] = best(lambda c=codec, d=dest: pq.write_table(table, d, compression=c), repeat)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--no-hta", action="store_true", help="skip HTA's load (it takes a minute)")
    args = ap.parse_args()
    from aiprof.allocators import use_lean

    use_lean(importing=True)  # as `aiprof import`, before pyarrow loads (aiprof/allocators.py)
    cores = os.cpu_count() or 1
    small = DATA / "V100" / "df_index_resolver.json.gz"
    with tempfile.TemporaryDirectory(prefix="aiprof-floor-") as tmpdir:
        tmp = Path(tmpdir)
        big = make_big(args.copies, tmp / "big.json")
        mb = big.stat().st_size / 1e6
        wall, cpu_s, stages, profile, (one_wall, one_cpu) = import_stages(big, tmp, args.repeat)
        gz = gunzip_floors(small.read_bytes(), max(3, args.repeat))
        parse = parse_floors(big, tmp, args.repeat)
        write = write_floors(profile, tmp, args.repeat)
        hta = {} if args.no_hta else run_hta([small, big], no_rounding=False)
    print(f"df_index_resolver x{args.copies}: {mb:.1f} MB of JSON, {cores} cores")
    print(f"\n1. aiprof import: {wall:.2f} s wall ({mb / wall:.1f} MB/s), {cpu_s:.2f} s CPU")
    print(f"   {'stage':34} {'wall s':>7} {'CPU s':>7} {'share':>6}")
    for label, (w, c) in stages.items():
        print(f"   {label:34} {w:7.2f} {c:7.2f} {w / wall:6.0%}")
    rest = wall - sum(w for w, _ in stages.values())
    print(f"   {'other (open, metadata, close)':34} {rest:7.2f} {'':>7} {rest / wall:6.0%}")
    print(
        f"   the event list read as one file instead (same run, in turn): {one_wall:.2f} s wall, "
        f"{one_cpu:.2f} s CPU: parts {one_wall / wall:.2f}x"
    )
    print("\n2. floors, fastest library for each stage")
    print(f"   gunzip of {small.name} ({small.stat().st_size / 1e6:.1f} MB):")
    for label, s in gz.items():
        print(f"     {label:44} {s:7.3f} s  {gz['zlib'] / s:5.2f}x zlib")
    print("   parse of every field the import reads:")
    for label, (w, c) in parse.items():
        print(f"     {label:44} {w:7.3f} s  {mb / w:6.1f} MB/s  (CPU {c:.3f} s)")
    print("   events table write:")
    for label, (w, c) in write.items():
        print(f"     {label:44} {w:7.3f} s  (CPU {c:.3f} s)")
    floor = min(w for w, _ in parse.values()) + min(w for w, _ in write.values())
    print("\n3. what the floors allow")
    print(
        f"   parse (fastest) + write (fastest), nothing else: {floor:.2f} s = {mb / floor:.0f} MB/s "
        f"(goal {GOAL_MB_S:.0f} MB/s)"
    )
    # On a CPU-bound machine a goal is a CPU budget: what is left of it once the two
    # floors are paid is all the rest may cost (rows, steps, derived tables, timeline).
    floors_cpu = min(c for _, c in parse.values()) + min(c for _, c in write.values())
    spool_cpu = stages.get("spool (copy the event list out)", [0.0, 0.0])[1]
    beyond = cpu_s - spool_cpu - floors_cpu

    def budget(seconds: float, goal: str) -> None:
        left = seconds * cores - floors_cpu
        print(
            f"   {goal}: {seconds:.2f} s x {cores} cores = {seconds * cores:.2f} s of CPU; the floors "
            f"(parse and write, least CPU) take {floors_cpu:.2f} s, leaving {left:.2f} s for the rest, "
            f"which costs {beyond:.2f} s now ({beyond / left:.1f}x)"
            if left > 0
            else f"   {goal}: {seconds:.2f} s x {cores} cores = {seconds * cores:.2f} s of CPU, less than "
            f"the floors' {floors_cpu:.2f} s alone"
        )

    budget(mb / GOAL_MB_S, f"at {GOAL_MB_S:.0f} MB/s")
    print(
        f"   the import's CPU over {cores} cores: {cpu_s / cores:.2f} s = {mb * cores / cpu_s:.0f} MB/s at most "
        f"(measured {mb / wall:.1f} MB/s)"
    )
    heavy = max(stages.items(), key=lambda kv: kv[1][1])
    print(f"   the stage that costs most CPU: {heavy[0]} ({heavy[1][1]:.2f} s of {cpu_s:.2f})")
    if hta:
        h_small = hta.get(str(small), {}).get("load_seconds") or float("nan")
        h_big = hta.get(str(big), {}).get("load_seconds") or float("nan")
        print(f"\n4. HTA load: {small.name} {h_small:.3f} s; the large trace {h_big:.2f} s")
        print(f"   aiprof import vs HTA load on the large trace: {h_big / wall:.1f}x (goal 15x)")
        if h_big == h_big:  # not NaN
            budget(h_big / 15, "at 15x HTA")
    return 0


if __name__ == "__main__":
    sys.exit(main())
