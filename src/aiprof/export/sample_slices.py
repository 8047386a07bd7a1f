"""Python stack samples as nested slices per thread: a sampled flame chart, as py-spy's
and speedscope's draw it, for the timechart (Chrome trace) export.

Each sample stands for the time from its own timestamp to the next sample of its
thread. Consecutive samples that share a prefix of their stack (functions from the
outermost call inward, one function one frame, as in :class:`StackTable`) share the
slices of that prefix: a slice opens at the first sample whose stack holds its frame
at its depth and closes at the first sample whose stack does not. A gap of more than
:data:`MAX_GAP_INTERVALS` sampling intervals (the thread was not sampled: recording
paused, the thread idle outside Python) closes every slice one interval after the last
sample, so a flame never bridges time nobody saw.
"""

from __future__ import annotations

import pyarrow as pa

from ..analysis.common import fetch
from ..store import Profile
from .samples import StackTable, sampling_interval_ns

#: A thread's samples further apart than this many median sampling intervals are not
#: joined into one slice (py-spy's flame chart also breaks where no sample was taken).
MAX_GAP_INTERVALS = 4

_COLUMNS = ("rank", "pid", "tid", "ts", "dur", "depth", "name", "file")


def sample_slices(profile: Profile) -> pa.Table:
    """One row per slice: rank, pid, tid, ts, dur (ns on the profile's axis), depth
    (0 = outermost), name (the function) and file; empty without samples."""
    got = fetch(profile, "SELECT rank, pid, tid, ts, stack_id FROM samples ORDER BY rank, pid, tid, ts")
    out: dict[str, list[object]] = {c: [] for c in _COLUMNS}
    if not len(got["ts"]):
        return pa.table({c: pa.array([], type=_type(c)) for c in _COLUMNS})
    table = StackTable(profile)
    interval = max(1, sampling_interval_ns(profile))
    max_gap = MAX_GAP_INTERVALS * interval
    opened: list[tuple[int, int]] = []  # (frame index, start ns), outermost first
    thread: tuple[int, int, int] | None = None
    last = 0
    prev: int | None = None

    def close(keep: int, at: int) -> None:
        while len(opened) > keep:
            frame, start = opened.pop()
            if at > start:
                f = table.frames[frame]
                for c, v in zip(_COLUMNS, (*thread_key, start, at - start, len(opened), f["name"], f["file"])):
                    out[c].append(v)

    thread_key: tuple[int, int, int] = (0, 0, 0)
    for r, p, t, ts, leaf in zip(
        got["rank"].tolist(), got["pid"].tolist(), got["tid"].tolist(), got["ts"].tolist(), got["stack_id"].tolist()
    ):
        key = (r, p, t)
        if key != thread or ts - last > max_gap:
            close(0, last + interval)
            thread = thread_key = key
            prev = None
        elif leaf == prev:
            last = ts  # the same stack again: every slice of it goes on
            continue
        prev = leaf
        sid = table.stack(r, leaf)
        stack = table.stacks[sid] if sid >= 0 else []
        same = 0
        while same < len(opened) and same < len(stack) and opened[same][0] == stack[same]:
            same += 1
        close(same, ts)
        opened.extend((f, ts) for f in stack[same:])
        last = ts
    close(0, last + interval)
    return pa.table({c: pa.array(out[c], type=_type(c)) for c in _COLUMNS})


def _type(col: str) -> pa.DataType:
    if col in ("name", "file"):
        return pa.string()
    return pa.int32() if col in ("rank", "depth") else pa.int64()
