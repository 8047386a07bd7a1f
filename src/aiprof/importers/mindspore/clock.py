"""The clocks of a MindSpore 1.x profiler folder, and the one relation that joins them.

Three clocks write the files of one folder:

- the device's 100 MHz system counter: ``step_trace_raw_N_detail_time.csv`` and the raw
  ``training_trace.*`` (ticks, 10 ns), ``output_format_data_hwts_N.txt``
  (``Cycle_counter``, the same ticks), ``aicpu_intermediate_N.csv`` and
  ``output_data_preprocess_aicpu_N.txt`` (``run_start`` / ``run_end``: µs of that counter,
  tick / 100);
- ``ascend_timeline_display_N.json``: µs from the timeline's own origin. MindSpore writes
  ``ts = (start - min_cycle_counter) x 1000`` with ``start`` the op's start in ms of the
  device counter and ``min_cycle_counter`` the earliest start it saw; it writes that
  minimum to ``min_cycle_counter_N.txt`` during the run but a copied ``profiler/``
  folder rarely holds it;
- ``device_queue_profiling_N.txt``: ms of the host's clock (``gettimeofday`` or
  ``steady_clock``), which no file of the folder ties to the device's.

The timeline's origin on the device counter is found from the spans both sides hold:
the timeline's AI CPU spans are the AI CPU file's rows (same op, ``run_start`` µs), and
its AI Core spans are the HWTS log's tasks (the framework file gives each op's stream
and task id, the HWTS ``Task_ID`` is ``stream_task``). The k-th span of one op (or task)
in the timeline is paired with its k-th run in the other file; every pair gives
``device ns - timeline ns``, and the value most pairs agree on (within 1 µs) is the
offset. In the real folder of the Ascend 910 test job all 112 pairs agree on
154,901,853,050,000 ns (the first AI CPU op's ``run_start``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import orjson

from ..ascend.tables import read_csv

#: Pairs whose offset differs from the others' by more than this are counted as disagreeing
#: (the timeline's µs are floats; MindSpore's ms -> µs product rounds in the last digits).
TOLERANCE_NS = 1_000


@dataclass(frozen=True)
class TimelineClock:
    """Where ts = 0 of a MindSpore timeline lies on the device counter (ns = tick x 10)."""

    offset_ns: int
    pairs: int
    agree: int
    via: tuple[str, ...]
    """The files the pairs came from."""


def _timeline_spans(path: Path) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """The timeline's span starts (ns) by AI CPU op name and by AI Core full op name."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}, {}
    aicpu: dict[str, list[int]] = defaultdict(list)
    aicore: dict[str, list[int]] = defaultdict(list)
    for e in doc if isinstance(doc, list) else []:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, name, args = e.get("ts"), e.get("name"), e.get("args")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not isinstance(name, str):
            continue
        ns = round(ts * 1000)
        if isinstance(args, dict) and "type" in args:
            if isinstance(args.get("fullname"), str):
                aicore[args["fullname"]].append(ns)
        else:
            aicpu[name].append(ns)
    return aicpu, aicore


def _aicpu_starts(path: Path, kind: str) -> dict[str, list[int]]:
    """AI CPU run starts (device ns) by op name, from the CSV or the text table."""
    out: dict[str, list[int]] = defaultdict(list)
    if kind == "aicpu":
        header, rows, _bad = read_csv(path)
        idx = {h.strip(): i for i, h in enumerate(header)}
        if "kernel_type" not in idx or "run_start" not in idx:
            return {}
        for r in rows:
            start = r[idx["run_start"]].strip()
            if start.isdigit() and len(start) < 20:
                out[r[idx["kernel_type"]].strip()].append(int(start) * 1000)
    else:
        from .text import parse_aicpu_text

        ops, _total, _bad = parse_aicpu_text(path.read_text(encoding="utf-8", errors="replace"))
        for o in ops:
            if len(o.run_start) < 20:
                out[o.op_type].append(int(o.run_start) * 1000)
    return out


def _hwts_starts(hwts: Path, framework: Path) -> dict[str, list[int]]:
    """HWTS task starts (device ns) by full op name, through the framework file's ids."""
    from .text import parse_hwts

    header, rows, _bad = read_csv(framework)
    idx = {h.strip(): i for i, h in enumerate(header)}
    if not {"task_id", "stream_id", "full_op_name"} <= idx.keys():
        return {}
    op_of = {f"{r[idx['stream_id']].strip()}_{r[idx['task_id']].strip()}": r[idx["full_op_name"]].strip() for r in rows}
    records, _bad = parse_hwts(hwts.read_text(encoding="utf-8", errors="replace"))
    out: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if r["type"] != "Start of task":
            continue
        task = str(r["task_id"])
        key = task if "_" in task else f"{r['stream_id']}_{task}"
        op = op_of.get(key)
        if op is not None:
            out[op].append(r["cycle"] * 10)
    return out


def _pair(timeline: dict[str, list[int]], device: dict[str, list[int]]) -> list[int]:
    offsets: list[int] = []
    for name, starts in timeline.items():
        for t, d in zip(sorted(starts), sorted(device.get(name, [])), strict=False):
            offsets.append(d - t)
    return offsets


def timeline_clock(timeline: Path, files: list[tuple[Path, str]]) -> TimelineClock | None:
    """The device-counter offset of ``timeline`` from the AI CPU and HWTS files among
    ``files`` ((path, kind) of the same rank), or None when no pair of spans ties them or
    the pairs do not agree (more than half within :data:`TOLERANCE_NS` of their median)."""
    aicpu_tl, aicore_tl = _timeline_spans(timeline)
    offsets: list[int] = []
    via: list[str] = []
    # The AI CPU CSV and text table hold the same ops: the first that pairs is enough.
    for p, k in files:
        if k in ("aicpu", "aicpu_text") and aicpu_tl:
            got = _pair(aicpu_tl, _aicpu_starts(p, k))
            if got:
                offsets += got
                via.append(p.name)
                break
    fw = [p for p, k in files if k == "framework"]
    for p, k in files:
        if k == "hwts" and fw and aicore_tl:
            got = _pair(aicore_tl, _hwts_starts(p, fw[0]))
            if got:
                offsets += got
                via += [p.name, fw[0].name]
    if not offsets:
        return None
    mid = median(offsets)
    agree = [o for o in offsets if abs(o - mid) <= TOLERANCE_NS]
    if 2 * len(agree) <= len(offsets):
        return None
    return TimelineClock(round(median(agree)), len(offsets), len(agree), tuple(via))
