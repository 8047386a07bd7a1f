"""The importer registry: one module per format, tried in this order.

Adding a format means one new module exposing ``IMPORTER`` and one line below.
The dispatcher tries file-name patterns first, then content detection, logs which
importer it chose, and when none fits says why each one declined.
"""

from __future__ import annotations

import fnmatch
import importlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AiprofError, ImportFormatError, UnexpectedInputError
from ..store.runs import UNIX_NS_MIN, process_key, separate_runs, windows_of_one_process
from .base import Detection, ImportContext, Importer

if TYPE_CHECKING:
    from ..store.writer import ProfileWriter
log = logging.getLogger("aiprof.import")


#: Module names under aiprof.importers, most specific formats first.
REGISTRY: list[str] = [
    "ascend.msprof",
    "ascend.cluster",
    "mindspore.job",
    "mindspore.legacy",
    "mindspore.cluster",
    "mindspore.aicpu",
    "mindspore.framework",
    "mindspore.hwts",
    "mindspore.text",
    "mindspore.step_trace",
    "ascend.torch_npu",
    "cnperf",
    "ascend.trace",
    "nvidia.nsys",
    "nvidia.ncu",
    "nvidia.dmon",
    "nvidia.query_csv",
    "smi_cnmon",
    "smi_hlsmi",
    "smi_npu",
    "popvision",
    "kineto",
]


def importers() -> list[Importer]:
    """The registered importers, in order."""
    return [importlib.import_module(f"{__name__}.{m}").IMPORTER for m in REGISTRY]


def name_matches(name: str, pattern: str) -> bool:
    """``fnmatch.fnmatchcase(name, pattern)``; a pattern of literals and ``*`` only (every
    importer's) is matched without compiling a regular expression, which for the
    registry's ~70 patterns cost ~20 ms of a small file's import."""
    if "?" in pattern or "[" in pattern:
        return fnmatch.fnmatchcase(name, pattern)
    first, *middle, last = pattern.split("*") if "*" in pattern else (pattern, None)
    if last is None:
        return name == first
    if len(name) < len(first) + len(last) or not name.startswith(first) or not name.endswith(last):
        return False
    at, end = len(first), len(name) - len(last)
    for part in middle:
        found = name.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def choose(path: Path, forced: str | None = None) -> Importer:
    """The importer for ``path``: by ``forced`` name, else by name pattern + content."""
    all_ = importers()
    if forced:
        for imp in all_:
            if imp.name == forced:
                return imp
        raise ImportFormatError(f"unknown format {forced!r}; known: {', '.join(i.name for i in all_)}")
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or folder")
    if path.is_file() and path.stat().st_size == 0:
        # Before the detectors: no format is an empty file, and 25 of them need not say so.
        raise ImportFormatError(f"{path}: the file is empty (0 bytes): nothing to import")
    reasons: list[tuple[str, Detection]] = []
    by_name = [i for i in all_ if any(name_matches(path.name, pat) for pat in i.patterns)]
    rest = [i for i in all_ if i not in by_name]
    for imp in by_name + rest:
        try:
            d = imp.detect(path)
        except OSError as e:
            d = Detection(False, f"cannot read ({e.strerror})")
        if d:
            log.info("importing %s as %s (%s)", path, imp.name, d.reason)
            return imp
        reasons.append((imp.name, d))
    runs = _recordings_in(path)
    if runs:
        names = ", ".join(r.name for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
        raise ImportFormatError(
            f"{path}: a folder of {len(runs)} aiprof recordings ({names}), not one: "
            f"name one (or several to read together), e.g. {runs[0]}"
        )
    raise ImportFormatError(f"{path}: no importer recognises it ({_why(path, reasons, by_name)})")


def _recordings_in(path: Path) -> list[Path]:
    """The subfolders of the folder ``path`` that are aiprof profiles or hold some (a
    recording's ``rank<N>.aiprof``): a folder of runs, given where one was meant."""
    from ..store.reader import find_profiles

    if not path.is_dir():
        return []
    try:
        subs = sorted(c for c in path.iterdir() if c.is_dir() and not c.name.startswith("."))
    except OSError:
        return []
    return [c for c in subs if find_profiles(c)]


def _sniff(path: Path) -> str:
    """What the file looks like, in the words importers use in their reasons."""
    if path.is_dir():
        return "folder"
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return ""
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"SQLite format 3\0"):
        return "SQLite"
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return "JSON"
    first = text.split(b"\n", 1)[0]
    return "CSV" if first.count(b",") >= 2 else "text"


