"""Device activity: kernels (NCCL kernels as collectives), copies with their host memory
kind, memsets and synchronisations, each on the stream it ran on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ....store.vocabulary import is_collective_kernel
from .reader import ExportReader, _with
from .schema import _q

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

_NO_STREAM = 0xFFFFFFFF


class DeviceActivity(ExportReader):
    """The CUPTI_ACTIVITY_KIND_{KERNEL,MEMCPY,MEMSET,SYNCHRONIZATION} tables."""

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
            kinds = ["collective" if is_collective_kernel(nm) else "kernel" for nm in names]
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
