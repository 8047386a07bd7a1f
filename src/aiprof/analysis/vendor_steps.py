"""Step time as the vendor's own tool computed it, per rank and step.

``vendor_steps`` (one row per rank, step and source; read from kernel_metrics, where the
importers keep these files' figures whole):

- section ``cluster_step_trace_time``: msprof-analyze's ``cluster_step_trace_time.csv``
  (its ``rank`` rows; the ``stage`` rows, which hold no rank, are left out);
- section ``step_trace_time``: torch_npu's ``ASCEND_PROFILER_OUTPUT/step_trace_time.csv``;
- section ``cluster_analyse``: MindInsight's per-rank ``ascend_cluster_analyse_*.csv``.

Columns: rank, step (null where the file leaves it blank, or for MindInsight's row of
averages), source (the section), then one float column per figure, in µs, then
communication_pct (communication_not_overlapped_us / stage_us, %, where both exist).

Naming rule, one for every figure: the vendor's header (its unit already split off by
the importer) in lower case, each run of characters other than letters and digits made
one ``_``, the ends trimmed, and ``_us`` appended: ``Communication(Not Overlapped)`` ->
``communication_not_overlapped_us``. The figures the three tools write are always
columns (:data:`FIGURES`, null where a source lacks them); a header outside them gets a
column by the same rule, after communication_pct (with no unit declared). Identity
columns (``Device_id``, ``Rank ID``, ``Step``, ...) are not figures.

Units: a figure is converted to µs by its row's ``unit`` (ns, us, µs, ms, s; case
ignored). A figure in any other unit (MindSpore's older layout counts ``tick``) is left
out, and a (rank, step) with no figure left is no row. Sorted by rank, step (blank
last), source. No such rows in the profile: an empty table with the fixed columns.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser

#: kernel_metrics section -> the tool that computed its figures.
SOURCES: dict[str, str] = {
    "cluster_step_trace_time": "msprof-analyze",
    "step_trace_time": "torch_npu",
    "cluster_analyse": "MindInsight",
}
#: The figure columns always present: msprof-analyze's and torch_npu's headers, then
#: MindInsight's (its importer drops the ``_time`` suffix).
FIGURES: tuple[str, ...] = (
    "stage_us",
    "computing_us",
    "communication_not_overlapped_us",
    "overlapped_us",
    "communication_us",
    "free_us",
    "bubble_us",
    "communication_not_overlapped_and_exclude_receive_us",
    "preparing_us",
    "computation_us",
    "communication_alone_us",
    "receive_alone_us",
    "collective_communication_alone_us",
)
#: Time unit (lower case) -> factor to µs.
TO_US: dict[str, float] = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "μs": 1.0, "ms": 1e3, "s": 1e6}
#: Headers (by the naming rule, without ``_us``) that name a row, not a figure.
_IDENTITY = frozenset({"device_id", "rank_id", "rank", "index", "type", "step", "step_num", "step_id"})
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")


def column_name(header: str) -> str:
    """The view's column for a vendor header (the module doc's rule)."""
    return _NOT_ALNUM.sub("_", header.lower()).strip("_") + "_us"


def _schema(extra: list[str]) -> pa.Schema:
    fields = [
        pa.field("rank", pa.int64()),
        pa.field("step", pa.int64()),
        pa.field("source", pa.string()),
        *(pa.field(c, pa.float64()) for c in FIGURES),
        pa.field("communication_pct", pa.float64()),
        *(pa.field(c, pa.float64()) for c in extra),
    ]
    return pa.schema(fields)


@analyser(
    "vendor_steps",
    "Step time as the vendor's tool computed it",
    default_sort=("rank", "step", "source"),
    units={c: "µs" for c in FIGURES} | {"communication_pct": "%"},
)
def vendor_steps(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank, step and source of the vendor's step-time figures (see the
    module doc for the sources, the naming rule and the units)."""
    sections = ", ".join(f"'{s}'" for s in SOURCES)
    long = profile.sql(
        f"""
        SELECT CAST(rank AS BIGINT) AS rank, CAST(launch_id AS BIGINT) AS step, section, metric,
               lower(coalesce(unit, '')) AS unit, value
        FROM kernel_metrics
        WHERE section IN ({sections}) AND rank IS NOT NULL AND value IS NOT NULL
        """
    ).to_pylist()
    rows: dict[tuple[int, int | None, str], dict[str, float]] = {}
    extra: set[str] = set()
    for r in long:
        factor = TO_US.get(r["unit"])
        name = column_name(str(r["metric"]))
        if factor is None or name.removesuffix("_us") in _IDENTITY:
            continue
        rows.setdefault((r["rank"], r["step"], r["section"]), {})[name] = float(r["value"]) * factor
        if name not in FIGURES:
            extra.add(name)
    schema = _schema(sorted(extra))
    out: list[dict[str, Any]] = []
    for (rank, step, section), figs in sorted(
        rows.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1] or 0, kv[0][2])
    ):
        row: dict[str, Any] = {"rank": rank, "step": step, "source": section, **figs}
        alone, stage = figs.get("communication_not_overlapped_us"), figs.get("stage_us")
        row["communication_pct"] = 100.0 * alone / stage if alone is not None and stage else None
        out.append(row)
    return pa.Table.from_pylist(out, schema=schema)
