"""What every importer is: a detector and an import function, and the context they share."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store.writer import ProfileWriter

log = logging.getLogger("aiprof.import")


@dataclass(frozen=True)
class Detection:
    """A detector's answer: ``ok`` and, either way, why (shown when nothing fits)."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


def yes(reason: str) -> Detection:
    return Detection(True, reason)


def no(reason: str) -> Detection:
    return Detection(False, reason)


@dataclass
class ImportContext:
    """Shared state of one ``aiprof import``: the writer, the time origin, the summary."""

    writer: ProfileWriter
    progress: Callable[[int], None] = lambda _n: None
    """Called with a count of input bytes consumed since the last call."""
    rank: int | None = None
    """Rank to use when the input does not say (one file per rank given by the user)."""
    origin_raw_ns: int | None = None
    """Raw timestamp (in the first source's clock) that becomes ts = 0."""
    kinds: Counter[str] = field(default_factory=Counter)
    """Events written, by kind (the import summary)."""
    tables: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the import did that the user should know and is no loss (the summary's
    lines: windows of one process read as one rank)."""
    tracks_written: set[tuple[Any, ...]] = field(default_factory=set)
    """Rows of the tracks table written so far: several traces of one process name the
    same processes and threads, written once."""
    columnar: bool = False
    """May Chrome traces take the columnar path (importers/kineto/columnar.py)?"""
    columnar_parts: bool = True
    """May the columnar path read a trace's events as several files, one per core at a
    time (off once DuckDB refused such a read: it then reads them as one file)?"""
    sample_interval_ns: int | None = None
    """Time between samples of a log without timestamps, as the user gave it (``--interval``)."""

    @property
    def default_rank(self) -> int:
        """The rank of what the input does not place: the user's ``--rank``, else 0."""
        return self.rank if self.rank is not None else 0

    def warn(self, message: str) -> None:
        """A loss or oddity the user must hear about; also kept in profile.json.

        Logged at INFO only: the caller (the CLI) shows the collected warnings once, at
        the end, so they are neither repeated nor lost among progress output.
        """
        log.info("warning: %s", message)
        self.warnings.append(message)
        self.writer.warn(message)

    def origin(self, first_raw_ns: int) -> int:
        """The raw ns value that maps to ts = 0, fixed by the first source that asks."""
        if self.origin_raw_ns is None:
            self.origin_raw_ns = int(first_raw_ns)
        return self.origin_raw_ns


#: One kernel_metrics row: (launch_id, kernel, section, metric, unit, value, text).
MetricRow = tuple[int | None, str, str, str, str | None, float | None, str | None]


def write_metrics(ctx: ImportContext, rows: Sequence[MetricRow], rank: int | None = None) -> None:
    """Append rows to the kernel_metrics table, on ``rank`` (default: the context's, else 0)."""
    if not rows:
        return
    if rank is None:
        rank = ctx.default_rank
    ctx.writer.append(
        "kernel_metrics",
        {
            "rank": [rank] * len(rows),
            "launch_id": [r[0] for r in rows],
            "kernel": [r[1] for r in rows],
            "section": [r[2] for r in rows],
            "metric": [r[3] for r in rows],
            "unit": [r[4] for r in rows],
            "value": [r[5] for r in rows],
            "text": [r[6] for r in rows],
        },
    )
    ctx.tables["kernel_metrics"] += len(rows)


@dataclass(frozen=True)
class Importer:
    """One format: a name, the file name patterns it claims, a detector, a loader."""

    name: str
    description: str
    detect: Callable[[Path], Detection]
    load: Callable[[Path, ImportContext], None]
    patterns: tuple[str, ...] = ()
    """Glob patterns of file names this format usually has (tried before content)."""


def load_by_kind(
    name: str,
    file_kind: Callable[[Path], str | None],
    load_kind: Callable[[Path, str, ImportContext], dict[str, Any]],
    refusal: str,
    refused: tuple[str, ...] = (),
) -> Callable[[Path, ImportContext], None]:
    """The loader of a format family whose files are told apart by name or content
    (``file_kind``) and each read by ``load_kind``: a file of no kind (or of a kind in
    ``refused``) is refused with ``refusal``; the source records its kind."""

    def load(path: Path, ctx: ImportContext) -> None:
        from ..errors import ImportFormatError

        kind = file_kind(path)
        if kind is None or kind in refused:
            raise ImportFormatError(f"{path}: {refusal}")
        extra = load_kind(path, kind, ctx)
        ctx.writer.add_source(name, path, file_kind=kind, **extra)

    return load


def append_npu_events(ctx: ImportContext, device: int, cols: dict[str, Any]) -> None:
    """Append device events of one NPU (rank from the context, pid 0; tid from ``cols`` or
    0) and count them by kind. ``cols`` holds the other event columns, ``kind`` one per row
    or a single string for all."""
    n = len(cols["ts"])
    kind = cols["kind"]
    kinds = [kind] * n if isinstance(kind, str) else list(kind)
    rank = ctx.default_rank
    ctx.writer.append(
        "events",
        {
            "rank": [rank] * n,
            "device_type": ["npu"] * n,
            "device": [device] * n,
            "pid": [0] * n,
            "tid": [0] * n,
            **cols,
            "kind": kinds,
        },
    )
    ctx.kinds.update(kinds)


def device_clock(ctx: ImportContext) -> None:
    """Mark the profile's times as the device's clock unless a source set the clock."""
    if ctx.writer.meta.get("clock") in (None, "unknown"):
        ctx.writer.meta["clock"] = "device"