def _why(path: Path, reasons: list[tuple[str, Detection]], by_name: list[Importer]) -> str:
    """The reasons worth a user's reading, on one line: every importer's answer (about
    25) is a line of 1,200 characters. Those of the importers the file's name points to,
    else those that speak of what the file is (a JSON file: the JSON importers' answers
    that are not a plain "not ..."), at most three, and how many more were asked;
    AIPROF_DEBUG=1 gives them all."""
    every = [f"{n}: {d.reason}" for n, d in reasons]
    if os.environ.get("AIPROF_DEBUG"):
        return "; ".join(every)
    kind = _sniff(path)
    named = {i.name for i in by_name}
    near = [f"{n}: {d.reason}" for n, d in reasons if n in named]
    if not near and kind:
        near = [
            f"{n}: {d.reason}"
            for n, d in reasons
            if kind in d.reason and not d.reason.lower().startswith(("not ", kind.lower() + ", not"))
        ]
    shown = near[:3]
    what = f"a {kind} file" if kind and kind != "folder" else ("a folder" if kind else "")
    other = "other " if shown else ""
    tail = f"{len(every) - len(shown)} {other}formats checked: AIPROF_DEBUG=1 lists why each refused, --format NAME forces one"
    return "; ".join([*([what] if what else []), *shown, tail])


def trace_inputs(path: Path) -> list[Path]:
    """What to import for ``path`` when it is given to be opened: itself when an importer
    takes it whole, else, for a folder, each file in it that an importer takes (a
    ``torch.profiler.tensorboard_trace_handler`` folder of per-rank traces); when nothing
    in it is recognised, the folder's own error."""
    try:
        choose(path)
        return [path]
    except ImportFormatError:
        if not path.is_dir():
            raise
        found: list[Path] = []
        for f in sorted(c for c in path.iterdir() if c.is_file() and not c.name.startswith(".")):
            try:
                choose(f)
            except ImportFormatError:
                continue
            found.append(f)
        if not found:
            raise
        return found


def import_paths(
    paths: list[Path],
    out: Path,
    *,
    forced: str | None = None,
    rank: int | None = None,
    progress: Callable[[int], None] = lambda _n: None,
    sample_interval_ns: int | None = None,
    keep_events: bool = False,
    chosen_for: Sequence[Importer] | None = None,
) -> tuple[Path, ImportContext]:
    """Import ``paths`` into one profile at ``out`` (written atomically).

    ``sample_interval_ns``: time between samples of logs without timestamps (SMI logs).
    ``chosen_for``: the importer of each path, as :func:`choose` found them (a caller that
    checked its inputs first; each file is then detected once).
    ``keep_events``: leave the events table as written in ``ctx.writer.kept_events``
    (store/writer.py), for a caller that summarises it without reading it back."""
    from .kineto.columnar import ColumnarUnavailable, PartsRefused

    chosen = (
        list(zip(paths, chosen_for, strict=True)) if chosen_for is not None else [(p, choose(p, forced)) for p in paths]
    )
    try:
        try:
            return _import(chosen, out, rank, progress, columnar=True, interval=sample_interval_ns, keep=keep_events)
        except PartsRefused as e:
            # A trace's events read in parts stopped after rows were written: read again
            # as one file each (a cut inside an event is refused, never read).
            log.info("columnar import in parts stopped (%s); importing again in one part", e)
            return _import(
                chosen, out, rank, progress, columnar=True, parts=False, interval=sample_interval_ns, keep=keep_events
            )
    except ColumnarUnavailable as e:
        # DuckDB stopped part-way through a trace (a damaged event deep in the file):
        # the half-written profile is gone; the event path reads what can be read.
        log.info("columnar import stopped (%s); importing again event by event", e)
        return _import(chosen, out, rank, progress, columnar=False, interval=sample_interval_ns, keep=keep_events)


def _derive_at_import(folder: Path, meta: dict[str, Any]) -> bool:
    """The derived tables (store/derived.py) of a profile of DERIVE_MIN_EVENTS events or
    more, and the timeline's tables of a bigger one (web/timeline_store.py); the modules
    that compute them are imported only then (a small import skips their start-up).
    True when it wrote any."""
    from ..store.derived import DERIVE_MIN_EVENTS

    if int(meta.get("tables", {}).get("events", 0)) >= DERIVE_MIN_EVENTS:
        from ..analysis.derived import derive
        from ..web import timeline_store

        derive(folder, meta)
        timeline_store.keep(
            folder, meta, min_events=timeline_store.KEEP_MIN_EVENTS, max_events=timeline_store.KEEP_MAX_AT_IMPORT
        )
        return True
    return False


