"""The overview of a large profile (default 5M events) from the totals derived at import,
against the same overview computed from the events (a profile as an older aiprof wrote
it), and with --hta against HTA's temporal breakdown on the same trace, in one run.

The trace is V100/df_index_resolver.json.gz repeated in time (hta_compare.make_big) until
it holds --events events. The import runs in its own child process (its seconds, peak
RSS, and whether every event of the copies arrived); each overview runs in a fresh child
on a freshly opened profile, module imports not timed (HTA's are not either).

    .venv/bin/python bench/overview_big.py [--events 5000000] [--hta] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hta_compare import DATA, make_big, run_hta

_IMPORT = r"""
import json, resource, sys, time
from pathlib import Path
from aiprof.importers import import_paths
import aiprof.importers.kineto, aiprof.analysis.derived
t = time.perf_counter()
out, ctx = import_paths([Path(sys.argv[1])], Path(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - t, "events": sum(ctx.kinds.values()),
  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

_OVERVIEW = r"""
import json, resource, sys, time
from aiprof.analysis import Query, run, views
from aiprof.store import open_profile
views()
t = time.perf_counter()
p = open_profile(sys.argv[1])
rows = run(p, "overview", Query.parse([], None, None)).rows
print(json.dumps({"seconds": time.perf_counter() - t, "rows": rows,
  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def child(code: str, *args: str | Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"bench: child failed:\n{out.stderr[-2000:]}")
    d: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return d


def as_old(src: Path, dest: Path) -> Path:
    """``src`` as an aiprof without derived tables wrote it (event tables hard-linked)."""
    from aiprof.store.derived import DERIVED_SCHEMAS

    dest.mkdir()
    for f in src.iterdir():
        if f.name.endswith(".parquet") and f.name[: -len(".parquet")] not in DERIVED_SCHEMAS:
            os.link(f, dest / f.name)
    meta = json.loads((src / "profile.json").read_text())
    meta.pop("derived", None)
    (dest / "profile.json").write_text(json.dumps(meta))
    return dest


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=5_000_000, help="about this many events (whole copies)")
    ap.add_argument("--hta", action="store_true", help="also HTA's load and temporal breakdown (many GB of RAM)")
    ap.add_argument("--work", type=Path, help="folder for the trace and profiles (default: temporary, removed)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="aiprof-overview-big-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        one = child(_IMPORT, DATA / "V100" / "df_index_resolver.json.gz", work / "one.aiprof")
        repeat = max(1, math.ceil(args.events / one["events"]))
        t = time.perf_counter()
        big = make_big(repeat, work / "big.json")
        print(
            f"trace: df_index_resolver x{repeat}, {big.stat().st_size / 2**20:.0f} MiB ({time.perf_counter() - t:.0f} s)"
        )
        imp = child(_IMPORT, big, work / "big.aiprof")
        lost = repeat * one["events"] - imp["events"]
        meta = json.loads((work / "big.aiprof" / "profile.json").read_text())
        one_tables = json.loads((work / "one.aiprof" / "profile.json").read_text())["tables"]
        for t, n in one_tables.items():
            if t not in ("tracks", "events"):  # the copies repeat no process or thread names
                lost += repeat * n - meta["tables"].get(t, 0)
        print(
            f"import: {imp['events']:,} events in {imp['seconds']:.1f} s, peak RSS {imp['rss'] / 2**20:.0f} MiB; "
            f"{lost:,} rows lost (events and other tables, x{repeat} of {one_tables}); derived: {meta.get('derived')}"
        )
        old = as_old(work / "big.aiprof", work / "old.aiprof")
        fast = child(_OVERVIEW, work / "big.aiprof")
        slow = child(_OVERVIEW, old)
        same = "identical" if fast["rows"] == slow["rows"] else "DIFFERENT"
        print(f"overview, derived at import: {fast['seconds']:7.3f} s  peak RSS {fast['rss'] / 2**20:6.0f} MiB")
        print(f"overview, from the events:   {slow['seconds']:7.3f} s  peak RSS {slow['rss'] / 2**20:6.0f} MiB")
        print(f"ratio (from the events / derived): {slow['seconds'] / fast['seconds']:.1f}x; answers {same}")
        if args.hta:
            h = run_hta([big], no_rounding=False).get(str(big), {})
            ht = (h.get("analysis_seconds") or {}).get("temporal_breakdown")
            if ht:
                print(
                    f"HTA temporal_breakdown: {ht:.3f} s (load {h.get('load_seconds', float('nan')):.1f} s); ratio {ht / fast['seconds']:.1f}x"
                )
            else:
                print(f"HTA did not finish: {str(h.get('error') or h.get('errors') or 'no answer')[:200]}")
        return 0 if same == "identical" and lost == 0 else 1
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
