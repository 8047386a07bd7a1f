"""Write the rank files of one generated training job from a real Kineto trace.

Every rank is the template trace (a real PyTorch profiler output from ../shared/data)
re-timed on a per-rank clock, as the ranks of one synchronous job would be:

- between two collectives each rank runs the template's work at its own speed
  (bounded jitter of ``JITTER`` around 1.0; the straggler at ``STRAGGLER_SLOWDOWN``);
- a collective starts on each rank when that rank arrives and ends, on every rank of
  its process group, when the last one has arrived plus the transfer time (the
  template kernel's duration; twice that on the slow link: half the bandwidth);
- every third template collective runs on two-rank groups (0,1), (2,3)... (pipeline
  pairs), the others on the world group; each group counts its own sequence numbers,
  written as Kineto does (``Seq``, ``Process Group Name``/``Ranks``, ``Group size``);
- each rank's trace starts its clock elsewhere (``ts`` shifted, ``baseTimeNanoseconds``
  shifted back), so only wall-clock time lines ranks up; ``distributedInfo`` says
  rank, world size, backend and the process groups, the same job everywhere.

    python bench/make_fleet.py OUT_DIR --ranks 16 [--template FILE] [--steps-repeat K]

Importable: :func:`make_fleet` returns the :class:`Fleet` (files and planted faults).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "kineto"
#: Default template: rank 0 of a real 2-rank NCCL job on A100 (collectives with sizes).
TEMPLATE = DATA / "A100-nccl-parser" / "nccl_data.json.gz"
#: A smaller real template (ranks of a 128-rank job), for benchmarks with many ranks.
SMALL_TEMPLATE = DATA / "sampled-128-ranks" / "sampled_rank-0.json.gz"

#: Work between collectives runs at 1 +- JITTER of the template's speed on each rank.
JITTER = 0.01
#: The planted straggler computes this much slower (+20%).
STRAGGLER_SLOWDOWN = 1.2
#: The planted slow link moves data at this fraction of the others' bandwidth.
SLOW_LINK_BANDWIDTH = 0.5
#: Each rank's clock starts up to this far (µs) from the others'.
CLOCK_SHIFT_US = 500_000.0

_NCCL_RE = re.compile(r"^(void )?(nccl|rccl)", re.IGNORECASE)
_OP_RE = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)


@dataclass
class Fleet:
    """What was written and what was planted."""

    files: list[Path]
    ranks: int
    straggler: int
    slow_pair: tuple[int, int]
    pair_groups: list[tuple[int, int]] = field(default_factory=list)

    @property
    def slow_group(self) -> str:
        return pair_group_name(*self.slow_pair)


def pair_group_name(a: int, b: int) -> str:
    return f"pp{a}_{b}"


def load_template(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(
        gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    )
    return data


def _step_renumber(name: str, offset: int) -> str:
    head, sep, tail = name.rpartition("#")
    return f"{head}#{int(tail) + offset}" if sep and tail.isdigit() else name


def repeat_steps(events: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The template's events k times one after the other (steps renumbered), for longer jobs."""
    if k <= 1:
        return events
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur") or 0) for e in timed)
    span = t1 - t0
    nsteps = sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    out = list(events)
    for i in range(1, k):
        for e in events:
            if not isinstance(e.get("ts"), (int, float)):
                continue
            c = dict(e)
            c["ts"] = float(e["ts"]) + i * span
            if str(c.get("name", "")).startswith("ProfilerStep#"):
                c["name"] = _step_renumber(str(c["name"]), i * nsteps)
            if isinstance(c.get("args"), dict):
                a = dict(c["args"])
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        a[key] = a[key] + i * (1 << 32)
                c["args"] = a
            if c.get("ph") in ("s", "f") and isinstance(c.get("id"), int):
                c["id"] = c["id"] + i * (1 << 32)
            out.append(c)
    return out


