"""Across-rank views, SQL over the cluster index (never over every rank's events).

Each view is an analyser (the common query applies inside DuckDB). Times in µs,
bandwidth in GB/s. On a profile without an index on disk, the index tables are
computed from its events first (:func:`.index.ensure`).

``straggler_steps`` (one row per rank and step)
    rank, step, step_us, compute_us (union of the rank's non-collective device work in
    the step; null on a rank without device work: not measured), work_us (the rank's
    own work in the step, what the others wait for: its compute_us where the device is
    measured, else its step less its waits for the other ranks, :data:`WORK_NS`; null
    where neither is measured), step_median_us, compute_median_us, work_median_us (over
    the ranks), step_z, compute_z, work_z (robust z-scores against the ranks of that
    step, see :data:`STRAGGLER_Z`; work_z is compute_z where the device is measured).

    In a synchronous job every rank's step lasts about as long as the slowest one's,
    so step_z cannot tell the straggler: the others' steps hold their wait for it. On
    ranks without device work that wait is measured on the host: DDP's waits in backward
    from the Python samples (the index's wait_ns, as the ``rank_waits`` view finds
    them), and the time in the collectives aiprof record writes (blocking calls: the
    index's exposed_ns); a rank's own work is its step less both. A robust z-score of
    two ranks is always +-0.6745 (the MAD is half their difference), so where a step
    has two ranks with work measured on the host, each is scored against the other
    rank, with the MAD floor (:data:`MAD_FLOOR` of the other's work) as the spread: a
    rank more than about 5% above the other is slow in that step.

``rank_steps`` (one row per rank and step)
    rank, step, step_us, compute_us (union of the compute kernels), copy_us (what the
    copies and memsets add to it; null in an index written before kernel_ns),
    exposed_comm_us (time with communication alone on the device: no computation and no
    copy under it), idle_us (step time with no device work); the four add up to step_us.
    All four are null on a rank without device work (not measured: the index's
    device_measured, overview.measured_ranks), as in the steps view.

``stragglers`` (one row per rank)
    rank, steps, step_us, compute_us, work_us (medians over the rank's steps), step_z,
    compute_z, work_z (medians over steps), slow_steps (steps with a step_z or work_z
    above :data:`STRAGGLER_Z`), slow_share, persistent (slow in at least
    :data:`PERSISTENT_SHARE` of its steps), lost_pct (mean share of the median step that
    the others wait for this rank's extra work, %; null where its work is not measured).

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
    (% of comm_us), exposed_pct (% of step_us), note (why a figure is null, or where it
    comes from on a rank without device work; null on device ranks). On a rank without
    device work comm_us is the time of its host-side collectives; the calls aiprof
    record writes block their thread (overlap 0, all exposed); torch.profiler's
    ``gloo:*`` ranges run beside the rank's work, whose overlap is not measured (null).
    A DDP rank without recorded collectives: null (not measured), with a note.
"""

from __future__ import annotations

from typing import Any

from ..analysis.base import SqlView, analyser
from ..analysis.rank_waits import DDP_COMM_NOTE
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


#: SQL: a step row's own work (ns) on a rank without device work: its step less its
#: waits for the others (DDP's, from the samples) and less its blocking host-side
#: collectives (exposed_ns); null where neither is measured. ``{wait}``: the wait column.
WORK_NS = (
    "CASE WHEN {wait} IS NOT NULL OR exposed_ns IS NOT NULL "
    "THEN greatest(dur_ns - coalesce({wait}, 0) - coalesce(exposed_ns, 0), 0) END"
)


