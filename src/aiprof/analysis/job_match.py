"""Whether two profiles come from the same job: the warnings of the compare page.

Two runs are compared as one job when their world size, their device models and
their operators agree. The model test is the share of operator names both runs have
(Jaccard of the distinct ``cpu_op`` names, or of kernel names where a run has no
operators): below :data:`MIN_SHARED_NAMES` the runs are taken to run different models.
"""

from __future__ import annotations

import re

from ..store import Profile
from .regression import device_names

#: Least share of operator (or kernel) names two runs of one model have in common.
MIN_SHARED_NAMES = 0.5
_COUNT = re.compile(r" \(x\d+\)$")


def world_size(profile: Profile) -> int:
    """The job's world size as recorded, else the number of ranks in the profile."""
    sizes = [int(m["world_size"]) for m in profile.metas if m.get("world_size")]
    if sizes:
        return max(sizes)
    return len({r for m in profile.metas for r in m.get("ranks", [])}) or 1


def device_models(profile: Profile) -> set[str]:
    """'type: name' of the devices used, without counts."""
    return {_COUNT.sub("", d) for d in device_names(profile)}


def _names(profile: Profile) -> set[str]:
    for kind in ("kind = 'cpu_op'", "kind IN ('kernel', 'collective') AND device_type <> 'cpu'"):
        t = profile.sql(f"SELECT DISTINCT name FROM events WHERE {kind} AND name IS NOT NULL")
        if t.num_rows:
            return {str(x) for x in t.column(0).to_pylist()}
    return set()


def shared_names(a: Profile, b: Profile) -> float | None:
    """Jaccard share of the two runs' operator (else kernel) names; None when neither has any."""
    na, nb = _names(a), _names(b)
    if not na and not nb:
        return None
    return len(na & nb) / len(na | nb)


def job_differences(a: Profile, b: Profile) -> list[str]:
    """One line per way B's job differs from A's (empty: the same job, as far as known)."""
    out: list[str] = []
    wa, wb = world_size(a), world_size(b)
    if wa != wb:
        out.append(f"world size differs: A {wa}, B {wb}")
    da, db = device_models(a), device_models(b)
    if any(d.endswith("(unnamed)") for d in da | db):  # an unnamed device: compare the types only
        da, db = {d.split(":")[0] for d in da}, {d.split(":")[0] for d in db}
    if da != db:
        out.append(f"devices differ: A {', '.join(sorted(da)) or 'none'}; B {', '.join(sorted(db)) or 'none'}")
    share = shared_names(a, b)
    if share is not None and share < MIN_SHARED_NAMES:
        out.append(f"the model looks different: {100 * share:.0f}% of operator names are shared")
    return out
