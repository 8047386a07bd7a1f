"""Graphcore PopVision profiles (``profile.pop``), read through Graphcore's libpva.

No public description of the ``.pop`` format exists, so aiprof does not parse it
itself: it reads it only through the PopVision Analysis Library (the ``pva`` Python
module that ships with the Poplar SDK). Without that library the import stops with a
one-line message saying so. What is imported when it is present:

- each execution step on each IPU -> an event of kind ``kernel`` on device_type
  ``ipu`` (device = IPU id), named after the step's program, placed by cycle counts
  converted to ns with the target's clock frequency;
- the target (IPU count, tiles, clock, Poplar version) -> the device records;
- memory per tile (including gaps) -> a ``tile_memory`` counter per tile at ts 0.

The field names used are those of libpva's documented Python API
(``report.execution.steps``, ``step.program.name``, ``step.ipus[i].cycles``,
``report.compilation.target``); anything missing is skipped with a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ImportFormatError
from .base import Detection, ImportContext, Importer, no, yes

NAME = "popvision"
#: Used when the report does not say (the IPU's nominal clock, Hz).
DEFAULT_CLOCK_HZ = 1.33e9


def _target(path: Path) -> Path:
    return path / "profile.pop" if path.is_dir() else path


def _detect(path: Path) -> Detection:
    p = _target(path)
    if p.suffix == ".pop" and p.is_file():
        return yes("a PopVision .pop report")
    return no("not a .pop file (PopVision reports are read only through libpva, by name)")


def load_pva() -> Any:
    """The ``pva`` module, or a clear error saying how to get it."""
    try:
        import pva  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ImportFormatError(
            "reading a PopVision profile.pop needs Graphcore's PopVision Analysis Library (the 'pva' "
            "module of the Poplar SDK), which is not installed; enable the Poplar SDK and retry"
        ) from None
    return pva


def _load(path: Path, ctx: ImportContext, pva: Any | None = None) -> None:
    pva = pva if pva is not None else load_pva()
    p = _target(path)
    try:
        report = pva.openReport(str(p))
    except Exception as e:
        raise ImportFormatError(f"{p}: libpva could not open it: {e}") from None
    target = getattr(getattr(report, "compilation", None), "target", None)
    clock = float(getattr(target, "clockFrequency", 0) or 0) or DEFAULT_CLOCK_HZ
    if not getattr(target, "clockFrequency", None):
        ctx.warn(f"{p.name}: the report gives no clock frequency; cycles converted at {DEFAULT_CLOCK_HZ / 1e9} GHz")
    version = getattr(getattr(report, "poplarVersion", None), "string", None)
    n_ipus = int(getattr(target, "numIPUs", 0) or 0)
    tiles = getattr(target, "numTiles", None)
    meta = ctx.writer.meta
    for i in range(max(n_ipus, 1)):
        meta["devices"].append(
            {
                "rank": 0,
                "type": "ipu",
                "index": i,
                "name": "Graphcore IPU",
                "vendor": "Graphcore",
                "tiles": tiles,
                "clock_hz": clock,
                "poplar_version": version,
            }
        )
    ctx.origin(0)
    rows: dict[str, list[Any]] = {k: [] for k in ("device", "tid", "name", "ts", "dur", "args")}
    cursor: dict[int, int] = {}
    steps = list(getattr(getattr(report, "execution", None), "steps", []) or [])
    if not steps:
        ctx.warn(f"{p.name}: the report holds no execution steps (was execution profiling on?)")
    for n, step in enumerate(steps):
        prog = getattr(getattr(step, "program", None), "name", None) or f"step {n}"
        for ipu_i, ipu in enumerate(getattr(step, "ipus", []) or []):
            dev = int(getattr(ipu, "id", ipu_i))
            cycles = int(getattr(ipu, "cycles", 0) or 0)
            start_cycle = getattr(ipu, "startCycle", None)
            start = int(start_cycle / clock * 1e9) if start_cycle is not None else cursor.get(dev, 0)
            dur = int(cycles / clock * 1e9)
            cursor[dev] = start + dur
            rows["device"].append(dev)
            rows["tid"].append(0)
            rows["name"].append(str(prog))
            rows["ts"].append(start)
            rows["dur"].append(dur)
            rows["args"].append(f'{{"cycles": {cycles}, "step_index": {n}}}')
    if rows["name"]:
        k = len(rows["name"])
        ctx.writer.append(
            "events",
            {
                **rows,
                "rank": [0] * k,
                "device_type": ["ipu"] * k,
                "pid": rows["device"],
                "kind": ["kernel"] * k,
                "cat": ["popvision"] * k,
            },
        )
        ctx.kinds["kernel"] += k
    tile_list = list(getattr(getattr(report, "compilation", None), "tiles", []) or [])
    if tile_list:
        values = []
        for t in tile_list:
            total = getattr(getattr(getattr(t, "memory", None), "total", None), "includingGaps", None)
            values.append(float(total) if total is not None else None)
        kept = [(i, v) for i, v in enumerate(values) if v is not None]
        ctx.writer.append(
            "counters",
            {
                "rank": [0] * len(kept),
                "device_type": ["ipu"] * len(kept),
                "device": [0] * len(kept),
                "ts": [0] * len(kept),
                "metric": [f"tile_memory.tile{i}" for i, _ in kept],
                "value": [v for _, v in kept],
                "unit": ["bytes"] * len(kept),
            },
        )
        ctx.tables["counters"] += len(kept)
    meta["time_origin_ns"], meta["clock"] = 0, "trace"
    ctx.writer.add_source(NAME, p, poplar_version=version)


IMPORTER = Importer(
    name=NAME,
    description="Graphcore PopVision profile.pop, through libpva (the Poplar SDK's pva module) only",
    detect=_detect,
    load=lambda path, ctx: _load(path, ctx),
    patterns=("*.pop",),
)
