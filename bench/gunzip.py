"""Gunzip of the Kineto traces of ../shared/data: aiprof's inflater against Python's gzip.

The peer is ``gzip.open(path).read()``, which is how HTA (and most Python tools) read a
``.json.gz``; aiprof's stream (:func:`aiprof.importers.jsonstream.open_bytes`) uses
Intel ISA-L's igzip when the ``isal`` package is installed (the ``fast`` extra), else
zlib (the "zlib" column: the same stream with ``AIPROF_GUNZIP=zlib``). Each is timed on the same bytes in the same run, best of --repeat, and the bytes
are checked equal. A last row times a whole import with ``AIPROF_GUNZIP=zlib`` against
the default, on the largest trace.

    .venv/bin/python bench/gunzip.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto"


def best(fn: object, repeat: int) -> tuple[float, float]:
    """(best, worst) seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return min(times), max(times)


def stream_chunks(path: Path) -> list[bytes]:
    """The chunks an import reads (not joined: an import never joins them)."""
    from aiprof.importers.jsonstream import open_bytes

    chunks, problems = open_bytes(path)
    out = list(chunks)
    assert not problems, problems
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from aiprof.importers import gunzip

    print(f"aiprof inflater: {gunzip.engine()}")
    files = sorted(DATA.rglob("*.gz"), key=lambda p: p.stat().st_size, reverse=True)[:4]
    print(f"{'trace':40} {'MB raw':>7} {'gzip.open s':>12} {'zlib s':>7} {'aiprof s':>9} {'vs gzip':>7} {'vs zlib':>7}")
    for f in files:
        peer_out = gzip.open(f).read()
        assert b"".join(stream_chunks(f)) == peer_out
        peer, peer_worst = best(lambda f=f: gzip.open(f).read(), args.repeat)
        os.environ[gunzip.ENV] = "zlib"
        plain, plain_worst = best(lambda f=f: stream_chunks(f), args.repeat)
        del os.environ[gunzip.ENV]
        ours, ours_worst = best(lambda f=f: stream_chunks(f), args.repeat)
        name = str(f.relative_to(DATA))[-40:]
        print(
            f"{name:40} {len(peer_out) / 1e6:7.1f} {peer:12.3f} {plain:7.3f} {ours:9.3f} {peer / ours:6.2f}x"
            f" {plain / ours:6.2f}x   (worst {peer_worst:.3f} / {plain_worst:.3f} / {ours_worst:.3f})"
        )
    big = files[0]
    walls: dict[str, list[float]] = {"zlib": [], "default": []}
    with tempfile.TemporaryDirectory(prefix="aiprof-gz-") as tmp:
        for i in range(args.repeat):
            for mode in walls:
                env = dict(os.environ)
                if mode == "zlib":
                    env["AIPROF_GUNZIP"] = "zlib"
                cmd = [sys.executable, "-m", "aiprof", "-q", "import", str(big), "-o", f"{tmp}/{mode}{i}.aiprof"]
                t = time.perf_counter()
                subprocess.run(cmd, env=env, check=True, capture_output=True)
                walls[mode].append(time.perf_counter() - t)
    z, d = min(walls["zlib"]), min(walls["default"])
    print(
        f"import {big.name}: AIPROF_GUNZIP=zlib {z:.3f} s, default ({gunzip.engine()}) {d:.3f} s, "
        f"{z / d:.2f}x (best of {args.repeat}; spreads {max(walls['zlib']) - z:.3f} / {max(walls['default']) - d:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
