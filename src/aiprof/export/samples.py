"""Python stack samples as interned stacks: the input of flame graphs (the web UI) and
of the speedscope export.

The store keeps each sample's leaf ``stack_id`` into ``frames``, a tree of call sites
(``parent`` links, per rank). Here every leaf becomes a path of functions from the
outermost call inward, functions identified by (name, file) as in the ``python``
view, so one function is one frame however many lines of it were sampled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis.common import fetch
from ..store import Profile


def sampling_interval_ns(profile: Profile) -> int:
    """The median gap between a thread's consecutive samples (ns); 0 without samples."""
    row = profile.sql(
        "SELECT median(d) AS d FROM (SELECT ts - lag(ts) OVER (PARTITION BY rank, pid, tid ORDER BY ts) AS d "
        "FROM samples) WHERE d > 0"
    ).to_pylist()
    d = row[0]["d"] if row else None
    return int(d) if d is not None else 0


class StackTable:
    """Frames and root-first stacks of one profile's samples, interned."""

    def __init__(self, profile: Profile) -> None:
        fr = fetch(profile, "SELECT rank, frame_id, parent, function, file FROM frames")
        self._parent: dict[tuple[int, int], int] = {}
        self._func: dict[tuple[int, int], int] = {}
        self.frames: list[dict[str, Any]] = []
        index: dict[tuple[str, str], int] = {}
        for r, f, p, fn, fl in zip(
            fr["rank"].tolist(), fr["frame_id"].tolist(), fr["parent"].tolist(), fr["function"], fr["file"]
        ):
            key = (str(fn), str(fl) if fl is not None else "")
            if key not in index:
                index[key] = len(self.frames)
                self.frames.append({"name": key[0], "file": key[1]})
            self._parent[(r, f)] = p
            self._func[(r, f)] = index[key]
        self.stacks: list[list[int]] = []
        self._stack_of: dict[tuple[int, int], int] = {}
        self._by_path: dict[tuple[int, ...], int] = {}

    def stack(self, rank: int, leaf: int) -> int:
        """The index in ``stacks`` of the path ending at call site ``leaf`` (-1: unknown)."""
        got = self._stack_of.get((rank, leaf))
        if got is not None:
            return got
        path: list[int] = []
        node = leaf
        seen = 0
        while node is not None and node >= 0 and (rank, node) in self._func and seen < 10_000:
            path.append(self._func[(rank, node)])
            node = self._parent.get((rank, node), -1)
            seen += 1
        if not path:
            self._stack_of[(rank, leaf)] = -1
            return -1
        key = tuple(reversed(path))
        sid = self._by_path.get(key)
        if sid is None:
            sid = self._by_path[key] = len(self.stacks)
            self.stacks.append(list(key))
        self._stack_of[(rank, leaf)] = sid
        return sid


#: One name per thread (rank, pid, tid): a thread can have a track row from each source
#: (torch's trace names it "thread N (python)", aiprof's recorder by the name the program
#: gave it); the recorder's (it has a device type) wins, then the first by text.
THREAD_NAMES_SQL = """
SELECT rank, pid, tid, first(thread_name ORDER BY device_type IS NULL, thread_name) AS thread_name
FROM tracks WHERE tid <> -1 AND thread_name IS NOT NULL AND thread_name <> '' GROUP BY ALL
"""


def thread_names(profile: Profile) -> dict[tuple[int, int, int], str]:
    """(rank, pid, tid) -> a thread's name, where the profile has one."""
    rows = profile.sql(THREAD_NAMES_SQL).to_pylist()
    return {(int(r["rank"]), int(r["pid"]), int(r["tid"])): str(r["thread_name"]) for r in rows}


