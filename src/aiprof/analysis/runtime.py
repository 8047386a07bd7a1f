"""Host runtime and driver calls by class: launch, sync, context creation, memory management, setup.

A job whose host time goes to ``cudaMalloc`` or ``cudaStreamCreate`` is not
launch-bound: each class has its own figures and its own advice.

Classes (first match wins):
- ``sync``: calls that block the host until the device is done (the sync view's
  synchronize, blocking copy and blocking memset calls);
- ``launch``: calls that started device work (a kernel, copy, set or collective with
  the same correlation), and calls named for launching or enqueueing
  (``cudaLaunchKernel``, ``cudaGraphLaunch``, ``cudaMemcpyAsync``...) whose work the
  trace lost;
- ``context``: the call that created the process's device context (:data:`CONTEXT_SQL`:
  its first runtime call, before any device work, lasting at least
  :data:`CONTEXT_INIT_MIN_US`; Nsight Systems shows it as a long first ``cudaMalloc``
  or ``cudaFree``): one-time start-up, not allocator or setup calls;
- ``memory``: allocator calls (``cudaMalloc``, ``cudaFree``, ``cudaHostAlloc``,
  ``hipMalloc``, ``aclrtMalloc``...);
- ``setup``: everything else (stream and event creation, device and attribute
  queries, module loading).
Operating-system calls that an importer keeps as runtime events (Nsight Systems's OS
runtime trace, category ``osrt``: poll, ioctl, sem_wait) are not device runtime calls
and are left out.

``runtime`` (one row per rank, class and call name)
    rank, class, name, calls, total_us, in_steps_us (inside the step windows),
    outside_steps_us (before the first step, between steps, after the last: startup
    and teardown), max_us (µs). One more row per rank and class, name ``(all)``, holds
    the union of the class's calls (calls on several threads at once count once).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from . import intervals as iv
from .base import analyser
from .common import fetch, rank_slice
from .ranks import step_windows
from .sync import SYNC_API_RE, SYNC_MEMCPY_RE, SYNC_MEMSET_RE

RUNTIME_CLASSES = ("launch", "sync", "context", "memory", "setup")
ALL = "(all)"

#: Synchronizing calls: the sync view's three patterns (synchronize, blocking copy, blocking set).
SYNC_RE = "|".join((SYNC_API_RE, SYNC_MEMCPY_RE, SYNC_MEMSET_RE))
#: Calls named for launching device work.
LAUNCH_RE = r"(?i)launch|memcpy\w*async|memset\w*async|invokekernel|enqueue|dequeue"
#: Allocator calls.
MEMORY_RE = (
    r"(?i)malloc|free|memalloc|hostalloc|hostregister|hostunregister|mempool|memmap|memunmap|memcreate"
    r"|memrelease|memaddress|memsetaccess"
)

#: CUDA (HIP, AscendCL) creates a process's device context lazily, in the first runtime
#: call the process makes, whatever it is: that call then lasts from tens of ms to
#: seconds (Nsight Systems users know it as a long first ``cudaMalloc`` or ``cudaFree``),
#: where the same call on a live context takes µs. A call is that context creation
#: (class ``context``) when it is the first ``runtime`` call of its process (rank, pid;
#: the driver calls the runtime makes for itself, ``cuModuleGetLoadingMode``, come before
#: it), starts before any device work of its rank, lasts at least this long, and would
#: otherwise be an allocator call or a device / context set-up call by its name
#: (:data:`CONTEXT_CALL_RE`; a first launch or synchronize keeps its class, and so does a
#: framework's own first call, such as Ascend's graph engine ``GE@...``). An allocator
#: call on a live context, even of a large buffer, takes well under this.
CONTEXT_INIT_MIN_US = 10_000.0
#: The calls that create the context when they come first: allocator calls, and the
#: runtimes' device and context set-up (``cuInit``, ``cudaSetDevice``, ``cuCtxCreate``,
#: ``cuDevicePrimaryCtxRetain``, ``hipInit``, ``aclInit``, ``aclrtSetDevice``,
#: ``aclrtCreateContext``, ``cnrtInit``...).
CONTEXT_CALL_RE = MEMORY_RE + r"|(cu|cuda|hip|acl|aclrt|cnrt)(init|setdevice|ctxcreate|createcontext|deviceprimaryctx)"

#: SQL over the calls ``e`` joined to their process's first runtime call ``fc`` and their
#: rank's first device work ``fd``: the context-creation condition (:data:`CONTEXT_INIT_MIN_US`).
CONTEXT_SQL = (
    f"fc.rank IS NOT NULL AND e.kind = 'runtime' AND e.dur >= {int(CONTEXT_INIT_MIN_US * 1000)} "
    f"AND (fd.ts IS NULL OR e.ts < fd.ts) AND regexp_matches(e.name, '{CONTEXT_CALL_RE}')"
)

_SQL = f"""
    WITH dev AS (SELECT DISTINCT rank, correlation FROM events
                 WHERE device_type <> 'cpu' AND correlation IS NOT NULL
                   AND kind IN ('kernel', 'memcpy', 'memset', 'collective')),
         fd AS (SELECT rank, min(ts) AS ts FROM events
                WHERE device_type <> 'cpu' AND kind IN ('kernel', 'memcpy', 'memset', 'collective') GROUP BY rank),
         fc AS (SELECT rank, coalesce(pid, -1) AS pid, min(ts) AS ts FROM events
                WHERE device_type = 'cpu' AND kind = 'runtime' AND coalesce(cat, '') <> 'osrt' GROUP BY rank, 2)
    SELECT e.rank, e.ts, e.ts + e.dur AS te, e.name,
           CASE WHEN regexp_matches(e.name, '{SYNC_RE}') THEN 'sync'
                WHEN dev.rank IS NOT NULL OR regexp_matches(e.name, '{LAUNCH_RE}') THEN 'launch'
                WHEN {CONTEXT_SQL} THEN 'context'
                WHEN regexp_matches(e.name, '{MEMORY_RE}') THEN 'memory'
                ELSE 'setup' END AS class
    FROM events e LEFT JOIN dev ON dev.rank = e.rank AND dev.correlation = e.correlation
    LEFT JOIN fc ON fc.rank = e.rank AND fc.pid = coalesce(e.pid, -1) AND fc.ts = e.ts
    LEFT JOIN fd ON fd.rank = e.rank
    WHERE e.device_type = 'cpu' AND e.kind IN ('runtime', 'driver') AND coalesce(e.cat, '') <> 'osrt'
