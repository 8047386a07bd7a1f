"""Across-rank views, SQL over the cluster index (never over every rank's events).

Each view is an analyser (the common query applies inside DuckDB). Times in µs,
bandwidth in GB/s. On a profile without an index on disk, the index tables are
computed from its events first (:func:`.index.ensure`).

``straggler_steps`` (one row per rank and step)
    rank, step, step_us, compute_us (union of the rank's non-collective device work in
    the step), step_median_us, compute_median_us (over the ranks), step_z, compute_z
    (robust z-scores against the ranks of that step, see :data:`STRAGGLER_Z`).

``rank_steps`` (one row per rank and step)
    rank, step, step_us, compute_us (union of the compute kernels), copy_us (what the
    copies and memsets add to it; null in an index written before kernel_ns),
    exposed_comm_us (time with communication alone on the device: no computation and no
    copy under it), idle_us (step time with no device work); the four add up to step_us.
    All four are null on a rank without device work (not measured: the index's
    device_measured, overview.measured_ranks), as in the steps view.

``stragglers`` (one row per rank)
    rank, steps, step_us, compute_us (medians over the rank's steps), step_z, compute_z
    (medians over steps), slow_steps (steps with a z-score above :data:`STRAGGLER_Z`),
    slow_share, persistent (slow in at least :data:`PERSISTENT_SHARE` of its steps),
    lost_pct (mean share of the median step that the others wait for this rank's extra
    compute, %).

``collectives`` (one row per collective instance, matched across the ranks of its group
by group and sequence number, or by group, op and order of issue without one)
    pg, op, matched_by ('seq' or 'order'), key (the seq or the order), step, ranks
    (ranks seen), pg_size, bytes, start_us (first arrival, from the job's first),
    arrival_spread_us (last arrival - first), last_rank, total_wait_us (what the other
    ranks wait for the last one, summed), mean_wait_us, transfer_us (median end - last
    arrival), busbw_gbps (NCCL-tests bus bandwidth of the transfer).

``links`` (one row per process group and op)
    pg, pg_ranks, op, pg_size, instances, bytes, transfer_us, busbw_gbps (median),
    rel_bw (median of each instance's bus bandwidth over the median of all groups'
    instances of the same op, group size and message size), slowest_rank,
    slowest_rank_rel (that rank's own bandwidth over its group's, median), slow
    (rel_bw or slowest_rank_rel below :data:`SLOW_LINK_FRACTION`), lost_us (transfer
    time above what the typical group needs, slow groups only).

``exposed_comm`` (one row per rank)
    rank, steps, step_us, comm_us, overlap_us, exposed_us (sums over steps), overlap_pct
    (% of comm_us), exposed_pct (% of step_us).
"""

from __future__ import annotations

from typing import Any

from ..analysis.base import SqlView, analyser
from ..store import Profile
from .index import ensure, from_index

#: Robust (modified) z-score above which a rank is slow in a step: Iglewicz & Hoaglin's
#: 3.5 on 0.6745 (x - median) / MAD, the outlier rule of analysis/outliers.py.
STRAGGLER_Z = 3.5
#: MAD floor, as a share of the median: ranks within 1% of each other are never apart.
MAD_FLOOR = 0.01
#: A rank slow in at least this share of its steps is a persistent straggler.
PERSISTENT_SHARE = 0.5
#: A group (or a rank in it) below this fraction of the typical bus bandwidth is slow.
SLOW_LINK_FRACTION = 0.7


def bus_factor_sql(op: str, n: str) -> str:
    """NCCL-tests' bus bandwidth factor (doc/PERFORMANCE.md) for op on n ranks."""
    return (
        f"(CASE WHEN {op} = 'allreduce' THEN 2.0 * ({n} - 1) / {n} "
        f"WHEN {op} IN ('allgather', 'reducescatter', 'alltoall') THEN ({n} - 1.0) / {n} ELSE 1.0 END)"
    )


