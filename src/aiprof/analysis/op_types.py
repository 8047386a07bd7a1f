"""Device operators by type and one by one (MindInsight's AicoreTypeAnalyser and
AicoreDetailAnalyser), for every source whose device ops carry a type.

An op's type is the ``type`` its events carry in ``args`` (MindSpore's timeline, the
raw HWTS log named by the framework files); for a kernel that carries none, the name
of the framework operator that launched it (the ``cpu_op`` sharing its
``external_id``: Kineto's aten ops, ``aten::mm`` for a GEMM kernel). An AI CPU op of
MindSpore, named by its type, is its own type. Device ops with no type from any of
these are left out of both views. Device ops are ``kernel`` and ``memset`` events off
the host.

Views:

``op-types`` (one row per op type)
    op_type, count, total_us, avg_us, min_us, max_us (µs), pct (% of the time of all
    device ops, typed or not, MindInsight's share of device time), ops (distinct op
    names), gflops_per_s (achieved: FLOPs over the time of the launches that carry
    ``flops``; null when none does), ranks.

``op-detail`` (one row per op name and type)
    name, op_type, count, avg_us, total_us, pct, full_name (``fullname`` in args, else
    the name), input_shapes, input_formats, output_shapes, output_formats (as the
    source writes them; for a launched kernel its operator's ``Input Dims``), flops
    (per launch, mean), gflops_per_s (achieved, as above), ranks.
"""

from __future__ import annotations

from typing import Any

from ..store import Profile
from .base import SqlView, analyser

_TIMES = ("total_us", "avg_us", "min_us", "max_us")
#: FLOPs per ns is GFLOP/s.
_ACHIEVED = "sum(flops) / nullif(sum(dur) FILTER (WHERE flops IS NOT NULL), 0) AS gflops_per_s"


def typed_ops_sql() -> str:
    """Device ops with their type (see the module doc): the columns of events plus
    op_type, launcher_args."""
    return """
        WITH d AS (
            SELECT * FROM events WHERE device_type <> 'cpu' AND kind IN ('kernel', 'memset')),
        o AS (
            SELECT rank, external_id, any_value(name) AS lname, any_value(args) AS largs FROM events
            WHERE kind = 'cpu_op' AND external_id IS NOT NULL
              AND external_id IN (SELECT external_id FROM d WHERE external_id IS NOT NULL)
            GROUP BY rank, external_id)
        SELECT d.*, coalesce(
                   json_extract_string(d.args, '$.type'),
                   o.lname,
                   CASE WHEN d.cat = 'AI_CPU' THEN d.name END) AS op_type,
               o.largs AS launcher_args
        FROM d LEFT JOIN o ON o.rank = d.rank AND o.external_id = d.external_id
    """


@analyser(
    "op-types",
    "Device ops by type",
    default_sort=("-total_us",),
    units={c: "µs" for c in _TIMES} | {"pct": "%", "gflops_per_s": "GFLOP/s"},
)
def op_types(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per op type (see the module doc for the columns and units)."""
    return SqlView(
        f"""
        WITH t AS ({typed_ops_sql()})
        SELECT op_type, count(*) AS count, sum(dur) / 1000.0 AS total_us, avg(dur) / 1000.0 AS avg_us,
               min(dur) / 1000.0 AS min_us, max(dur) / 1000.0 AS max_us,
               100.0 * sum(dur) / nullif((SELECT sum(dur) FROM t), 0) AS pct,
               count(DISTINCT name) AS ops,
               {_ACHIEVED},
               string_agg(DISTINCT CAST(rank AS VARCHAR), ',' ORDER BY CAST(rank AS VARCHAR)) AS ranks
        FROM t WHERE op_type IS NOT NULL GROUP BY op_type
        """
    )


@analyser(
    "op-detail",
    "Device ops one by one",
    default_sort=("-total_us",),
    units={"avg_us": "µs", "total_us": "µs", "pct": "%", "flops": "FLOP", "gflops_per_s": "GFLOP/s"},
)
def op_detail(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per op name and type (see the module doc for the columns and units)."""
    return SqlView(
        f"""
        WITH t AS ({typed_ops_sql()})
        SELECT name, op_type, count(*) AS count, avg(dur) / 1000.0 AS avg_us, sum(dur) / 1000.0 AS total_us,
               100.0 * sum(dur) / nullif((SELECT sum(dur) FROM t), 0) AS pct,
               coalesce(any_value(json_extract_string(args, '$.fullname')), name) AS full_name,
               coalesce(any_value(json_extract_string(args, '$.input_shapes')),
                        any_value(CAST(json_extract(launcher_args, '$."Input Dims"') AS VARCHAR))) AS input_shapes,
               any_value(json_extract_string(args, '$.input_formats')) AS input_formats,
               any_value(json_extract_string(args, '$.output_shapes')) AS output_shapes,
               any_value(json_extract_string(args, '$.output_formats')) AS output_formats,
               avg(flops) AS flops,
               {_ACHIEVED},
               string_agg(DISTINCT CAST(rank AS VARCHAR), ',' ORDER BY CAST(rank AS VARCHAR)) AS ranks
        FROM t WHERE op_type IS NOT NULL GROUP BY name, op_type
        """
    )
