"""Turn a recording's raw folder into a profile (Parquet tables + profile.json).

Runs in the recording process at stop, or in ``aiprof record``'s process after the
job (``defer``), so the job does not pay for pyarrow. The summary printed at the end
of a recording is computed here from the raw data, without reading the profile back.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from .environment import launch_file
from .job.collectors.torch_ops import SYNC_PREFIX
from .rawfile import MANIFEST, MARKS, RAW_SUFFIX, load_raw_cut

log = logging.getLogger("aiprof.record")


@dataclass
class RecordSummary:
    """What one recording holds, for the few lines printed at its end."""

    path: Path
    rank: int = 0
    partial: bool = False
    partial_reason: str | None = None
    duration_s: float = 0.0
    steps: int = 0
    step_ms_median: float | None = None
    steps_how: str = ""
    """How the steps were found (record.step_finder's rule)."""
    samples: int = 0
    events: Counter[str] = field(default_factory=Counter)
    counters: int = 0
    hottest: list[tuple[str, float]] = field(default_factory=list)
    """(function (file:line), share of samples with it as leaf), most first: of the
    samples inside steps when there are steps (startup is not what a user tunes)."""
    hottest_in_steps: bool = False
    step_windows: list[tuple[int, int]] = field(default_factory=list)
    """The steps' (start, end) on the raw clock, by start."""
    step_tids: set[int] = field(default_factory=set)
    """The threads that ran the steps."""
    startup_s: float | None = None
    """Seconds before the first step when recording began with the process."""
    failed: dict[str, str] = field(default_factory=dict)
    """Collector -> why it stopped early."""
    devices: list[str] | None = None
    """Devices whose telemetry was polled (None: device polling was off)."""
    exit_code: int | None = None
    """The job's non-zero exit status when it ended by exiting so (not partial)."""

    def lines(self) -> list[str]:
        """The summary as text lines (the CLI prints them)."""
        head = f"wrote {self.path}"
        if self.partial:
            head += f" (partial: {self.partial_reason or 'the job did not finish'})"
        elif self.exit_code:
            head += f" (the job exited with code {self.exit_code})"
        out = [head]
        bits = [f"{self.duration_s:.2f} s"]
        if self.steps:
            med = f", median {self.step_ms_median:.1f} ms" if self.step_ms_median is not None else ""
            how = f" ({self.steps_how})" if self.steps_how else ""
            bits.append(f"{self.steps} steps{how}{med}")
        bits.append(f"{self.samples:,} Python samples")
        if self.events:
            bits.append(f"{sum(self.events.values()):,} events")
        if self.counters:
            bits.append(f"{self.counters:,} counter readings")
        out.append("  " + ", ".join(bits))
        if self.startup_s is not None:
            out.append(f"  startup (imports and setup before the first step): {self.startup_s:.2f} s")
        if self.hottest:
            where = " inside steps" if self.hottest_in_steps else ""
            out.append(f"  hottest Python{where}: " + "; ".join(f"{n} {s:.0%}" for n, s in self.hottest))
        if self.devices is not None:
            accel = [d for d in self.devices if not d.startswith("cpu")]
            shown = ", ".join(self.devices) or "none"
            out.append(f"  devices: {shown}" + ("" if accel else " (no accelerator found: host telemetry only)"))
        for name, why in self.failed.items():
            out.append(f"  collector {name} stopped early: {why}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def find_raw(folder: Path) -> list[Path]:
    """Raw folders (complete or not) of recordings under ``folder`` or beside a profile."""
    if folder.name.endswith(".aiprof"):
        return sorted(p for p in folder.parent.glob(f".{folder.name}*{RAW_SUFFIX}") if p.is_dir())
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith(".") and p.name.endswith(RAW_SUFFIX))


def read_manifest(raw_dir: Path) -> dict[str, Any]:
    """The manifest of ``raw_dir``; the one being replaced when the process died between
    writing and renaming it (a segfault in a checkpoint)."""
    from ..errors import AiprofError

    for name in (MANIFEST, MANIFEST + ".tmp"):
        try:
            manifest: dict[str, Any] = json.loads((raw_dir / name).read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            log.info("%s/%s unreadable: %s", raw_dir, name, e)
            continue
        return manifest
    raise AiprofError(f"{raw_dir}: no readable manifest (the recording process died before it started recording)")


def warm_up() -> None:
    """Import what :func:`finalize` needs (the store: pyarrow, numpy, duckdb; 0.27 of
    the 0.33 s a 3 s training job's profile took to write). ``aiprof record`` runs this
    in a thread while the job runs, so the profile is written sooner after it ends."""
    try:
        from ..importers import base  # noqa: F401
        from ..store import writer  # noqa: F401
        from . import step_finder  # noqa: F401
    except Exception:  # finalize imports them again, and says what failed
        log.debug("warming up the finalizer's imports failed", exc_info=True)


def finalize(
    raw: str | PathLike[str],
    *,
    partial_reason: str | None = None,
    keep_raw: bool = False,
    exit_code: int | None = None,
) -> RecordSummary:
    """Write the profile of raw folder ``raw``; ``partial_reason`` marks it partial (the
    job was killed by a signal). ``exit_code``: the job's non-zero exit status, which
    marks it partial only when the recording did not stop cleanly (the recorder's
    manifest is still a checkpoint's, or says why it stopped: an exception, a signal);
    a job that ended by exiting with a status of its own (``sys.exit(3)``) ran all it
    was going to, and its profile says so in a warning instead."""
    from ..importers.base import ImportContext
    from ..store.writer import ProfileWriter

    raw_dir = Path(raw)

    manifest = read_manifest(raw_dir)
    profile = Path(manifest["profile"])
    rank = manifest["rank"] if manifest["rank"] is not None else 0
    clock = manifest["clock"]
    mono0 = int(clock["mono0"])
    unfinished = bool(manifest.get("partial"))
    if exit_code and unfinished and partial_reason is None:
        partial_reason = f"exit code {exit_code}"
    partial = unfinished or partial_reason is not None
    reason = manifest.get("partial_reason") or partial_reason
    summary = RecordSummary(path=profile, rank=rank, partial=partial, partial_reason=reason)
    if exit_code and not partial:
        summary.exit_code = exit_code
    summary.duration_s = (int(clock.get("mono1", clock.get("mono_last", mono0))) - mono0) / 1e9
    pid = int(manifest["pid"])

    with ProfileWriter(profile) as w:
        ctx = ImportContext(writer=w, rank=rank)
        collectors = manifest["collectors"]

        def load(name: str) -> dict[str, Any] | None:
            entry = collectors.get(name)
            if entry is None or not entry.get("file"):
                return None
            return _load_or_warn(w, raw_dir / entry["file"])

        if summary.exit_code:
            w.warn(f"the job exited with code {summary.exit_code}: it ran to that exit, and all of it is recorded")
        for name, entry in collectors.items():
            if entry.get("failed"):
                summary.failed[name] = entry["failed"]
                w.warn(f"collector {name} stopped early: {entry['failed']}")
        marks = _load_or_warn(w, raw_dir / MARKS) or {}
        whole = bool((manifest.get("options") or {}).get("whole_process"))
        py = load("python")
        if py is not None and "outside" in py:
            # Sampled from outside and never merged (aiprof record was killed): the
            # samples it spilled into the raw folder as they came.
            from .launcher.outside_stacks import merge_spilled

            cut = merge_spilled(raw_dir, py, clock, pid)
            if cut:
                w.warn(cut)
        how = _write_marks(w, marks, rank, pid, mono0, summary, whole_process=whole, py=py)
        thread_names: dict[int, str] = {}
        if py is not None:
            _write_python(w, py, rank, pid, mono0, summary)
            thread_names.update({int(k): v for k, v in py.get("thread_names", {}).items()})
        sysdata = load("system")
        if sysdata is not None:
            _write_system(w, sysdata, rank, pid, mono0, summary)
        dev = load("device")
        if dev is not None:
            _write_devices(w, dev, rank, clock, summary)
        # The operators (--ops), else the default device trace: the same raw data.
        ops = load("ops") or load("device_trace")
        if ops is not None:
            annotated = {a[2] for a in marks.get("annotations", [])}
            _write_ops(ctx, ops, raw_dir, mono0, clock, summary, annotated)
        if thread_names:
            tids = sorted(thread_names)
            w.append(
                "tracks",
                {
                    "rank": [rank] * len(tids),
                    "pid": [pid] * len(tids),
                    "tid": tids,
                    "device_type": ["cpu"] * len(tids),
                    "device": [-1] * len(tids),
                    "process_name": [f"rank {rank} (pid {pid})"] * len(tids),
                    "thread_name": [thread_names[t] for t in tids],
                },
            )
        meta = w.meta
        # The Kineto import sets its own origin; the recording's is the truth here.
        meta["time_origin_ns"] = int(clock["unix0"])
        meta["clock"] = "unix"
        meta["partial"] = partial
        if reason:
            meta["partial_reason"] = reason
        if rank not in meta["ranks"]:
            meta["ranks"].append(rank)
        meta["world_size"] = manifest.get("world_size") or meta.get("world_size") or 1
        if manifest.get("host") and manifest["host"] not in meta["hosts"]:
            meta["hosts"].append(manifest["host"])
        meta["record"] = {
            "pid": pid,
            "argv": manifest.get("argv"),
            "monotonic_origin_ns": mono0,
            "clock": clock,
            "options": manifest.get("options"),
            "collectors": {k: {"failed": v.get("failed")} for k, v in collectors.items()},
            "device_trace": (ops or {}).get("device_trace"),
            "steps": how,
        }
        if summary.exit_code:
            meta["record"]["exit_code"] = summary.exit_code
        meta["sources"].append({"importer": "aiprof.record", "path": str(profile), "collectors": sorted(collectors)})
    if not keep_raw:
        shutil.rmtree(raw_dir, ignore_errors=True)
    return summary


def _load_or_warn(w: Any, path: Path) -> dict[str, Any] | None:
    """One raw data file; a missing or damaged one costs its collector, with a warning."""
    try:
        data, cut = load_raw_cut(path)
    except (OSError, EOFError, ValueError, TypeError) as e:
        w.warn(f"raw file {path.name} unreadable ({type(e).__name__}: {e}); its data is not in the profile")
        return None
    if cut:
        w.warn(f"raw file {path.name} ends in a cut record ({cut} bytes, the job died writing it); the rest is kept")
    return data if isinstance(data, dict) else None


#: The words the summary uses for each rule of record.step_finder.
HOW_TEXT = {
    "marked": "marked by prof.step()",
    "optimizer": "one per optimizer.step()",
    "backward": "one per backward(), no optimizer",
}

#: Name of the span that replaces step 0 when recording began with the process.
BEFORE_FIRST_STEP = "aiprof: before the first step"
#: ``cat`` of the host events the recorder itself writes: steps and annotations, GC
#: pauses, torch.distributed calls (the timechart gives them tracks of their own).
MARKS_CAT, GC_CAT, COLLECTIVES_CAT = "aiprof", "python_gc", "torch.distributed"
OWN_CATS = (MARKS_CAT, GC_CAT, COLLECTIVES_CAT)


def _write_marks(
    w: Any,
    marks: dict[str, Any],
    rank: int,
    pid: int,
    mono0: int,
    summary: RecordSummary,
    *,
    whole_process: bool = False,
    py: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from .step_finder import find_steps, first_in_loop_from_samples

    found = find_steps(
        marks,
        mono0,
        whole_process=whole_process,
        first_in_loop=first_in_loop_from_samples(py or {}, marks.get("loop")),
    )
    steps = found.steps
    ann = list(marks.get("annotations", []))
    if found.startup is not None:
        # Recording began with the process: the time before the first iteration holds
        # interpreter start, imports and setup; a named span, not a training step.
        start, end, tid = found.startup
        ann.append((start, end - start, BEFORE_FIRST_STEP, tid))
        summary.startup_s = (end - start) / 1e9
    rows: dict[str, list[Any]] = {k: [] for k in ("kind", "name", "ts", "dur", "tid", "step", "args")}
    clock = step_clock(marks)
    for start, end, num, tid in steps:
        rows["kind"].append("step")
        rows["name"].append(f"ProfilerStep#{num}")
        rows["ts"].append(start - mono0)
        rows["dur"].append(end - start)
        rows["tid"].append(tid)
        rows["step"].append(num)
        got = clock(start, end, tid)
        rows["args"].append(None if got is None else json.dumps({"cpu_ns": got[0], "runq_ns": got[1]}))
    for start, dur, name, tid, *samples in ann:
        rows["kind"].append("user_annotation")
        rows["name"].append(name)
        rows["ts"].append(start - mono0)
        rows["dur"].append(dur)
        rows["tid"].append(tid)
        rows["step"].append(None)
        rows["args"].append(json.dumps({"samples": samples[0]}) if samples else None)
    _append_host_events(w, rows, rank, pid, MARKS_CAT)
    _write_collectives(w, marks.get("collectives", []), rank, pid, mono0, summary)
    summary.steps = len(steps)
    summary.step_windows = sorted((s, e) for s, e, _, _ in steps)
    summary.step_tids = {int(t) for *_, t in steps}
    if steps:
        durs = sorted(e - s for s, e, _, _ in steps)
        summary.step_ms_median = durs[len(durs) // 2] / 1e6
    for k in rows["kind"]:
        summary.events[k] += 1
    summary.steps_how = HOW_TEXT.get(str(found.how.get("rule")), "")
    return found.how


def step_clock(marks: dict[str, Any]) -> Callable[[int, int, int], tuple[int, int] | None]:
    """(start, end, tid) -> the thread's (CPU ns, run-queue ns) in that span, from the
    clock readings at its two ends (record.job.sched; Controller.read_clock), whichever
    rule found the step; None where either end is not a reading of that thread (the
    first step, when it begins at a Python sample; a last step whose end is estimated;
    elsewhere than Linux). The figures of every step, marked or found, come from here."""
    at = {(int(tid), int(ts)): (int(c), int(q)) for ts, tid, c, q in marks.get("clock", [])}
    # Raw folders of earlier versions: (start, end, cpu, runq) of each marked step.
    old = {(int(s), int(e)): (int(c), int(q)) for s, e, c, q in marks.get("sched", [])}

    def figures(start: int, end: int, tid: int) -> tuple[int, int] | None:
        a, b = at.get((tid, start)), at.get((tid, end))
        if a is None or b is None:
            return old.get((start, end))
        return b[0] - a[0], b[1] - a[1]

    return figures


def _write_collectives(w: Any, calls: list[Any], rank: int, pid: int, mono0: int, summary: RecordSummary) -> None:
    """torch.distributed calls (record.collectives) as host ``collective`` events."""
    rows = [
        {
            "kind": "collective",
            "name": op,
            "ts": t0 - mono0,
            "dur": t1 - t0,
            "tid": tid,
            "bytes": nbytes,
            "args": json.dumps({"group": group, "group_size": size, "seq": seq}),
        }
        for t0, t1, op, nbytes, group, size, seq, tid in calls
    ]
    _append_host_events(
        w, _columns(rows, ("kind", "name", "ts", "dur", "tid", "bytes", "args")), rank, pid, COLLECTIVES_CAT
    )
    summary.events["collective"] += len(calls)


def _columns(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[Any]]:
    """Records as the columns the writer takes."""
    return {k: [r[k] for r in rows] for k in keys}


def _append_host_events(w: Any, rows: dict[str, list[Any]], rank: int, pid: int, cat: str) -> None:
    n = len(rows["kind"])
    if not n:
        return
    w.append(
        "events",
        {
            **rows,
            "rank": [rank] * n,
            "device_type": ["cpu"] * n,
            "device": [-1] * n,
            "pid": [pid] * n,
            "cat": [cat] * n,
        },
    )


#: Share of the samples dropped (%) from which the warning says the phase split may be off.
BIAS_WARN_PCT = 1.0


def dropped_samples_warning(torn: int, kept: int, in_steps: tuple[int, int] | None = None) -> str:
    """The warning for ``torn`` samples dropped beside ``kept`` ones (``in_steps``: the
    same two counts of the steps' thread inside the steps): how many, what share, and
    (from :data:`BIAS_WARN_PCT`) that the step time by phase may be biased by that share.
    Drops are not spread evenly: a walk fails when the thread's frames change while they
    are read, which a tight loop of Python calls (per-element work, a generator yielding
    each item: data loading, often) does all the time and a long C call never does."""

    def share(t: int, k: int) -> float:
        return 100.0 * t / (t + k) if t + k else 0.0

    pct = share(torn, kept)
    text = (
        f"{torn:,} of {torn + kept:,} Python stack samples ({pct:.1f}%) were dropped: the stack changed "
        "while it was read from outside the job"
    )
    if in_steps is not None:
        pct = share(*in_steps)
        text += f" ({in_steps[0]:,} of {sum(in_steps):,} inside the steps, {pct:.1f}%)"
    if pct < BIAS_WARN_PCT:
        return text
    return (
        text + "; drops fall mostly in tight Python loops (per-element work, data loading often), so the step "
        f"time by phase may under-count the phases that run them by up to {pct:.1f} points"
    )


def job_rooted(frames: list[Any]) -> list[Any]:
    """``frames`` (``(id, parent, function, file, line)``, parent -1 at a root) with each
    stack starting at the job's own code: a frame of the job whose ancestors are all
    launch frames (:func:`.environment.launch_file`: aiprof's runner and bootstrap,
    runpy) becomes a root. Every sample keeps its frames; the launch frames stay in
    the table, as roots of what ran in them alone (the recorder's start and stop)."""
    by_id = {int(f[0]): f for f in frames}
    launch: dict[int, bool] = {}  # frame id -> it and all its ancestors are launch frames

    def chain(fid: int) -> bool:
        path = []
        while fid >= 0 and fid not in launch and fid in by_id:
            path.append(fid)
            fid = int(by_id[fid][1])
        ok = launch.get(fid, True)  # a root's parent, or one not in the table
        for i in reversed(path):
            ok = ok and launch_file(str(by_id[i][3]))
            launch[i] = ok
        return ok

    out = []
    for f in frames:
        parent = int(f[1])
        if parent >= 0 and parent in by_id and chain(parent) and not launch_file(str(f[3])):
            f = (f[0], -1, *f[2:])
        out.append(f)
    return out


def _write_python(w: Any, py: dict[str, Any], rank: int, pid: int, mono0: int, summary: RecordSummary) -> None:
    frames = job_rooted(py["frames"])
    if frames:
        w.append(
            "frames",
            {
                "rank": [rank] * len(frames),
                "frame_id": [f[0] for f in frames],
                "parent": [f[1] if f[1] >= 0 else None for f in frames],
                "function": [f[2] for f in frames],
                "file": [f[3] for f in frames],
                "line": [f[4] for f in frames],
            },
        )
    ts = py["ts"]
    n = len(ts)
    summary.samples = n
    torn = int(py.get("torn_walks", 0))
    if torn:
        # Read from outside without pausing the job: a stack that changed under the
        # walk (even after retries), none of whose frames lasted through it, is not
        # kept rather than kept wrong (launcher/outside_stacks.py).
        in_steps = None
        if summary.step_windows and len(py.get("torn_ts", ())) == torn:
            # The share that matters for the step time by phase: the step thread's, in steps.
            tids, win = summary.step_tids, summary.step_windows
            in_steps = (
                sum(1 for i in _inside_windows(py["torn_ts"], win) if py["torn_tid"][i] in tids),
                sum(1 for i in _inside_windows(ts, win) if py["tid"][i] in tids),
            )
        w.warn(dropped_samples_warning(torn, n, in_steps))
    if not n:
        return
    w.append(
        "samples",
        {
            "rank": [rank] * n,
            "ts": [t - mono0 for t in ts],
            "pid": [pid] * n,
            "tid": py["tid"],
            "stack_id": py["stack"],
        },
    )
    by_id = {f[0]: f for f in frames}
    stacks = py["stack"]
    inside = _inside_windows(ts, summary.step_windows)
    if inside:
        # The threads that ran the steps: another thread parked meanwhile (a queue's
        # feeder, a DataLoader's pin thread, a logger) would lead with its wait.
        mine = [i for i in inside if py["tid"][i] in summary.step_tids]
        stacks = [stacks[i] for i in (mine or inside)]
        summary.hottest_in_steps = True
    names: Counter[str] = Counter()
    for node, count in Counter(stacks).items():
        f = by_id.get(node)
        if f is None:
            continue
        names[f"{f[2]} ({Path(f[3]).name}:{f[4]})"] += count
    summary.hottest = [(name, c / len(stacks)) for name, c in names.most_common(3)]


def _inside_windows(ts: list[int], windows: list[tuple[int, int]]) -> list[int]:
    """Indexes of the times in ``ts`` that fall inside one of ``windows`` (sorted by start)."""
    starts = [w[0] for w in windows]
    out = []
    for i, t in enumerate(ts):
        j = bisect.bisect_right(starts, t) - 1
        if j >= 0 and t < windows[j][1]:
            out.append(i)
    return out


def _write_system(w: Any, data: dict[str, Any], rank: int, pid: int, mono0: int, summary: RecordSummary) -> None:
    units = data.get("units", {})
    cols: dict[str, list[Any]] = {"ts": [], "metric": [], "value": [], "unit": []}
    for metric, (ts, vals) in data.get("series", {}).items():
        cols["ts"] += [t - mono0 for t in ts]
        cols["metric"] += [metric] * len(ts)
        cols["value"] += vals
        cols["unit"] += [units.get(metric)] * len(ts)
    n = len(cols["ts"])
    if n:
        w.append("counters", {**cols, "rank": [rank] * n, "device_type": ["cpu"] * n, "device": [-1] * n})
        summary.counters += n
    gcs = data.get("gc", [])
    rows = [
        {
            "kind": "gc",
            "name": f"gc gen{gen}",
            "ts": start - mono0,
            "dur": dur,
            "tid": tid,
            "args": json.dumps({"generation": gen, "collected": collected, "uncollectable": uncollectable}),
        }
        for start, dur, gen, collected, uncollectable, tid in gcs
    ]
    _append_host_events(w, _columns(rows, ("kind", "name", "ts", "dur", "tid", "args")), rank, pid, GC_CAT)
    summary.events["gc"] += len(gcs)


def _write_devices(w: Any, data: dict[str, Any], rank: int, clock: dict[str, int], summary: RecordSummary) -> None:
    from ..devices import metric_unit

    summary.devices = [f"{d['type']} {d['index']} ({d['name']})" for d in data.get("devices", [])]
    for d in data.get("devices", []):
        rec = {"rank": rank, **d}
        if rec not in w.meta["devices"]:
            w.meta["devices"].append(rec)
    to_ts = unix_to_origin(clock)
    cols: dict[str, list[Any]] = {k: [] for k in ("device_type", "device", "ts", "metric", "value", "unit")}
    for dtype, dev, ts_unix, values in data.get("samples", []):
        ts = to_ts(ts_unix)
        for metric, value in values.items():
            if value is None:
                continue
            cols["device_type"].append(dtype)
            cols["device"].append(dev)
            cols["ts"].append(ts)
            cols["metric"].append(metric)
            cols["value"].append(float(value))
            cols["unit"].append(metric_unit(metric))
    n = len(cols["ts"])
    if n:
        w.append("counters", {**cols, "rank": [rank] * n})
        summary.counters += n


def unix_to_origin(clock: dict[str, int]) -> Any:
    """Unix ns -> ns from the recording's origin, fitted on the (monotonic, Unix) pairs
    read at start and stop (so an NTP slew during the run does not shift the end)."""
    m0, u0 = int(clock["mono0"]), int(clock["unix0"])
    m1 = int(clock.get("mono1", clock.get("mono_last", m0)))
    u1 = int(clock.get("unix1", clock.get("unix_last", u0)))
    slope = (m1 - m0) / (u1 - u0) if u1 != u0 else 1.0

    def to_ts(unix_ns: int) -> int:
        return round((unix_ns - u0) * slope)

    return to_ts


_SYNC_RE = re.compile(rb'"name":\s*"' + re.escape(SYNC_PREFIX.encode()) + rb'(\d+)"[^}]*?"ts":\s*([0-9.eE+-]+)')


def sync_offsets(trace: bytes) -> list[int]:
    """(torch raw ns - monotonic ns) of every clock-sync marker found in a trace."""
    from ..importers.timeconv import us_to_ns

    out = []
    for m in _SYNC_RE.finditer(trace):
        ns, ok = us_to_ns([m.group(2).decode()])
        if ok[0]:
            out.append(int(ns[0]) - int(m.group(1)))
    return out


def _write_ops(
    ctx: Any,
    data: dict[str, Any],
    raw_dir: Path,
    mono0: int,
    clock: dict[str, int],
    summary: RecordSummary,
    annotated: set[str],
) -> None:
    from ..importers.kineto import ChromeTraceConverter, Ev, load_chrome_trace

    class RecordedTrace(ChromeTraceConverter):
        """torch's trace as recorded by aiprof: steps, sync markers and the
        record_function twins of aiprof.annotate ranges are already in the profile."""

        importer_name = "aiprof.record.torch"

        def add_batch(self, evs: list[Ev]) -> None:
            keep = [e for e in evs if not _ours(e.name) and not (e.cat == "user_annotation" and e.name in annotated)]
            super().add_batch(keep)

    before = Counter(ctx.kinds)
    for name in data.get("traces", []):
        path = raw_dir / name
        if not path.is_file():
            ctx.warn(f"torch trace {name} is missing from the raw folder")
            continue
        offsets = sorted(sync_offsets(path.read_bytes()))
        if offsets:
            origin = offsets[len(offsets) // 2] + mono0
        else:
            # No marker (an active window that saw no step edge, or a device-only
            # trace, which records no record_function): torch's clock is Unix.
            base = _base_time(path)
            origin = int(clock["unix0"]) - base
            if data.get("clock_markers", True):
                ctx.warn(f"{name}: no clock-sync marker; aligned through the wall clock")
        ctx.origin_raw_ns = origin
        load_chrome_trace(path, ctx, converter=RecordedTrace)
    summary.events.update(ctx.kinds - before)


def _ours(name: object) -> bool:
    return isinstance(name, str) and (name.startswith("ProfilerStep#") or name.startswith(SYNC_PREFIX))


def _base_time(path: Path) -> int:
    m = re.search(rb'"baseTimeNanoseconds":\s*(\d+)', path.read_bytes())
    return int(m.group(1)) if m else 0