_STEP_Z = f"""
WITH s AS (SELECT rank, step, dur_ns, compute_ns FROM cluster_steps WHERE step IS NOT NULL),
m AS (SELECT step, median(dur_ns) AS md, median(compute_ns) AS mc FROM s GROUP BY step),
d AS (SELECT s.*, md, mc FROM s JOIN m USING (step)),
mad AS (SELECT step, median(abs(dur_ns - md)) AS madd, median(abs(compute_ns - mc)) AS madc FROM d GROUP BY step)
SELECT rank::BIGINT AS rank, step::BIGINT AS step, dur_ns / 1e3 AS step_us, compute_ns / 1e3 AS compute_us,
       md / 1e3 AS step_median_us, mc / 1e3 AS compute_median_us,
       0.6745 * (dur_ns - md) / greatest(madd, {MAD_FLOOR} * md, 1) AS step_z,
       0.6745 * (compute_ns - mc) / greatest(madc, {MAD_FLOOR} * mc, 1) AS compute_z
FROM d JOIN mad USING (step)
"""

_INSTANCE = """
WITH c AS (SELECT *, CASE WHEN seq IS NOT NULL THEN 'seq' ELSE 'order' END AS matched_by,
                  coalesce(seq, ordinal) AS key, CASE WHEN seq IS NULL THEN op ELSE '' END AS kop
           FROM cluster_collectives),
j AS (SELECT c.*, max(start_ns) OVER (PARTITION BY pg, kop, key) AS last_ns FROM c),
t0 AS (SELECT min(start_ns) AS t0 FROM cluster_collectives)
SELECT pg, any_value(op) AS op, matched_by, key, min(step)::BIGINT AS step, count(*)::BIGINT AS ranks,
       max(pg_size)::BIGINT AS pg_size, max(bytes)::BIGINT AS bytes, any_value(pg_ranks) AS pg_ranks,
       (min(start_ns) - any_value(t0)) / 1e3 AS start_us,
       (max(start_ns) - min(start_ns)) / 1e3 AS arrival_spread_us,
       arg_max(rank, start_ns)::BIGINT AS last_rank, max(start_ns) AS last_ns,
       sum(last_ns - start_ns) / 1e3 AS total_wait_us,
       sum(last_ns - start_ns) / 1e3 / greatest(count(*) - 1, 1) AS mean_wait_us,
       greatest(median(end_ns) - max(start_ns), 0) / 1e3 AS transfer_us
FROM j, t0 GROUP BY pg, kop, key, matched_by
"""


def _instances_sql() -> str:
    factor = bus_factor_sql("op", "coalesce(pg_size, ranks)")
    return (
        f"SELECT i.*, CASE WHEN transfer_us > 0 AND bytes IS NOT NULL "
        f"THEN bytes * {factor} / (transfer_us * 1e3) END AS busbw_gbps FROM ({_INSTANCE}) i"
    )


def _view(profile: Profile, sql: str) -> SqlView:
    ensure(profile)
    return SqlView(sql)


