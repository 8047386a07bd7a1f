"""Where the step time goes, from the Python samples: forward, backward, optimizer...

A default recording (no torch.profiler) has no operator events, only Python stack
samples. Each sample of the thread that runs the steps, inside a step, is given one
phase by the frames of its stack (rules below); a step's time is split between the
phases in proportion to its samples. With operator events (``--ops``) the operators
refine it: a sample taken inside an operator range of a known phase on the same
thread (``Optimizer.step#...``, ``enumerate(DataLoader)#...``, autograd's
``evaluate_function``, ``aten::item`` / ``aten::_local_scalar_dense``, a collective)
takes that phase whatever its frames say.

A rank without steps (an inference loop; a job cut short before its steps were
written) has one window, its whole run: the span of its events and of its step
thread's samples (the events alone can end long before the job: an inference loop's
GC pauses stop with its setup). Its rows say step null, as all steps do.

Imports. A stack under a frame of the import machinery (``<frozen
importlib._bootstrap>``, ``_bootstrap_external``, as ``_call_with_frames_removed``)
runs an ``import``: the frames inside it say nothing of the work (``import torch``
runs ``torch/distributed/``'s module code without communicating). In a step (a lazy
import: the first ``opt.step()`` importing ``torch._dynamo``) the sample takes the
phase of the frames outside the import, the call that pays for it. In the whole run of
a rank without steps it is ``startup``: not a phase of the work, a row of its own
where it has samples (``import torch``, ``torch.optim.SGD(...)`` importing
``torch._dynamo``); the steps view has no column of it.

Rules (docs/record.md), strongest first; a stack takes the strongest phase of any of
its frames (those outside an import):

====================  =======================================================================
sync                  the innermost frame's line calls ``.item()``, ``.cpu()``, ``.tolist()``,
                      ``.numpy()`` (C calls: the sample stops at that line), or a frame is
                      ``torch.cuda.synchronize`` / ``Event.synchronize`` / ``Stream.synchronize``
collective            a frame in ``torch/distributed/`` (``all_reduce``, ``barrier``...)
logging               a frame in ``logging``, ``tqdm``, ``wandb``, ``tensorboard``; or the
                      innermost frame's line calls ``print(``
data_loading          a frame in ``torch/utils/data/`` (``DataLoader.__next__``, the
                      fetcher, the dataset's ``__getitem__`` under it, collate)
optimizer             a frame in ``torch/optim/`` (``Optimizer.step``, ``zero_grad``)
backward              ``Tensor.backward`` or ``torch.autograd.backward`` / ``grad``
forward               ``nn.Module.__call__`` (``_call_impl``), not under backward
other_python          anything else (the loop's own code, a manual SGD update...)
====================  =======================================================================

Source lines are read where the profile is analysed (``linecache``); where the
script's file is not readable, the line rules do not apply.

Views:

``phases`` (one row per rank, step and phase; step null = all steps, or the whole run
of a rank without steps)
    rank, step, phase, samples, time_us, percent (of the step time). ``startup`` has
    a row only in a rank whose samples hold some.

``phase_hotspots`` (one row per rank, phase and line)
    rank, phase, function, file, line (the innermost frame of the user's own code in
    the stack, else the innermost frame), samples, time_us, phase_pct (% of the
    phase's samples), step_pct (% of all samples inside steps).

The waits for other ranks hidden in backward (``rank_waits``) are in :mod:`.rank_waits`.
"""

from __future__ import annotations

import linecache
import re
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import COMM_NAME_SQL, fetch

PHASES = ("forward", "backward", "optimizer", "data_loading", "sync", "collective", "logging", "other_python")
#: A stack under an import in the whole run of a rank without steps: startup, not a
#: phase of the work (module doc). Its samples have the phase index ``len(PHASES)`` in
#: :class:`Classified`; the rows name it after PHASES.
STARTUP = "startup"
ROW_PHASES = (*PHASES, STARTUP)
#: Strength of each phase: a stack takes its strongest frame's.
_RANK = {"other_python": 0, "forward": 1, "backward": 2, "optimizer": 3, "data_loading": 4, "logging": 5}
_RANK |= {"collective": 6, "sync": 7}
#: The import machinery's frames (frozen, or the source files of a Python built without
#: frozen modules).
_IMPORT_FILE = re.compile(r"^<frozen importlib\._bootstrap(_external)?>$|/importlib/_bootstrap(_external)?\.py$")

