"""The rank files of one job: found in folders, given a rank each, checked to be one job.

Rank of a file: its trace's ``distributedInfo.rank``, else a number in its file name
(``rank-3``, ``rank3``, ``_3.json``), else its position among the inputs. The job
facts compared across ranks are those of ``distributedInfo`` that name the job:
``world_size``, ``backend`` and, where written, the process group configuration
and the NCCL version.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ImportFormatError

#: How much of a trace (decompressed) is searched for its header keys.
HEAD_BYTES = 4 << 20
#: distributedInfo keys that must agree for files to be ranks of one job.
JOB_KEYS = ("world_size", "backend", "pg_count", "nccl_version")
_TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_RE = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
_LAST_NUM_RE = re.compile(r"(\d+)(?!.*\d)")


@dataclass
class RankFile:
    path: Path
    rank: int
    how: str
    """Where the rank came from: distributedInfo, file name, or order."""
    dist: dict[str, Any] | None = None


@dataclass
class Job:
    files: list[RankFile]
    mixed: list[str] = field(default_factory=list)
    """What disagrees across the ranks' distributedInfo (empty: one job)."""


def expand(paths: list[Path]) -> list[Path]:
    """Inputs with folders of traces replaced by the trace files in them (sorted)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(
                c
                for c in p.iterdir()
                if c.is_file() and c.name.endswith(_TRACE_SUFFIXES) and not c.name.startswith(".")
            )
            if not found:
                raise ImportFormatError(f"{p}: a folder with no trace files (*.json, *.json.gz)")
            out.extend(found)
        else:
            out.append(p)
    return out


def read_head(path: Path, limit: int = HEAD_BYTES) -> bytes:
    with path.open("rb") as f:
        raw = f.read(limit)
    if raw[:2] == b"\x1f\x8b":
        try:
            return zlib.decompressobj(wbits=31).decompress(raw, limit)
        except zlib.error:
            with gzip.open(path, "rb") as g:
                return g.read(limit)
    return raw


def distributed_info(path: Path) -> dict[str, Any] | None:
    """The trace's ``distributedInfo`` object, when it is in the file's first
    ``HEAD_BYTES`` (decompressed). The head is read a step at a time until the object is
    whole: Kineto writes it before the events, so most files are read for 64 KiB, not
    decompressed to 4 MiB (the client reads every rank's file before the import)."""
    head = b""
    for head in _growing_head(path):
        found = _find_info(head)
        if found is not None:
            return found if isinstance(found, dict) else None
    return None


def _find_info(head: bytes) -> object | None:
    """The value after the first ``"distributedInfo"`` of ``head`` when it parses whole
    there (a dict, or False when it is no object), None when more of the file may tell."""
    i = head.find(b'"distributedInfo"')
    if i < 0:
        return None
    j = head.find(b"{", i)
    if j < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(head[j:].decode("utf-8", "replace"))
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else False


def _growing_head(path: Path, limit: int = HEAD_BYTES, step: int = 1 << 16) -> Iterator[bytes]:
    """Longer and longer heads of ``path`` (decompressed), the last ``read_head``'s."""
    with path.open("rb") as f:
        magic = f.read(2)
        if magic != b"\x1f\x8b":
            data = magic
            while True:
                more = f.read(min(step, limit - len(data)))
                data += more
                yield data
                if not more or len(data) >= limit:
                    return
        f.seek(0)
        d = zlib.decompressobj(wbits=31)
        data = b""
        taken = 0  # read_head reads at most ``limit`` compressed bytes
        try:
            while len(data) < limit:
                raw = f.read(min(step, limit - taken))
                taken += len(raw)
                if not raw:
                    break
                data += d.decompress(raw, limit - len(data))
                yield data
                while d.unconsumed_tail and len(data) < limit:
                    data += d.decompress(d.unconsumed_tail, limit - len(data))
                    yield data
                if d.eof:
                    break
        except zlib.error:
            yield read_head(path, limit)


def job_facts(dist: dict[str, Any] | None) -> dict[str, Any] | None:
    """What of a distributedInfo is kept per rank: its rank, the job keys, and the process
    groups as a digest (a 1,024-rank job's pg_config is large; the client keeps 1,024)."""
    if dist is None:
        return None
    out = {k: dist[k] for k in ("rank", *JOB_KEYS) if k in dist}
    if "pg_config" in dist:
        text = json.dumps(_groups(dist["pg_config"]), sort_keys=True)
        out["pg_config"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def rank_from_name(path: Path) -> int | None:
    name = path.name
    m = _RANK_RE.search(name)
    if m:
        return int(m.group(1))
    m = _LAST_NUM_RE.search(name.split(".")[0])
    return int(m.group(1)) if m else None


def plan(paths: list[Path]) -> Job:
    """Rank every file and compare their job facts. Duplicate ranks are an error."""
    files: list[RankFile] = []
    named = [rank_from_name(p) for p in paths]
    use_names = all(n is not None for n in named) and len(set(named)) == len(named)
    for i, p in enumerate(paths):
        dist = job_facts(distributed_info(p))
        if dist is not None and isinstance(dist.get("rank"), int):
            files.append(RankFile(p, int(dist["rank"]), "distributedInfo", dist))
        elif use_names and named[i] is not None:
            files.append(RankFile(p, int(named[i] or 0), "file name", dist))
        else:
            files.append(RankFile(p, i, "order", dist))
    seen: dict[int, Path] = {}
    for f in files:
        if f.rank in seen:
            raise ImportFormatError(f"rank {f.rank} twice: {seen[f.rank]} and {f.path} (by {f.how}); one file per rank")
        seen[f.rank] = f.path
    return Job(sorted(files, key=lambda f: f.rank), mixed=disagreements(files))


def disagreements(files: list[RankFile]) -> list[str]:
    """One line per job fact that differs across the ranks that state it."""
    out: list[str] = []
    for key in (*JOB_KEYS, "pg_config"):
        values: dict[str, list[int]] = {}
        for f in files:
            if f.dist is None or key not in f.dist:
                continue
            v = f.dist[key]
            text = json.dumps(v, sort_keys=True)
            values.setdefault(text, []).append(f.rank)
        if len(values) > 1:
            parts = [f"{_short(v)} on rank(s) {_ranks(r)}" for v, r in values.items()]
            out.append(f"{key}: " + "; ".join(parts))
    return out


def _groups(pg_config: Any) -> Any:
    """The process groups as a comparable value (names and ranks, in any order)."""
    if not isinstance(pg_config, list):
        return pg_config
    return sorted([str(g.get("pg_name")), g.get("ranks")] if isinstance(g, dict) else [str(g), None] for g in pg_config)


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _ranks(r: list[int]) -> str:
    return ", ".join(map(str, r[:8])) + (f" (+{len(r) - 8})" if len(r) > 8 else "")