@analyser(
    "straggler_steps",
    "Stragglers per step",
    default_sort=("-compute_z",),
    units={"step_us": "µs", "compute_us": "µs", "step_median_us": "µs", "compute_median_us": "µs"},
)
def straggler_steps(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per rank and step: its step and compute time against the ranks' medians
    (robust z-scores); see aiprof.cluster.views for the columns."""
    return _view(profile, _STEP_Z)


@analyser(
    "rank_steps",
    "Step time and its parts per rank and step",
    default_sort=("rank", "step"),
    units={"step_us": "µs", "compute_us": "µs", "copy_us": "µs", "exposed_comm_us": "µs", "idle_us": "µs"},
)
def rank_steps(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per rank and step from the cluster summaries (the index of a many-rank job):
    the step's time, its device computation, copies and exposed communication, and the
    device's idle time in it; what the distributed page draws, without reading events."""
    ensure(profile)
    # Indexes written before kernel_ns counted copies with the computation.
    kernel, copy = ("kernel_ns", "compute_ns - kernel_ns") if _has_kernel_ns(profile) else ("compute_ns", "NULL")
    # Null where not measured (CASE without ELSE); greatest() would skip a null.
    m = _device_measured(profile)
    return SqlView(
        f"""
        SELECT rank::BIGINT AS rank, step::BIGINT AS step, dur_ns / 1e3 AS step_us,
               CASE WHEN {m} THEN {kernel} / 1e3 END AS compute_us,
               CASE WHEN {m} THEN greatest({copy}, 0) / 1e3 END AS copy_us,
               CASE WHEN {m} THEN greatest(busy_ns - compute_ns, 0) / 1e3 END AS exposed_comm_us,
               CASE WHEN {m} THEN greatest(dur_ns - busy_ns, 0) / 1e3 END AS idle_us
        FROM cluster_steps WHERE step IS NOT NULL
        """
    )


@analyser(
    "stragglers",
    "Stragglers",
    default_sort=("-compute_z",),
    units={"step_us": "µs", "compute_us": "µs", "lost_pct": "%"},
)
def stragglers(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per rank: how often and by how much it is slower than the other ranks
    (robust z-scores per step), whether persistently, and the step share the job loses."""
    return _view(
        profile,
        f"""
        WITH z AS ({_STEP_Z}),
        r AS (SELECT rank, count(*)::BIGINT AS steps, median(step_us) AS step_us, median(compute_us) AS compute_us,
                     median(step_z) AS step_z, median(compute_z) AS compute_z,
                     count(*) FILTER (WHERE step_z > {STRAGGLER_Z} OR compute_z > {STRAGGLER_Z})::BIGINT AS slow_steps,
                     100.0 * avg(greatest(compute_us - compute_median_us, 0) / nullif(step_median_us, 0)) AS lost_pct
              FROM z GROUP BY rank)
        SELECT rank, steps, step_us, compute_us, step_z, compute_z, slow_steps,
               slow_steps / steps AS slow_share, slow_steps >= {PERSISTENT_SHARE} * steps AS persistent, lost_pct
        FROM r
        """,
    )


@analyser(
    "collectives",
    "Collective instances across ranks",
    default_sort=("-arrival_spread_us",),
    units={
        "start_us": "µs",
        "arrival_spread_us": "µs",
        "total_wait_us": "µs",
        "mean_wait_us": "µs",
        "transfer_us": "µs",
        "bytes": "B",
        "busbw_gbps": "GB/s",
    },
)
def collective_instances(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per collective instance matched across its group's ranks: arrival spread,
    last rank, the wait it costs the others, transfer time and bus bandwidth."""
    return _view(profile, f"SELECT * EXCLUDE (pg_ranks, last_ns) FROM ({_instances_sql()})")


@analyser(
    "links",
    "Links: bus bandwidth per process group",
    default_sort=("rel_bw",),
    units={"bytes": "B", "transfer_us": "µs", "busbw_gbps": "GB/s", "lost_us": "µs"},
)
def links(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per process group and op: achieved bus bandwidth against the other
    groups of the same shape, and the slowest rank inside the group."""
    factor = bus_factor_sql("c.op", "coalesce(c.pg_size, i.ranks)")
    return _view(
        profile,
        f"""
        WITH i AS ({_instances_sql()}),
        ref AS (SELECT op, coalesce(pg_size, ranks) AS n, bytes, median(busbw_gbps) AS ref_bw FROM i
                WHERE busbw_gbps IS NOT NULL GROUP BY ALL),
        ir AS (SELECT i.*, busbw_gbps / ref_bw AS rel FROM i
               LEFT JOIN ref ON ref.op = i.op AND ref.n = coalesce(i.pg_size, i.ranks) AND ref.bytes = i.bytes),
        c AS (SELECT *, CASE WHEN seq IS NOT NULL THEN 'seq' ELSE 'order' END AS matched_by,
                     coalesce(seq, ordinal) AS key FROM cluster_collectives),
        own AS (SELECT c.pg, c.op, c.rank,
                       median(CASE WHEN c.end_ns > i.last_ns AND i.busbw_gbps > 0 AND c.bytes IS NOT NULL
                              THEN c.bytes * {factor} / (c.end_ns - i.last_ns) / i.busbw_gbps END) AS rel_rank
                FROM c JOIN i ON i.pg = c.pg AND i.key = c.key AND i.matched_by = c.matched_by
                           AND (c.matched_by = 'seq' OR i.op = c.op)
                GROUP BY ALL),
        -- ranks within 1e-9 of each other tie (their order of summation differs between
        -- readers); a tie goes to the lowest rank, so every reader names the same one
        worst AS (SELECT pg, op,
                         first(rank ORDER BY round(rel_rank, 9), rank)
                             FILTER (WHERE rel_rank IS NOT NULL)::BIGINT AS slowest_rank,
                         min(rel_rank) AS slowest_rank_rel
                  FROM own GROUP BY ALL),
        g AS (SELECT pg, any_value(pg_ranks) AS pg_ranks, op, max(coalesce(pg_size, ranks))::BIGINT AS pg_size,
                     count(*)::BIGINT AS instances, sum(bytes)::BIGINT AS bytes, sum(transfer_us) AS transfer_us,
                     median(busbw_gbps) AS busbw_gbps, median(rel) AS rel_bw
              FROM ir GROUP BY pg, op)
        SELECT g.*, w.slowest_rank, w.slowest_rank_rel,
               coalesce(rel_bw < {SLOW_LINK_FRACTION} OR w.slowest_rank_rel < {SLOW_LINK_FRACTION}, false) AS slow,
               CASE WHEN rel_bw < {SLOW_LINK_FRACTION} THEN transfer_us * (1 - rel_bw) ELSE 0 END AS lost_us
        FROM g LEFT JOIN worst w USING (pg, op)
        """,
    )


@analyser(
    "exposed_comm",
    "Exposed communication per rank",
    default_sort=("-exposed_pct",),
    units={
        "step_us": "µs",
        "comm_us": "µs",
        "overlap_us": "µs",
        "exposed_us": "µs",
        "overlap_pct": "%",
        "exposed_pct": "%",
    },
)
def exposed_comm(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per rank: communication time, how much of it overlaps computation, and
    what is left exposed, summed over the rank's steps."""
    return _view(
        profile,
        """
        SELECT rank::BIGINT AS rank, count(step)::BIGINT AS steps, sum(dur_ns) / 1e3 AS step_us,
               sum(comm_ns) / 1e3 AS comm_us, sum(overlap_ns) / 1e3 AS overlap_us, sum(exposed_ns) / 1e3 AS exposed_us,
               100.0 * sum(overlap_ns) / nullif(sum(comm_ns), 0) AS overlap_pct,
               100.0 * sum(exposed_ns) / nullif(sum(dur_ns), 0) AS exposed_pct
        FROM cluster_steps GROUP BY rank
        """,
    )


#: The ``ranks`` view from the index; ``{m}``: whether a step row's device columns are measured.
RANKS_SQL = """
WITH i AS (SELECT pg, CASE WHEN seq IS NULL THEN op ELSE '' END AS kop, coalesce(seq, ordinal) AS key,
                  rank, start_ns, end_ns, bytes FROM cluster_collectives),
n AS (SELECT count(DISTINCT rank) AS n FROM cluster_collectives),
m AS (SELECT i.*, min(start_ns) OVER w AS first_ns, max(start_ns) OVER w AS last_ns, count(*) OVER w AS cnt,
             arg_max(rank, start_ns) OVER w AS last_rank FROM i WINDOW w AS (PARTITION BY pg, kop, key)),
cr AS (SELECT rank, count(*) FILTER (WHERE cnt > 1) AS collectives,
              count(*) FILTER (WHERE cnt > 1 AND last_rank = rank AND last_ns > first_ns) AS last_arrivals,
              avg(start_ns - first_ns) FILTER (WHERE cnt > 1) / 1e3 AS mean_late_us,
              sum(end_ns - start_ns) / 1e3 AS comm_us, sum(bytes) AS comm_bytes,
              sum(bytes) / nullif(sum(end_ns - start_ns) FILTER (WHERE bytes IS NOT NULL), 0) AS comm_gbps
       FROM m GROUP BY rank),
st AS (SELECT rank, count(step) AS steps, sum(dur_ns) / 1e3 AS step_total_us, avg(dur_ns) / 1e3 AS step_mean_us,
              median(dur_ns) / 1e3 AS step_median_us, min(dur_ns) / 1e3 AS step_min_us, max(dur_ns) / 1e3 AS step_max_us,
              CASE WHEN count(step) > 0 AND avg(dur_ns) > 0 THEN 100.0 * (max(dur_ns) - min(dur_ns)) / avg(dur_ns) END
                  AS step_jitter_pct,
              sum(busy_ns) FILTER (WHERE {m}) / 1e3 AS device_busy_us,
              100.0 * sum(busy_ns) FILTER (WHERE {m}) / nullif(sum(dur_ns), 0) AS busy_pct
       FROM cluster_steps GROUP BY rank)
SELECT st.rank::BIGINT AS rank, steps::BIGINT AS steps, step_total_us::DOUBLE AS step_total_us,
       step_mean_us::DOUBLE AS step_mean_us, step_median_us::DOUBLE AS step_median_us,
       step_min_us::DOUBLE AS step_min_us, step_max_us::DOUBLE AS step_max_us,
       step_jitter_pct::DOUBLE AS step_jitter_pct, device_busy_us::DOUBLE AS device_busy_us,
       busy_pct::DOUBLE AS busy_pct, coalesce(cr.collectives, 0)::BIGINT AS collectives,
       coalesce(cr.last_arrivals, 0)::BIGINT AS last_arrivals, cr.mean_late_us::DOUBLE AS mean_late_us,
       coalesce(cr.comm_us, 0)::DOUBLE AS comm_us, cr.comm_bytes::BIGINT AS comm_bytes,
       cr.comm_gbps::DOUBLE AS comm_gbps, ws.world_size::BIGINT AS world_size
FROM st LEFT JOIN cr USING (rank)
LEFT JOIN (SELECT rank, max(world_size) AS world_size FROM cluster_ranks GROUP BY rank) ws USING (rank)
"""


def ranks_from_index(profile: Profile) -> SqlView | None:
    """The ``ranks`` view from the index on disk, when the profile was opened with one."""
    return SqlView(RANKS_SQL.replace("{m}", _device_measured(profile))) if from_index(profile) else None


#: The ``comm_overlap`` view (analysis/communication.py's columns) as one pass over the
#: index's steps, for the ranks that run collectives.
COMM_OVERLAP_SQL = """
SELECT rank::BIGINT AS rank, step::BIGINT AS step, dur_ns / 1e3 AS step_us, comm_ns / 1e3 AS comm_us,
       kernel_ns / 1e3 AS compute_us, overlap_ns / 1e3 AS overlap_us,
       100.0 * overlap_ns / nullif(comm_ns, 0) AS overlap_pct, exposed_ns / 1e3 AS exposed_us
FROM cluster_steps WHERE rank IN (SELECT DISTINCT rank FROM cluster_collectives)
"""


def comm_overlap_from_index(profile: Profile) -> SqlView | None:
    """The ``comm_overlap`` view from the index on disk, when the profile was opened with
    one that has the computation column (indexes written before it are recomputed)."""
    if not from_index(profile):
        return None
    return SqlView(COMM_OVERLAP_SQL) if _has_kernel_ns(profile) else None


def _has_kernel_ns(profile: Profile) -> bool:
    """Whether the steps of the cluster summaries have ``kernel_ns`` (indexes written
    before it do not)."""
    return "kernel_ns" in _steps_columns(profile)


def _device_measured(profile: Profile) -> str:
    """SQL: whether a row of the index's steps has its device columns measured (the
    rank has device work); an index written before ``device_measured`` says none, and
    its rows read as measured, as they did."""
    return "coalesce(device_measured, true)" if "device_measured" in _steps_columns(profile) else "true"


def _steps_columns(profile: Profile) -> set[str]:
    return {str(r[0]) for r in profile.con.execute("DESCRIBE cluster_steps").fetchall()}
