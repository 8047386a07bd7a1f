"""The export's tables, columns, string ids and enums, looked up rather than assumed;
and whether a file is an export at all."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from ...base import Detection, no, yes

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

#: Tables whose presence (besides StringIds) marks an nsys export.
_MARKER_TABLES = (
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "ThreadNames",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "OSRT_API",
    "NVTX_EVENTS",
)

_REF_RE = re.compile(r"^\s*(\w+)\s+\w+.*?--\s*REFERENCES\s+(\w+)\s*\(\s*(\w+)\s*\)", re.MULTILINE)


def _int64s(values: Sequence[Any], missing: int) -> np.ndarray:
    """Integer ns of a time column; a null, or a value a damaged page turned into bytes
    or text, is ``missing``."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array(
            [v if isinstance(v, int) and -(2**63) <= v < 2**63 else missing for v in values], dtype=np.int64
        )


def _decode(b: bytes) -> str:
    # Exports carry raw bytes from the target (environment blocks, binary-ish names).
    return b.decode("utf-8", "replace")


@dataclass
class _Table:
    name: str
    columns: list[str]
    refs: dict[str, tuple[str, str]] = field(default_factory=dict)
    """column -> (referenced table, referenced column), from the exporter's comments."""


class NsysExport:
    """A read-only view of one nsys SQLite export: its tables, columns and enums."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.tables: dict[str, _Table] = {}
        for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({_q(name)})")]
            refs = {m.group(1): (m.group(2), m.group(3)) for m in _REF_RE.finditer(sql or "")}
            self.tables[name] = _Table(name, cols, {c: r for c, r in refs.items() if c in cols})
        self.meta: dict[str, str] = {}
        for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(t, "name", "value"):
                self.meta.update({str(k): str(v) for k, v in con.execute(f"SELECT name, value FROM {t}")})
        self._enums: dict[str, dict[int, str]] = {}

    def has(self, table: str, *cols: str) -> bool:
        t = self.tables.get(table)
        return t is not None and all(c in t.columns for c in cols)

    def cols(self, table: str) -> list[str]:
        t = self.tables.get(table)
        return t.columns if t else []

    def count(self, table: str) -> int:
        try:
            return int(self.con.execute(f"SELECT count(*) FROM {_q(table)}").fetchone()[0])
        except sqlite3.DatabaseError:
            return -1

    def enum(self, table: str, default: dict[int, str] | None = None) -> dict[int, str]:
        """id -> label of an ENUM_* table (its ``label``, else ``name``), or ``default``."""
        if table in self._enums:
            return self._enums[table]
        out: dict[int, str] = {}
        cols = self.cols(table)
        text = "label" if "label" in cols else "name" if "name" in cols else None
        if "id" in cols and text:
            out = {int(i): str(v) for i, v in self.con.execute(f"SELECT id, {text} FROM {table}") if i is not None}
        if not out and default is not None:
            out = dict(default)
        self._enums[table] = out
        return out

    def enum_names(self, table: str) -> dict[int, str]:
        """id -> ``name`` (the C identifier) of an ENUM_* table."""
        if "name" not in self.cols(table) or "id" not in self.cols(table):
            return {}
        return {int(i): str(v) for i, v in self.con.execute(f"SELECT id, name FROM {table}") if i is not None}

    @property
    def schema_version(self) -> str | None:
        return self.meta.get("EXPORT_SCHEMA_VERSION")

    @property
    def product_version(self) -> str | None:
        return self.meta.get("EXPORT_PRODUCT_VERSION")

    def args_sql(self, table: str, alias: str, skip: set[str]) -> tuple[str, str]:
        """(SELECT expression, JOIN clauses) building a JSON object of every column not in
        ``skip``; StringIds references become their text, ENUM references their label.
        Columns that are null in every row are left out (one scan counts them)."""
        t = self.tables[table]
        rest = [c for c in t.columns if c not in skip]
        if not rest:
            return "NULL", ""
        counts = self.con.execute(f"SELECT {', '.join(f'count({_q(c)})' for c in rest)} FROM {_q(table)}").fetchone()
        pairs: list[str] = []
        joins: list[str] = []
        for i, (c, n) in enumerate(zip(rest, counts, strict=True)):
            if not n:
                continue
            expr = f"{alias}.{_q(c)}"
            ref = t.refs.get(c)
            if ref and ref[0] == "StringIds" and "StringIds" in self.tables:
                a = f"_s{i}"
                joins.append(f"LEFT JOIN StringIds {a} ON {a}.id = {expr}")
                expr = f"coalesce({a}.value, {expr})"
            elif ref and ref[0].startswith("ENUM_"):
                labels = self.enum(ref[0])
                # The few values a column holds, as a CASE: cheaper per row than a join.
                present = [v for (v,) in self.con.execute(f"SELECT DISTINCT {_q(c)} FROM {_q(table)} LIMIT 65")]
                if labels and len(present) <= 64:
                    whens = " ".join(
                        f"WHEN {int(v)} THEN {_sql_str(labels[int(v)])}"
                        for v in present
                        if isinstance(v, int) and int(v) in labels
                    )
                    if whens:
                        expr = f"CASE {expr} {whens} ELSE {expr} END"
            pairs.append(f"'{c}', {expr}")
        if not pairs:
            return "NULL", ""
        # SQLite caps a function's arguments (100 by default): build it in pieces.
        parts = [f"json_object({', '.join(pairs[i : i + 40])})" for i in range(0, len(pairs), 40)]
        expr = parts[0]
        for p in parts[1:]:
            expr = f"json_patch({expr}, {p})"
        return expr, " ".join(joins)

    def string_col(self, table: str, alias: str, col: str, n: int) -> tuple[str, str]:
        """(expression, join) giving the text of a StringIds id column (or the column itself)."""
        if "StringIds" in self.tables:
            a = f"_n{n}"
            return f"{a}.value", f"LEFT JOIN StringIds {a} ON {a}.id = {alias}.{_q(col)}"
        return f"CAST({alias}.{_q(col)} AS TEXT)", ""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def open_export(path: Path) -> sqlite3.Connection:
    """Open an SQLite file read-only (no journal, no lock left behind)."""
    con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
    con.text_factory = _decode
    return con


# -- detection -------------------------------------------------------------------------


def _detect(path: Path) -> Detection:
    if path.is_dir():
        return no("a folder, not an SQLite file")
    if path.name.endswith(REPORT_SUFFIXES):
        return yes("an Nsight Systems report (.nsys-rep), converted with nsys export")
    with path.open("rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        return no("not an SQLite database")
    try:
        con = open_export(path)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        # A damaged export still names its tables in the raw pages: claim it so the
        # user hears what is wrong with it rather than that nothing recognises it.
        with path.open("rb") as f:
            raw = f.read(4 << 20)
        if b"StringIds" in raw and any(m.encode() in raw for m in _MARKER_TABLES):
            return yes(f"a damaged SQLite file naming Nsight Systems tables ({e})")
        return no(f"an SQLite header but an unreadable database ({e})")
    if "StringIds" in names and names.intersection(_MARKER_TABLES):
        return yes("an SQLite database with Nsight Systems export tables")
    return no("an SQLite database, but not an Nsight Systems export (no StringIds and export metadata tables)")
