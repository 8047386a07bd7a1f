"""Where ``aiprof record``'s overhead goes: CPU time of the job and of aiprof's own
process, per phase, against the plain run, for the workloads of bench/overhead.py
and an empty script (the fixed cost).

Wall time on a shared machine moves with the load; CPU time (user + system, from
the kernel's accounting of each process) moves much less, so this bench compares
CPU seconds: the job's (what the workload pays: its own interpreter, aiprof's
bootstrap and hooks in it) and aiprof record's (the stack sampler reading the job's
memory, the telemetry poller, the spill of samples, and the profile written after
the job). Variants switch one part off at a time (``--no-python``, checkpoints off)
so each part's share is the difference with the default, in the same run,
interleaved. Before the workloads: the job's start and stop phase by phase (CPU in a
fresh interpreter each time, ``--only start``) and what it pays per call while it runs
(a checkpoint, a step mark, an anchor; ``--only calls``).

aiprof record runs in this process (aiprof.record.launcher.launch.run), so its CPU is
this process's and the job's is this process's children's.

    .venv/bin/python bench/record_phases.py [--repeat 5] [--steps 300] [--reps 6] [--only start|calls|NAME] [--tree DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
if "--tree" in sys.argv:
    # Another source tree's recorder (a checkout of main: before/after in one run).
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--tree") + 1]) / "src"))
else:
    sys.path.insert(0, str(ROOT / "src"))

from overhead import CALL_HEAVY  # noqa: E402

PY = sys.executable
EMPTY = "import time\nprint(time.monotonic_ns(), flush=True)\n"


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def plain(cmd: list[str]) -> dict[str, float]:
    c0 = _cpu(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return {"job wall": time.perf_counter() - t0, "job cpu": _cpu(resource.RUSAGE_CHILDREN) - c0}


class _Job(subprocess.Popen[bytes]):
    """The job's process, reaped with wait4 so its own CPU time (and its children's)
    is known apart from what aiprof record's process spawns (device probes)."""

    last: _Job | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _Job.last = self
        self.cpu = float("nan")

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            _, status, ru = os.wait4(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            self.cpu = ru.ru_utime + ru.ru_stime
        return self.returncode


def recorded(cmd: list[str], out: Path, options: dict[str, Any], env: dict[str, str]) -> dict[str, float]:
    from types import SimpleNamespace

    from aiprof.record.launcher import launch

    # Every run records into ``out`` (this bench's own temporary folder): the run before
    # is removed here, since aiprof record refuses a folder holding a recording (and
    # another --tree's launch.run may not take force=).
    shutil.rmtree(out, ignore_errors=True)

    launch.subprocess = SimpleNamespace(Popen=_Job)  # type: ignore[assignment]

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    c0, s0 = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        keep = os.dup(1)
        os.dup2(fd, 1)
        try:
            res = launch.run(cmd, out, options)
        finally:
            os.dup2(keep, 1)
            os.close(keep)
            os.close(fd)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    total = time.perf_counter() - t0
    if res.returncode != 0 or res.failed:
        raise RuntimeError(f"{cmd}: {res.returncode} {res.problems}")
    job = _Job.last
    assert job is not None
    return {
        "job wall": res.job_s,
        "job cpu": job.cpu,
        # This process's threads, and what it ran besides the job (device probes).
        "aiprof cpu": _cpu(resource.RUSAGE_SELF) - s0 + _cpu(resource.RUSAGE_CHILDREN) - c0 - job.cpu,
        "finalize wall": res.finalize_s,
        "total wall": total,
    }


START_PROBE = r"""
import os, sys, time
P = time.process_time
t = [P()]
import aiprof.record.job.bootstrap as b
t.append(P())
from aiprof.record.launcher.pystate import calibrate
t.append(P())
calibrate()
t.append(P())
os.environ["AIPROF_RECORD"] = os.environ.pop("PROBE_OUT")
prof = b.profiler_from_env()
b.claim()
b._start(prof)  # connect (its own calibration again, warm), the controller's start and first dump
t.append(P())
b._safe_stop(prof, None)
t.append(P())
print(repr([t[i + 1] - t[i] for i in range(len(t) - 1)] + [prof.python_sampler]))
"""
START_PHASES = [
    "import the job side (aiprof.record.job.bootstrap)",
    "import pystate (ctypes)",
    "calibrate the layout",
    "start: offer, controller, first dump",
    "stop: final dump",
]


def start_phases(repeat: int, out: Path) -> None:
    """The job's CPU in each phase of its recording's start and stop, measured in a
    fresh interpreter each time (cold imports, as in a job), against a real server."""
    from aiprof.record.environment import ENV_OUT, ENV_STACKS
    from aiprof.record.launcher.launch import record_env
    from aiprof.record.launcher.outside_stacks import StackServer

    server = StackServer(OPTIONS)
    server.start()
    env = record_env(out, OPTIONS)
    env[ENV_STACKS] = server.name
    env["PROBE_OUT"] = env.pop(ENV_OUT)  # the sitecustomize must not record the probe itself
    rows = []
    try:
        for _ in range(repeat):
            p = subprocess.run([PY, "-c", START_PROBE], env=env, capture_output=True, text=True, check=True)
            rows.append(eval(p.stdout.strip().splitlines()[-1]))
    finally:
        server.stop()
    print(f"\n== the job's start and stop, CPU ms in the job (median / min of {repeat} fresh interpreters)")
    print(f"   sampler: {sorted({r[-1] for r in rows})}")
    for i, name in enumerate(START_PHASES):
        vals = [r[i] * 1e3 for r in rows]
        print(f"   {name:52} {statistics.median(vals):7.1f} {min(vals):7.1f}")


def per_call(out: Path, n: int = 20_000) -> None:
    """What the job pays while it runs, per call, in this process: a checkpoint (with
    300 steps marked), a step mark at the optimizer's hook, its schedstat read, an
    anchor."""
    from aiprof.record.job import anchors
    from aiprof.record.job.api import Profiler

    prof = Profiler(out / "calls.aiprof", host=["system"], device=False, defer=True, telemetry_outside=True)
    prof.start()
    ctl = prof._controller
    assert ctl is not None and ctl._checkpointer is not None
    ctl._checkpointer.stop()
    for _ in range(300):
        ctl.step()
    cases: list[tuple[str, Any, int]] = [
        ("checkpoint (300 steps marked)", lambda: ctl.dump(partial=True, reason="bench", checkpoint=True), 200),
        ("step mark at the optimizer's hook", prof._optimizer_step, n),
        ("  of it: the schedstat read", ctl._thread_clock.read, n),
        ("anchor (backward, DataLoader.__next__)", lambda: anchors.record("backward", 1, 2), n),
    ]
    print("\n== per call, CPU us in the job (this process)")
    for name, fn, k in cases:
        t = time.thread_time()
        for _ in range(k):
            fn()
        print(f"   {name:52} {(time.thread_time() - t) / k * 1e6:9.1f}")
    prof.stop()


OPTIONS: dict[str, Any] = {
    "host": ["python", "system"],
    "device": True,
    "device_trace": True,
    "rate": 100.0,
    "sample_inside": False,
    "schedule": None,
    "record_shapes": False,
    "with_stack": False,
    "profile_memory": False,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--only", help="run only the workloads whose name contains this")
    ap.add_argument("--start-repeat", type=int, default=11, help="fresh interpreters for the start phases")
    ap.add_argument("--tree", type=Path, help="record with this source tree's aiprof (default: this one)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aiprof-phases-"))
    heavy = tmp / "call_heavy.py"
    heavy.write_text(CALL_HEAVY)
    empty = tmp / "empty.py"
    empty.write_text(EMPTY)
    workloads = {
        "empty script": [str(empty)],
        "a: train_cpu.py": [str(ROOT / "examples" / "train_cpu.py"), "--steps", str(args.steps)],
        "b: call-heavy Python": [str(heavy), str(args.reps)],
    }
    variants: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
        "record default": (OPTIONS, {}),
        "record no checkpoints": (OPTIONS, {"AIPROF_RECORD_CHECKPOINT_S": "0"}),
        "record --rate 1000": ({**OPTIONS, "rate": 1000.0}, {}),
        "record --no-python": ({**OPTIONS, "host": ["system"]}, {}),
        "record --no-python --no-device": ({**OPTIONS, "host": ["system"], "device": False}, {}),
    }
    import aiprof

    tree = Path(aiprof.__file__).parents[2]
    print(f"aiprof from {tree}; load {Path('/proc/loadavg').read_text().strip()}")
    if not args.only or args.only == "start":
        start_phases(args.start_repeat, tmp / "probe")
    if not args.only or args.only == "calls":
        per_call(tmp / "calls")
    for wname, target in workloads.items():
        if args.only in ("start", "calls"):
            break
        if args.only and args.only not in wname:
            continue
        rows: dict[str, list[dict[str, float]]] = {"plain": [], **{v: [] for v in variants}}
        for _ in range(args.repeat):
            rows["plain"].append(plain([PY, *target]))
            for v, (opts, env) in variants.items():
                rows[v].append(recorded([PY, *target], tmp / "rec", opts, env))
        print(f"\n== {wname} ({tree}): median of {args.repeat} (s); x = job cpu / plain job cpu")
        base = statistics.median(r["job cpu"] for r in rows["plain"])
        cols = ["job wall", "job cpu", "aiprof cpu", "finalize wall", "total wall"]
        print(f"{'mode':32}" + "".join(f"{c:>14}" for c in cols) + f"{'cpu x':>8}{'+cpu ms':>9}")
        for m, rs in rows.items():
            med = {c: statistics.median(r[c] for r in rs) if c in rs[0] else float("nan") for c in cols}
            print(
                f"{m:32}"
                + "".join(f"{med[c]:14.3f}" for c in cols)
                + f"{med['job cpu'] / base:8.3f}{(med['job cpu'] - base) * 1e3:9.1f}"
            )
    print(f"\nload {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
