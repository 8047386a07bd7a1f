"""``aiprof export --format speedscope``: the Python stack samples in speedscope's file
format (https://www.speedscope.app/file-format-schema.json, "sampled" profiles), one
profile per thread, samples in time order, each weighted by the sampling interval (ns).
Open the file in speedscope (its Time Order, Left Heavy and Sandwich views).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from .. import __version__
from ..analysis.common import fetch
from ..errors import AiprofError
from ..store import Profile
from .samples import StackTable, sampling_interval_ns, thread_names

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope_document(profile: Profile, name: str = "aiprof") -> dict[str, Any]:
    """The speedscope file as a dict: shared.frames, one sampled profile per thread."""
    got = fetch(profile, "SELECT rank, pid, tid, ts, stack_id FROM samples ORDER BY rank, pid, tid, ts")
    if len(got["ts"]) == 0:
        raise AiprofError("the profile has no Python stack samples (record with aiprof record, Python sampling on)")
    table = StackTable(profile)
    interval = max(1, sampling_interval_ns(profile))
    names = thread_names(profile)
    profiles: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    key: tuple[int, int, int] | None = None
    for r, p, t, ts, leaf in zip(
        got["rank"].tolist(), got["pid"].tolist(), got["tid"].tolist(), got["ts"].tolist(), got["stack_id"].tolist()
    ):
        if (r, p, t) != key:
            key = (r, p, t)
            label = names.get(key) or f"thread {t}"
            cur = {
                "type": "sampled",
                "name": f"rank {r} · pid {p} · {label}",
                "unit": "nanoseconds",
                "startValue": ts,
                "endValue": ts,
                "samples": [],
                "weights": [],
            }
            profiles.append(cur)
        assert cur is not None
        sid = table.stack(r, leaf)
        if sid < 0:
            continue
        cur["samples"].append(table.stacks[sid])
        cur["weights"].append(interval)
        cur["endValue"] = ts + interval
    profiles = [pr for pr in profiles if pr["samples"]]
    for pr in profiles:
        pr["endValue"] = max(pr["endValue"], pr["startValue"] + sum(pr["weights"]))
    frames = [{"name": f["name"], "file": f["file"]} if f["file"] else {"name": f["name"]} for f in table.frames]
    return {
        "$schema": SCHEMA,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": name,
        "activeProfileIndex": 0,
        "exporter": f"aiprof {__version__}",
    }


def write_speedscope(profile: Profile, path: str | os.PathLike[str], name: str = "aiprof") -> dict[str, int]:
    """Write the speedscope file (atomically); returns counts: profiles, samples, frames."""
    doc = speedscope_document(profile, name)
    out = Path(path)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_bytes(orjson.dumps(doc))
    os.replace(tmp, out)
    return {
        "profiles": len(doc["profiles"]),
        "samples": sum(len(p["samples"]) for p in doc["profiles"]),
        "frames": len(doc["shared"]["frames"]),
    }