_SYNC_LINE = re.compile(r"\.(item|cpu|tolist|numpy)\(\s*\)")
_PRINT_LINE = re.compile(r"(^|[^\w.])print\(")
#: A logging call on the line (its arguments are formatted there: a norm per parameter
#: for a log line is the logging's cost): logging's functions, a logger's, tqdm's write,
#: a summary writer's add_*.
_LOG_LINE = re.compile(
    r"\b(logging|log|logger|_logger|LOGGER|LOG)\.(debug|info|warning|warn|error|exception|critical|log)\(|"
    r"\btqdm\.write\(|\bwriter\.add_\w+\(|\bwandb\.log\("
)
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+/|^<|/aiprof/record/")
#: The DataLoader's iterator over worker processes: the main process waits for batches.
_WORKER_ITER = "_MultiProcessingDataLoaderIter"
#: DistributedDataParallel's module: ranks in lockstep at each gradient all-reduce.
_DDP_FILE = "/torch/nn/parallel/distributed.py"
_LOGGING_FILE = re.compile(r"/logging/|/tqdm/|/wandb/|/tensorboard(X)?/|/torch/utils/tensorboard/")


def frame_phase(function: str, file: str) -> str:
    """The phase one frame stands for (other_python when it says nothing). ``function``
    may be qualified (``Module._call_impl``, as Python 3.11's co_qualname)."""
    f = file.replace("\\", "/")
    function = function.rsplit(".", 1)[-1]
    if function == "synchronize" and ("/torch/cuda/" in f or "/torch/mps/" in f or "/torch/xpu/" in f):
        return "sync"
    if "/torch/distributed/" in f:
        return "collective"
    if _LOGGING_FILE.search(f):
        return "logging"
    if "/torch/utils/data/" in f:
        return "data_loading"
    if "/torch/optim/" in f:
        return "optimizer"
    if function == "backward" and f.endswith("/torch/_tensor.py"):
        return "backward"
    if "/torch/autograd/" in f and function in ("backward", "grad", "_engine_run_backward"):
        return "backward"
    if f.endswith("/torch/nn/modules/module.py") and function in ("_call_impl", "_wrapped_call_impl"):
        return "forward"
    return "other_python"


def is_import_frame(file: str) -> bool:
    """A frame of the import machinery: the stack under it runs an ``import``."""
    return bool(_IMPORT_FILE.search(file.replace("\\", "/")))


def line_phase(file: str, line: int) -> str:
    """The phase the innermost frame's source line stands for (a C call on it)."""
    text = linecache.getline(file, line) if line and line > 0 else ""
    if _SYNC_LINE.search(text):
        return "sync"
    if _PRINT_LINE.search(text) or _LOG_LINE.search(text):
        return "logging"
    return "other_python"


def is_user_code(file: str) -> bool:
    """A file of the user's own code (not a library, the standard library, or frozen)."""
    return not _LIBRARY.search(file.replace("\\", "/"))


#: Operator ranges that name a phase (with --ops), strongest first.
_OP_PHASES_SQL = f"""
    CASE
      WHEN name IN ('aten::item', 'aten::_local_scalar_dense') THEN 'sync'
      WHEN kind = 'collective' OR {COMM_NAME_SQL} THEN 'collective'
      WHEN name LIKE 'enumerate(DataLoader)%' THEN 'data_loading'
      WHEN name LIKE 'Optimizer.%' THEN 'optimizer'
      WHEN name LIKE 'autograd::engine::evaluate_function%' THEN 'backward'
      ELSE NULL END
"""