"""


def runtime_calls(profile: Profile) -> dict[str, np.ndarray]:
    """Every host runtime / driver call: rank, ts, te (ns), name (codes into
    ``name__dict``: one string per distinct name, not per call) and class (fixed-width
    text: a 10 GB trace has tens of millions of calls)."""

    def read() -> dict[str, np.ndarray]:
        c = fetch(profile, _SQL + " ORDER BY e.rank, e.ts", codes=("name", "class"))
        classes = c.pop("class__dict").astype(str)
        c["class"] = classes[c["class"]] if len(c["class"]) else np.zeros(0, "U1")
        return c

    return profile.memo("runtime_calls", read, per_event=True)


_SCHEMA = pa.schema(
    [
        ("rank", pa.int64()),
        ("class", pa.string()),
        ("name", pa.string()),
        ("calls", pa.int64()),
        ("total_us", pa.float64()),
        ("in_steps_us", pa.float64()),
        ("outside_steps_us", pa.float64()),
        ("max_us", pa.float64()),
    ]
)


@analyser(
    "runtime",
    "Runtime calls by class",
    default_sort=("rank", "-total_us"),
    units={c: "µs" for c in ("total_us", "in_steps_us", "outside_steps_us", "max_us")},
)
def runtime(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, class and call name (module doc: classes and columns)."""
    c = runtime_calls(profile)
    w = step_windows(profile)
    rows: list[dict[str, Any]] = []
    for r in np.unique(c["rank"]):
        # The calls come in rank order (runtime_calls): each rank's are one slice, a view.
        sel = rank_slice(c["rank"], r)
        wsel = (w["rank"] == r) & (w["step"] >= 0)
        ws, we = iv.merge(w["start"][wsel], w["end"][wsel])
        names, cls = c["name"][sel], c["class"][sel]
        ts, te = c["ts"][sel], c["te"][sel]
        inside = iv.covered(ws, we, ts, te) if len(ws) else ts * 0
        if not wsel.any():  # no steps: the whole span is the one window
            ws, we = iv.merge(w["start"][w["rank"] == r], w["end"][w["rank"] == r])
            inside = iv.covered(ws, we, ts, te)
        for k in RUNTIME_CLASSES:
            m = cls == k
            if not m.any():
                continue
            us_, ue = iv.merge(ts[m], te[m])
            u_in = int(iv.covered(ws, we, us_, ue).sum())
            rows.append(
                {
                    "rank": int(r),
                    "class": k,
                    "name": ALL,
                    "calls": int(m.sum()),
                    "total_us": float((ue - us_).sum()) / 1000.0,
                    "in_steps_us": u_in / 1000.0,
                    "outside_steps_us": float((ue - us_).sum() - u_in) / 1000.0,
                    "max_us": float((te[m] - ts[m]).max()) / 1000.0,
                }
            )
        # Per (class, name): the calls grouped by one integer key, summed at once (a 10
        # GB trace has 10M calls: no Python object per call).
        text = c["name__dict"]
        kc = np.zeros(len(cls), dtype=np.int64)
        for i, k in enumerate(RUNTIME_CLASSES):
            kc[cls == k] = i
        width = max(len(text), 1)
        keys, group = np.unique(kc * width + names, return_inverse=True)
        group = group.reshape(-1)
        dur = te - ts
        calls = np.bincount(group, minlength=len(keys))
        total = np.bincount(group, weights=dur, minlength=len(keys))
        held = np.bincount(group, weights=inside, minlength=len(keys))
        longest = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(longest, group, dur)
        labels = [(RUNTIME_CLASSES[int(g) // width], str(text[int(g) % width])) for g in keys]
        for j in sorted(range(len(keys)), key=lambda j: labels[j]):
            rows.append(
                {
                    "rank": int(r),
                    "class": labels[j][0],
                    "name": labels[j][1],
                    "calls": int(calls[j]),
                    "total_us": float(total[j]) / 1000.0,
                    "in_steps_us": float(held[j]) / 1000.0,
                    "outside_steps_us": float(total[j] - held[j]) / 1000.0,
                    "max_us": float(longest[j]) / 1000.0,
                }
            )
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
