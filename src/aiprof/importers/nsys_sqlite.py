"""Nsight Systems SQLite exports (``nsys export --type sqlite``), any export schema version.

The schema drifts between Nsight Systems releases (tables renamed, columns added), so
nothing here assumes a layout: tables and columns are looked up in ``sqlite_master``
and ``PRAGMA table_info``, and the ``-- REFERENCES StringIds(id)`` / ``ENUM_*``
annotations that the exporter writes into each ``CREATE TABLE`` are used to turn ids
into text. A ``.nsys-rep`` report is first converted with ``nsys export`` when nsys is
on PATH.

Mapping (every source column without a typed home goes into ``args`` as JSON):

=====================================  ===============================================
CUPTI_ACTIVITY_KIND_KERNEL             kernel (``collective`` for NCCL kernels);
                                       grid/block "[x,y,z]"; device = deviceId;
                                       tid = streamId; registers, shared memory in args
CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET   memcpy / memset with bytes; direction and host
                                       memory kind (pageable/pinned/managed) in args
CUPTI_ACTIVITY_KIND_RUNTIME / _DRIVER  runtime or driver (by eventClass); correlation
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION    sync, on the device stream it waited for
NVTX_EVENTS                            ranges -> user_annotation (step when named like
                                       a step), marks -> instant
OSRT_API                               runtime with cat "osrt"
GPU_METRICS                            the counters table
TARGET_INFO_GPU / _CUDA_DEVICE         profile.json devices
PROCESSES / ThreadNames                the tracks table
=====================================  ===============================================

IDs: PID = (globalPid >> 24) & 0xFFFFFF, TID = globalTid & 0xFFFFFF. Times are integer
ns from the session start; with TARGET_INFO_SESSION_START_TIME they become Unix ns.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from ..errors import ImportFormatError
from .base import Detection, ImportContext, Importer, no, yes

NAME = "nsys"

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

#: Rows fetched from SQLite per batch written to the store.
BATCH_ROWS = 100_000

#: Tables whose presence (besides StringIds) marks an nsys export.
_MARKER_TABLES = (
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "ThreadNames",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "OSRT_API",
    "NVTX_EVENTS",
)

#: Tables this importer reads; every other non-empty table is listed in a warning.
_HANDLED = {
    "StringIds",
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_GPU_METRICS",
    "PROCESSES",
    "ThreadNames",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
    "GPU_METRICS",
}

#: Secondary tables that only describe others (call stacks, stream lists, profiler
#: bookkeeping); not listed as lost when they are skipped.
_SECONDARY = re.compile(
    r"^(ENUM_|TARGET_INFO_|META_DATA_|ANALYSIS_|.*CALLCHAINS$|ProcessStreams$|UnwindMethodType$|sqlite_)"
)

#: Fallback numbering of ENUM_CUDA_MEMCPY_OPER (the CUPTI CUpti_ActivityMemcpyKind order).
MEMCPY_KINDS_DEFAULT = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}  # fmt: skip
#: Fallback numbering of ENUM_CUDA_MEM_KIND as nsys writes it (it differs from CUPTI's).
MEM_KINDS_DEFAULT = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
    6: "Managed Static", 7: "Unknown",
}  # fmt: skip
#: Host-side memory kinds, the ones that decide how fast a host<->device copy can go.
HOST_MEM_KINDS = {"pageable", "pinned", "managed", "managed static"}

#: Fallback ENUM_NSYS_EVENT_TYPE ids for NVTX rows (the numbering of exports 2020-2025).
NVTX_TYPES_DEFAULT = {
    33: "NvtxCategory", 34: "NvtxMark", 39: "NvtxThread", 59: "NvtxPushPopRange",
    60: "NvtxStartEndRange", 75: "NvtxDomainCreate", 76: "NvtxDomainDestroy",
}  # fmt: skip

#: An NVTX range named like one iteration of a training loop becomes kind ``step``.
STEP_NAME_RE = re.compile(
    r"^\s*(?:ProfilerStep#|(?:train(?:ing)?[ _-]?)?step[ _#:=-]*|iter(?:ation)?[ _#:=-]*|batch[ _#:=-]*)(\d+)\s*$",
    re.IGNORECASE,
)
_API_VERSION_SUFFIX = re.compile(r"_v\d+$")
_REF_RE = re.compile(r"^\s*(\w+)\s+\w+.*?--\s*REFERENCES\s+(\w+)\s*\(\s*(\w+)\s*\)", re.MULTILINE)
_UNIT_RE = re.compile(r"^(.*?)\s*\[(.*)\]\s*$")
_NO_STREAM = 0xFFFFFFFF


def _int64s(values: Sequence[Any], missing: int) -> np.ndarray:
    """Integer ns of a time column; a null, or a value a damaged page turned into bytes
    or text, is ``missing``."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array(
            [v if isinstance(v, int) and -(2**63) <= v < 2**63 else missing for v in values], dtype=np.int64
        )


def _decode(b: bytes) -> str:
    # Exports carry raw bytes from the target (environment blocks, binary-ish names).
    return b.decode("utf-8", "replace")


@dataclass
class _Table:
    name: str
    columns: list[str]
    refs: dict[str, tuple[str, str]] = field(default_factory=dict)
    """column -> (referenced table, referenced column), from the exporter's comments."""