class Classified:
    """Per rank: each sample's window index (-1 outside steps), phase (an index into
    PHASES; ``len(PHASES)``: startup) and hotspot frame; each window's rank, step and
    duration (a rank's whole-run window covers its samples)."""

    def __init__(self) -> None:
        self.rank = np.zeros(0, dtype=np.int64)
        self.ts = np.zeros(0, dtype=np.int64)
        """Each sample's time (ns), sorted within a rank."""
        self.window = np.zeros(0, dtype=np.int64)
        self.phase = np.zeros(0, dtype=np.int64)
        self.where: list[tuple[str, str, int]] = []
        self.in_workers = np.zeros(0, dtype=bool)
        """The stack waits for DataLoader worker processes (a multi-process iterator frame)."""
        self.ddp = np.zeros(0, dtype=bool)
        """A DistributedDataParallel frame is on the stack (its forward or its hooks)."""
        self.w_rank = np.zeros(0, dtype=np.int64)
        self.w_step = np.zeros(0, dtype=np.int64)
        self.w_dur = np.zeros(0, dtype=np.int64)


def classify(profile: Profile) -> Classified:
    """Every sample of the step threads, classified (memoised per profile)."""
    return profile.memo("phases", lambda: _classify(profile), per_event=True)


def _classify(profile: Profile) -> Classified:
    from .ranks import step_windows

    out = Classified()
    w = dict(step_windows(profile))
    out.w_rank, out.w_step, out.w_dur = w["rank"], w["step"], w["end"] - w["start"]
    if not profile.tables.get("samples"):
        return out
    s = fetch(profile, "SELECT rank, ts, tid, stack_id FROM samples ORDER BY rank, ts")
    fr = fetch(profile, "SELECT rank, frame_id, parent, function, file, line FROM frames")
    threads = fetch(profile, "SELECT rank, tid, count(*) AS n FROM events WHERE kind = 'step' GROUP BY rank, tid")
    per_thread = fetch(profile, "SELECT rank, tid, count(*) AS n FROM samples GROUP BY rank, tid")
    step_tid: dict[int, int] = {}
    for src in (per_thread, threads):  # the steps' thread wins; else the busiest sampled one
        best: dict[int, int] = {}
        for r, t, n in zip(src["rank"].tolist(), src["tid"].tolist(), src["n"].tolist(), strict=True):
            if n > best.get(r, -1):
                best[r], step_tid[r] = n, t
    nodes: dict[tuple[int, int], tuple[int, str, str, int]] = {}
    for r, f, p, fn, fl, ln in zip(
        fr["rank"].tolist(), fr["frame_id"].tolist(), fr["parent"].tolist(), fr["function"], fr["file"], fr["line"]
    ):
        nodes[(r, f)] = (p, str(fn), str(fl), int(ln))
    memo: dict[tuple[int, int], tuple[int, tuple[str, str, int] | None, bool, bool, bool]] = {}

    def up(r: int, node: int) -> tuple[int, tuple[str, str, int] | None, bool, bool, bool]:
        """(strongest phase rank of the frames from node to the root, those outside an
        import only; innermost user frame; whether a frame waits for loader workers,
        whether one is DDP's, whether one is the import machinery's)."""
        chain: list[tuple[int, int]] = []
        k = (r, node)
        while k in nodes and k not in memo:
            chain.append(k)
            k = (r, nodes[k][0])
        base = memo.get(k, (0, None, False, False, False))
        for key in reversed(chain):
            _, fn, fl, ln = nodes[key]
            user = (fn, fl, ln) if is_user_code(fl) else base[1]
            f = fl.replace("\\", "/")
            workers = base[2] or (_WORKER_ITER in fn and "/torch/utils/data/" in f)
            base = (
                # The frames an import runs say nothing of the work (the caller's do).
                base[0] if base[4] else max(base[0], _RANK[frame_phase(fn, fl)]),
                user,
                workers,
                base[3] or f.endswith(_DDP_FILE),
                base[4] or is_import_frame(f),
            )
            memo[key] = base
        return base

    by_rank = sorted(_RANK, key=_RANK.__getitem__)  # phase rank -> phase
    startup = len(_RANK)  # a phase rank above all: the stack runs an import
    whole = w.get("whole_span")
    whole = np.zeros(len(w["rank"]), dtype=bool) if whole is None else whole.astype(bool)
    ranks_, times, windows, phases, where, workers, ddp = [], [], [], [], [], [], []
    for r in np.unique(s["rank"]).tolist():
        tid = step_tid.get(r)
        sel = np.flatnonzero((s["rank"] == r) & (s["tid"] == tid))
        if not len(sel):
            continue
        ts = s["ts"][sel]
        wsel = np.flatnonzero(w["rank"] == r)
        order = wsel[np.argsort(w["start"][wsel])]
        st, en = w["start"][order], w["end"][order]
        i = np.searchsorted(st, ts, side="right") - 1
        ic = np.clip(i, 0, None)
        inside = (i >= 0) & (ts < en[ic]) if len(order) else np.zeros(len(ts), dtype=bool)
        win = np.where(inside, order[ic] if len(order) else -1, -1)
        refine = _op_phases(profile, r, int(tid) if tid is not None else -1, ts)
        for j, stack in enumerate(s["stack_id"][sel].tolist()):
            strongest, user, waits, in_ddp, importing = up(r, stack)
            leaf = nodes.get((r, stack))
            if leaf is not None and not importing:
                strongest = max(strongest, _RANK[line_phase(leaf[2], leaf[3])])
            if refine[j] >= 0:
                strongest = int(refine[j])
            if importing and win[j] >= 0 and whole[win[j]]:
                strongest = startup
            ranks_.append(r)
            times.append(int(ts[j]))
            windows.append(int(win[j]))
            phases.append(strongest)
            workers.append(waits)
            ddp.append(in_ddp)
            where.append(user or ((leaf[1], leaf[2], leaf[3]) if leaf else ("?", "?", 0)))
    out.rank = np.array(ranks_, dtype=np.int64)
    out.ts = np.array(times, dtype=np.int64)
    out.window = np.array(windows, dtype=np.int64)
    # Phase index into PHASES.
    idx = [PHASES.index(p) for p in by_rank] + [len(PHASES)]
    out.phase = np.array([idx[p] for p in phases], dtype=np.int64)
    out.where = where
    out.in_workers = np.array(workers, dtype=bool)
    out.ddp = np.array(ddp, dtype=bool)
    return out


