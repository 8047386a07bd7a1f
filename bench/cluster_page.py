"""The Distributed page of a many-rank job, cold: each view it requests, answered from the
cluster index, against the same ``comm_overlap`` computed rank by rank (the per-rank work
the page used to wait for: each rank's events, its step windows, the overlap of its
communication and computation unions).

Prints, for one job folder (``aiprof import`` of many ranks, or one this script builds
with bench/make_fleet.py):
1. each view the page requests (``stragglers``, ``ranks``, ``steps``, ``comm_overlap``,
   ``collectives``, ``links``) on a freshly opened job, seconds each and their sum: the
   page's cold load as the server computes it (HTTP and drawing left out);
2. ``comm_overlap`` from the index (one SQL pass over ``cluster_steps``) against the same
   view computed rank by rank on ``rank<N>.aiprof`` (all ranks, or ``--peer-sample K``
   of them, the time scaled by ranks / K and said so): seconds and the ratio, and
   whether the rows agree on the ranks computed.

    .venv/bin/python bench/cluster_page.py JOB_DIR [--peer-sample K]
    .venv/bin/python bench/cluster_page.py --build OUT --ranks 1024 [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from aiprof.analysis import run  # noqa: E402
from aiprof.analysis.query import Query  # noqa: E402
from aiprof.cluster.opened import open_job  # noqa: E402
from aiprof.cluster.views import comm_overlap_from_index  # noqa: E402
from aiprof.store import open_profile  # noqa: E402

#: The views the Distributed page requests (web/ui/src/views/distributed.ts), in order.
PAGE_VIEWS = ("stragglers", "ranks", "steps", "comm_overlap", "collectives", "links")
ALL = Query(limit=10_000_000)
COLS = ("step_us", "comm_us", "compute_us", "overlap_us", "exposed_us")


def build(out: Path, ranks: int, workers: int) -> Path:
    from make_fleet import SMALL_TEMPLATE, make_fleet

    traces = out / "traces"
    make_fleet(traces, ranks, template=SMALL_TEMPLATE, seed=3)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    job = out / "job"
    subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(traces), "-o", str(job), "--workers", str(workers)],
        check=True,
        env=env,
    )
    return job


def _key(r: dict[str, Any]) -> tuple[int, int]:
    return (int(r["rank"]), -1 if r["step"] is None else int(r["step"]))


def main() -> None:
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", nargs="?", type=Path)
    ap.add_argument("--build", type=Path, help="write a fleet and import it here first")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--peer-sample", type=int, default=0, help="compute the peer on K ranks only (0: all)")
    a = ap.parse_args()
    job = build(a.build, a.ranks, a.workers) if a.build else a.job
    if job is None:
        ap.error("give JOB_DIR or --build OUT")

    print(f"job {job}")
    total = 0.0
    with open_job(job) as prof:
        assert comm_overlap_from_index(prof) is not None, "the index lacks kernel_ns: re-import the job"
        for view in PAGE_VIEWS:
            t0 = time.perf_counter()
            res = run(prof, view, ALL)
            dt = time.perf_counter() - t0
            total += dt
            print(f"  {view:13s} {dt:8.2f} s  {len(res.rows):7d} rows")
            if view == "comm_overlap":
                ours, ours_s = res.rows, dt
    print(f"page views, cold, from the index: {total:.2f} s")

    ranks = sorted({int(r["rank"]) for r in ours})
    sample = ranks if not a.peer_sample else ranks[:: max(1, len(ranks) // a.peer_sample)][: a.peer_sample]
    t0 = time.perf_counter()
    peer: list[dict[str, Any]] = []
    for r in sample:
        with open_profile(job / f"rank{r}.aiprof") as one:
            peer += run(one, "comm_overlap", ALL).rows
    peer_s = (time.perf_counter() - t0) * len(ranks) / len(sample)
    scaled = "" if len(sample) == len(ranks) else f" (measured on {len(sample)} ranks, scaled to {len(ranks)})"
    mine = sorted((r for r in ours if int(r["rank"]) in set(sample)), key=_key)
    agree = len(mine) == len(peer) and all(
        _key(x) == _key(y) and all(abs(x[c] - y[c]) <= 1e-6 + 1e-9 * abs(y[c]) for c in COLS)
        for x, y in zip(mine, sorted(peer, key=_key), strict=True)
    )
    print(f"comm_overlap, {len(ranks)} ranks: index {ours_s:.2f} s, rank by rank {peer_s:.2f} s{scaled}")
    print(f"ratio (rank by rank / index): {peer_s / max(ours_s, 1e-9):.1f}x; rows agree: {agree}")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
