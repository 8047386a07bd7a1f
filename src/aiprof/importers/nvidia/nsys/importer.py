"""The import of one export: time origin, metadata, devices, every table in turn, tracks,
and what was left unread."""

from __future__ import annotations

import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from ....errors import ImportFormatError
from ...base import ImportContext, Importer
from .device import DeviceActivity
from .host import HostActivity
from .metrics import GpuMetrics
from .report import export_report
from .schema import _MARKER_TABLES, REPORT_SUFFIXES, SQLITE_MAGIC, NsysExport, _detect, open_export

NAME = "nsys"

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


class NsysImporter(DeviceActivity, HostActivity, GpuMetrics):
    """Reads one export and writes events, counters, tracks and devices through ``ctx``."""

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