def under_imports(profile: Profile, rank: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which of ``rank``'s spans (ns, on its step thread) ran under an import: the step
    thread's sample inside the span, else its first one after it within one sampling
    interval, is of the startup phase (an import's frames on its stack). False where no
    sample tells."""
    c = classify(profile)
    sel = np.flatnonzero(c.rank == rank)
    out = np.zeros(len(starts), dtype=bool)
    if len(sel) < 2 or not len(starts):
        return out
    ts, phase = c.ts[sel], c.phase[sel]
    gap = int(np.median(np.diff(ts)))
    i = np.searchsorted(ts, starts, side="left")
    ok = i < len(ts)
    ic = np.clip(i, 0, len(ts) - 1)
    ok &= ts[ic] <= np.maximum(ends, starts) + gap
    return np.asarray(ok & (phase[ic] == len(PHASES)), dtype=bool)


def _op_phases(profile: Profile, rank: int, tid: int, ts: np.ndarray) -> np.ndarray:
    """Per sample: the phase rank of the strongest operator range holding it, or -1."""
    out = np.full(len(ts), -1, dtype=np.int64)
    ev = fetch(
        profile,
        f"SELECT ph, ts, ts + dur AS te FROM (SELECT {_OP_PHASES_SQL} AS ph, ts, dur FROM events "
        "WHERE rank = ? AND tid = ? AND device_type = 'cpu' AND dur > 0 "
        "AND kind IN ('cpu_op', 'user_annotation', 'collective')) WHERE ph IS NOT NULL",
        [rank, tid],
    )
    if not len(ev["ts"]):
        return out
    from . import intervals as iv

    for ph in sorted(set(ev["ph"].tolist()), key=_RANK.__getitem__):
        m = ev["ph"] == ph
        ms, me = iv.merge(ev["ts"][m], ev["te"][m])
        i = np.searchsorted(ms, ts, side="right") - 1
        ic = np.clip(i, 0, None)
        hit = (i >= 0) & (ts < me[ic])
        out[hit] = _RANK[ph]
    return out


def window_times(profile: Profile) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per step window (ranks.step_windows order): samples per phase (windows x
    phases), and ns per phase (the window's duration split in proportion to them; the
    share of its startup samples, a rank without steps' imports, is in no phase)."""
    counts, ns = _window_counts(profile)
    return counts[:, : len(PHASES)], {p: ns[p] for p in PHASES}


def _window_counts(profile: Profile) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """:func:`window_times` with startup: windows x ROW_PHASES, and ns of each."""
    c = classify(profile)
    counts = np.zeros((len(c.w_rank), len(ROW_PHASES)), dtype=np.int64)
    ok = c.window >= 0
    np.add.at(counts, (c.window[ok], c.phase[ok]), 1)
    total = counts.sum(axis=1)
    share = counts / np.maximum(total, 1)[:, None]
    ns = {p: np.round(share[:, i] * c.w_dur).astype(np.int64) for i, p in enumerate(ROW_PHASES)}
    return counts, ns


_PHASES_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("step", pa.int64()),
        ("phase", pa.string()),
        ("samples", pa.int64()),
        ("time_us", pa.float64()),
        ("percent", pa.float64()),
    ]
)