def _step_z(profile: Profile) -> str:
    """The per rank and step z-scores (``straggler_steps``), for this profile's index."""
    m = _device_measured(profile)
    work = WORK_NS.replace("{wait}", "wait_ns" if "wait_ns" in _steps_columns(profile) else "NULL")
    floor = MAD_FLOOR
    return f"""
WITH s AS (SELECT rank, step, dur_ns, {m} AS measured, CASE WHEN {m} THEN compute_ns END AS compute_ns,
                  CASE WHEN {m} THEN compute_ns ELSE {work} END AS work_ns
           FROM cluster_steps WHERE step IS NOT NULL),
m AS (SELECT step, median(dur_ns) AS md, median(compute_ns) AS mc, median(work_ns) FILTER (WHERE NOT measured) AS mw,
             count(work_ns) FILTER (WHERE NOT measured) AS nw, sum(work_ns) FILTER (WHERE NOT measured) AS sw
      FROM s GROUP BY step),
d AS (SELECT s.*, md, mc, mw, nw, sw, sw - work_ns AS other FROM s JOIN m USING (step)),
mad AS (SELECT step, median(abs(dur_ns - md)) AS madd, median(abs(compute_ns - mc)) AS madc,
               median(abs(work_ns - mw)) FILTER (WHERE NOT measured) AS madw FROM d GROUP BY step),
z AS (SELECT d.*, 0.6745 * (dur_ns - md) / greatest(madd, {floor} * md, 1) AS step_z,
             0.6745 * (compute_ns - mc) / greatest(madc, {floor} * mc, 1) AS compute_z, madw
      FROM d JOIN mad USING (step))
SELECT rank::BIGINT AS rank, step::BIGINT AS step, dur_ns / 1e3 AS step_us, compute_ns / 1e3 AS compute_us,
       work_ns / 1e3 AS work_us, md / 1e3 AS step_median_us, mc / 1e3 AS compute_median_us,
       (CASE WHEN measured THEN mc ELSE mw END) / 1e3 AS work_median_us, step_z, compute_z,
       CASE WHEN measured THEN compute_z
            WHEN nw = 2 THEN 0.6745 * (work_ns - other) / greatest({floor} * other, 1)
            ELSE 0.6745 * (work_ns - mw) / greatest(madw, {floor} * mw, 1) END AS work_z
FROM z
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
    default_sort=("-work_z",),
    units={
        "step_us": "µs",
        "compute_us": "µs",
        "work_us": "µs",
        "step_median_us": "µs",
        "compute_median_us": "µs",
        "work_median_us": "µs",
    },
)
def straggler_steps(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per rank and step: its step time, compute and own work against the ranks'
    medians (robust z-scores); see aiprof.cluster.views for the columns."""
    ensure(profile)
    return SqlView(_step_z(profile))


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
    default_sort=("-work_z",),
    units={"step_us": "µs", "compute_us": "µs", "work_us": "µs", "lost_pct": "%"},
)
def stragglers(profile: Profile, params: dict[str, Any]) -> SqlView:
    """One row per rank: how often and by how much it is slower than the other ranks
    (robust z-scores per step of its own work), whether persistently, and the step
    share the job loses."""
    ensure(profile)
    return SqlView(
        f"""
        WITH z AS ({_step_z(profile)}),
        r AS (SELECT rank, count(*)::BIGINT AS steps, median(step_us) AS step_us, median(compute_us) AS compute_us,
                     median(work_us) AS work_us, median(step_z) AS step_z, median(compute_z) AS compute_z,
                     median(work_z) AS work_z,
                     count(*) FILTER (WHERE step_z > {STRAGGLER_Z} OR work_z > {STRAGGLER_Z})::BIGINT AS slow_steps,
                     -- greatest() skips a null: a rank whose work is not measured loses null, not 0
                     100.0 * avg(CASE WHEN work_us IS NOT NULL
                                 THEN greatest(work_us - work_median_us, 0) / nullif(step_median_us, 0) END) AS lost_pct
              FROM z GROUP BY rank)
        SELECT rank, steps, step_us, compute_us, work_us, step_z, compute_z, work_z, slow_steps,
               slow_steps / steps AS slow_share, slow_steps >= {PERSISTENT_SHARE} * steps AS persistent, lost_pct
        FROM r
        """
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
    what is left exposed, summed over the rank's steps (null where not measured, with a
    note saying why)."""
    ensure(profile)
    m = _device_measured(profile)
    return SqlView(
        f"""
        SELECT rank::BIGINT AS rank, count(step)::BIGINT AS steps, sum(dur_ns) / 1e3 AS step_us,
               sum(comm_ns) / 1e3 AS comm_us, sum(overlap_ns) / 1e3 AS overlap_us, sum(exposed_ns) / 1e3 AS exposed_us,
               100.0 * sum(overlap_ns) / nullif(sum(comm_ns), 0) AS overlap_pct,
               100.0 * sum(exposed_ns) / nullif(sum(dur_ns), 0) AS exposed_pct,
               CASE WHEN bool_or({m}) THEN NULL
                    WHEN count(comm_ns) = 0 THEN '{_sql_text(DDP_COMM_NOTE)}'
                    WHEN coalesce(sum(comm_ns), 0) = 0 THEN NULL
                    WHEN count(overlap_ns) = 0 THEN '{_sql_text(HOST_RANGES_NOTE)}'
                    ELSE '{_sql_text(HOST_CALLS_NOTE)}' END AS note
        FROM cluster_steps GROUP BY rank
        """
    )


#: The notes of the exposed_comm view on a rank without device work.
HOST_CALLS_NOTE = "host-side collectives (no device work): each call blocks its thread, all of it exposed"
HOST_RANGES_NOTE = "host-side gloo/nccl ranges (no device work): their overlap with the rank's work is not measured"


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


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
              100.0 * sum(busy_ns) FILTER (WHERE {m}) / nullif(sum(dur_ns), 0) AS busy_pct,
              count(comm_ns) > 0 AS comm_measured
       FROM cluster_steps GROUP BY rank)
SELECT st.rank::BIGINT AS rank, steps::BIGINT AS steps, step_total_us::DOUBLE AS step_total_us,
       step_mean_us::DOUBLE AS step_mean_us, step_median_us::DOUBLE AS step_median_us,
       step_min_us::DOUBLE AS step_min_us, step_max_us::DOUBLE AS step_max_us,
       step_jitter_pct::DOUBLE AS step_jitter_pct, device_busy_us::DOUBLE AS device_busy_us,
       busy_pct::DOUBLE AS busy_pct,
       CASE WHEN comm_measured THEN coalesce(cr.collectives, 0) END::BIGINT AS collectives,
       CASE WHEN comm_measured THEN coalesce(cr.last_arrivals, 0) END::BIGINT AS last_arrivals,
       cr.mean_late_us::DOUBLE AS mean_late_us,
       CASE WHEN comm_measured THEN coalesce(cr.comm_us, 0) END::DOUBLE AS comm_us, cr.comm_bytes::BIGINT AS comm_bytes,
       cr.comm_gbps::DOUBLE AS comm_gbps, ws.world_size::BIGINT AS world_size,
       CASE WHEN NOT comm_measured THEN '{ddp_note}' END AS note
FROM st LEFT JOIN cr USING (rank)
LEFT JOIN (SELECT rank, max(world_size) AS world_size FROM cluster_ranks GROUP BY rank) ws USING (rank)
"""