def sample_stacks(
    profile: Profile, *, rank: int | None = None, t0: int | None = None, t1: int | None = None
) -> dict[str, Any]:
    """The samples of [t0, t1] (ns, the profile's axis; all when None), per thread and
    stack: frames [{name, file}], stacks (root-first lists of frame indexes), threads
    [{key "rank:pid:tid", rank, pid, tid, name, samples}], and the columnar rows
    thread (index into threads), stack (index into stacks), samples (count),
    weight_ns (samples x interval_ns); interval_ns and total_samples."""
    cond = ["true"]
    if rank is not None:
        cond.append(f"rank = {int(rank)}")
    if t0 is not None:
        cond.append(f"ts >= {int(t0)}")
    if t1 is not None:
        cond.append(f"ts <= {int(t1)}")
    got = fetch(
        profile,
        f"SELECT rank, pid, tid, stack_id, count(*) AS n FROM samples WHERE {' AND '.join(cond)} "
        "GROUP BY ALL ORDER BY rank, pid, tid, stack_id",
    )
    table = StackTable(profile)
    interval = sampling_interval_ns(profile)
    names = thread_names(profile)
    threads: list[dict[str, Any]] = []
    tindex: dict[tuple[int, int, int], int] = {}
    out: dict[str, list[int]] = {"thread": [], "stack": [], "samples": [], "weight_ns": []}
    for r, p, t, leaf, n in zip(
        got["rank"].tolist(), got["pid"].tolist(), got["tid"].tolist(), got["stack_id"].tolist(), got["n"].tolist()
    ):
        sid = table.stack(r, leaf)
        if sid < 0:
            continue
        key = (r, p, t)
        ti = tindex.get(key)
        if ti is None:
            ti = tindex[key] = len(threads)
            threads.append({"key": f"{r}:{p}:{t}", "rank": r, "pid": p, "tid": t, "name": names.get(key), "samples": 0})
        threads[ti]["samples"] += n
        out["thread"].append(ti)
        out["stack"].append(sid)
        out["samples"].append(n)
        out["weight_ns"].append(n * interval)
    used = sorted({f for s in table.stacks for f in s})
    return {
        "frames": table.frames,
        "stacks": table.stacks,
        "threads": threads,
        "rows": out,
        "interval_ns": interval,
        "total_samples": int(np.sum(out["samples"])) if out["samples"] else 0,
        "frames_used": len(used),
    }


def sample_window(profile: Profile, t0: int, t1: int, width: int) -> dict[str, Any]:
    """The samples of [t0, t1] merged to ``width`` pixels, per thread: for each pixel
    the last sample in it (its ts and stack), for a flame chart track. Returns frames,
    stacks, threads (as in :func:`sample_stacks`), rows {thread, ts, stack, n (samples
    in the pixel)}, bucket_ns and interval_ns."""
    bucket = max(1, -(-(t1 - t0) // max(1, width)))
    got = fetch(
        profile,
        f"""SELECT rank, pid, tid, max(ts) AS ts, arg_max(stack_id, ts) AS stack_id, count(*) AS n FROM samples
            WHERE ts >= {int(t0)} AND ts <= {int(t1)}
            GROUP BY rank, pid, tid, (ts - {int(t0)}) // {bucket} ORDER BY rank, pid, tid, ts""",
    )
    table = StackTable(profile)
    threads: list[dict[str, Any]] = []
    tindex: dict[tuple[int, int, int], int] = {}
    rows: dict[str, list[int]] = {"thread": [], "ts": [], "stack": [], "n": []}
    for r, p, t, ts, leaf, n in zip(
        got["rank"].tolist(),
        got["pid"].tolist(),
        got["tid"].tolist(),
        got["ts"].tolist(),
        got["stack_id"].tolist(),
        got["n"].tolist(),
    ):
        sid = table.stack(r, leaf)
        if sid < 0:
            continue
        key = (r, p, t)
        if key not in tindex:
            tindex[key] = len(threads)
            threads.append({"key": f"{r}:{p}:{t}", "rank": r, "pid": p, "tid": t, "name": None, "samples": 0})
        threads[tindex[key]]["samples"] += n
        rows["thread"].append(tindex[key])
        rows["ts"].append(ts)
        rows["stack"].append(sid)
        rows["n"].append(n)
    return {
        "frames": table.frames,
        "stacks": table.stacks,
        "threads": threads,
        "rows": rows,
        "bucket_ns": bucket,
        "interval_ns": sampling_interval_ns(profile),
    }