def _wall_spans(writer: ProfileWriter, before: int, into: list[tuple[int, int, str]]) -> None:
    """Add to ``into`` the wall-time spans (first, last Unix ns, path) of the sources one
    importer added from index ``before`` on: their rows' ``ts`` past the time origin it
    set, where it set Unix time (a trace's own ``baseTimeNanoseconds`` included). Rows it
    wrote after its last source's entry (an importer that adds it first) are that
    source's. Times below ``UNIX_NS_MIN`` (an input without times of its own, placed
    at 0) are no wall times."""
    late = writer.take_span()
    last = len(writer.meta["sources"]) - 1
    if late is not None and last >= before:
        had = writer.source_spans.get(last)
        writer.source_spans[last] = late if had is None else (min(had[0], late[0]), max(had[1], late[1]))
    if writer.meta.get("clock") != "unix":
        return
    origin = int(writer.meta.get("time_origin_ns") or 0)
    for i in range(before, last + 1):
        span = writer.source_spans.get(i)
        if span is not None and origin + span[0] >= UNIX_NS_MIN:
            into.append((origin + span[0], origin + span[1], str(writer.meta["sources"][i].get("path", ""))))


def _windows(sources: list[dict[str, Any]]) -> list[str]:
    """The summary's line for each process of which several traces were imported (its
    windows in time: store/runs.py:process_key), e.g. ``2 traces of one process (pid 31243
    on vm): one rank, 2 windows``."""
    from .kineto.process import windows_note

    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in sources:
        key = process_key(s.get("process"))
        if key is not None:
            by.setdefault(key, []).append(s)
    return [
        windows_note(len(got), got[0]["process"]["pid"], got[0]["process"].get("host"))
        for got in by.values()
        if windows_of_one_process([{"sources": got}])
    ]


def _import(
    chosen: list[tuple[Path, Importer]],
    out: Path,
    rank: int | None,
    progress: Callable[[int], None],
    *,
    columnar: bool,
    parts: bool = True,
    interval: int | None = None,
    keep: bool = False,
) -> tuple[Path, ImportContext]:
    from ..store.writer import ProfileWriter
    from .kineto.columnar import ColumnarUnavailable

    with ProfileWriter(out, derive=_derive_at_import, keep_events=keep) as writer:
        ctx = ImportContext(
            writer=writer,
            progress=progress,
            rank=rank,
            columnar=columnar,
            columnar_parts=parts,
            sample_interval_ns=interval,
        )
        wall: list[tuple[int, int, str]] = []
        for p, imp in chosen:
            before = len(writer.meta["sources"])
            writer.take_span()
            try:
                imp.load(p, ctx)
            except (AiprofError, ColumnarUnavailable, MemoryError):
                raise
            except Exception as e:
                # The importer met input it did not foresee: one line for the user (exit 2),
                # a bug for us (the fuzz harness counts these).
                first = str(e).splitlines()[0][:300] if str(e) else ""
                raise UnexpectedInputError(
                    f"{p}: cannot read this {imp.name} input (damaged or unexpected: {type(e).__name__}: {first})"
                ) from e
            _wall_spans(writer, before, wall)
        apart = separate_runs(wall)
        if apart:
            ctx.warn(apart)
        ctx.notes.extend(_windows(writer.meta["sources"]))
        for column, n in sorted(writer.unfit.items()):
            where = "kept in args" if column.startswith("events.") else "left empty"
            ctx.warn(f"{n} values of {column} did not fit the column (too large, or of another type): {where}")
        writer.meta["import_summary"] = {"events_by_kind": dict(ctx.kinds), "tables": dict(ctx.tables)}
        if ctx.notes:
            writer.meta["import_summary"]["notes"] = list(ctx.notes)
        said = len(writer.meta["warnings"])
    # What the commit found (derived tables or the timeline not kept) is said too.
    ctx.warnings.extend(writer.meta["warnings"][said:])
    return writer.path, ctx


__all__ = ["REGISTRY", "Detection", "ImportContext", "Importer", "choose", "import_paths", "importers", "trace_inputs"]
