"""Host activity: CUDA runtime and driver calls, OS runtime calls and NVTX ranges and marks
(ranges named like a training step become steps)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ....store.vocabulary import STEP_NAME_RE
from .reader import ExportReader, _merge_args, _with
from .schema import _q

#: Fallback ENUM_NSYS_EVENT_TYPE ids for NVTX rows (the numbering of exports 2020-2025).
NVTX_TYPES_DEFAULT = {
    33: "NvtxCategory", 34: "NvtxMark", 39: "NvtxThread", 59: "NvtxPushPopRange",
    60: "NvtxStartEndRange", 75: "NvtxDomainCreate", 76: "NvtxDomainDestroy",
}  # fmt: skip

_API_VERSION_SUFFIX = re.compile(r"_v\d+$")

#: The kind of an OS runtime call (OSRT_API): not a CUDA runtime call, not a framework
#: operator; docs/store.md's word for host work without a home of its own.
OSRT_KIND = "other"


class HostActivity(ExportReader):
    """The CUPTI_ACTIVITY_KIND_{RUNTIME,DRIVER}, OSRT_API and NVTX_EVENTS tables."""

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
            # The calls themselves (poll, ioctl, sem_wait, read...) are operating-system
            # calls, not CUDA runtime calls: host work with no kind of its own, "other"
            # (cat "osrt" says what they are), so no analysis counts them as runtime.
            kinds = ["instant" if ec in marks else OSRT_KIND for ec in cols[5]]
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
