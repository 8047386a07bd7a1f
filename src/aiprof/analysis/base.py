"""The analyser factory: every view is a pure function (profile, params) -> Arrow table,
registered by name, and run through the common :class:`~aiprof.analysis.query.Query`.

The CLI, the REST API and the web UI all call :func:`run`; none of them computes
anything of its own. An analyser never prints or plots.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import QueryError
from ..store import Profile
from .query import Query


@dataclass(frozen=True)
class SqlView:
    """An analyser result left as SQL over the profile's views: the common query runs
    inside DuckDB, so only the requested page is ever materialised."""

    sql: str


AnalyserFn = Callable[[Profile, dict[str, Any]], "pa.Table | SqlView"]


@dataclass(frozen=True)
class Analyser:
    name: str
    fn: AnalyserFn
    title: str
    description: str
    default_sort: tuple[str, ...] = ()
    units: dict[str, str] = field(default_factory=dict)
    """Column -> unit, for renderers and the API's column list."""
    scope: tuple[str, ...] = ()
    """Columns the view filters on before it aggregates (``step``, ``thread``): the
    query's filters on them reach the analyser as ``params["scope"]``."""


_REGISTRY: dict[str, Analyser] = {}


def full_table(profile: Profile, view: str, params: dict[str, Any] | None = None) -> pa.Table:
    """All rows of a view, unpaged (for code that combines views)."""
    return run(profile, view, Query(), params).table


def analyser(
    name: str,
    title: str,
    *,
    default_sort: tuple[str, ...] = (),
    units: dict[str, str] | None = None,
    scope: tuple[str, ...] = (),
) -> Callable[[AnalyserFn], AnalyserFn]:
    """Register ``fn`` as the view ``name``. Its docstring documents the columns."""

    def deco(fn: AnalyserFn) -> AnalyserFn:
        _REGISTRY[name] = Analyser(name, fn, title, (fn.__doc__ or "").strip(), default_sort, units or {}, scope)
        return fn

    return deco


#: A column's unit from its name's ending, where its analyser names none: a view's
#: columns made per category or per metric (the steps view's ``<category>_us``) are not
#: listed one by one.
UNIT_SUFFIXES = (("_us", "µs"), ("_ms", "ms"), ("_ns", "ns"), ("_pct", "%"), ("_bytes", "B"))


def unit_of(column: str, units: dict[str, str]) -> str | None:
    """The unit of ``column``: its analyser's, else by :data:`UNIT_SUFFIXES`."""
    if column in units:
        return units[column]
    return next((u for suffix, u in UNIT_SUFFIXES if column.endswith(suffix)), None)


@dataclass
class Result:
    """A page of an analyser's rows and how many rows matched in all."""

    view: str
    table: pa.Table
    total: int
    query: Query
    units: dict[str, str]

    def __post_init__(self) -> None:
        # Every column's unit, named or by its name (unit_of): the API, the CLI's
        # headers and the notebook read the same.
        named = self.units
        self.units = {f.name: u for f in self.table.schema if (u := unit_of(f.name, named)) is not None}

    @property
    def rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.table.to_pylist()
        return rows

    def to_json(self) -> dict[str, Any]:
        """The stable JSON shape (README, "Views"): view, columns, rows, total, offset, limit."""
        return {
            "view": self.view,
            "columns": [
                {"name": f.name, "type": str(f.type), "unit": self.units.get(f.name)} for f in self.table.schema
            ],
            "rows": self.rows,
            "total": self.total,
            "offset": self.query.offset,
            "limit": self.query.limit,
        }


def views() -> dict[str, Analyser]:
    """All registered analysers by name."""
    # Importing the catalogue registers every view.
    importlib.import_module(f"{__package__}.catalog")

    return dict(_REGISTRY)


def run(
    profile: Profile,
    view: str,
    query: Query | None = None,
    params: dict[str, Any] | None = None,
    before: Callable[[pa.Table], pa.Table] | None = None,
) -> Result:
    """Run analyser ``view`` on ``profile`` and apply ``query`` to its rows (``before``:
    what to make of the analyser's table first, such as its compact form)."""
    all_views = views()
    a = all_views.get(view)
    if a is None:
        raise QueryError(f"unknown view {view!r}; views: {', '.join(sorted(all_views))}")
    q = query or Query()
    if not q.sort and a.default_sort:
        q = Query(q.filters, [(s.lstrip("-"), s.startswith("-")) for s in a.default_sort], q.limit, q.offset)
    params = dict(params or {})
    if a.scope:
        params["scope"] = [f for f in q.filters if f.column in a.scope]
        q = Query([f for f in q.filters if f.column not in a.scope], q.sort, q.limit, q.offset)
    table = a.fn(profile, params)
    if isinstance(table, SqlView):
        page, total = q.apply_sql(profile.con, table.sql)
    else:
        if before is not None:
            table = before(table)
        page, total = q.apply(table)
    return Result(view, page, total, q, a.units)