def make_fleet(
    out: Path,
    ranks: int = 16,
    *,
    template: Path = TEMPLATE,
    straggler: int | None = None,
    slow_pair: tuple[int, int] | None = None,
    steps_repeat: int = 1,
    seed: int = 0,
    compresslevel: int = 1,
) -> Fleet:
    """Write ``ranks`` Kineto traces of one job under ``out`` (rank-<N>.pt.trace.json.gz)."""
    if ranks < 4 or ranks % 2:
        raise ValueError("a fleet needs an even number of ranks, at least 4")
    out.mkdir(parents=True, exist_ok=True)
    data = load_template(template)
    events: list[dict[str, Any]] = repeat_steps(list(data["traceEvents"]), steps_repeat)
    header = {k: v for k, v in data.items() if k != "traceEvents"}
    straggler = ranks // 3 if straggler is None else straggler
    if slow_pair is None:
        lo = ranks // 2 - (ranks // 2) % 2
        if lo == straggler - straggler % 2:  # keep the two faults apart
            lo = (lo + 2) % ranks
        slow_pair = (lo, lo + 1)
    pairs = [(a, a + 1) for a in range(0, ranks, 2)]
    rng = np.random.default_rng(seed)

    # Template times in µs, as floats; the base makes them wall-clock ns.
    ts = np.array([float(e["ts"]) if isinstance(e.get("ts"), (int, float)) else np.nan for e in events])
    dur = np.array([float(e.get("dur") or 0.0) if isinstance(e.get("dur"), (int, float)) else 0.0 for e in events])
    base_ns = header.get("baseTimeNanoseconds")
    t_min = float(np.nanmin(ts))
    if not isinstance(base_ns, int):
        # ts are wall-clock µs already: move them to a base, as newer Kineto writes.
        base_ns = int(t_min) * 1000
        ts = ts - int(t_min)
        t_min -= int(t_min)
    coll = [
        i
        for i, e in enumerate(events)
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and _NCCL_RE.match(str(e.get("name", "")))
    ]
    coll.sort(key=lambda i: ts[i])
    if not coll:
        raise ValueError(f"{template}: the template has no NCCL kernels")
    t_end = float(np.nanmax(ts + dur))

    # Per collective j: which groups run it; arrival and end times per rank.
    world = list(range(ranks))
    t_rank = t_min + rng.uniform(0.0, 20.0, ranks)  # ranks start within 20 µs
    scale = np.ones(ranks)
    scale[straggler] = STRAGGLER_SLOWDOWN
    knots_x = [t_min - 1.0]
    knots_y = [t_rank - 1.0]
    prev_end = t_min
    seqs: dict[str, int] = {}
    coll_info: list[tuple[str, list[int], int]] = []  # per collective: kind, members, seq
    coll_span: list[tuple[np.ndarray, np.ndarray]] = []  # per collective: start, end per rank
    for j, i in enumerate(coll):
        s, e = ts[i], ts[i] + dur[i]
        if s < prev_end:  # overlapping collectives in the template: serialise them
            s = prev_end
        e = max(e, s + 2e-3)
        work = (s - prev_end) * scale * (1.0 + rng.uniform(-JITTER, JITTER, ranks))
        arrive = t_rank + work
        end = np.empty(ranks)
        transfer = e - s
        is_pair = j % 3 == 2
        groups = [list(p) for p in pairs] if is_pair else [world]
        for g in groups:
            factor = 1.0 / SLOW_LINK_BANDWIDTH if is_pair and tuple(g) == slow_pair else 1.0
            end[g] = arrive[g].max() + transfer * factor
        name = "pp" if is_pair else "0"
        seqs[name] = seqs.get(name, 0) + 1
        coll_info.append(("pair" if is_pair else "world", world, seqs[name]))
        # Inside the collective the other streams keep their own pace; the rank then
        # idles until the collective ends (its kernel spans arrival to end).
        inner = np.minimum(arrive + transfer * scale, end - 1e-3)
        knots_x += [s, e, e + 1e-3]
        knots_y += [arrive, inner, end]
        coll_span.append((arrive, end))
        t_rank = end
        prev_end = e + 2e-3
    knots_x.append(t_end + 1.0)
    t_end = max(t_end, prev_end)
    knots_y.append(t_rank + (t_end + 1.0 - prev_end) * scale)
    kx = np.array(knots_x)
    ky = np.vstack(knots_y)  # knots x ranks

    files: list[Path] = []
    shift = rng.uniform(0.0, CLOCK_SHIFT_US, ranks) + 1_000_000.0
    pg_config = [
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": ranks, "ranks": world}
    ] + [
        {
            "pg_name": pair_group_name(a, b),
            "pg_desc": "pipeline",
            "backend_config": "cuda:nccl",
            "pg_size": 2,
            "ranks": [a, b],
        }
        for a, b in pairs
    ]
    coll_pos = {i: j for j, i in enumerate(coll)}
    device_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    is_device = np.array([str(e.get("cat", "")).lower() in device_cats for e in events])
    host_pid = {e.get("pid") for e in events if str(e.get("cat", "")).lower() in ("cpu_op", "cuda_runtime")}
    ok = ~np.isnan(ts)
    for r in range(ranks):
        y = np.interp(ts, kx, ky[:, r]) + shift[r]
        y_end = np.interp(ts + dur, kx, ky[:, r]) + shift[r]
        # Device work keeps its own length (scaled), never stretched over a wait.
        y_end = np.where(is_device, np.minimum(y_end, y + dur * scale[r]), y_end)
        dev = r % 8
        evs: list[dict[str, Any]] = []
        for idx, e in enumerate(events):
            c = dict(e)
            if ok[idx]:
                c["ts"] = round(float(y[idx]), 3)
                if "dur" in e:
                    c["dur"] = round(max(float(y_end[idx] - y[idx]), 0.0), 3)
            pid = c.get("pid")
            if pid in host_pid:
                c["pid"] = 100_000 + r
            elif isinstance(pid, int) and pid < 64:
                c["pid"] = dev
            a = c.get("args")
            if isinstance(a, dict) and "device" in a:
                a = dict(a)
                a["device"] = dev
                c["args"] = a
            j = coll_pos.get(idx)
            if j is not None:
                c["args"] = _collective_args(c, e, coll_info[j], r, ranks)
                c["ts"] = round(float(coll_span[j][0][r] + shift[r]), 3)
                c["dur"] = round(float(coll_span[j][1][r] - coll_span[j][0][r]), 3)
            evs.append(c)
        hdr = copy.deepcopy(header)
        hdr["baseTimeNanoseconds"] = int(base_ns - round(shift[r] * 1000))
        hdr["distributedInfo"] = {
            "backend": "nccl",
            "rank": r,
            "world_size": ranks,
            "pg_count": len(pg_config),
            "pg_config": pg_config,
            "nccl_version": "2.21.5",
        }
        if isinstance(hdr.get("deviceProperties"), list) and hdr["deviceProperties"]:
            props = dict(hdr["deviceProperties"][0])
            props["id"] = dev
            hdr["deviceProperties"] = [props]
        f = out / f"rank-{r}.pt.trace.json.gz"
        with gzip.open(f, "wb", compresslevel=compresslevel) as fh:
            fh.write(kineto_json(hdr, evs))
        files.append(f)
    return Fleet(files=files, ranks=ranks, straggler=straggler, slow_pair=slow_pair, pair_groups=pairs)


