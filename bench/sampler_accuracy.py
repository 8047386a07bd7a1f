"""Where the samples land: aiprof's stack samplers against py-spy on the same workload.

The call-heavy workload of bench/overhead.py runs three times: under ``py-spy record
-r 100`` (the peer: it reads the process from outside, at random times), under
``aiprof record`` (stacks read from outside), and under ``aiprof record
--sample-inside`` (a sampler thread in the job, which can only take a sample where the
job lets its GIL go). For each, the share of self samples per function is printed,
and the distance of each aiprof sampler from py-spy's shares (total variation: half
the sum of the absolute differences; 0 is the same profile, 1 disjoint). Also printed:
the time aiprof record's process spends per sample reading the job (it is not the
job's time).

Usage: python bench/sampler_accuracy.py [--reps 10]
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import CALL_HEAVY, PY, ensure_py_spy


def short(name: str) -> str:
    """The last part of a (qualified) function name: py-spy and CPython spell
    classes and nested functions differently."""
    return name.rsplit(".", 1)[-1]


def shares(counts: collections.Counter[str]) -> dict[str, float]:
    total = sum(counts.values()) or 1
    return {k: v / total for k, v in counts.items()}


def py_spy_profile(spy: str, script: Path, reps: str, out: Path) -> collections.Counter[str]:
    subprocess.run(
        [spy, "record", "-r", "100", "-f", "raw", "-o", str(out), "--", PY, str(script), reps],
        check=True,
        capture_output=True,
    )
    counts: collections.Counter[str] = collections.Counter()
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        counts[short(leaf.split(" (")[0])] += int(n)
    return counts


def aiprof_profile(script: Path, reps: str, out: Path, *flags: str) -> collections.Counter[str]:
    subprocess.run(
        [PY, "-m", "aiprof", "-q", "record", *flags, "-o", str(out), "--", PY, str(script), reps],
        check=True,
        capture_output=True,
    )
    from aiprof.store import open_profile

    with open_profile(out / "rank0.aiprof") as p:
        rows = p.con.execute(
            "SELECT f.function, count(*) FROM samples s JOIN frames f ON s.stack_id = f.frame_id GROUP BY 1"
        ).fetchall()
    counts: collections.Counter[str] = collections.Counter()
    for name, n in rows:
        counts[short(name)] += n
    return counts


def read_cost(script: Path, reps: str) -> tuple[float, int]:
    """(µs per sample spent by the reading process, samples) on the workload."""
    from aiprof.record.environment import ENV_STACKS
    from aiprof.record.launcher.outside_stacks import StackServer

    job = script.with_name("offering.py")
    job.write_text(
        "import runpy, sys\n"
        "from aiprof.record.job.collectors.python_outside import connect\n"
        "sampler, why, _ = connect(100.0)\n"
        "assert sampler is not None, why\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    server = StackServer({"rate": 1e-6})  # never ticks: the samples are taken below
    server.start()
    p = subprocess.Popen(
        [PY, str(job), str(script), reps], env={**os.environ, ENV_STACKS: server.name}, stdout=subprocess.DEVNULL
    )
    spent, n = 0.0, 0
    while p.poll() is None:
        poller = server.pollers.get(p.pid)
        if poller is not None and poller.reader is not None:
            t = time.perf_counter()
            poller.sample()
            spent += time.perf_counter() - t
            n += 1
        time.sleep(0.01)
    server.stop()
    return (spent / n * 1e6 if n else float("nan")), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10, help="repetitions inside the call-heavy workload")
    args = ap.parse_args()
    spy = ensure_py_spy()
    if spy is None:
        sys.exit("py-spy is needed as the peer")
    tmp = Path(tempfile.mkdtemp(prefix="aiprof-accuracy-"))
    script = tmp / "call_heavy.py"
    script.write_text(CALL_HEAVY)
    reps = str(args.reps)
    runs = {
        "py-spy": shares(py_spy_profile(spy, script, reps, tmp / "spy.txt")),
        "aiprof (outside)": shares(aiprof_profile(script, reps, tmp / "outside")),
        "aiprof --sample-inside": shares(aiprof_profile(script, reps, tmp / "inside", "--sample-inside")),
    }
    names = sorted(set().union(*runs.values()), key=lambda k: -runs["py-spy"].get(k, 0.0))
    print(f"\n== self samples per function, call-heavy workload ({args.reps} reps)")
    print(f"{'function':20}" + "".join(f"{m:>24}" for m in runs))
    for name in names[:8]:
        print(f"{name[:20]:20}" + "".join(f"{100 * r.get(name, 0.0):23.1f}%" for r in runs.values()))
    base = runs["py-spy"]
    for m in ("aiprof (outside)", "aiprof --sample-inside"):
        tv = 0.5 * sum(abs(runs[m].get(k, 0.0) - base.get(k, 0.0)) for k in names)
        print(f"distance from py-spy, {m}: {tv:.3f}")
    cost, n = read_cost(script, reps)
    print(f"aiprof record's time per sample reading the job: {cost:.0f} µs ({n} samples; not the job's time)")


if __name__ == "__main__":
    main()
