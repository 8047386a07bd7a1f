"""Import the rank files of one job in parallel: one rank task per file (up to 4 of them
in one Dask task, :func:`.engine.per_task`), then the index.

Each rank task imports its file into ``OUT/rank<N>.aiprof`` in the worker process and
returns the rank's summaries (a few KiB), computed from the events it has just written,
still in memory (:mod:`.summary_mem`; :mod:`.summary`'s SQL over the profile read back
where that path declines), as are its derived tables (:mod:`.derived_mem`, else
analysis/derived.py's SQL); the client gathers them
into the cluster index (:mod:`.index`). A failed rank is reported and skipped. The
client never holds a rank's events: its memory is bounded by the index. OUT may be an
fsspec URL (:mod:`.storage`): a task then imports into its worker's scratch folder and
uploads the rank's files.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import AiprofError
from .engine import Outcome, Starting, Where, map_tasks
from .index import write_index
from .job import Job, RankFile, disagreements, plan
from .storage import locate

RANK_DIR = "rank{rank}.aiprof"


@dataclass
class Report:
    """What a parallel import did (the CLI prints it)."""

    out: str
    imported: list[int] = field(default_factory=list)
    failed: list[tuple[int, Path, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    index_rows: dict[str, int] = field(default_factory=dict)
    index_bytes: int = 0
    client_peak_rss: int = 0
    seconds: float = 0.0


def import_rank(rf: RankFile, out: str, forced: str | None, warning: str | None) -> dict[str, Any]:
    """One task: import ``rf`` into OUT/rank<N>.aiprof and summarise it (runs on a worker)."""
    import pyarrow

    from ..store.writer import META_FILE

    # One task per worker thread: its libraries' own thread pools would only compete.
    pyarrow.set_cpu_count(1)
    loc = locate(out)
    name = RANK_DIR.format(rank=rf.rank)
    if loc.local is not None:
        return _import_into(rf, loc.local / name, forced, warning)
    scratch = Path(tempfile.mkdtemp(prefix="aiprof-rank-"))
    try:
        result = _import_into(rf, scratch / name, forced, warning)
        loc.upload(scratch / name, name, last=META_FILE)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def _import_into(rf: RankFile, target: Path, forced: str | None, warning: str | None) -> dict[str, Any]:
    from ..analysis.derived import derived_tables
    from ..importers import import_paths
    from ..store import open_profile
    from ..store.derived import has_derived, write_derived
    from ..store.writer import write_meta
    from .derived_mem import derive_rank
    from .job import job_facts
    from .summary import ranks_table, summarize
    from .summary_mem import SPAN_TABLES, Unsure, rank_events, ranks_of, summarize_rank

    path, ctx = import_paths([rf.path], target, forced=forced, rank=rf.rank, keep_events=True)
    meta_file = path / "profile.json"
    meta = json.loads(meta_file.read_text())
    meta["rank_from"] = rf.how
    if warning:
        meta["warnings"].append(warning)
    meta_file.write_text(json.dumps(meta, indent=1))
    # The tables just written, still in memory, answer the summaries and the derived
    # tables without reading the profile back; where they cannot answer exactly
    # (summary_mem.py, derived_mem.py), the SQL over the profile does.
    events, ctx.writer.kept_events = ctx.writer.kept_events, None
    other = {n: ctx.writer.kept_table(n) for n in SPAN_TABLES}
    fast, ranks, derived = None, None, None
    try:
        e = rank_events(events, meta) if events is not None else None
    except Unsure:
        e = None
    del events
    if e is not None:
        with suppress(Unsure):
            fast = summarize_rank(e, meta)
        with suppress(Unsure):
            ranks = ranks_of(e, other, path, meta)
        # Every rank of a job keeps its derived tables (store/derived.py), whatever its
        # size: the job's overview and steps views then read 1,000 ranks' totals, not
        # their events (a small profile alone skips them: its views are fast anyway).
        # Unsure, or a fault of the fast path: the SQL (the rule) answers instead.
        with suppress(Exception):
            derived = derive_rank(e)
        del e
    del other
    kept = has_derived(path, meta)
    if fast is not None and ranks is not None and (derived is not None or kept):
        tables = {**fast, "ranks": ranks}
    else:
        with open_profile(path) as prof:
            prof.con.execute("SET threads TO 1")
            tables = summarize(prof) if fast is None else {**fast, "ranks": ranks_table(prof)}
            if derived is None and not kept:
                derived = derived_tables(prof, meta)
    if derived is not None:
        write_derived(path, meta, derived)
        write_meta(path, meta)
    elif not kept:
        write_meta(path, meta)  # the warning that says why not
    return {
        "rank": rf.rank,
        "tables": tables,
        "warnings": list(ctx.warnings),
        "distributed": job_facts(meta.get("distributed")),
    }


def run_import(
    ranks: Job | Sequence[Path],
    out: str | os.PathLike[str],
    where: Where,
    *,
    forced: str | None = None,
    allow_mixed: bool = False,
    on_change: Callable[[int, int, int], None] = lambda _d, _f, _r: None,
) -> Report:
    """Import every rank under ``out`` (a path or an fsspec URL) and write the cluster
    index. ``ranks``: the planned job, or its files, ranked (:func:`.job.plan`) while the
    cluster starts."""
    t0 = time.perf_counter()
    started = Starting(where)
    try:
        job = ranks if isinstance(ranks, Job) else plan(list(ranks))
        rep = _run(job, out, started, forced=forced, allow_mixed=allow_mixed, on_change=on_change)
    finally:
        started.close()
    rep.seconds = time.perf_counter() - t0
    rep.client_peak_rss = peak_rss()
    return rep


def _run(
    job: Job,
    out: str | os.PathLike[str],
    started: Starting,
    *,
    forced: str | None,
    allow_mixed: bool,
    on_change: Callable[[int, int, int], None],
) -> Report:
    where = started.where
    mixed_warning = _mixed(job.mixed, allow_mixed)
    c = started.get()  # a cluster that cannot be reached leaves no folder behind
    loc = locate(out)
    loc.mkdir()
    rep = Report(out=loc.url)
    if mixed_warning:
        rep.warnings.append(mixed_warning)
    parts: dict[str, list[pa.Table]] = {}
    dists: list[RankFile] = []

    def gathered(o: Outcome) -> None:
        rf: RankFile = o.item
        if o.error is not None:
            rep.failed.append((rf.rank, rf.path, o.error))
            return
        rep.imported.append(rf.rank)
        for name, t in o.value["tables"].items():
            parts.setdefault(name, []).append(t)
            rep.index_bytes += t.nbytes
        rep.warnings.extend(f"rank {rf.rank}: {w}" for w in o.value["warnings"])
        dists.append(RankFile(rf.path, rf.rank, rf.how, o.value["distributed"]))

    map_tasks(c, import_rank, job.files, (loc.url, forced, mixed_warning), on_change, gathered)
    started.stop_soon()  # the cluster shuts down while the index is written
    # distributedInfo written after the events is only known once imported.
    late = disagreements(dists)
    if late and not job.mixed:
        msg = _mixed(late, allow_mixed)
        if msg:
            rep.warnings.append(msg)
    if not rep.imported:
        raise AiprofError("no rank could be imported: " + "; ".join(f"rank {r}: {e}" for r, _, e in rep.failed))
    rep.index_rows = write_index(
        loc,
        parts,
        {
            "ranks": sorted(rep.imported),
            "failed": [{"rank": r, "path": str(p), "error": e} for r, p, e in rep.failed],
            "world_size": _world(dists),
            "mixed": bool(job.mixed or late),
            "warnings": rep.warnings,
            "cluster": {"kind": where.kind, "address": where.address, "workers": where.workers},
        },
    )
    return rep


def _mixed(lines: list[str], allow: bool) -> str | None:
    if not lines:
        return None
    text = "the ranks are not one job (" + " | ".join(lines) + ")"
    if not allow:
        raise AiprofError(text + "; import them separately, or pass --allow-mixed to import them as one")
    return text + "; imported together because of --allow-mixed"


def _world(dists: list[RankFile]) -> int | None:
    sizes = {d.dist.get("world_size") for d in dists if d.dist}
    return next(iter(sizes)) if len(sizes) == 1 else None


def peak_rss() -> int:
    """This process's peak resident set, bytes."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)
