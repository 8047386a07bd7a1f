"""The devices a profile's ranks actually used (not every device the node reported)."""

from __future__ import annotations

from typing import Any

from ..store import Profile
from ..store.schema import DEVICE_KINDS


def devices_used(profile: Profile) -> list[dict[str, Any]]:
    """One record per (rank, device type, device index) that has device work (kernels,
    copies, sets, collectives), counters or allocator records in the profile, with the
    name and memory the trace's device properties give for it (null when they give
    none): a rank of an 8-GPU node that ran on one GPU lists one device. Sorted by
    rank, type and index."""
    kinds = ", ".join(f"'{k}'" for k in sorted(DEVICE_KINDS))
    rows = profile.sql(
        f"""
        SELECT rank, device_type, device, sum(n)::BIGINT AS records FROM (
            SELECT rank, device_type, device, count(*) AS n FROM events
            WHERE kind IN ({kinds}) AND device_type <> 'cpu' AND device IS NOT NULL AND device >= 0 GROUP BY ALL
            UNION ALL
            SELECT rank, device_type, device, count(*) FROM counters
            WHERE device_type <> 'cpu' AND device IS NOT NULL AND device >= 0 GROUP BY ALL
            UNION ALL
            SELECT rank, device_type, device, count(*) FROM memory
            WHERE device_type <> 'cpu' AND device IS NOT NULL AND device >= 0 GROUP BY ALL
        ) GROUP BY ALL ORDER BY ALL
        """
    ).to_pylist()
    return device_records(rows, profile.devices)


def device_records(rows: list[dict[str, Any]], devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`devices_used`'s records from its counts (rank, device_type, device,
    records; sorted) and the profile's device properties."""
    props = {(d.get("rank"), d.get("type"), d.get("index")): d for d in devices}
    out = []
    for r in rows:
        p = props.get((r["rank"], r["device_type"], r["device"])) or props.get(
            (None, r["device_type"], r["device"]), {}
        )
        out.append(
            {
                "rank": r["rank"],
                "type": r["device_type"],
                "index": r["device"],
                "name": p.get("name"),
                "memory_bytes": p.get("memory_bytes"),
                "records": r["records"],
            }
        )
    return out