def phase_rows(profile: Profile, per_step: bool = True) -> list[dict[str, Any]]:
    """Rows of the ``phases`` view (also the overview's 'phases' section)."""
    c = classify(profile)
    counts, ns = _window_counts(profile)
    rows: list[dict[str, Any]] = []
    for r in np.unique(c.w_rank).tolist():
        sel = np.flatnonzero(c.w_rank == r)
        if not counts[sel].sum():
            continue
        scopes: list[tuple[int | None, np.ndarray]] = [(None, sel)]
        if per_step:
            scopes += [(int(c.w_step[i]), np.array([i])) for i in sel if c.w_step[i] >= 0]
        # Startup is a row only in a rank that has some (the steps view has no column of it).
        shown = ROW_PHASES if counts[sel, len(PHASES)].sum() else PHASES
        for step, idx in scopes:
            dur = int(c.w_dur[idx].sum())
            n = int(counts[idx].sum())
            for k, p in enumerate(shown):
                # One step: its own samples split it. All steps: every sample inside
                # them splits their total (steps shorter than the sampling interval
                # have no sample of their own).
                v = int(ns[p][idx].sum()) if step is not None else round(dur * int(counts[idx, k].sum()) / max(n, 1))
                rows.append(
                    {
                        "rank": r,
                        "step": step,
                        "phase": p,
                        "samples": int(counts[idx, k].sum()),
                        "time_us": v / 1000.0,
                        "percent": 100.0 * v / dur if dur > 0 else None,
                    }
                )
    return rows


