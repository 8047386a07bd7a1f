"""The steps of scripts/gpu_check.sh (run it through that script, which sets up Python).

On the GPU machine (``--mode gpu``) every step runs; with ``--mode cpu`` the steps that
need a GPU or NVIDIA's tools say they are skipped and why, and the rest runs on the CPU
with smaller sizes, so the test command checks the script itself. What it writes into
OUT (at most 8 files, each under 16 MiB, as the GPU machine sends back):

    log.txt          everything printed, with each command and its exit status
    tables.txt       aiprof report (overview, kernels, idle, launch) and advise of each profile
    ratios.json      wall times and step medians of every repeat, and the ratios
    profiles.zip     the profiles (default, --ops, the planted sync), their timecharts
    torch_trace.json.gz  torch.profiler's own trace of the example (a small Kineto trace)
    counters.csv     the default profile's counters (NVML telemetry on a GPU)
    monitor.txt      aiprof monitor next to nvidia-smi dmon, during the load
    ncu.csv          Nsight Compute's --csv details of a few kernels, and its import
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_gpu.py"
PY = sys.executable
LIMIT = 16 * 1024 * 1024

SIZES = {
    "gpu": {"repeats": 3, "args": ["--steps", "60", "--batch-size", "128", "--size", "64", "--micro", "4"]},
    "cpu": {"repeats": 1, "args": ["--steps", "6", "--batch-size", "8", "--size", "16", "--micro", "2"]},
}


class Run:
    def __init__(self, out: Path, mode: str) -> None:
        self.out = out
        self.mode = mode
        self.work = out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = (out / "log.txt").open("w")
        self.tables = (out / "tables.txt").open("w")

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def sh(self, cmd: list[str], *, timeout: float = 300, table: bool = False, quiet: bool = False) -> tuple[int, str]:
        """Run ``cmd``; its output goes to the log (and to tables.txt with ``table``)."""
        self.say("$ " + " ".join(cmd))
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            rc, text = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as e:
            rc, text = 124, f"timed out after {timeout} s\n{e.stdout or ''}{e.stderr or ''}"
        except FileNotFoundError as e:
            rc, text = 127, str(e)
        if not quiet:
            self.log.write(text)
        self.say(f"  -> exit {rc}")
        if table:
            self.tables.write("$ " + " ".join(cmd) + "\n" + text + "\n")
            self.tables.flush()
        return rc, text


def aiprof(*args: str) -> list[str]:
    return [PY, "-m", "aiprof", *args]


def timed(run: Run, cmd: list[str]) -> tuple[float, float | None]:
    """Wall seconds of the whole process and the median step (ms) the example printed."""
    t0 = time.perf_counter()
    rc, text = run.sh(cmd, timeout=600)
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"gpu_check: {' '.join(cmd)} failed with exit {rc}")
    step = None
    for line in text.splitlines():
        if "median step" in line:
            step = float(line.split("median step")[1].split()[0])
    return wall, step


def overhead(run: Run, sizes: dict[str, Any]) -> dict[str, Any]:
    """Plain, aiprof record (default and --ops), torch.profiler alone: interleaved repeats."""
    args = [str(EXAMPLE), *sizes["args"]]
    w = run.work
    modes = {
        "plain": lambda i: [PY, *args],
        "record": lambda i: aiprof("record", "-o", str(w / f"default_{i}"), "--", PY, *args),
        "record_ops": lambda i: aiprof("record", "--ops", "-o", str(w / f"ops_{i}"), "--", PY, *args),
        "torch_profiler": lambda i: [PY, *args, "--torch-profiler", str(w / f"torch_{i}")],
    }
    got: dict[str, list[tuple[float, float | None]]] = {m: [] for m in modes}
    for i in range(sizes["repeats"]):
        for m, cmd in modes.items():
            got[m].append(timed(run, cmd(i)))
    med = {m: statistics.median(x[0] for x in v) for m, v in got.items()}
    step = {m: statistics.median([x[1] for x in v if x[1] is not None] or [float("nan")]) for m, v in got.items()}
    ratios = {
        "step: record / plain": step["record"] / step["plain"],
        "step: record --ops / plain": step["record_ops"] / step["plain"],
        "step: record --ops / torch.profiler alone": step["record_ops"] / step["torch_profiler"],
        "record / plain": med["record"] / med["plain"],
        "record --ops / plain": med["record_ops"] / med["plain"],
        "record --ops / torch.profiler alone": med["record_ops"] / med["torch_profiler"],
        "torch.profiler alone / plain": med["torch_profiler"] / med["plain"],
    }
    run.say(
        f"\noverhead over {sizes['repeats']} interleaved repeats: the whole process's wall time"
        " (aiprof record's includes writing the profile) and the example's own median step"
    )
    for m, v in med.items():
        run.say(f"  {m:16s} {v:8.3f} s   step median {step[m]:.3f} ms")
    for k, r in ratios.items():
        run.say(f"  {k:44s} {r:6.3f}x")
    return {
        "wall_s": {m: [x[0] for x in v] for m, v in got.items()},
        "median_s": med,
        "step_ms": step,
        "ratios": ratios,
    }


def monitor(run: Run, sizes: dict[str, Any]) -> None:
    """aiprof monitor (and nvidia-smi dmon where it exists) while the example runs."""
    lines = []
    load = subprocess.Popen([PY, str(EXAMPLE), *sizes["args"], "--steps", "200"], cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        count = "50" if run.mode == "gpu" else "10"
        procs = {
            "aiprof monitor": subprocess.Popen(aiprof("monitor", "-s", "pucm", "-d", "0.1", "-c", count), **_pipes())
        }
        if shutil.which("nvidia-smi"):
            procs["nvidia-smi dmon"] = subprocess.Popen(
                ["nvidia-smi", "dmon", "-s", "pucm", "-d", "1", "-c", "5"], **_pipes()
            )
        else:
            lines.append("nvidia-smi dmon: skipped (no nvidia-smi on this machine)")
        for name, p in procs.items():
            text, _ = p.communicate(timeout=120)
            lines += [f"== {name} (exit {p.returncode})", text]
    finally:
        load.kill()
        load.wait()
    (run.out / "monitor.txt").write_text("\n".join(lines) + "\n")
    run.say("\n".join(lines))


def _pipes() -> dict[str, Any]:
    return {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, "cwd": ROOT}


def ncu(run: Run, sizes: dict[str, Any]) -> None:
    """Nsight Compute on a few kernels of the example, then its import."""
    if shutil.which("ncu") is None:
        run.say("ncu: skipped (no Nsight Compute on this machine)")
        return
    csv = run.out / "ncu.csv"
    cmd = ["ncu", "--csv", "--clock-control", "none", "--launch-count", "5"]
    rc, text = run.sh([*cmd, PY, str(EXAMPLE), *sizes["args"], "--steps", "2"], timeout=300, quiet=True)
    csv.write_text(text)
    if rc == 0:
        prof = run.work / "ncu.aiprof"
        run.sh(aiprof("import", str(csv), "-o", str(prof)))
        run.sh(aiprof("report", str(prof), "--view", "kernel-metrics"), table=True)


def reports(run: Run, profiles: dict[str, Path]) -> None:
    for label, p in profiles.items():
        run.tables.write(f"\n######## {label}: {p.name}\n")
        run.sh(aiprof("report", str(p)), table=True)
        for view in ("kernels", "idle", "launch"):
            run.sh(aiprof("report", str(p), "--view", view, "--limit", "15"), table=True)
        run.sh(aiprof("advise", str(p)), table=True)
        run.sh(aiprof("timechart", str(p), "-o", str(p.parent / f"{label}.trace.json.gz")))


def package(run: Run, profiles: dict[str, Path]) -> None:
    """The profiles and timecharts into one zip, dropping the largest when over the limit."""
    zpath = run.out / "profiles.zip"
    todo = [(label, p.parent) for label, p in profiles.items()]
    while todo:
        with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
            for label, folder in todo:
                for f in sorted(folder.rglob("*")):
                    if f.is_file():
                        z.write(f, f"{label}/{f.relative_to(folder)}")
        if zpath.stat().st_size <= LIMIT:
            break
        dropped = todo.pop()
        run.say(f"profiles.zip: over 16 MiB, left out {dropped[0]}")
    run.say(f"profiles.zip: {zpath.stat().st_size / 2**20:.1f} MiB ({', '.join(t[0] for t in todo)})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if a.out.exists():
        shutil.rmtree(a.out)
    run = Run(a.out, a.mode)
    sizes = SIZES[a.mode]
    run.say(f"gpu_check: mode {a.mode}, python {sys.version.split()[0]}, out {a.out}")
    run.sh([PY, "-c", "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"])
    if shutil.which("nvidia-smi"):
        run.sh(["nvidia-smi", "-L"])
    if a.mode == "gpu":
        ok, text = run.sh([PY, "-c", "import torch; assert torch.cuda.is_available()"])
        if ok != 0:
            raise SystemExit("gpu_check: torch sees no CUDA device; use --cpu for the dry run")
    result = overhead(run, sizes)
    (a.out / "ratios.json").write_text(json.dumps(result, indent=2))
    sync_out = run.work / "sync"
    run.sh(aiprof("record", "-o", str(sync_out), "--", PY, str(EXAMPLE), *sizes["args"], "--sync-every-step"))
    profiles = {
        "default": run.work / "default_0" / "rank0.aiprof",
        "ops": run.work / "ops_0" / "rank0.aiprof",
        "sync": sync_out / "rank0.aiprof",
    }
    from aiprof.store import open_profile

    for label, p in profiles.items():
        m = json.loads((p / "profile.json").read_text())
        with open_profile(p) as prof:
            kinds = dict(prof.con.execute("select kind, count(*) from events group by 1 order by 2 desc").fetchall())
            ncounters = prof.con.execute("select count(distinct metric) from counters").fetchone()
        run.say(f"{label}: device trace: {m['record'].get('device_trace')}; events {kinds}; metrics {ncounters}")
    reports(run, profiles)
    rc, text = run.sh(aiprof("sql", str(profiles["default"]), "select * from counters order by ts", "--format", "csv"))
    (a.out / "counters.csv").write_text(text if rc == 0 else "")
    trace = run.work / "torch_0" / "trace.json"
    with trace.open("rb") as src, gzip.open(a.out / "torch_trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    monitor(run, sizes)
    ncu(run, sizes)
    package(run, profiles)
    shutil.rmtree(run.work, ignore_errors=True)
    run.say("gpu_check: done")
    sizes_ok = all(f.stat().st_size <= LIMIT for f in a.out.iterdir())
    files = sorted(f.name for f in a.out.iterdir())
    run.say(f"gpu_check: {len(files)} files: {', '.join(files)}; all under 16 MiB: {sizes_ok}")
    run.log.close()
    run.tables.close()
    sys.exit(0 if sizes_ok and len(files) <= 8 else 1)


if __name__ == "__main__":
    main()
