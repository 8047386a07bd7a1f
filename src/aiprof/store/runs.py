"""Inputs of two runs read as one: recorded far apart (two runs joined in one import, or
profiles of two runs opened together, where one's kernels would be read beside the
other's timeline), or profiles opened together that hold the same rank from the same
kind of source (:func:`same_rank`); and the one case of several traces that is one run
and one rank: windows of one process (:func:`process_key`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Two inputs (of one import, or profiles opened together) whose times do not overlap and lie further apart than this
#: were recorded in two runs (or two sessions far apart): a profiling session records
#: seconds to minutes, the files of one session overlap or follow within seconds, and the
#: clocks of a job's ranks or hosts differ by seconds at most; an hour is far past all of
#: these and still far below the days that lie between runs kept side by side.
SEPARATE_RUNS_NS = 3600 * 10**9
#: Unix ns before which a time is not taken as wall time (2001-09-09): boot and device
#: clocks, and inputs without times of their own placed at 0, stay below it.
UNIX_NS_MIN = 10**18


def separate_runs(spans: Sequence[tuple[int, int, str]], what: str = "import each on its own") -> str | None:
    """The warning, one line, when the wall-time spans (first, last Unix ns, path) of one
    import's inputs fall into groups further than ``SEPARATE_RUNS_NS`` apart, the spans of
    each group overlapping or near: two runs joined in one profile, one's kernels read
    beside the other's timeline. Names the two inputs on either side of the widest gap."""
    by_path: dict[str, tuple[int, int]] = {}
    for lo, hi, path in spans:
        had = by_path.get(path)
        by_path[path] = (lo, hi) if had is None else (min(had[0], lo), max(had[1], hi))
    timed = sorted((lo, hi, path) for path, (lo, hi) in by_path.items())
    if len(timed) < 2:
        return None
    gaps: list[tuple[int, str, str]] = []
    end, last = timed[0][1], timed[0][2]
    for lo, hi, path in timed[1:]:
        if lo - end > SEPARATE_RUNS_NS:
            gaps.append((lo - end, last, path))
        if hi >= end:
            end, last = hi, path
    if not gaps:
        return None
    gap, a, b = max(gaps)
    names = [Path(a).name, Path(b).name]
    if names[0] == names[1]:
        names = [a, b]
    runs = f" (the {len(timed)} inputs fall into {len(gaps) + 1} runs)" if len(gaps) > 1 else ""
    return f"{names[0]} and {names[1]} were recorded {_how_long(gap)} apart: they are two runs; {what}{runs}"


def _how_long(ns: int) -> str:
    """A gap of an hour or more in words: days past two days, else hours."""
    hours = ns / 3.6e12
    if hours >= 48:
        return f"{hours / 24:.0f} days"
    return f"{hours:.1f} hours"


def source_kind(meta: dict[str, Any]) -> str:
    """What wrote a profile (its profile.json ``meta``): ``aiprof record``, or the
    importers of its sources. A job's run gives one profile per rank of each kind (a
    recording's ranks, a trace per rank); a recording of a run and a vendor profiler's
    trace of it are two kinds, meant to be read together."""
    if "record" in meta:
        return "aiprof record"
    return "+".join(sorted({str(s.get("importer", "?")) for s in meta.get("sources", [])})) or "?"


def process_key(process: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """Who a trace traced, from its source entry's ``process`` (profile.json; the Kineto
    importer reads it from the trace's head, importers/kineto/process.py): the host, the
    pid and the rank its distributedInfo states. Without a host name (older Kineto) the
    profiler's base time stands in for it (one value for the processes of a machine: it
    was for two processes of torch 2.13's Kineto, seconds apart). None where the trace does
    not tell (no pid, or neither a host nor a base time): never taken as one process.

    Traces with one key are windows of one process in time (``torch.profiler`` with a
    schedule that repeats writes a file per window): one rank, not ranks of a job."""
    if not isinstance(process, dict):
        return None
    pid, host, base = process.get("pid"), process.get("host"), process.get("base_time_ns")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None
    rank = process.get("distributed_rank")
    if isinstance(host, str) and host:
        return (host, pid, rank)
    if isinstance(base, int) and base:
        return (None, pid, rank, base)
    return None


def windows_of_one_process(metas: Sequence[dict[str, Any]]) -> bool:
    """Whether the profiles' sources are all traces of one process (:func:`process_key`),
    each file once (two windows differ in their first bytes, ``sha256_head``; one trace
    imported twice does not): one rank's windows in time, not two runs."""
    sources = [s for m in metas for s in m.get("sources", [])]
    keys = {process_key(s.get("process")) for s in sources}
    heads = [s.get("sha256_head") for s in sources]
    return (
        len(sources) > 1 and len(keys) == 1 and None not in keys and None not in heads and len(set(heads)) == len(heads)
    )


def same_rank(metas: Sequence[dict[str, Any]], paths: Sequence[Path]) -> str | None:
    """The warning, one line, when two profiles opened together hold the same rank from
    the same kind of source (:func:`source_kind`): two runs (or two ranks saved without
    their rank numbers), whose events are read as one rank's, summed, whenever they ran.
    Profiles of windows of one process (:func:`windows_of_one_process`) are one rank's."""
    seen: dict[tuple[str, int], Path] = {}
    by_path = {p: m for m, p in zip(metas, paths, strict=True)}
    for meta, path in zip(metas, paths, strict=True):
        kind = source_kind(meta)
        for rank in meta.get("ranks") or []:
            key = (kind, int(rank))
            if key in seen and seen[key] != path and not windows_of_one_process([by_path[seen[key]], meta]):
                names = [seen[key].name, path.name]
                if names[0] == names[1]:
                    names = [str(seen[key]), str(path)]
                return (
                    f"{names[0]} and {names[1]} both hold rank {rank} ({kind}): two runs, read as one rank's "
                    "events; open each on its own, or compare them with aiprof diff"
                )
            seen.setdefault(key, path)
    return None
