"""The table a profile handle returns: rows that display as HTML in a notebook and
convert to Arrow, pandas or polars."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ..errors import AiprofError
from ..render.terminal import format_cell

#: Rows shown when a table displays (all rows stay in the object).
SHOWN_ROWS = 50


class Table:
    """Rows of a view or a SQL query. ``total`` is how many rows matched before the
    limit and offset (the same as ``aiprof report``'s "of N")."""

    def __init__(
        self, table: pa.Table, *, title: str = "", total: int | None = None, units: dict[str, str] | None = None
    ) -> None:
        self.table = table
        self.title = title
        self.total = table.num_rows if total is None else total
        self.units = dict(units or {})

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts (what ``aiprof report --format json`` prints)."""
        rows: list[dict[str, Any]] = self.table.to_pylist()
        return rows

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]

    def to_arrow(self) -> pa.Table:
        return self.table

    def to_pandas(self) -> Any:
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise AiprofError("to_pandas() needs pandas, which is not installed: pip install pandas") from None
        return self.table.to_pandas()

    def to_polars(self) -> Any:
        try:
            import polars
        except ImportError:
            raise AiprofError("to_polars() needs polars, which is not installed: pip install polars") from None
        return polars.from_arrow(self.table)

    def _header(self, name: str) -> str:
        unit = self.units.get(name)
        return f"{name} ({unit})" if unit else name

    def __repr__(self) -> str:
        cols = self.columns
        lines = [f"{self.title or 'table'}: {len(self)} of {self.total} rows"]
        lines.append("  ".join(self._header(c) for c in cols))
        for row in self.table.slice(0, SHOWN_ROWS).to_pylist():
            lines.append("  ".join(format_cell(row[c]) for c in cols))
        if len(self) > SHOWN_ROWS:
            lines.append(f"... {len(self) - SHOWN_ROWS} more rows (.to_arrow() / .to_pandas() for all)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        cols = self.columns
        numeric = {f.name for f in self.table.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)}
        head = "".join(
            f'<th style="text-align:{"right" if c in numeric else "left"};padding:2px 8px">{esc(self._header(c))}</th>'
            for c in cols
        )
        body = []
        for row in self.table.slice(0, SHOWN_ROWS).to_pylist():
            cells = []
            for c in cols:
                text = format_cell(row[c])
                align = "right" if c in numeric else "left"
                cells.append(
                    f'<td style="text-align:{align};padding:2px 8px;max-width:40em;overflow-wrap:anywhere">'
                    f"{esc(text)}</td>"
                )
            body.append("<tr>" + "".join(cells) + "</tr>")
        shown = min(len(self), SHOWN_ROWS)
        note = f"{shown} of {self.total:,} rows"
        if len(self) > SHOWN_ROWS:
            note += f" shown ({len(self):,} in this table: .to_pandas() or .to_arrow() for all)"
        title = f"<b>{esc(self.title)}</b> " if self.title else ""
        return (
            f'<div class="aiprof-table"><div style="margin:4px 0">{title}<span style="opacity:.7">{esc(note)}</span>'
            f'</div><table style="border-collapse:collapse;font-size:12px"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