@analyser(
    "phases",
    "Step time by phase (Python samples)",
    default_sort=("rank", "step"),
    units={"time_us": "µs", "percent": "%"},
)
def phases(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, step (null: all steps) and phase: samples, time_us, percent
    of the step time (see the module doc for the rules)."""
    return pa.Table.from_pylist(phase_rows(profile), schema=_PHASES_SCHEMA)


_HOT_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("phase", pa.string()),
        ("function", pa.string()),
        ("file", pa.string()),
        ("line", pa.int64()),
        ("samples", pa.int64()),
        ("time_us", pa.float64()),
        ("phase_pct", pa.float64()),
        ("step_pct", pa.float64()),
    ]
)


@analyser(
    "phase_hotspots",
    "Lines that cost most in each phase",
    default_sort=("rank", "phase", "-samples"),
    units={"time_us": "µs", "phase_pct": "%", "step_pct": "%"},
)
def phase_hotspots(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, phase and line (the innermost frame of the user's code):
    samples inside steps, time_us (samples x the step time per sample), phase_pct,
    step_pct."""
    c = classify(profile)
    counts: dict[tuple[int, int, tuple[str, str, int]], int] = {}
    for j in np.flatnonzero(c.window >= 0).tolist():
        k = (int(c.rank[j]), int(c.phase[j]), c.where[j])
        counts[k] = counts.get(k, 0) + 1
    rows: list[dict[str, Any]] = []
    for r in sorted({k[0] for k in counts}):
        n_all = sum(v for k, v in counts.items() if k[0] == r)
        step_ns = int(c.w_dur[c.w_rank == r].sum())
        per_sample = step_ns / n_all if n_all else 0.0
        for ph in range(len(ROW_PHASES)):
            n_ph = sum(v for k, v in counts.items() if k[0] == r and k[1] == ph)
            for (rr, pp, (fn, fl, ln)), v in counts.items():
                if rr != r or pp != ph:
                    continue
                rows.append(
                    {
                        "rank": r,
                        "phase": ROW_PHASES[ph],
                        "function": fn,
                        "file": fl,
                        "line": ln,
                        "samples": v,
                        "time_us": v * per_sample / 1000.0,
                        "phase_pct": 100.0 * v / n_ph,
                        "step_pct": 100.0 * v / n_all,
                    }
                )
    return pa.Table.from_pylist(rows, schema=_HOT_SCHEMA)


# -- the phases as causes of step time (analysis/attribution.py) ------------------------

#: The phases that advice acts on (advise/python_time.py), as attribution causes: phase
#: -> cause. ``other_python`` (user Python in the step outside the framework's calls) is
#: the cause ``python_preprocessing``.
ADVISED = {
    "data_loading": "python_data_loading",
    "sync": "python_sync",
    "logging": "python_logging",
    "optimizer": "python_optimizer",
    "other_python": "python_preprocessing",
}


def _filled_times(profile: Profile) -> dict[str, np.ndarray]:
    """:func:`window_times`' ns per phase, a step without a sample of its own (shorter
    than the sampling interval) split by its rank's shares over all its steps, as the
    phases view's all-steps row splits them: else the attribution gave the phases only
    the steps that drew a sample (a logging loop of 2 ms steps at 100 Hz: 1.9% where the
    phases said 33%)."""

    def f() -> dict[str, np.ndarray]:
        from .ranks import step_windows

        w = step_windows(profile)
        _, ns = window_times(profile)
        n = len(ns[PHASES[0]])
        if not n:
            return ns
        dur = (w["end"] - w["start"])[:n].astype(np.int64)
        rank, step = w["rank"][:n], w["step"][:n]
        total = sum((ns[p] for p in PHASES), np.zeros(n, dtype=np.int64))
        out = {p: ns[p].copy() for p in PHASES}
        for r in np.unique(rank).tolist():
            mine = (rank == r) & (step >= 0)
            empty = mine & (total == 0)
            sampled = int(total[mine].sum())
            if not empty.any() or not sampled:
                continue
            for p in PHASES:
                out[p][empty] = np.round(dur[empty] * (int(ns[p][mine].sum()) / sampled)).astype(np.int64)
        return out

    return profile.memo("phases:filled", f, per_event=True)


def _phase_intervals(phase: str) -> Any:
    """Intervals holding each window's sampled time of ``phase``: samples give a share
    of the window, not instants, so the phases are laid end to end from the window's
    start in PHASES order. Their lengths are exact; where they fall inside the window is
    a convention, so a cause before them in priority (a recorded span) takes its own
    time first."""

    def f(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        from .ranks import step_windows

        w = step_windows(profile)
        ns = _filled_times(profile)
        if not len(ns[phase]):
            return {}
        k = PHASES.index(phase)
        before = sum((ns[p] for p in PHASES[:k]), np.zeros(len(ns[phase]), dtype=np.int64))
        start = w["start"][: len(before)].astype(np.int64) + before
        end = start + ns[phase]
        rank = w["rank"][: len(before)]
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for r in np.unique(rank):
            sel = (rank == r) & (ns[phase] > 0) & (w["step"][: len(before)] >= 0)
            out[int(r)] = (start[sel], end[sel])
        return out

    return f


def _register_causes() -> None:
    from .attribution import Cause, register

    def waits(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        from .rank_waits import wait_intervals

        return wait_intervals(profile)

    register(Cause("rank_wait", "Waiting for other ranks in backward (Python samples)", waits))
    for p, cause in ADVISED.items():
        title = "User Python in the step" if p == "other_python" else p.replace("_", " ").capitalize()
        register(Cause(cause, f"{title} (Python samples)", _phase_intervals(p)))


_register_causes()
