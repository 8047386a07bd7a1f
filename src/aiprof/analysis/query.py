"""The one query every analyser takes: filters, a sort, and a page.

The same object comes from the CLI (``--filter kind=kernel --sort -total_us``), from
REST query parameters, and from a JSON body. It is applied to an analyser's full
result table by DuckDB, so any column of any view can be filtered and sorted on.

Filter expressions (CLI and GET parameters):
    COL=V[,V...]   in          COL!=V[,V...]  not in
    COL~TEXT       contains    COL!~TEXT      does not contain
    COL>=N COL>N COL<=N COL<N  comparisons
    COL=A..B       range (inclusive)
JSON form: {"column": C, "op": in|not_in|contains|not_contains|range|ge|gt|le|lt, "values": [...]}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError
from ..store import duck

_ARROW_MAJOR = int(pa.__version__.split(".")[0])

OPS = ("in", "not_in", "contains", "not_contains", "range", "ge", "gt", "le", "lt")
_EXPR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|!~|>=|<=|=|~|>|<)\s*(.*?)\s*$")
_SYM = {"=": "in", "!=": "not_in", "~": "contains", "!~": "not_contains", ">=": "ge", ">": "gt", "<=": "le", "<": "lt"}
_SQL_OP = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


@dataclass
class Filter:
    column: str
    op: str
    values: list[Any]

    @classmethod
    def parse(cls, expr: str) -> Filter:
        m = _EXPR.match(expr)
        if not m:
            raise QueryError(f"bad filter {expr!r}: use COL=V, COL!=V, COL~TEXT, COL>=N, COL=A..B")
        col, sym, raw = m.groups()
        op = _SYM[sym]
        if op == "in" and ".." in raw and "," not in raw:
            lo, _, hi = raw.partition("..")
            return cls(col, "range", [lo, hi])
        if op in ("in", "not_in"):
            return cls(col, op, [v for v in raw.split(",")])
        return cls(col, op, [raw])

    @classmethod
    def from_json(cls, obj: Any) -> Filter:
        if not isinstance(obj, dict) or "column" not in obj:
            raise QueryError("a filter must be an object with column, op and values")
        op = obj.get("op", "in")
        if op not in OPS:
            raise QueryError(f"unknown filter op {op!r}; one of {', '.join(OPS)}")
        values = obj.get("values", obj.get("value"))
        if not isinstance(values, list):
            values = [values]
        return cls(str(obj["column"]), op, values)


@dataclass
class Query:
    """Filters (all must hold), a sort (column, descending) list, limit and offset."""

    filters: list[Filter] = field(default_factory=list)
    sort: list[tuple[str, bool]] = field(default_factory=list)
    limit: int | None = None
    offset: int = 0

    @classmethod
    def parse(
        cls,
        filters: list[str] | tuple[str, ...] = (),
        sort: str | list[str] | tuple[str, ...] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> Query:
        """From CLI-style strings: ``["kind=kernel"]``, ``"-total_us,name"``."""
        sorts: list[tuple[str, bool]] = []
        items = [sort] if isinstance(sort, str) else list(sort or [])
        for item in items:
            for s in item.split(","):
                s = s.strip()
                if s:
                    sorts.append((s.lstrip("-+"), s.startswith("-")))
        if limit is not None and limit < 0:
            raise QueryError("limit must be >= 0")
        if offset < 0:
            raise QueryError("offset must be >= 0")
        return cls([Filter.parse(f) for f in filters], sorts, limit, offset)

    @classmethod
    def from_json(cls, obj: Any) -> Query:
        if obj is None:
            return cls()
        if not isinstance(obj, dict):
            raise QueryError("the query must be a JSON object")
        sorts: list[tuple[str, bool]] = []
        raw_sort = obj.get("sort") or []
        if isinstance(raw_sort, str):
            return cls.parse([], raw_sort, obj.get("limit"), int(obj.get("offset") or 0))._with_filters(obj)
        for s in raw_sort:
            if isinstance(s, str):
                sorts.append((s.lstrip("-+"), s.startswith("-")))
            elif isinstance(s, dict) and "column" in s:
                sorts.append((str(s["column"]), bool(s.get("desc"))))
            else:
                raise QueryError("sort items are 'col', '-col' or {column, desc}")
        limit = obj.get("limit")
        offset = obj.get("offset") or 0
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise QueryError("limit must be a non-negative integer")
        if not isinstance(offset, int) or offset < 0:
            raise QueryError("offset must be a non-negative integer")
        q = cls([], sorts, limit, offset)
        return q._with_filters(obj)

    def _with_filters(self, obj: dict[str, Any]) -> Query:
        fl = obj.get("filters") or []
        if not isinstance(fl, list):
            raise QueryError("filters must be a list")
        self.filters = [Filter.from_json(f) if isinstance(f, dict) else Filter.parse(str(f)) for f in fl]
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "filters": [{"column": f.column, "op": f.op, "values": f.values} for f in self.filters],
            "sort": [{"column": c, "desc": d} for c, d in self.sort],
            "limit": self.limit,
            "offset": self.offset,
        }

    def apply(self, table: pa.Table) -> tuple[pa.Table, int]:
        """Filter, sort and page ``table``; returns (page, rows matching before paging)."""
        if not self.filters:
            return self._sort_and_page(table), table.num_rows
        con = duck.cursor()
        try:
            con.register("t", table)
            page, total = self._run(con, "t", table.schema)
        finally:
            con.close()
        return page.cast(table.schema), total

    def _sort_and_page(self, table: pa.Table) -> pa.Table:
        # Without filters Arrow sorts and slices in place: a DuckDB connection per call
        # cost ~15 ms, most of the time of a small view (the report runs 18 of them).
        # Same order as the SQL path: nulls last in either direction, ties kept stable.
        for c, _ in self.sort:
            if c not in table.schema.names:
                raise QueryError(f"no column {c!r} to sort on; columns: {', '.join(table.schema.names)}")
        start = int(self.offset or 0)
        if self.sort and table.num_rows > 1:
            orders = [(c, "descending" if desc else "ascending") for c, desc in self.sort]
            # Ties in the same order whatever order the view's rows came in (a view
            # computed on another connection): then by name where the table has one.
            if "name" in table.schema.names and all(c != "name" for c, _ in self.sort):
                orders.append(("name", "ascending"))
            if _ARROW_MAJOR >= 25:  # null placement per key (the global option is deprecated)
                idx = pc.sort_indices(table, sort_keys=[(c, o, "at_end") for c, o in orders])
            else:
                idx = pc.sort_indices(table, sort_keys=orders, null_placement="at_end")
            # Only the page's rows are taken (a row per launch of a big profile: the
            # whole table sorted would be a second copy of it).
            if self.limit is not None:
                idx = idx.slice(start, int(self.limit))
            elif start:
                idx = idx.slice(start)
            return table.take(idx)
        if self.limit is not None:
            return table.slice(start, int(self.limit))
        return table.slice(start) if start else table

    def apply_sql(self, con: duckdb.DuckDBPyConnection, sql: str) -> tuple[pa.Table, int]:
        """Same as :meth:`apply` for the rows of a SQL query on ``con``, so DuckDB filters
        and pages without materialising the whole result (the events view of a
        multi-million-event profile)."""
        src = f"({sql}) AS t"
        try:
            schema = con.sql(f"SELECT * FROM {src} LIMIT 0").to_arrow_table().schema
        except duckdb.Error as e:
            raise QueryError(f"query failed: {str(e).splitlines()[0]}") from None
        return self._run(con, src, schema)

    def _run(self, con: duckdb.DuckDBPyConnection, src: str, schema: pa.Schema) -> tuple[pa.Table, int]:
        names = schema.names
        types = {f.name: f.type for f in schema}
        where: list[str] = []
        params: list[Any] = []
        for f in self.filters:
            if f.column not in types:
                raise QueryError(f"no column {f.column!r} to filter on; columns: {', '.join(names)}")
            col = _ident(f.column)
            t = types[f.column]
            vals = [_coerce(v, t, f.column) for v in f.values]
            if f.op in ("in", "not_in"):
                nulls = [v for v in vals if v is None]
                vals = [v for v in vals if v is not None]
                parts = []
                if vals:
                    parts.append(f"{col} IN ({', '.join('?' for _ in vals)})")
                    params.extend(vals)
                if nulls:
                    parts.append(f"{col} IS NULL")
                cond = "(" + " OR ".join(parts) + ")" if parts else "FALSE"
                where.append(cond if f.op == "in" else f"NOT coalesce({cond}, FALSE)")
            elif f.op in ("contains", "not_contains"):
                cond = f"contains(lower(CAST({col} AS VARCHAR)), lower(?))"
                params.append(str(f.values[0]))
                where.append(cond if f.op == "contains" else f"NOT coalesce({cond}, FALSE)")
            elif f.op == "range":
                if len(vals) != 2:
                    raise QueryError(f"range filter on {f.column} needs two values")
                where.append(f"{col} BETWEEN ? AND ?")
                params.extend(vals)
            else:
                where.append(f"{col} {_SQL_OP[f.op]} ?")
                params.append(vals[0])
        order: list[str] = []
        for c, desc in self.sort:
            if c not in types:
                raise QueryError(f"no column {c!r} to sort on; columns: {', '.join(names)}")
            order.append(f"{_ident(c)} {'DESC' if desc else 'ASC'} NULLS LAST")
        if order and "name" in types and all(c != "name" for c, _ in self.sort):
            order.append('"name" ASC NULLS LAST')  # ties as the Arrow path orders them
        w = (" WHERE " + " AND ".join(where)) if where else ""
        sql = f"SELECT * FROM {src}{w}"
        if order:
            sql += " ORDER BY " + ", ".join(order)
        if self.limit is not None:
            sql += f" LIMIT {int(self.limit)}"
        if self.offset:
            sql += f" OFFSET {int(self.offset)}"
        try:
            total = con.execute(f"SELECT count(*) FROM {src}{w}", params).fetchall()[0]
            page = con.sql(sql, params=params).to_arrow_table() if params else con.sql(sql).to_arrow_table()
        except duckdb.Error as e:
            raise QueryError(f"query failed: {str(e).splitlines()[0]}") from None
        return page, int(total[0]) if total else 0


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _coerce(v: Any, t: pa.DataType, col: str) -> Any:
    if v is None or (isinstance(v, str) and v.lower() in ("null", "none")):
        return None
    try:
        if pa.types.is_integer(t):
            return int(float(v)) if not isinstance(v, int) else v
        if pa.types.is_floating(t):
            return float(v)
        if pa.types.is_boolean(t):
            return v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")
    except (TypeError, ValueError):
        raise QueryError(f"{col} holds numbers; {v!r} is not one") from None
    return str(v)
