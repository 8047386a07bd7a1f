"""Device kernels by name."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..store import Profile
from .base import analyser
from .tensor_cores import tensor_core_sql


def _shape(value: str) -> str:
    """Kineto's launch shape arg ``[4,106,1]`` (the JSON ``value``) as ``4×106×1``."""
    return f"replace(regexp_replace({value}::VARCHAR, '[\\[\\] ]', '', 'g'), ',', '×')"


@analyser(
    "kernels",
    "Kernels",
    default_sort=("-total_us",),
    units={k: "µs" for k in ("total_us", "mean_us", "median_us", "min_us", "max_us")}
    | {"pct": "%", "occupancy_pct": "%", "shared_memory_bytes": "B"},
)
def kernels(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per kernel name (device kinds kernel and collective): name, kind,
    tensor_core (the name is a Tensor Core kernel's, tb-profiler's rule: analysis/tensor_cores.py),
    count, total_us, mean_us, median_us, min_us, max_us (µs), pct (% of all kernel time);
    where the trace records them (Kineto's kernel args; null otherwise) grid and block
    (the most common launch shape, ties to the smallest), registers_per_thread and shared_memory_bytes
    (largest), occupancy_pct (estimated achieved occupancy, mean weighted by duration);
    then devices and streams (comma-separated) and ranks."""
    from .derived import load_rows

    kept = load_rows(profile, "kernel_stats")
    return kept if kept is not None else kernels_from_events(profile)


def kernels_from_events(profile: Profile) -> pa.Table:
    """The kernels view's rows computed from the events (the rule; kept at import as
    the derived table ``kernel_stats``)."""
    # Deterministic whatever the threads: the most common shape, ties to the smallest;
    # occupancy summed as a decimal (a float sum depends on the order rows arrive in).
    # A small aggregate: materialised once, then filtered and paged in memory.
    # The five args keys in one parse of each args (one json_extract each parses it again).
    paths = (
        """['$.grid', '$.block', '$."registers per thread"', '$."shared memory"', '$."est. achieved occupancy %"']"""
    )
    return profile.sql(
        f"""
        WITH j AS (
            SELECT name, kind, dur, device, tid, rank, json_extract(args, {paths}) AS a
            FROM events WHERE device_type <> 'cpu' AND kind IN ('kernel', 'collective')),
        k AS (
            SELECT name, kind, dur, device, tid, rank, {_shape("a[1]")} AS grid, {_shape("a[2]")} AS block,
                   TRY_CAST(a[3] AS BIGINT) AS regs, TRY_CAST(a[4] AS BIGINT) AS smem,
                   TRY_CAST(a[5] AS DOUBLE)::DECIMAL(38, 12) AS occ, a[5] IS NOT NULL AS has_occ
            FROM j),
        shapes AS (
            SELECT name, 'grid' AS axis, grid AS shape, count(*) AS n FROM k WHERE grid IS NOT NULL GROUP BY ALL
            UNION ALL
            SELECT name, 'block', block, count(*) FROM k WHERE block IS NOT NULL GROUP BY ALL),
        common AS (
            SELECT name, first(shape ORDER BY n DESC, shape) FILTER (WHERE axis = 'grid') AS grid,
                   first(shape ORDER BY n DESC, shape) FILTER (WHERE axis = 'block') AS block
            FROM shapes GROUP BY name),
        a AS (
            SELECT name, min(kind) AS kind, {tensor_core_sql("name")} AS tensor_core, count(*) AS count,
                   sum(dur) / 1000.0 AS total_us, avg(dur) / 1000.0 AS mean_us,
                   median(dur) / 1000.0 AS median_us, min(dur) / 1000.0 AS min_us, max(dur) / 1000.0 AS max_us,
                   100.0 * sum(dur) / nullif((SELECT sum(dur) FROM k), 0) AS pct,
                   max(regs) AS registers_per_thread, max(smem) AS shared_memory_bytes,
                   sum(dur * occ)::DOUBLE / nullif(sum(dur) FILTER (WHERE has_occ), 0) AS occupancy_pct,
                   string_agg(DISTINCT device::VARCHAR, ',' ORDER BY device::VARCHAR) AS devices,
                   string_agg(DISTINCT tid::VARCHAR, ',' ORDER BY tid::VARCHAR) AS streams,
                   string_agg(DISTINCT rank::VARCHAR, ',' ORDER BY rank::VARCHAR) AS ranks
            FROM k GROUP BY name)
        SELECT a.name, kind, tensor_core, count, total_us, mean_us, median_us, min_us, max_us, pct,
               c.grid, c.block, registers_per_thread, shared_memory_bytes, occupancy_pct, devices, streams, ranks
        FROM a LEFT JOIN common c ON c.name = a.name
        """
    )


@analyser(
    "tensor-cores",
    "Tensor Core share",
    units={"kernel_us": "µs", "tensor_core_us": "µs", "tensor_core_pct": "%"},
)
def tensor_cores(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per rank: kernel_us (all kernel time, collectives excluded), tensor_core_us
    (of kernels whose name is a Tensor Core kernel's, tb-profiler's rule),
    tensor_core_pct, kernels and tensor_core_kernels (distinct names)."""
    return profile.sql(
        f"""
        WITH k AS (SELECT rank, name, dur, {tensor_core_sql("name")} AS tc FROM events
                   WHERE device_type <> 'cpu' AND kind = 'kernel')
        SELECT rank, sum(dur) / 1000.0 AS kernel_us,
               coalesce(sum(dur) FILTER (WHERE tc), 0) / 1000.0 AS tensor_core_us,
               100.0 * coalesce(sum(dur) FILTER (WHERE tc), 0) / nullif(sum(dur), 0) AS tensor_core_pct,
               count(DISTINCT name) AS kernels, count(DISTINCT name) FILTER (WHERE tc) AS tensor_core_kernels
        FROM k GROUP BY rank ORDER BY rank
        """
    )