def ranks_from_index(profile: Profile) -> SqlView | None:
    """The ``ranks`` view from the index on disk, when the profile was opened with one."""
    if not from_index(profile):
        return None
    return SqlView(RANKS_SQL.replace("{m}", _device_measured(profile)).replace("{ddp_note}", _sql_text(DDP_COMM_NOTE)))


#: The ``comm_overlap`` view (analysis/communication.py's columns) as one pass over the
#: index's steps, for the ranks that run collectives on their device (HTA's overlap of
#: device collectives and kernels; ``{m}``: whether a step row's device is measured).
COMM_OVERLAP_SQL = """
SELECT rank::BIGINT AS rank, step::BIGINT AS step, dur_ns / 1e3 AS step_us, comm_ns / 1e3 AS comm_us,
       kernel_ns / 1e3 AS compute_us, overlap_ns / 1e3 AS overlap_us,
       100.0 * overlap_ns / nullif(comm_ns, 0) AS overlap_pct, exposed_ns / 1e3 AS exposed_us
FROM cluster_steps WHERE rank IN (SELECT DISTINCT rank FROM cluster_collectives) AND {m}
"""


def comm_overlap_from_index(profile: Profile) -> SqlView | None:
    """The ``comm_overlap`` view from the index on disk, when the profile was opened with
    one that has the computation column (indexes written before it are recomputed)."""
    if not from_index(profile):
        return None
    return SqlView(COMM_OVERLAP_SQL.replace("{m}", _device_measured(profile))) if _has_kernel_ns(profile) else None


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
