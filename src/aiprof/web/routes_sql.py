"""The SQL page's routes (read-only queries over the profile's tables) and the
timeline window's Chrome trace export.

The queries run on a connection of their own per profile
(:class:`aiprof.store.readonly_sql.ReadOnlySql`, made on first use): a read-only
database, no file access beyond the profile's folders, locked settings, SELECT only,
a time limit and a row limit. A refusal or a failed query is a 400, a query stopped
at its time limit a 408, each with a one-line message the page shows inline.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from starlette.responses import Response

from ..export.chrome_trace import chrome_trace_bytes
from ..store.readonly_sql import DEFAULT_ROWS, DEFAULT_TIMEOUT_S, ReadOnlySql, TimedOut
from . import models as m
from .jsonio import json_response
from .library import ApiError, Entry, Library

TIMEOUT: dict[int | str, dict[str, Any]] = {
    408: {"model": m.ErrorResponse, "description": "the query ran past its time limit and was stopped"}
}


def _sql_of(e: Entry) -> ReadOnlySql:
    # Not under the entry's lock, which the timeline's build holds (minutes on a
    # 1,000-rank job, at the warm-up): the SQL page waited 90 s for it. A free connection.
    with e.sql_lock:
        if e.sql is None:
            with e.reading() as prof:
                e.sql = ReadOnlySql(prof)
        return e.sql


def add_sql_routes(r: APIRouter, lib: Library) -> None:
    """Add /sql, /sql/schema and /timeline/chrome-trace to the /api/v1 router ``r``."""

    @r.get("/profiles/{pid}/sql/schema", response_model=m.SqlSchema, summary="The tables a query can read")
    def sql_schema(pid: str) -> Response:
        return json_response(
            {"tables": _sql_of(lib.get(pid)).schema(), "max_rows": DEFAULT_ROWS, "timeout_s": DEFAULT_TIMEOUT_S}
        )

    @r.post(
        "/profiles/{pid}/sql",
        response_model=m.SqlResponse,
        responses=TIMEOUT,
        summary="One read-only SELECT over the profile's tables, with a time and a row limit",
    )
    def sql_query(pid: str, body: Annotated[m.SqlBody, Body()]) -> Response:
        runner = _sql_of(lib.get(pid))
        try:
            ans = runner.query(body.query, max_rows=body.max_rows, timeout_s=body.timeout_s)
        except TimedOut as ex:
            raise ApiError(408, str(ex)) from None
        return json_response(
            {
                "columns": [{"name": n, "type": t} for n, t in zip(ans.table.column_names, ans.types)],
                "rows": ans.table.to_pylist(),
                "total": ans.table.num_rows,
                "truncated": ans.truncated,
                "elapsed_ms": round(ans.elapsed_ms, 3),
                "max_rows": body.max_rows,
                "timeout_s": body.timeout_s,
            }
        )

    @r.get(
        "/profiles/{pid}/timeline/chrome-trace",
        summary="The events of [t0, t1] as a Chrome trace (Perfetto, chrome://tracing), as a download",
        response_class=Response,
        responses={200: {"content": {"application/json": {}}, "description": "Chrome Trace Event JSON"}},
    )
    def chrome_trace(
        pid: str,
        t0: Annotated[int | None, Query(description="window start, ns (default: the first event)")] = None,
        t1: Annotated[int | None, Query(description="window end, ns (default: the last event's end)")] = None,
    ) -> Response:
        e = lib.get(pid)
        assert e.profile is not None and e.timeline is not None
        with e.lock:
            e.timeline.build()
            lo = e.timeline.span[0] if t0 is None else t0
            hi = e.timeline.span[1] if t1 is None else t1
            if hi <= lo:
                raise ApiError(422, "t1 must be greater than t0")
            data, _ = chrome_trace_bytes(e.profile, (lo, hi))
        name = f"{e.path.name.removesuffix('.aiprof')}.{lo}-{hi}.trace.json"
        headers: dict[str, Any] = {"Content-Disposition": f'attachment; filename="{_safe(name)}"'}
        return Response(data, media_type="application/json", headers=headers)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
