"""Which events a timeline draws, and the span each rank covers: one rule, read by the
web timeline (its tracks and window) and kept per rank in the cluster index
(cluster/summary.py), so a job's page spans what its ranks' timelines span."""

from __future__ import annotations

from .reader import Profile

#: An event that only carries a flow (a Kineto ``ph: s/f`` arrow end): not drawn as a
#: slice, and no part of any span.
FLOW_SQL = "(kind = 'other' AND dur = 0 AND starts_with(args, '{\"ph\":'))"

#: Per rank, the first and last ns the timeline covers: its drawable events (flows left
#: out; an event's end, its dur floored at 0), samples, counters and allocator records.
SPAN_BY_RANK_SQL = f"""
SELECT rank, min(lo) AS lo, max(hi) AS hi FROM (
  SELECT rank, min(ts) AS lo, max(ts + greatest(dur, 0)) AS hi FROM events
  WHERE NOT coalesce({FLOW_SQL}, FALSE) GROUP BY rank
  UNION ALL SELECT rank, min(ts), max(ts) FROM samples GROUP BY rank
  UNION ALL SELECT rank, min(ts), max(ts) FROM counters GROUP BY rank
  UNION ALL SELECT rank, min(ts), max(ts) FROM memory GROUP BY rank
) WHERE lo IS NOT NULL GROUP BY rank ORDER BY rank
"""


def spans_by_rank(profile: Profile) -> dict[int, tuple[int, int]]:
    """{rank: (first, last) ns on the profile's axis} by the timeline's rule (its span is
    their min and max): what the cluster index keeps per rank."""
    rows = profile.con.execute(SPAN_BY_RANK_SQL).fetchall()
    return {int(r): (int(lo), int(hi)) for r, lo, hi in rows}
