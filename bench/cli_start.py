"""CLI start: wall time of ``aiprof --help``, ``aiprof report --help`` and the overview
(``aiprof report PROFILE``), this tree against a baseline tree, in the same run.

Issue 18 asks for the overview in <= 0.5 s. The peers, run alternately with ours on
the same profile so load on a shared machine hits both alike:

- the baseline: the same commands from another source tree (``--baseline``, e.g. a
  checkout of main before the change);
- the floor: ``python -c "import duckdb, pyarrow"``, the two libraries any read of
  the store needs.

Each figure is the median of --repeat runs, with the spread (min-max).

The overview is kept in the profile by the first report (overview.json, cli/overview.py):
``aiprof report PROFILE`` is timed with it kept, and as ``(first)`` with it removed
before each of this tree's runs (the overview computed from the store, as every run of
the baseline computes it).

    .venv/bin/python bench/cli_start.py --baseline /path/to/main [--repeat 5] [--profile P]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "data" / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def wall(cmd: list[str], src: Path | None) -> float:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def fmt(ts: list[float]) -> str:
    return f"{statistics.median(ts):6.3f} s ({min(ts):.3f}-{max(ts):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, required=True, help="another source tree (with src/aiprof)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--profile", type=Path, help="an imported profile (default: V100 rank 0, imported here)")
    args = ap.parse_args()
    py = sys.executable
    for tree in (ROOT, args.baseline):  # as scripts/setup-venv.sh does: no compile at each start (use a copy)
        subprocess.run([py, "-m", "compileall", "-q", "-x", "/node_modules/", str(tree / "src")], check=True)
    with tempfile.TemporaryDirectory(prefix="aiprof-start-") as tmp:
        prof = args.profile
        if prof is None:
            prof = Path(tmp) / "v100.aiprof"
            subprocess.run([py, "-m", "aiprof", "-q", "import", str(TRACE), "-o", str(prof)], check=True)
        cases = {
            "aiprof --help": ["--help"],
            "aiprof report --help": ["report", "--help"],
            "aiprof report PROFILE": ["report", str(prof)],
            "report PROFILE (first)": ["report", str(prof)],
        }
        kept = Path(prof) / "overview.json"
        wall([py, "-m", "aiprof", "report", str(prof)], ROOT)  # keeps the overview
        floor: list[float] = []
        res: dict[str, dict[str, list[float]]] = {c: {"ours": [], "base": []} for c in cases}
        for _ in range(args.repeat):
            floor.append(wall([py, "-c", "import duckdb, pyarrow"], None))
            for case, argv in cases.items():
                res[case]["base"].append(wall([py, "-m", "aiprof", *argv], args.baseline))
                if case.endswith("(first)"):
                    kept.unlink(missing_ok=True)
                res[case]["ours"].append(wall([py, "-m", "aiprof", *argv], ROOT))
    print(f"load (/proc/loadavg): {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"floor (python -c 'import duckdb, pyarrow'): {fmt(floor)}")
    print(f"{'command':24} {'baseline':>24} {'this tree':>24} {'speed-up':>8}  {'vs floor':>8}")
    for case, r in res.items():
        b, o = statistics.median(r["base"]), statistics.median(r["ours"])
        print(
            f"{case:24} {fmt(r['base']):>24} {fmt(r['ours']):>24} {b / o:7.2f}x  {o / statistics.median(floor):7.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
