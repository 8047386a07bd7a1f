"""Cost of ``aiprof monitor`` at 10 Hz with the CPU backend: CPU seconds per wall second.

Runs the real command (dmon lines to /dev/null) as a child process and reads the
child's own CPU time with psutil. Prints the figure for the whole run (start-up
included) and for the steady state after a warm-up. Target: below 1% of one core.

    .venv/bin/python bench/monitor.py [--seconds 60] [--hz 10]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

import psutil


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured wall time (default 60)")
    ap.add_argument("--hz", type=float, default=10.0, help="samples per second (default 10)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds left out of the steady figure")
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    cmd = [sys.executable, "-m", "aiprof", "monitor", "--backend", args.backend, "-d", str(1 / args.hz)]
    cmd += ["-s", "pucm", "-f", "/dev/null"]
    start = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc = psutil.Process(child.pid)
    time.sleep(args.warmup)
    t0 = time.monotonic()
    c0 = sum(proc.cpu_times()[:2])
    time.sleep(args.seconds)
    t1 = time.monotonic()
    c1 = sum(proc.cpu_times()[:2])
    child.send_signal(signal.SIGTERM)
    try:
        _, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
    if child.returncode not in (0, 130, -15):
        sys.exit(f"monitor failed ({child.returncode}): {err.decode()[-500:]}")
    steady = (c1 - c0) / (t1 - t0)
    total = c1 / (t1 - start)
    print(f"aiprof monitor --backend {args.backend} at {args.hz:g} Hz, {args.seconds:g} s measured")
    print(f"  steady state : {c1 - c0:.3f} CPU s / {t1 - t0:.1f} wall s = {100 * steady:.2f}% of one core")
    print(f"  with start-up: {c1:.3f} CPU s / {t1 - start:.1f} wall s = {100 * total:.2f}% of one core")
    print(f"  target < 1%  : {'met' if steady < 0.01 else 'NOT met'} (steady state)")


if __name__ == "__main__":
    main()
