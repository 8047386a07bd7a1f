"""Long fuzz run: ``python bench/fuzz.py --inputs 100000 [--jobs N] [--seed S]``.

Imports N mangled copies of every format of ../shared/data (the mutations of
tests/fuzzing.py) in worker processes and prints the counts: inputs, imported, clean
errors (aiprof's own; the CLI exits 2), imports that warned (partial data kept), crashes (any other exception, or an importer's
UnexpectedInputError), hangs (past --limit seconds; a worker stuck in C code is killed),
and the workers' peak RSS. Each crash cause is printed once with how to make its input
again (``--only I``). Exit status 1 when anything crashed or hung.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import fuzzing  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def worker(wid: int, jobs: int, n: int, rng_seed: int, limit: float, q: Any, start: int) -> None:
    import warnings

    warnings.simplefilter("ignore")
    seeds = fuzzing.discover(DATA)
    for i in range(start, n, jobs):
        q.put(("start", wid, i, time.monotonic()))
        seed, mutation, data = fuzzing.input_at(seeds, i, rng_seed)
        with tempfile.TemporaryDirectory(prefix="aiprof-fuzz-") as d:
            o = fuzzing.run_one(seed, data, Path(d), limit)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        kind = "warned" if o.kind == "imported" and o.warnings else o.kind
        q.put(("done", wid, i, seed.name, mutation, kind, o.cause, o.detail[-800:], rss))
    q.put(("exit", wid))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--limit", type=float, default=30.0, help="seconds before an input counts as a hang")
    ap.add_argument("--max-s", type=float, help="stop after this many seconds and print what ran")
    ap.add_argument("--only", type=int, help="run input number I alone, in this process, and print its outcome")
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"no data folder at {DATA}", file=sys.stderr)
        return 2
    if args.only is not None:
        seeds = fuzzing.discover(DATA)
        seed, mutation, data = fuzzing.input_at(seeds, args.only, args.seed)
        with tempfile.TemporaryDirectory() as d:
            o = fuzzing.run_one(seed, data, Path(d), args.limit)
        print(seed.name, mutation, o.kind, o.cause, o.detail, sep="\n")
        return 0
    ctx = mp.get_context("forkserver")
    q = ctx.Queue()
    t0 = time.monotonic()
    procs: dict[int, Any] = {}
    running: dict[int, tuple[int, float]] = {}

    def launch(wid: int, start: int) -> None:
        p = ctx.Process(target=worker, args=(wid, args.jobs, args.inputs, args.seed, args.limit, q, start))
        p.start()
        procs[wid] = p

    for w in range(args.jobs):
        launch(w, w)
    counts: Counter[str] = Counter()
    causes: dict[str, list[tuple[int, str, str, str]]] = {}
    peak = 0
    alive = set(procs)
    last_print = time.monotonic()
    while alive:
        try:
            msg = q.get(timeout=1.0)
        except Exception:
            msg = None
        now = time.monotonic()
        if msg is not None:
            if msg[0] == "start":
                running[msg[1]] = (msg[2], msg[3])
            elif msg[0] == "done":
                _, wid, i, seed, mutation, kind, cause, detail, rss = msg
                running.pop(wid, None)
                counts[kind] += 1
                peak = max(peak, rss)
                if kind in ("crash", "hang"):
                    causes.setdefault(cause, []).append((i, seed, mutation, detail))
            elif msg[0] == "exit":
                alive.discard(msg[1])
        for wid, (i, since) in list(running.items()):
            if now - since > args.limit * 2 + 10:
                # Stuck where the alarm cannot reach (C code): kill, count, go on.
                procs[wid].kill()
                procs[wid].join()
                running.pop(wid)
                counts["hang"] += 1
                causes.setdefault("hang (worker killed)", []).append((i, "?", "?", ""))
                if i + args.jobs < args.inputs:
                    launch(wid, i + args.jobs)
                else:
                    alive.discard(wid)
        if args.max_s is not None and now - t0 > args.max_s:
            for p in procs.values():
                p.kill()
            break
        if now - last_print > 30:
            last_print = now
            print(f"  ... {sum(counts.values()):,} inputs, {now - t0:.0f} s", file=sys.stderr, flush=True)
    for p in procs.values():
        p.join()
    took = time.monotonic() - t0
    total = sum(counts.values())
    stopped = f", stopped at --max-s of {args.inputs:,}" if total < args.inputs else ""
    print(f"inputs {total:,} in {took:.0f} s ({args.jobs} workers, seed {args.seed}{stopped})")
    print(f"  imported      {counts['imported'] + counts['warned']:,}")
    print(f"    of which with a warning (partial data kept)  {counts['warned']:,}")
    print(f"  clean errors  {counts['clean']:,} (aiprof's error type: one line, exit 2)")
    print(f"  crashes       {counts['crash']:,}")
    print(f"  hangs         {counts['hang']:,}")
    print(f"  peak RSS      {peak / 2**20:.0f} MiB (largest worker)")
    for cause, hits in sorted(causes.items(), key=lambda kv: -len(kv[1])):
        i, seed, mutation, detail = hits[0]
        print(f"\n{len(hits)} x {cause}: first input {i} ({seed}, {mutation}); again: --only {i} --seed {args.seed}")
        print("    " + detail.strip().replace("\n", "\n    "))
    return 1 if counts["crash"] or counts["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