def kineto_json(header: dict[str, Any], events: list[dict[str, Any]]) -> bytes:
    """The trace as PyTorch writes it: header keys first (``"key": value`` with a space,
    which HTA's rank lookup expects), then one event per line."""
    head = json.dumps(header)[1:-1]
    body = b",\n".join(orjson.dumps(e) for e in events)
    return b"{" + head.encode() + b', "traceEvents": [\n' + body + b"\n]}"


def _collective_args(
    c: dict[str, Any], orig: dict[str, Any], info: tuple[str, list[int], int], r: int, n: int
) -> dict[str, Any]:
    kind, _, seq = info
    a = dict(c.get("args") or {})
    m = _OP_RE.search(str(orig.get("name", "")))
    op = (m.group(1) if m else "allreduce").lower()
    a.setdefault("Collective name", op)
    if "In msg nelems" not in a:
        # Sizes the template does not say: a fixed 16 Mi floats (64 MiB).
        a["In msg nelems"] = a["Out msg nelems"] = 1 << 24
        a["dtype"] = "Float"
    if kind == "pair":
        lo = r - r % 2
        a["Process Group Name"] = pair_group_name(lo, lo + 1)
        a["Process Group Description"] = "pipeline"
        a["Process Group Ranks"] = f"[{lo}, {lo + 1}]"
        a["Group size"] = 2
    else:
        a["Process Group Name"] = "0"
        a["Process Group Description"] = "default_pg"
        a["Process Group Ranks"] = "[" + ", ".join(str(i) for i in range(n)) + "]"
        a["Group size"] = n
    a["Seq"] = seq
    return a


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--template", type=Path, default=TEMPLATE)
    ap.add_argument("--steps-repeat", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    fl = make_fleet(args.out, args.ranks, template=args.template, steps_repeat=args.steps_repeat, seed=args.seed)
    print(f"wrote {len(fl.files)} ranks to {args.out}; straggler rank {fl.straggler}, slow link {fl.slow_pair}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
