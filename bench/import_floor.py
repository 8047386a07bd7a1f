"""The floor of a Kineto import on this machine, against HTA's load in the same run.

Issue 2 asks for imports >= 40x faster than Holistic Trace Analysis (HTA 0.5.0). This
measures the steps no importer writing aiprof's store can skip, and prints the largest
ratio to HTA they leave even if every other step cost nothing:

- V100/df_index_resolver.json.gz: gunzipping the file (a gzip stream cannot be
  decompressed in parallel), with zlib and with igzip (``isal``, when installed:
  the inflater the import uses then, aiprof.importers.gunzip);
- the large trace (df_index_resolver repeated, as bench/hta_compare.py --big makes it):
  DuckDB's JSON reader parsing the event list while keeping a single field, on every
  core, plus writing the events table of its profile as Parquet (the store's format).

Best of --repeat runs for our steps; HTA's load once, from its own venv (see
bench/hta_compare.py).

    .venv/bin/python bench/import_floor.py [--repeat 3] [--copies 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hta_compare import DATA, make_big, run_hta


def best(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--copies", type=int, default=8)
    args = ap.parse_args()

    import duckdb
    import pyarrow.parquet as pq

    from aiprof.importers import import_paths
    from aiprof.importers.jsonstream import TraceStream

    small = DATA / "V100" / "df_index_resolver.json.gz"
    raw = small.read_bytes()
    gunzip = best(lambda: zlib.decompressobj(wbits=31).decompress(raw), args.repeat)
    try:
        from isal import isal_zlib

        fast = best(lambda: isal_zlib.decompressobj(wbits=31).decompress(raw), args.repeat)
    except ImportError:
        fast = float("nan")
    with tempfile.TemporaryDirectory(prefix="aiprof-floor-") as tmp:
        big = make_big(args.copies, Path(tmp) / "big.json")
        events = Path(tmp) / "events.json"
        with events.open("wb") as f:
            assert TraceStream(big).copy_events(f)
        con = duckdb.connect()
        sql = f"SELECT count(*) FROM read_json('{events}', format = 'array', columns = {{ph: 'VARCHAR'}})"
        parse = best(lambda: con.execute(sql).fetchall(), args.repeat)
        out, _ = import_paths([big], Path(tmp) / "p.aiprof")
        table = pq.read_table(out / "events.parquet")
        write = best(lambda: pq.write_table(table, Path(tmp) / "w.parquet", compression="zstd"), args.repeat)
        hta = run_hta([small, big], no_rounding=False)
        h_small = hta.get(str(small), {}).get("load_seconds") or float("nan")
        h_big = hta.get(str(big), {}).get("load_seconds") or float("nan")
    print(f"{'trace':34} {'HTA load s':>10} {'40x needs s':>11} {'floor s':>8}  {'floor steps':40} {'max ratio':>9}")
    print(
        f"{'V100/df_index_resolver.json.gz':34} {h_small:10.3f} {h_small / 40:11.3f} {gunzip:8.3f}  "
        f"{'gunzip (zlib)':40} {h_small / gunzip:8.1f}x"
    )
    print(
        f"{'V100/df_index_resolver.json.gz':34} {h_small:10.3f} {h_small / 40:11.3f} {fast:8.3f}  "
        f"{f'gunzip (isal igzip, {gunzip / fast:.2f}x zlib)':40} {h_small / fast:8.1f}x"
    )
    print(
        f"{f'df_index_resolver x{args.copies} (JSON)':34} {h_big:10.3f} {h_big / 40:11.3f} {parse + write:8.3f}  "
        f"{f'DuckDB parse {parse:.3f} s + Parquet write {write:.3f} s':40} {h_big / (parse + write):8.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
