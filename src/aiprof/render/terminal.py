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

    cells = [[format_cell(v) for v in row.values()] for row in table.to_pylist()]
    # Each column shortened as a whole: two long names that shorten alike are shown
    # such that they still differ (a diff's rows would otherwise read as one kernel twice).
    rows = [list(r) for r in zip(*(shorten_distinct(list(col)) for col in zip(*cells)))] if cells else []
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema]
    heads = [header(f.name, (units or {}).get(f.name)) for f in table.schema]
    widths = [
        max([len(h)] + [len(r[i]) for r in rows]) if num else min(60, max([len(h)] + [len(r[i]) for r in rows]))
        for i, (h, num) in enumerate(zip(heads, numeric))
    ]
    t = Table(title=title, show_lines=False, header_style="bold")
    for h, num, width in zip(heads, numeric, widths):
        # Numbers and headers never wrap: a wide table scrolls rather than turning
        # every cell into a column of single characters.
        t.add_column(
            h,
            justify="right" if num else "left",
            no_wrap=num,
            min_width=min(width, len(h)) if not num else width,
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


#: Characters shown before and after the point where names that shorten alike part.
_BEFORE, _AFTER = 12, 40


def shorten_distinct(texts: list[str]) -> list[str]:
    """Each text shortened as :func:`_shorten` does, except where distinct texts would
    read alike (kernel names that differ only in a template argument in the middle):
    those also show where they part, head…part…tail, the part taken after the longest
    head the alike ones share, and again within any that still read alike; whole
    where that is not shorter, or past a few rounds."""
    shown = {t: _shorten(t) for t in texts}
    for _ in range(8):
        groups: dict[str, list[str]] = {}
        for t, s in shown.items():
            groups.setdefault(s, []).append(t)
        alike = [g for g in groups.values() if len(g) > 1]
        if not alike:
            break
        for g in alike:
            at = len(_common_prefix(g))
            for t in g:
                shown[t] = _with_part(t, at)
    else:
        counts: dict[str, int] = {}
        for s in shown.values():
            counts[s] = counts.get(s, 0) + 1
        shown = {t: t if counts[s] > 1 else s for t, s in shown.items()}
    return [shown[t] for t in texts]


def _with_part(text: str, at: int) -> str:
    """``text``'s head and tail, as :func:`_shorten` keeps them, and its part around ``at``."""
    half = (MAX_CELL - 1) // 2
    start, end = max(half, at - _BEFORE), min(len(text) - half, at + _AFTER)
    if start >= end:
        return text
    out = text[:half] + ("…" if start > half else "") + text[start:end] + ("…" if end < len(text) - half else "")
    out += text[-half:]
    return out if len(out) < len(text) else text


def _common_prefix(texts: list[str]) -> str:
    """The longest head all ``texts`` share, character by character."""
    first, last = min(texts), max(texts)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


#: Column name endings that already say the unit: the header then adds nothing.
_UNIT_NAMED = ("_us", "_ns", "_ms", "_s", "pct", "percent", "bytes", "_j", "_w", "_hz", "gbps", "cycles")


def header(name: str, unit: str | None) -> str:
    """A column's header: its name, and its unit where the name does not say it
    (the events view's ts and dur, in ns, beside ts_us and dur_us)."""
    return f"{name} ({unit})" if unit and not name.endswith(_UNIT_NAMED) else name


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
