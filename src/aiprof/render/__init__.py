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

    t = Table(title=title, show_lines=False, header_style="bold")
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema]
    for f, num in zip(table.schema, numeric):
        t.add_column(f.name, justify="right" if num else "left", overflow="fold", max_width=None if num else 60)
    for row in table.to_pylist():
        t.add_row(*[format_cell(v) for v in row.values()])
    console = Console()
    console.print(t)
    if total is not None and total > table.num_rows:
        console.print(f"[dim]{table.num_rows} of {total} rows; use --limit/--offset to page[/dim]")


def format_cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        if abs(v) >= 100:
            return f"{v:,.1f}"
        return f"{v:.3f}".rstrip("0").rstrip(".") if v else "0"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)
