"""Renderers: Arrow tables -> terminal tables (rich), CSV or JSON on stdout."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

import orjson
import pyarrow as pa


def emit_table(
    table: pa.Table,
    fmt: str,
    *,
    title: str | None = None,
    total: int | None = None,
    units: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write ``table`` to stdout as a rich table, CSV, or JSON."""
    table = _unique_names(table)
    if fmt == "json":
        doc: dict[str, Any] = {
            "columns": [{"name": f.name, "type": str(f.type), "unit": (units or {}).get(f.name)} for f in table.schema],
            "rows": table.to_pylist(),
            "total": table.num_rows if total is None else total,
        }
        if extra:
            doc.update(extra)
        sys.stdout.write(
            orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str).decode() + "\n"
        )
        return
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(table.column_names)
        for row in table.to_pylist():
            w.writerow(["" if v is None else v for v in row.values()])
        sys.stdout.write(buf.getvalue())
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    rows = [[_shorten(format_cell(v)) for v in row.values()] for row in table.to_pylist()]
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema]
    widths = [
        max([len(f.name)] + [len(r[i]) for r in rows])
        if num
        else min(60, max([len(f.name)] + [len(r[i]) for r in rows]))
        for i, (f, num) in enumerate(zip(table.schema, numeric))
    ]
    t = Table(title=title, show_lines=False, header_style="bold")
    for f, num, width in zip(table.schema, numeric, widths):
        # Numbers and headers never wrap: a wide table scrolls rather than turning
        # every cell into a column of single characters.
        t.add_column(
            f.name,
            justify="right" if num else "left",
            no_wrap=num,
            min_width=min(width, len(f.name)) if not num else width,
            max_width=None if num else 60,
            overflow="fold",
        )
    for r in rows:
        # Plain text, not markup: "[memory]" or "[garbage collection]" are names.
        t.add_row(*(Text(c) for c in r))
    base = Console()
    need = sum(min(w, 60) for w in widths) + 3 * len(widths) + 1
    console = Console(width=max(base.width, need)) if need > base.width else base
    console.print(t)
    if total is not None and total > table.num_rows:
        console.print(f"[dim]{table.num_rows} of {total} rows; use --limit/--offset to page[/dim]")


def _unique_names(table: pa.Table) -> pa.Table:
    # SQL may return two columns of one name (a join's `rank` and `rank`); rows as
    # dicts would silently keep one of them.
    seen: dict[str, int] = {}
    names = []
    for n in table.column_names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        names.append(n if k == 0 else f"{n}_{k + 1}")
    return table.rename_columns(names) if names != table.column_names else table


#: Longest text shown in a terminal cell; CSV and JSON always carry the full text.
MAX_CELL = 100


def _shorten(text: str) -> str:
    # C++ kernel names run to hundreds of characters; keep the head and the tail.
    if len(text) <= MAX_CELL:
        return text
    half = (MAX_CELL - 1) // 2
    return text[:half] + "…" + text[-half:]


def format_cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        if abs(v) >= 100:
            return f"{v:,.1f}"
        if v and abs(v) < 0.001:
            # Three decimals would print a p-value of 4e-05 or a tiny share as "0".
            return f"{v:.3g}"
        return f"{v:.3f}".rstrip("0").rstrip(".") if v else "0"
    if isinstance(v, bool):  # before int: a flag column (live_at_peak) read as 1 and 0
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