class NsysExport:
    """A read-only view of one nsys SQLite export: its tables, columns and enums."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.tables: dict[str, _Table] = {}
        for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({_q(name)})")]
            refs = {m.group(1): (m.group(2), m.group(3)) for m in _REF_RE.finditer(sql or "")}
            self.tables[name] = _Table(name, cols, {c: r for c, r in refs.items() if c in cols})
        self.meta: dict[str, str] = {}
        for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(t, "name", "value"):
                self.meta.update({str(k): str(v) for k, v in con.execute(f"SELECT name, value FROM {t}")})
        self._enums: dict[str, dict[int, str]] = {}

    def has(self, table: str, *cols: str) -> bool:
        t = self.tables.get(table)
        return t is not None and all(c in t.columns for c in cols)

    def cols(self, table: str) -> list[str]:
        t = self.tables.get(table)
        return t.columns if t else []

    def count(self, table: str) -> int:
        try:
            return int(self.con.execute(f"SELECT count(*) FROM {_q(table)}").fetchone()[0])
        except sqlite3.DatabaseError:
            return -1

    def enum(self, table: str, default: dict[int, str] | None = None) -> dict[int, str]:
        """id -> label of an ENUM_* table (its ``label``, else ``name``), or ``default``."""
        if table in self._enums:
            return self._enums[table]
        out: dict[int, str] = {}
        cols = self.cols(table)
        text = "label" if "label" in cols else "name" if "name" in cols else None
        if "id" in cols and text:
            out = {int(i): str(v) for i, v in self.con.execute(f"SELECT id, {text} FROM {table}") if i is not None}
        if not out and default is not None:
            out = dict(default)
        self._enums[table] = out
        return out

    def enum_names(self, table: str) -> dict[int, str]:
        """id -> ``name`` (the C identifier) of an ENUM_* table."""
        if "name" not in self.cols(table) or "id" not in self.cols(table):
            return {}
        return {int(i): str(v) for i, v in self.con.execute(f"SELECT id, name FROM {table}") if i is not None}

    @property
    def schema_version(self) -> str | None:
        return self.meta.get("EXPORT_SCHEMA_VERSION")

    @property
    def product_version(self) -> str | None:
        return self.meta.get("EXPORT_PRODUCT_VERSION")

    def args_sql(self, table: str, alias: str, skip: set[str]) -> tuple[str, str]:
        """(SELECT expression, JOIN clauses) building a JSON object of every column not in
        ``skip``; StringIds references become their text, ENUM references their label.
        Columns that are null in every row are left out (one scan counts them)."""
        t = self.tables[table]
        rest = [c for c in t.columns if c not in skip]
        if not rest:
            return "NULL", ""
        counts = self.con.execute(f"SELECT {', '.join(f'count({_q(c)})' for c in rest)} FROM {_q(table)}").fetchone()
        pairs: list[str] = []
        joins: list[str] = []
        for i, (c, n) in enumerate(zip(rest, counts, strict=True)):
            if not n:
                continue
            expr = f"{alias}.{_q(c)}"
            ref = t.refs.get(c)
            if ref and ref[0] == "StringIds" and "StringIds" in self.tables:
                a = f"_s{i}"
                joins.append(f"LEFT JOIN StringIds {a} ON {a}.id = {expr}")
                expr = f"coalesce({a}.value, {expr})"
            elif ref and ref[0].startswith("ENUM_"):
                labels = self.enum(ref[0])
                # The few values a column holds, as a CASE: cheaper per row than a join.
                present = [v for (v,) in self.con.execute(f"SELECT DISTINCT {_q(c)} FROM {_q(table)} LIMIT 65")]
                if labels and len(present) <= 64:
                    whens = " ".join(
                        f"WHEN {int(v)} THEN {_sql_str(labels[int(v)])}"
                        for v in present
                        if isinstance(v, int) and int(v) in labels
                    )
                    if whens:
                        expr = f"CASE {expr} {whens} ELSE {expr} END"
            pairs.append(f"'{c}', {expr}")
        if not pairs:
            return "NULL", ""
        # SQLite caps a function's arguments (100 by default): build it in pieces.
        parts = [f"json_object({', '.join(pairs[i : i + 40])})" for i in range(0, len(pairs), 40)]
        expr = parts[0]
        for p in parts[1:]:
            expr = f"json_patch({expr}, {p})"
        return expr, " ".join(joins)

    def string_col(self, table: str, alias: str, col: str, n: int) -> tuple[str, str]:
        """(expression, join) giving the text of a StringIds id column (or the column itself)."""
        if "StringIds" in self.tables:
            a = f"_n{n}"
            return f"{a}.value", f"LEFT JOIN StringIds {a} ON {a}.id = {alias}.{_q(col)}"
        return f"CAST({alias}.{_q(col)} AS TEXT)", ""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def open_export(path: Path) -> sqlite3.Connection:
    """Open an SQLite file read-only (no journal, no lock left behind)."""
    con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
    con.text_factory = _decode
    return con


# -- detection -------------------------------------------------------------------------


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder, not an SQLite file")
    if path.name.endswith(REPORT_SUFFIXES):
        return yes("an Nsight Systems report (.nsys-rep), converted with nsys export")
    with path.open("rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        return no("not an SQLite database")
    try:
        con = open_export(path)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        # A damaged export still names its tables in the raw pages: claim it so the
        # user hears what is wrong with it rather than that nothing recognises it.
        with path.open("rb") as f:
            raw = f.read(4 << 20)
        if b"StringIds" in raw and any(m.encode() in raw for m in _MARKER_TABLES):
            return yes(f"a damaged SQLite file naming Nsight Systems tables ({e})")
        return no(f"an SQLite header but an unreadable database ({e})")
    if "StringIds" in names and names.intersection(_MARKER_TABLES):
        return yes("an SQLite database with Nsight Systems export tables")
    return no("an SQLite database, but not an Nsight Systems export (no StringIds and export metadata tables)")


# -- .nsys-rep conversion --------------------------------------------------------------


def export_report(report: Path, out_dir: Path) -> Path:
    """Run ``nsys export --type sqlite`` on ``report`` into ``out_dir``; the SQLite path."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise ImportFormatError(
            f"{report}: an Nsight Systems report; nsys is not on PATH here, so export it first with "
            f"`nsys export --type sqlite --output {report.stem}.sqlite {report}` and import the .sqlite"
        )
    out = out_dir / (report.stem + ".sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ImportFormatError(f"{report}: nsys export failed to run ({e})") from None
    if res.returncode != 0 or not out.is_file():
        last = (res.stderr or res.stdout or "").strip().splitlines()
        raise ImportFormatError(f"{report}: nsys export failed: {last[-1] if last else f'exit {res.returncode}'}")
    return out


# -- import -------------------------------------------------------------------------------


class NsysImporter:
    """Reads one export and writes events, counters, tracks and devices through ``ctx``."""

    def __init__(self, ex: NsysExport, ctx: ImportContext, path: Path) -> None:
        self.ex = ex
        self.ctx = ctx
        self.path = path
        self.rank = ctx.rank if ctx.rank is not None else 0
        self.pids: set[int] = set()
        self.threads: set[tuple[int, int]] = set()
        self.streams: set[tuple[int, int, int]] = set()  # pid, device, stream
        self.partial = False
        self.counts: dict[str, int] = {}
        self._session_start_unix, self._session_clock = self._session_start()
        self._shift = 0

    # -- time ----------------------------------------------------------------------

    def _session_start(self) -> tuple[int | None, int | None]:
        t = "TARGET_INFO_SESSION_START_TIME"
        if not self.ex.has(t, "utcEpochNs"):
            return None, None
        clock = "systemClockNs" if self.ex.has(t, "systemClockNs") else "NULL"
        row = self.ex.con.execute(f"SELECT utcEpochNs, {clock} FROM {t} LIMIT 1").fetchone()
        if not row or row[0] is None:
            return None, None
        return int(row[0]), (int(row[1]) if row[1] is not None else None)

    def _fix_origin(self, first_raw: int | None) -> None:
        """Set the shift that turns the file's ns into the context's raw clock, and the origin."""
        start = self._session_start_unix
        if start is not None:
            # Session-relative times (the usual export) get the wall-clock start added;
            # an export written in the raw system clock is moved by its own session start.
            base = (
                self._session_clock
                if (self._session_clock and first_raw and first_raw > self._session_clock // 2)
                else 0
            )
            self._shift = start - base
        prev_clock = self.ctx.writer.meta.get("clock")
        had_origin = self.ctx.origin_raw_ns is not None
        origin = self.ctx.origin((first_raw or 0) + self._shift)
        meta = self.ctx.writer.meta
        clock = "unix" if start is not None else "trace"
        if had_origin and prev_clock not in (None, "unknown", clock):
            self.ctx.warn(
                f"{self.path.name}: its clock ({clock}) differs from the earlier inputs' ({prev_clock}); "
                "times may not line up"
            )
        meta["time_origin_ns"], meta["clock"] = origin, clock
        self._origin = origin

    def _first_time(self, tables: list[tuple[str, str]]) -> int | None:
        best: int | None = None
        for table, col in tables:
            if not self.ex.has(table, col):
                continue
            try:
                v = self.ex.con.execute(f"SELECT min({_q(col)}) FROM {_q(table)}").fetchone()[0]
            except sqlite3.DatabaseError:
                continue
            if v is not None and (best is None or v < best):
                best = int(v)
        return best

    # -- run -----------------------------------------------------------------------

    def run(self) -> None:
        ex = self.ex
        activity = [
            ("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
            ("CUPTI_ACTIVITY_KIND_MEMCPY", "start"),
            ("CUPTI_ACTIVITY_KIND_MEMSET", "start"),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", "start"),
            ("CUPTI_ACTIVITY_KIND_DRIVER", "start"),
            ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "start"),
            ("NVTX_EVENTS", "start"),
            ("OSRT_API", "start"),
            ("GPU_METRICS", "timestamp"),
        ]
        self._fix_origin(self._first_time(activity))
        self._meta()
        self._devices()
        self._guard("CUPTI_ACTIVITY_KIND_KERNEL", self._kernels)
        self._guard("CUPTI_ACTIVITY_KIND_MEMCPY", self._memcpy)
        self._guard("CUPTI_ACTIVITY_KIND_MEMSET", self._memset)
        for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
            self._guard(t, lambda t=t: self._api(t))
        self._guard("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", self._sync)
        self._guard("NVTX_EVENTS", self._nvtx)
        self._guard("OSRT_API", self._osrt)
        self._guard("GPU_METRICS", self._gpu_metrics)
        self._tracks()
        self._report_missing()
        meta = self.ctx.writer.meta
        meta["partial"] = meta.get("partial", False) or self.partial
        self.ctx.writer.add_source(
            NAME,
            self.path,
            nsys_version=ex.product_version,
            export_schema=ex.schema_version,
            rows_by_table=self.counts,
        )

    def _guard(self, table: str, fn: Any) -> None:
        if table not in self.ex.tables:
            return
        try:
            fn()
        except sqlite3.DatabaseError as e:
            self.partial = True
            self.ctx.warn(
                f"{self.path.name}: table {table} is damaged ({e}); "
                f"{self.counts.get(table, 0):,} rows imported before the damage, the rest lost"
            )

    def _meta(self) -> None:
        ex = self.ex
        meta = self.ctx.writer.meta
        if self.rank not in meta["ranks"]:
            meta["ranks"].append(self.rank)
        info: dict[str, Any] = {
            "nsys_version": ex.product_version,
            "export_schema": ex.schema_version,
        }
        if self._session_start_unix is not None:
            info["session_start_unix_ns"] = self._session_start_unix
        shift = ex.meta.get("EXPORT_CONFIG_TIME_SHIFT") or ex.meta.get("EXPORT_PARAM_TIME_SHIFT")
        if shift not in (None, "", "0"):
            info["export_time_shift"] = shift
            self.ctx.warn(f"{self.path.name}: exported with a time shift of {shift}; Unix times are off by it")
        if ex.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
            env = dict(ex.con.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"))
            for k in (
                "Hostname",
                "CudaDriverVersion",
                "NvDriverVersion",
                "OsDescription",
                "CpuDescription",
                "CpuCores",
            ):
                if env.get(k):
                    info[k] = env[k]
            host = env.get("Hostname")
            if host and host not in meta["hosts"]:
                meta["hosts"].append(host)
        meta.setdefault("trace_info", {}).update({k: v for k, v in info.items() if v is not None})

    def _devices(self) -> None:
        ex = self.ex
        if not ex.has("TARGET_INFO_GPU", "id"):
            return
        cuda_ids: dict[int, int] = {}
        if ex.has("TARGET_INFO_CUDA_DEVICE", "gpuId", "cudaId"):
            cuda_ids = {
                int(g): int(c)
                for g, c in ex.con.execute("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE")
                if g is not None and c is not None
            }
        cols = ex.cols("TARGET_INFO_GPU")
        meta = self.ctx.writer.meta
        known = {(d.get("rank"), d.get("type"), d.get("index")) for d in meta["devices"]}
        for row in ex.con.execute("SELECT * FROM TARGET_INFO_GPU"):
            r = dict(zip(cols, row, strict=True))
            gid = int(r["id"])
            index = r.get("cuDevice") if r.get("cuDevice") is not None else cuda_ids.get(gid, gid)
            if (self.rank, "cuda", index) in known:
                continue
            rec: dict[str, Any] = {
                "rank": self.rank,
                "type": "cuda",
                "index": index,
                "name": r.get("name"),
                "vendor": "NVIDIA",
                "memory_bytes": r.get("totalMemory"),
            }
            if r.get("computeMajor") is not None:
                rec["compute_capability"] = f"{r['computeMajor']}.{r.get('computeMinor', 0)}"
            if r.get("smCount") is not None:
                rec["numSms"] = r["smCount"]
            if r.get("memoryBandwidth"):
                rec["peak_bandwidth_bytes_s"] = r["memoryBandwidth"]
            for k in (
                "busLocation",
                "uuid",
                "chipName",
                "clockRate",
                "l2CacheSize",
                "maxShmemPerBlock",
                "threadsPerWarp",
            ):
                if r.get(k) not in (None, ""):
                    rec[k] = r[k]
            meta["devices"].append(rec)

    # -- event tables ---------------------------------------------------------------

    def _rows(self, sql: str) -> Iterator[list[tuple[Any, ...]]]:
        """Batches of rows. Text is decoded by SQLite's own (fast) UTF-8 path; a batch with
        bytes that are not UTF-8 is read again, from where it began, with replacement."""
        con = self.ex.con
        done = 0
        con.text_factory = str
        try:
            cur = con.execute(sql)
            while True:
                try:
                    rows = cur.fetchmany(BATCH_ROWS)
                except sqlite3.OperationalError as e:
                    if "decode" not in str(e).lower():
                        raise
                    con.text_factory = _decode
                    cur = con.execute(f"{sql} LIMIT -1 OFFSET {done}")
                    continue
                if not rows:
                    return
                done += len(rows)
                yield rows
        finally:
            con.text_factory = _decode

    def _write(self, table: str, cols: dict[str, Any], kinds: list[str]) -> None:
        n = self.ctx.writer.append("events", cols)
        self.ctx.kinds.update(Counter(kinds))
        self.counts[table] = self.counts.get(table, 0) + n

    def _times(self, start: Sequence[Any], end: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(ts from the origin, dur) in ns; a missing end (-1 or null) gives dur 0."""
        s = _int64s(start, 0)
        off = self._shift - self._origin
        e_raw = _int64s(end, -1)
        dur = np.where(e_raw >= s, e_raw - s, 0)
        return s + off, dur

    def _device_events(
        self, table: str, extra_skip: set[str], select: dict[str, str], joins: list[str]
    ) -> Iterator[tuple[list[tuple[Any, ...]], list[str]]]:
        """Rows of a device activity table: start, end, deviceId, streamId, correlationId,
        pid, then ``select``'s expressions, then the args JSON."""
        ex = self.ex
        c = ex.cols(table)
        pid = "coalesce((t.globalPid >> 24) & 16777215, 0)" if "globalPid" in c else "0"
        corr = "t.correlationId" if "correlationId" in c else "NULL"
        skip = {"start", "end", "deviceId", "streamId", "correlationId", "globalPid", *extra_skip}
        args, ajoin = ex.args_sql(table, "t", skip)
        dev = "coalesce(t.deviceId, -1)" if "deviceId" in c else "-1"
        # 0xFFFFFFFF is CUPTI's "no stream" (device- or context-wide waits).
        stream = f"CASE WHEN t.streamId IS NULL OR t.streamId = {_NO_STREAM} THEN -1 ELSE t.streamId END"
        if "streamId" not in c:
            stream = "-1"
        end = 'coalesce(t."end", -1)' if "end" in c else "-1"
        exprs = ["t.start", end, dev, stream, corr, pid, *select.values(), args]
        sql = f"SELECT {', '.join(exprs)} FROM {_q(table)} t {' '.join(joins)} {ajoin}"
        for rows in self._rows(sql):
            yield rows, list(select)

    def _common(self, rows: list[tuple[Any, ...]], kinds: list[str], names: list[str], **extra: Any) -> dict[str, Any]:
        cols = list(zip(*rows, strict=True))
        ts, dur = self._times(cols[0], cols[1])
        n = len(rows)
        dev, streams, pids = cols[2], cols[3], cols[5]
        self.streams.update(set(zip(pids, dev, streams, strict=True)))
        out = {
            "rank": np.full(n, self.rank, dtype=np.int32),
            "device_type": ["cuda"] * n,
            "device": dev,
            "pid": pids,
            "tid": streams,
            "kind": kinds,
            "cat": extra.pop("cat", None) or ["cuda"] * n,
            "name": names,
            "ts": ts,
            "dur": dur,
            "correlation": list(cols[4]),
            "args": list(cols[-1]),
        }
        out.update(extra)
        return out

    def _kernels(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        ex = self.ex
        c = ex.cols(table)
        name_col = next((x for x in ("demangledName", "shortName", "mangledName", "name") if x in c), None)
        if name_col is None:
            self.ctx.warn(f"{self.path.name}: {table} has no name column; kernels named by their table")
            name_expr, join = "'kernel'", ""
        else:
            name_expr, join = ex.string_col(table, "t", name_col, 0)
        select = {"name": name_expr}
        skip: set[str] = {name_col} if name_col else set()
        for dims, key in ((("gridX", "gridY", "gridZ"), "grid"), (("blockX", "blockY", "blockZ"), "block")):
            if all(d in c for d in dims):
                select[key] = "'[' || " + " || ',' || ".join(f"t.{d}" for d in dims) + " || ']'"
                skip.update(dims)
        for rows, keys in self._device_events(table, skip, select, [join]):
            cols = list(zip(*rows, strict=True))
            names = [x if x is not None else "" for x in cols[6]]
            kinds = ["collective" if _is_nccl(nm) else "kernel" for nm in names]
            extra: dict[str, Any] = {}
            for i, k in enumerate(keys[1:], start=7):
                extra[k] = list(cols[i])
            self._write(table, self._common(rows, kinds, names, **extra), kinds)

    def _memcpy(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_MEMCPY"
        ex = self.ex
        c = ex.cols(table)
        copy_kinds = {i: _short_copy_kind(n) for i, n in ex.enum_names("ENUM_CUDA_MEMCPY_OPER").items()}
        mem_kinds = ex.enum("ENUM_CUDA_MEM_KIND")
        if not copy_kinds:
            copy_kinds = MEMCPY_KINDS_DEFAULT
        if not mem_kinds:
            mem_kinds = MEM_KINDS_DEFAULT
            if "srcKind" in c and ex.count(table) > 0:
                self.ctx.warn(
                    f"{self.path.name}: no ENUM_CUDA_MEM_KIND table; memory kinds read with the nsys numbering"
                )
        select = {
            "bytes": "t.bytes" if "bytes" in c else "NULL",
            "copyKind": "t.copyKind" if "copyKind" in c else "NULL",
            "srcKind": "t.srcKind" if "srcKind" in c else "NULL",
            "dstKind": "t.dstKind" if "dstKind" in c else "NULL",
        }
        skip = {"bytes", "copyKind", "srcKind", "dstKind"}
        for rows, _ in self._device_events(table, skip, select, []):
            cols = list(zip(*rows, strict=True))
            names: list[str] = []
            args: list[str] = []
            for ck, sk, dk, a in zip(cols[7], cols[8], cols[9], cols[-1], strict=True):
                direction = copy_kinds.get(ck, f"kind {ck}") if ck is not None else "Unknown"
                src = mem_kinds.get(sk, f"kind {sk}") if sk is not None else None
                dst = mem_kinds.get(dk, f"kind {dk}") if dk is not None else None
                names.append(f"Memcpy {direction} ({src or '?'} -> {dst or '?'})")
                extra = {
                    "direction": direction,
                    "src_kind": src,
                    "dst_kind": dst,
                    "host_memory": _host_memory(src, dst),
                }
                args.append(_with(a, extra))
            kinds = ["memcpy"] * len(rows)
            out = self._common(rows, kinds, names, bytes=list(cols[6]))
            out["args"] = args
            self._write(table, out, kinds)

    def _memset(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_MEMSET"
        ex = self.ex
        c = ex.cols(table)
        mem_kinds = ex.enum("ENUM_CUDA_MEM_KIND", MEM_KINDS_DEFAULT)
        kcol = "memKind" if "memKind" in c else "memoryKind" if "memoryKind" in c else None
        select = {"bytes": "t.bytes" if "bytes" in c else "NULL", "memKind": f"t.{kcol}" if kcol else "NULL"}
        skip = {"bytes", *([kcol] if kcol else [])}
        for rows, _ in self._device_events(table, skip, select, []):
            cols = list(zip(*rows, strict=True))
            names = []
            args = []
            for mk, a in zip(cols[7], cols[-1], strict=True):
                mem = mem_kinds.get(mk, f"kind {mk}") if mk is not None else None
                names.append(f"Memset ({mem})" if mem else "Memset")
                args.append(_with(a, {"mem_kind": mem}))
            kinds = ["memset"] * len(rows)
            out = self._common(rows, kinds, names, bytes=list(cols[6]))
            out["args"] = args
            self._write(table, out, kinds)

    def _sync(self) -> None:
        table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        ex = self.ex
        sync_types = ex.enum("ENUM_CUPTI_SYNC_TYPE")
        c = ex.cols(table)
        select = {"syncType": "t.syncType" if "syncType" in c else "NULL"}
        for rows, _ in self._device_events(table, {"syncType"}, select, []):
            cols = list(zip(*rows, strict=True))
            names = [sync_types.get(s, f"Sync type {s}") if s is not None else "Synchronization" for s in cols[6]]
            kinds = ["sync"] * len(rows)
            self._write(table, self._common(rows, kinds, names), kinds)

    def _host_rows(
        self, table: str, name_col: str | None, skip: set[str], extra: dict[str, str] | None = None
    ) -> Iterator[tuple[list[tuple[Any, ...]], list[str]]]:
        """Rows of a host table: start, end, pid, tid, name, ``extra``..., args JSON."""
        ex = self.ex
        c = ex.cols(table)
        tid_col = "globalTid" if "globalTid" in c else None
        pid = f"coalesce((t.{tid_col} >> 24) & 16777215, 0)" if tid_col else "0"
        tid = f"coalesce(t.{tid_col} & 16777215, 0)" if tid_col else "0"
        if name_col:
            name_expr, join = ex.string_col(table, "t", name_col, 0)
        else:
            name_expr, join = "NULL", ""
        extra = extra or {}
        args, ajoin = ex.args_sql(table, "t", {"start", "end", tid_col or "", name_col or "", *skip})
        end = 'coalesce(t."end", -1)' if "end" in c else "-1"
        exprs = ["t.start", end, pid, tid, f"coalesce({name_expr}, '')", *extra.values(), args]
        sql = f"SELECT {', '.join(exprs)} FROM {_q(table)} t {join} {ajoin}"
        for rows in self._rows(sql):
            yield rows, list(extra)

    def _host_cols(
        self, rows: list[tuple[Any, ...]], kinds: list[str], names: Sequence[str], cat: str, **extra: Any
    ) -> dict[str, Any]:
        cols = list(zip(*rows, strict=True))
        ts, dur = self._times(cols[0], cols[1])
        n = len(rows)
        pids = np.array(cols[2], dtype=np.int64)
        tids = np.array(cols[3], dtype=np.int64)
        for key in np.unique((pids << 32) | tids):
            self.threads.add((int(key >> 32), int(key & 0xFFFFFFFF)))
        out = {
            "rank": np.full(n, self.rank, dtype=np.int32),
            "device_type": ["cpu"] * n,
            "device": np.full(n, -1, dtype=np.int32),
            "pid": pids,
            "tid": tids,
            "kind": kinds,
            "cat": [cat] * n,
            "name": names,
            "ts": ts,
            "dur": dur,
            "args": list(cols[-1]),
        }
        out.update(extra)
        return out

    def _api(self, table: str) -> None:
        ex = self.ex
        c = ex.cols(table)
        classes = ex.enum("ENUM_NSYS_EVENT_CLASS")
        extra = {
            "correlationId": "t.correlationId" if "correlationId" in c else "NULL",
            "eventClass": "t.eventClass" if "eventClass" in c else "NULL",
        }
        name_col = "nameId" if "nameId" in c else "name" if "name" in c else None
        default_kind = "driver" if table.endswith("DRIVER") else "runtime"
        cache: dict[str, str] = {}
        for rows, _ in self._host_rows(table, name_col, {"correlationId"}, extra):
            cols = list(zip(*rows, strict=True))
            names: list[str] = []
            kinds: list[str] = []
            for nm, ec in zip(cols[4], cols[6], strict=True):
                raw = nm if nm is not None else ""
                short = cache.get(raw)
                if short is None:
                    short = cache[raw] = _API_VERSION_SUFFIX.sub("", raw)
                names.append(short)
                label = classes.get(ec, "") if ec is not None else ""
                if "driver" in label.lower():
                    kinds.append("driver")
                elif "runtime" in label.lower():
                    kinds.append("runtime")
                elif short.startswith("cu") and not short.startswith("cuda"):
                    kinds.append("driver")
                else:
                    kinds.append(default_kind)
            out = self._host_cols(rows, kinds, names, "cuda_api", correlation=list(cols[5]))
            if any(n != (r or "") for n, r in zip(names, cols[4], strict=True)):
                out["args"] = [
                    _with(a, {"function": r}) if r and n != r else a
                    for a, n, r in zip(out["args"], names, cols[4], strict=True)
                ]
            self._write(table, out, kinds)

    def _osrt(self) -> None:
        table = "OSRT_API"
        c = self.ex.cols(table)
        name_col = "nameId" if "nameId" in c else None
        classes = self.ex.enum("ENUM_NSYS_EVENT_CLASS")
        marks = {i for i, label in classes.items() if re.search(r"start|finish", label, re.I)}
        extra = {"eventClass": "t.eventClass" if "eventClass" in c else "NULL"}
        for rows, _ in self._host_rows(table, name_col, set(), extra):
            cols = list(zip(*rows, strict=True))
            names = cols[4]
            # The "OSRT start/finish" rows mark when tracing began and ended: instants.
            kinds = ["instant" if ec in marks else "runtime" for ec in cols[5]]
            self._write(table, self._host_cols(rows, kinds, names, "osrt"), kinds)

    def _nvtx(self) -> None:
        table = "NVTX_EVENTS"
        ex = self.ex
        c = ex.cols(table)
        types = ex.enum_names("ENUM_NSYS_EVENT_TYPE") or {}
        types = {**NVTX_TYPES_DEFAULT, **types} if not types else types
        # Domain and category names are rows of their own; read them first.
        domains: dict[int, str] = {}
        categories: dict[tuple[int, int], str] = {}
        text_expr = "t.text" if "text" in c else "NULL"
        join = ""
        if "textId" in c:
            sexpr, join = ex.string_col(table, "t", "textId", 0)
            text_expr = f"coalesce({text_expr}, {sexpr})"
        dom = "t.domainId" if "domainId" in c else "0"
        cat = "t.category" if "category" in c else "NULL"
        type_ids = {v: k for k, v in types.items()}
        meta_ids = [type_ids[x] for x in ("NvtxDomainCreate", "NvtxCategory") if x in type_ids]
        if meta_ids and "eventType" in c:
            ids = ",".join(map(str, meta_ids))
            q = f"SELECT t.eventType, {dom}, {cat}, {text_expr} FROM NVTX_EVENTS t {join} WHERE t.eventType IN ({ids})"
            for et, d, cg, txt in ex.con.execute(q):
                if types.get(et) == "NvtxDomainCreate":
                    domains[int(d or 0)] = txt
                else:
                    categories[(int(d or 0), int(cg or 0))] = txt
        extra = {"eventType": "t.eventType" if "eventType" in c else "NULL", "domainId": dom, "category": cat}
        skip = {"text", "textId", "eventType"}
        for rows in self._nvtx_rows(table, text_expr, join, skip, extra):
            cols = list(zip(*rows, strict=True))
            names: list[str] = []
            kinds: list[str] = []
            steps: list[int | None] = []
            extra_args: list[dict[str, Any]] = []
            keep = []
            for i, (txt, et, d, cg) in enumerate(zip(cols[4], cols[5], cols[6], cols[7], strict=True)):
                tname = types.get(et, f"type {et}") if et is not None else "NvtxPushPopRange"
                if tname in ("NvtxDomainCreate", "NvtxCategory", "NvtxDomainDestroy"):
                    continue
                keep.append(i)
                name = txt if txt is not None else ""
                a: dict[str, Any] = {"nvtx_type": tname}
                if d:
                    a["domain"] = domains.get(int(d), d)
                if cg:
                    a["category_name"] = categories.get((int(d or 0), int(cg)), None)
                if "Range" in tname:
                    m = STEP_NAME_RE.match(name)
                    if m:
                        kinds.append("step")
                        steps.append(int(m.group(1)))
                    else:
                        kinds.append("user_annotation")
                        steps.append(None)
                elif "Mark" in tname:
                    kinds.append("instant")
                    steps.append(None)
                else:
                    kinds.append("other")
                    steps.append(None)
                names.append(name)
                extra_args.append(a)
            if not keep:
                continue
            rows = [rows[i] for i in keep]
            open_ = sum(1 for r in rows if r[1] is None)
            if open_:
                self.ctx.warn(f"{self.path.name}: {open_} NVTX ranges never ended; kept with dur = 0")
            out = self._host_cols(rows, kinds, names, "nvtx", step=steps)
            out["args"] = [_merge_args(a, e) for a, e in zip(out["args"], extra_args, strict=True)]
            self._write(table, out, kinds)

    def _nvtx_rows(
        self, table: str, text_expr: str, join: str, skip: set[str], extra: dict[str, str]
    ) -> Iterator[list[tuple[Any, ...]]]:
        """NVTX rows: start, end, pid, tid, text, eventType, domainId, category, args JSON."""
        ex = self.ex
        c = ex.cols(table)
        tid_col = "globalTid" if "globalTid" in c else None
        pid = f"((t.{tid_col} >> 24) & 16777215)" if tid_col else "NULL"
        tid = f"(t.{tid_col} & 16777215)" if tid_col else "NULL"
        args, ajoin = ex.args_sql(table, "t", {"start", "end", tid_col or "", *skip})
        end = 't."end"' if "end" in c else "NULL"
        exprs = ["t.start", end, pid, tid, text_expr, *extra.values(), args]
        sql = f"SELECT {', '.join(exprs)} FROM {_q(table)} t {join} {ajoin}"
        yield from self._rows(sql)

    def _gpu_metrics(self) -> None:
        table = "GPU_METRICS"
        ex = self.ex
        c = ex.cols(table)
        tcol = "timestamp" if "timestamp" in c else "start" if "start" in c else None
        if tcol is None or "value" not in c or "metricId" not in c:
            n = ex.count(table)
            if n:
                self.ctx.warn(
                    f"{self.path.name}: GPU_METRICS has a layout aiprof does not know ({', '.join(c)}); "
                    f"{n:,} samples not imported"
                )
            return
        names: dict[tuple[int, int], str] = {}
        by_metric: dict[int, str] = {}
        info = "TARGET_INFO_GPU_METRICS"
        if ex.has(info, "metricId", "metricName"):
            tsel = "typeId" if "typeId" in ex.cols(info) else "0"
            for t, m, nm in ex.con.execute(f"SELECT DISTINCT {tsel}, metricId, metricName FROM {info}"):
                names[(int(t or 0), int(m))] = nm
                by_metric.setdefault(int(m), nm)
        type_col = "t.typeId" if "typeId" in c else "0"
        sql = f"SELECT t.{tcol}, {type_col}, t.metricId, t.value FROM GPU_METRICS t"
        split: dict[str, tuple[str, str | None]] = {}
        off = self._shift - self._origin
        for rows in self._rows(sql):
            cols = list(zip(*rows, strict=True))
            ts = np.array(cols[0], dtype=np.int64) + off
            metric: list[str] = []
            unit: list[str | None] = []
            dev: list[int] = []
            for ty, m in zip(cols[1], cols[2], strict=True):
                raw = names.get((int(ty or 0), int(m)), by_metric.get(int(m), f"metric {m}"))
                got = split.get(raw)
                if got is None:
                    got = split[raw] = _metric_unit(raw)
                metric.append(got[0])
                unit.append(got[1])
                # The low byte of typeId is the GPU id (the exporter's own convention).
                dev.append(int(ty or 0) & 0xFF)
            n = len(rows)
            self.ctx.writer.append(
                "counters",
                {
                    "rank": np.full(n, self.rank, dtype=np.int32),
                    "device_type": ["cuda"] * n,
                    "device": dev,
                    "ts": ts,
                    "metric": metric,
                    "value": [float(v) if v is not None else None for v in cols[3]],
                    "unit": unit,
                },
            )
            self.ctx.tables["counters"] += n
            self.counts[table] = self.counts.get(table, 0) + n

    # -- tracks and what is missing -------------------------------------------------------

    def _tracks(self) -> None:
        ex = self.ex
        procs: dict[int, str] = {}
        if ex.has("PROCESSES", "globalPid", "name"):
            for gp, nm in ex.con.execute("SELECT globalPid, name FROM PROCESSES"):
                if gp is not None:
                    procs[(int(gp) >> 24) & 0xFFFFFF] = nm
        tnames: dict[tuple[int, int], str] = {}
        if ex.has("ThreadNames", "nameId", "globalTid"):
            expr, join = ex.string_col("ThreadNames", "t", "nameId", 0)
            for gt, nm in ex.con.execute(f"SELECT t.globalTid, {expr} FROM ThreadNames t {join}"):
                if gt is not None:
                    tnames[((int(gt) >> 24) & 0xFFFFFF, int(gt) & 0xFFFFFF)] = nm
        pids = {p for p, _ in self.threads} | {p for p, _, _ in self.streams}
        rows: list[dict[str, Any]] = []
        for pid in sorted(pids):
            rows.append(
                {
                    "pid": pid,
                    "tid": -1,
                    "device_type": "cpu",
                    "device": -1,
                    "process_name": procs.get(pid),
                    "thread_name": None,
                }
            )
        for pid, tid in sorted(self.threads):
            rows.append(
                {
                    "pid": pid,
                    "tid": tid,
                    "device_type": "cpu",
                    "device": -1,
                    "process_name": procs.get(pid),
                    "thread_name": tnames.get((pid, tid)),
                }
            )
        for pid, dev, stream in sorted(self.streams):
            rows.append(
                {
                    "pid": pid,
                    "tid": stream,
                    "device_type": "cuda",
                    "device": dev,
                    "process_name": procs.get(pid),
                    "thread_name": f"stream {stream}" if stream >= 0 else "no stream",
                }
            )
        if rows:
            cols = {k: [r[k] for r in rows] for k in rows[0]}
            cols["rank"] = [self.rank] * len(rows)
            self.ctx.writer.append("tracks", cols)
            self.ctx.tables["tracks"] += len(rows)
        meta = self.ctx.writer.meta.setdefault("trace_info", {})
        meta["processes_in_capture"] = len(procs)

    def _report_missing(self) -> None:
        ex = self.ex
        if not any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in ex.tables):
            self.ctx.warn(
                f"{self.path.name}: no CUDA trace in this capture (no CUPTI_ACTIVITY_KIND_* tables: "
                "kernels, copies and CUDA API calls are missing; profile with --trace=cuda to get them)"
            )
        skipped: dict[str, int] = {}
        for name in ex.tables:
            if name in _HANDLED or _SECONDARY.match(name):
                continue
            n = ex.count(name)
            if n:
                skipped[name] = n
        if skipped:
            self.ctx.writer.meta.setdefault("trace_info", {})["tables_not_imported"] = skipped
            listed = ", ".join(f"{k} ({v:,})" for k, v in sorted(skipped.items()))
            self.ctx.warn(f"{self.path.name}: tables aiprof does not import yet, left in the source file: {listed}")


def _is_nccl(name: str) -> bool:
    n = name.lstrip()
    if n.startswith("void "):
        n = n[5:]
    return n[:4].lower() == "nccl"


def _short_copy_kind(enum_name: str) -> str:
    """CUDA_MEMCPY_KIND_HTOD -> HtoD; CUDA_MEMCPY_KIND_UVM_DTOH -> UVM DtoH."""
    tail = enum_name.removeprefix("CUDA_MEMCPY_KIND_")
    parts = tail.split("_")
    last = parts[-1]
    if "TO" in last and len(last) == 4:
        last = last[0] + "to" + last[3]
    return " ".join([*parts[:-1], last]) if last != "UNKNOWN" else "Unknown"


def _host_memory(src: str | None, dst: str | None) -> str | None:
    """The host side's memory kind of a copy (pageable, pinned, managed), if one side is host."""
    for k in (src, dst):
        if k and k.lower() in HOST_MEM_KINDS:
            return k.lower()
    return None


_TAILS: dict[tuple[tuple[str, Any], ...], str] = {}


def _with(base: str | None, extra: dict[str, Any]) -> str:
    """``base`` (JSON object text) with ``extra``'s non-null members appended.

    ``extra`` repeats across rows (a copy direction, a function name), so its JSON text
    is made once and spliced in, instead of parsing and re-writing every row's object."""
    key = tuple(extra.items())
    tail = _TAILS.get(key)
    if tail is None:
        tail = json.dumps({k: v for k, v in extra.items() if v is not None}, separators=(",", ":"))[1:-1]
        if len(_TAILS) < 65536:
            _TAILS[key] = tail
    if not tail:
        return base or "{}"
    if not base or base == "{}":
        return "{" + tail + "}"
    return base[:-1] + "," + tail + "}"


def _merge_args(base: str | None, extra: dict[str, Any]) -> str:
    """``base`` (JSON object text) with ``extra``'s non-null members added."""
    d: dict[str, Any] = json.loads(base) if base else {}
    d.update({k: v for k, v in extra.items() if v is not None})
    return json.dumps(d, separators=(",", ":"))


def _metric_unit(raw: str) -> tuple[str, str | None]:
    """'SMs Active [Throughput %]' -> ('SMs Active', '%'); 'GPC Clock Frequency [MHz]' -> (.., 'MHz')."""
    m = _UNIT_RE.match(raw)
    if not m:
        return raw, None
    unit = m.group(2).strip()
    return m.group(1), "%" if unit.endswith("%") else unit


def _load(path: Path, ctx: ImportContext) -> None:
    tmp: str | None = None
    src = path
    try:
        if path.name.endswith(REPORT_SUFFIXES):
            tmp = tempfile.mkdtemp(prefix="aiprof-nsys-")
            src = export_report(path, Path(tmp))
        with src.open("rb") as f:
            if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                raise ImportFormatError(f"{path}: not an SQLite database (nsys export --type sqlite writes one)")
        try:
            con = open_export(src)
        except sqlite3.DatabaseError as e:
            raise ImportFormatError(f"{path}: unreadable SQLite database ({e})") from None
        try:
            try:
                ex = NsysExport(con)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                raise ImportFormatError(
                    f"{path}: damaged SQLite database, its table list is unreadable ({e}); nothing can be "
                    "imported from it, export the report again with nsys export --type sqlite"
                ) from None
            if "StringIds" not in ex.tables or not set(ex.tables).intersection(_MARKER_TABLES):
                raise ImportFormatError(
                    f"{path}: an SQLite database, but not an Nsight Systems export "
                    "(no StringIds / export metadata tables)"
                )
            try:
                NsysImporter(ex, ctx, path).run()
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                # A page of the file is damaged (SQLite says "malformed"; a name's bytes
                # are not text): what that table held cannot be trusted.
                raise ImportFormatError(
                    f"{path}: damaged SQLite database ({type(e).__name__}: {str(e)[:200]}); "
                    "export the report again with nsys export --type sqlite"
                ) from None
        finally:
            con.close()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


IMPORTER = Importer(
    name=NAME,
    description="Nsight Systems SQLite export (nsys export --type sqlite), or a .nsys-rep when nsys is installed",
    detect=_detect,
    load=_load,
    patterns=("*.sqlite", "*.nsys-rep", "*.qdrep", "*.db"),
)

__all__ = ["IMPORTER", "STEP_NAME_RE", "NsysExport", "export_report", "open_export"]
