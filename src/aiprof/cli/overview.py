"""The overview ``aiprof report PROFILE`` prints, and its summary kept in the profile.

The overview is computed once (its views and the advice: ~2 s on a 70k-event trace,
most of a report) into a list of printable items: lines of rich markup and tables of
formatted cells. A profile folder keeps them in ``overview.json`` beside its tables,
keyed by profile.json's content and this aiprof's code (version, and its files' sizes
and times), so the next
``aiprof report PROFILE`` prints them without opening the store: no DuckDB, Arrow or
NumPy import, a few tens of ms after Python's start. A profile whose profile.json
changed (``aiprof import OLD.aiprof`` upgrades it), or a summary written by another
aiprof, is computed again; a folder that cannot be written is computed each time.

Only this module's reader runs on the fast path: it imports json, hashlib and rich.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__

if TYPE_CHECKING:
    import pyarrow as pa

    from ..store import Profile

SUMMARY_FILE = "overview.json"
#: Bumped whenever the items, or a rule that makes them, change.
SUMMARY_VERSION = 8
#: Ranks up to which the overview names each input and prints each rank's tables; past
#: it (a job of many ranks), one table of each kind over all of them.
RANK_TABLES = 8

Item = dict[str, Any]
#: A table column: name, justify, overflow (None: rich's default), max width.
Col = tuple[str, str, str | None, int | None]


# -- the summary file ------------------------------------------------------------------


def _code_stamp() -> str:
    """The aiprof package's Python files by name, size and mtime: a summary made by other
    code (an edited checkout, another install of the same version) is not reused."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("node_modules", "__pycache__") and not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(".py"):
                st = os.stat(os.path.join(dirpath, f))
                h.update(f"{dirpath}/{f}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _key(meta_bytes: bytes) -> str:
    h = hashlib.sha256(meta_bytes)
    h.update(f"\0{__version__}\0{SUMMARY_VERSION}\0{_code_stamp()}".encode())
    return h.hexdigest()


def _meta_bytes(folder: Path) -> bytes | None:
    try:
        return (folder / "profile.json").read_bytes()
    except OSError:
        return None


def read_summary(folder: Path) -> list[Item] | None:
    """The overview's items kept in ``folder``, when they were made from its current
    profile.json by this aiprof; else None."""
    meta = _meta_bytes(folder)
    if meta is None:
        return None
    try:
        doc = json.loads((folder / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != _key(meta) or not isinstance(doc.get("items"), list):
        return None
    items: list[Item] = doc["items"]
    return items


def write_summary(folder: Path, meta: bytes, items: list[Item]) -> bool:
    """Keep ``items`` in ``folder`` (whole or not at all); False when it cannot be written."""
    tmp = folder / f".{SUMMARY_FILE}.tmp-{os.getpid()}"
    try:
        tmp.write_text(json.dumps({"key": _key(meta), "items": items}))
        os.replace(tmp, folder / SUMMARY_FILE)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False
    return True


def single_profile(paths: tuple[str, ...]) -> Path | None:
    """The one profile folder named by ``paths`` (store.is_profile's test, without
    importing the store), else None."""
    if len(paths) != 1:
        return None
    p = Path(paths[0])
    return p if p.is_dir() and (p / "profile.json").is_file() and not (p / "cluster" / "index.json").exists() else None


# -- computing the items -----------------------------------------------------------------


def _line(text: str, highlight: bool = True) -> Item:
    return {"t": "line", "text": text, "highlight": highlight}


#: Where a hint line names the profile: the printer puts the path the user gave there
#: (the kept items do not depend on it). Only lines made by :func:`_hint` (marked
#: ``"path"``) are filled, and those hold fixed text only: a kernel, file or warning
#: that happens to hold the word PROFILE is printed as it is.
PATH_SLOT = "PROFILE"


def _hint(text: str) -> Item:
    """A line of rich markup, fixed text naming the profile as :data:`PATH_SLOT` (no
    name from the profile: every PATH_SLOT in it is filled when printed)."""
    return {"t": "line", "text": text, "highlight": True, "path": True}


def _table(title: str, cols: list[Col], rows: list[list[str]], plain: bool) -> Item:
    """A table; ``plain``: cells are shown as text (no markup), as rich.text.Text."""
    return {"t": "table", "title": title, "cols": [list(c) for c in cols], "rows": rows, "plain": plain}


def _split(title: str, rows: list[dict[str, Any]]) -> Item:
    from ..render.terminal import format_cell

    cols: list[Col] = [("category", "left", None, None), ("time (µs)", "right", None, None), ("%", "right", None, None)]
    cells = [[r["category"], format_cell(r["time_us"]), format_cell(r["percent"])] for r in rows]
    return _table(title, cols, cells, plain=False)


def _top(table: pa.Table, title: str, cols: list[str], ranks: int = 1) -> Item:
    """A top-N table of ``cols``, led by its rows' rank in a profile of several ``ranks``."""
    from ..render.terminal import format_cell

    if ranks > 1 and "rank" in table.column_names:
        cols = ["rank", *cols]
    spec: list[Col] = []
    for c in cols:
        text = c in ("name", "function")
        spec.append((c, "left" if text else "right", "fold", 70 if text else None))
    rows = [[format_cell(v) for v in row.values()] for row in table.select(cols).to_pylist()]
    return _table(title, spec, rows, plain=True)


def _device_label(d: dict[str, Any]) -> str:
    """A device's name, else its type and index (an SMI log names no model): never "None"."""
    if d.get("name"):
        return str(d["name"])
    return " ".join(str(d[k]) for k in ("type", "index") if d.get(k) is not None) or "unnamed device"


def compute_items(prof: Profile) -> list[Item]:
    """The overview of an opened profile, after its header line (which names the paths
    as given): profile facts, the all-steps split, device time, advice, top tables."""
    from rich.markup import escape

    from ..analysis import Query, run

    items: list[Item] = []
    metas = prof.metas
    ranks = sorted({r for m in metas for r in m.get("ranks", [])})
    srcs = [s for m in metas for s in m.get("sources", [])]
    if srcs:
        names = [f"{s.get('importer')}:{s.get('path', '').rsplit('/', 1)[-1]}" for s in srcs]
        if len(names) > RANK_TABLES:
            names = [*names[:3], f"... and {len(names) - 3:,} more"]
        items.append(_line("sources: " + escape(", ".join(names))))
    labels = ", ".join(sorted({_device_label(d) for d in prof.devices})) or "-"
    items.append(_line(escape(f"ranks: {ranks_text(ranks)}   devices: " + labels)))
    for w in prof.warnings:
        items.append(_line(f"[yellow]warning:[/yellow] {escape(w)}"))
    if any(m.get("partial") for m in metas):
        items.append(_line("[yellow]this profile is partial: the recording or file was cut short[/yellow]"))
    ov = run(prof, "overview", Query()).table.to_pylist()
    st = run(prof, "steps", Query()).table
    items.append(_line(escape(steps_line(metas, st.to_pylist()))))
    if prof.tables.get("kernel_metrics"):
        has_steps = any(r["step"] is not None for r in st.to_pylist())
        items.extend(_vendor_steps(prof, 0 if has_steps else prof.tables.get("events", 0)))
    energy = _energy(prof)
    items.extend(energy)
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for r in ov:
        by_rank.setdefault(r["rank"], []).append(r)
    # HTA's window leaves a rank's last step out where it has two or more.
    steps_of: dict[int, int] = {}
    for r in st.to_pylist():
        if r["step"] is not None:
            steps_of[r["rank"]] = steps_of.get(r["rank"], 0) + 1
    if len(by_rank) > RANK_TABLES:
        items.extend(
            _across_ranks(by_rank, last_step_out=any(n >= 2 for n in steps_of.values()), no_steps=not steps_of)
        )
    else:
        for rank in sorted(by_rank):
            items.extend(
                _rank_tables(
                    rank, by_rank[rank], last_step_out=steps_of.get(rank, 0) >= 2, no_steps=rank not in steps_of
                )
            )
    from ..analysis import operators

    # On a big profile the operators view (and the advice, which reads it and the other
    # event views) takes minutes and GiBs: the report says so and moves on.
    spans = operators.big_profile(metas)
    big = spans is not None
    if big:
        items.append(
            _hint(
                f"[dim]top advice: left out of the report on a profile this size ({spans:,} host spans); "
                f"aiprof advise {PATH_SLOT} computes it (minutes)[/dim]"
            )
        )
    else:
        items.extend(_advice(prof, of="step time" if steps_of else "the profiled time"))
    top = run(prof, "kernels", Query.parse([], "-total_us", 5)).table
    if top.num_rows:
        items.append(_top(top, "top kernels by total time", ["name", "count", "total_us", "pct"]))
    measured = {r["category"] for r in ov if r["section"] in ("breakdown", "utilization") and r["time_us"] is not None}
    operators_there = "cpu_exec" in measured  # the operators view's rows, where it is not computed
    if big:
        items.append(
            _hint(
                "[dim]top operators: left out for the same reason; "
                f"aiprof report {PATH_SLOT} --view operators computes them (minutes)[/dim]"
            )
        )
    else:
        ops = run(prof, "operators", Query.parse([], "-host_self_us", 5)).table
        operators_there = bool(ops.num_rows)
        if ops.num_rows and "host_self_us" in ops.column_names:
            cols = ["name", "calls", "host_self_us", "device_total_us"]
            if ops.column("device_total_us").null_count == ops.num_rows:
                cols.pop()  # no device work in the profile: not measured, left out
            items.append(_top(ops, "top operators by host self time", cols))
    if prof.tables.get("samples"):
        py = run(prof, "python", Query.parse([], "-self_samples", 5)).table
        if py.num_rows:
            items.append(
                _top(
                    py,
                    "top Python functions by sampled self time",
                    ["function", "self_pct", "self_us", "total_pct"],
                    ranks=len(ranks),
                )
            )
    # The views worth a look in this profile: those its data fills.
    more = ["steps"]
    more += ["phases", "phase_hotspots", "python"] if prof.tables.get("samples") else []
    more += ["operators"] if operators_there else []
    more += ["kernels", "idle"] if top.num_rows or "device_busy" in measured else []
    more += ["memory"] if prof.tables.get("memory") else []
    more += ["counters"] if prof.tables.get("counters") else []
    more += ["energy"] if energy else []
    items.append(_hint(f"[dim]more: aiprof report {PATH_SLOT} --view {'|'.join([*more, 'events'])}[/dim]"))
    return items


#: The breakdown's title: of the steps, or of the whole profile where a rank has none.
STEP_BREAKDOWN = "step time breakdown (all steps)"
WHOLE_RUN_BREAKDOWN = "time breakdown over the whole profile (no steps found)"
#: Where a rank has no steps, its phases cover its whole run (analysis/phases.py).
WHOLE_RUN_PHASES = "phases over the whole run (no steps found; from Python samples)"
#: Under a phase table that has a startup row.
STARTUP_NOTE = (
    "[dim]startup: samples under an import (import torch, a library's lazy import), "
    f"not a phase of the work; aiprof report {PATH_SLOT} --view phase_hotspots names their lines[/dim]"
)


def _rank_tables(
    rank: int, rows: list[dict[str, Any]], last_step_out: bool = False, no_steps: bool = False
) -> list[Item]:
    """One rank's overview tables: its step time split (by category, or by phase from
    the Python samples; ``no_steps``: the rank has no steps, the phases cover its whole
    run) and its device time (``last_step_out``: its active span leaves the last step
    out, which a line under the table says)."""
    from ..render.terminal import format_cell

    items: list[Item] = []
    mine = [r for r in rows if r["step"] is None]
    bd = [r for r in mine if r["section"] == "breakdown" and r["time_us"] is not None]
    unmeasured = [r["category"] for r in mine if r["section"] == "breakdown" and r["time_us"] is None]
    ph = [r for r in mine if r["section"] == "phases"]
    # Without operator events the breakdown is all "other" (or not measured at all):
    # the phases say more.
    if bd and (not ph or any(r["time_us"] for r in bd if r["category"] != "other")):
        items.append(_split(f"rank {rank}: " + (WHOLE_RUN_BREAKDOWN if no_steps else STEP_BREAKDOWN), bd))
        if unmeasured:
            items.append(_line(f"[dim]not measured in this profile, so left out: {', '.join(unmeasured)}[/dim]"))
    if ph:
        title = f"rank {rank}: " + (
            WHOLE_RUN_PHASES if no_steps else "step time by phase (all steps, from Python samples)"
        )
        items.append(_split(title, [r for r in ph if r["time_us"]]))
        if any(r["category"] == "startup" and r["time_us"] for r in ph):
            items.append(_startup_note())
    dev = [r for r in rows if r["section"] in ("device", "utilization")]
    if dev and not any(r["time_us"] for r in dev):
        # A host-only recording: a table of zeros would read as an idle device.
        items.append(_line(f"rank {rank}: no device activity in the profile"))
    elif dev:
        cols: list[Col] = [("figure", "left", None, None), *_right("time (µs)", "%")]
        cells = [
            [
                (
                    "busy (of profiled time)"
                    if no_steps and r["category"] == "device_busy"
                    else _DEVICE_FIGURE.get(r["category"], f"{r['category']} (of active span)")
                ),
                format_cell(r["time_us"]),
                format_cell(r["percent"]),
            ]
            for r in dev
        ]
        items.append(_table(f"rank {rank}: device time", cols, cells, plain=False))
        if last_step_out:
            items.append(_line(ACTIVE_SPAN_NOTE))
    return items


def _startup_note() -> Item:
    return _hint(STARTUP_NOTE)


_DEVICE_FIGURE = {"device_busy": "busy (of step time)"}
#: What "active span" means where a rank has two or more steps (analysis/common.py:
#: hta_device_window_sql): said under the device figures, which otherwise read as the
#: whole trace's.
ACTIVE_SPAN_NOTE = (
    "[dim]active span: the device's first operation to its last one launched before the last step "
    "(Holistic Trace Analysis's window: the profiler usually cuts the last step short); "
    "the step time split covers every step[/dim]"
)


def ranks_text(ranks: list[int]) -> str:
    """The ranks as runs of consecutive numbers: "0-1023 (1,024 ranks)", "[0]", "-"."""
    if len(ranks) <= RANK_TABLES:
        return str(ranks) if ranks else "-"
    runs: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return f"{', '.join(runs)} ({len(ranks):,} ranks)"


def _right(*names: str) -> list[Col]:
    return [(n, "right", None, None) for n in names]


def _across_ranks(
    by_rank: dict[int, list[dict[str, Any]]], last_step_out: bool = False, no_steps: bool = False
) -> list[Item]:
    """A job of many ranks: each split of the step time summed over the ranks, with the
    spread of a rank's own figure (median, and the largest with its rank), and each
    device figure's share as its median and range over the ranks (``no_steps``: no rank
    has steps, the phases cover the whole run); then where each rank's own tables are."""
    import numpy as np

    from ..render.terminal import format_cell

    n = len(by_rank)
    out: list[Item] = []
    whole = {rank: [r for r in rows if r["step"] is None] for rank, rows in by_rank.items()}
    for section, title in (
        ("breakdown", WHOLE_RUN_BREAKDOWN if no_steps else STEP_BREAKDOWN),
        ("phases", WHOLE_RUN_PHASES if no_steps else "step time by phase (all steps, from Python samples)"),
    ):
        per: dict[str, dict[int, float]] = {}
        for rank, rows in whole.items():
            for r in rows:
                if r["section"] == section and r["time_us"] is not None:  # null: not measured
                    per.setdefault(r["category"], {})[rank] = float(r["time_us"])
        total = sum(sum(v.values()) for v in per.values())
        if not per or not total:
            continue
        cols: list[Col] = [
            ("category", "left", "fold", None),
            *_right("all ranks (s)", "%", "rank median (µs)", "rank max (µs)", "rank"),
        ]
        cells = []
        for cat, v in per.items():
            top = max(v, key=lambda k: (v[k], -k))
            cells.append(
                [
                    cat,
                    format_cell(sum(v.values()) / 1e6),
                    format_cell(100.0 * sum(v.values()) / total),
                    format_cell(float(np.median(list(v.values())))),
                    format_cell(v[top]),
                    str(top) if v[top] else "-",
                ]
            )
        out.append(_table(f"{title}, over {n:,} ranks", cols, cells, plain=False))
        if section == "phases" and per.get("startup"):
            out.append(_startup_note())
    # A device figure per rank and device (a rank may drive several).
    dev: dict[str, dict[tuple[int, int], float]] = {}
    busy_any = False
    seen = any(r["section"] in ("device", "utilization") for rows in by_rank.values() for r in rows)
    for rank, rows in by_rank.items():
        for r in rows:
            if r["section"] in ("device", "utilization") and r["time_us"] is not None:
                key = (rank, -1 if r.get("device") is None else int(r["device"]))
                dev.setdefault(r["category"], {})[key] = float(r["percent"] or 0.0)
                busy_any = busy_any or bool(r["time_us"])
    several = any(len({d for _, d in v}) > 1 for v in dev.values())

    def where(key: tuple[int, int]) -> str:
        return f"{key[0]} dev {key[1]}" if several and key[1] >= 0 else str(key[0])

    if seen and not busy_any:  # no device work (its figures null) or all of it zero
        out.append(_line(f"no device activity in the profiles of the {n:,} ranks"))
    elif dev:
        cols = [("figure", "left", "fold", None), *_right("% median", "% lowest", "rank", "% highest", "rank")]
        cells = []
        for cat, figs in dev.items():
            lo = min(figs, key=lambda k: (figs[k], k))
            hi = max(figs, key=lambda k: (figs[k], -k[0], -k[1]))
            cells.append(
                [
                    _DEVICE_FIGURE.get(cat, f"{cat} (of active span)"),
                    format_cell(float(np.median(list(figs.values())))),
                    format_cell(figs[lo]),
                    where(lo),
                    format_cell(figs[hi]),
                    where(hi),
                ]
            )
        out.append(_table(f"device time, over {n:,} ranks", cols, cells, plain=False))
        if last_step_out:
            out.append(_line(ACTIVE_SPAN_NOTE))
    out.append(
        _hint(
            f"[dim]each rank: aiprof report {PATH_SLOT} --filter rank=N (its splits); "
            f"the ranks against each other: aiprof report {PATH_SLOT} --view stragglers (a job's index)[/dim]"
        )
    )
    return out


#: The vendor_steps figures the overview shows: (column, heading).
_VENDOR_FIGURES = (
    ("stage_us", "stage"),
    ("computing_us", "computing"),
    ("communication_not_overlapped_us", "comm. not overlapped"),
    ("free_us", "free"),
    ("communication_pct", "% comm."),
)


def _vendor_steps(prof: Profile, events_without_steps: int) -> list[Item]:
    """The step time by rank as the vendor's tool computed it (the ``vendor_steps``
    view: one source, the first of :data:`~aiprof.analysis.vendor_steps.SOURCES` the
    profile has; a rank's row without a step where the file gives one, else the mean of
    its steps), and, where the events hold no step but ``events_without_steps`` events,
    a line saying the breakdown after it covers only those events."""
    import numpy as np

    from ..analysis import full_table
    from ..analysis.vendor_steps import SOURCES
    from ..render.terminal import format_cell

    rows = full_table(prof, "vendor_steps").to_pylist()
    present = {r["source"] for r in rows}
    source = next((s for s in SOURCES if s in present), None)
    if source is None:
        return []
    per: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["source"] == source:
            per.setdefault(r["rank"], []).append(r)
    figs: dict[int, dict[str, float | None]] = {}
    averaged: set[int] = set()
    for rank, mine in per.items():
        whole = [r for r in mine if r["step"] is None]
        if whole:
            figs[rank] = {c: whole[0][c] for c, _ in _VENDOR_FIGURES}
            continue
        averaged.add(len(mine))
        f: dict[str, float | None] = {}
        for c, _ in _VENDOR_FIGURES[:-1]:
            vals = [float(r[c]) for r in mine if r[c] is not None]
            f[c] = float(np.mean(vals)) if vals else None
        alone, stage = f["communication_not_overlapped_us"], f["stage_us"]
        f["communication_pct"] = 100.0 * alone / stage if alone is not None and stage else None
        figs[rank] = f
    title = f"step time by rank (µs; % comm.: of stage), as {SOURCES[source]} computed it"
    if averaged:
        n = next(iter(averaged))
        title += f" (mean of {n:,} steps per rank)" if len(averaged) == 1 else " (mean per step)"
    out: list[Item] = []
    if len(figs) <= RANK_TABLES:
        cols: list[Col] = [("rank", "right", None, None), *_right(*(h for _, h in _VENDOR_FIGURES))]
        cells = [[str(rank), *(format_cell(f[c]) for c, _ in _VENDOR_FIGURES)] for rank, f in sorted(figs.items())]
    else:
        cols = [("figure", "left", "fold", None), *_right("median", "lowest", "rank", "highest", "rank")]
        cells = []
        for c, heading in _VENDOR_FIGURES:
            v = {rank: f[c] for rank, f in figs.items() if f[c] is not None}
            if not v:
                continue
            lo = min(v, key=lambda k: (v[k], k))
            hi = max(v, key=lambda k: (v[k], -k))
            med = float(np.median(list(v.values())))
            cells.append([heading, format_cell(med), format_cell(v[lo]), str(lo), format_cell(v[hi]), str(hi)])
        title += f", over {len(figs):,} ranks"
    out.append(_table(title, cols, cells, plain=False))
    if events_without_steps:
        out.append(
            _line(
                f"[dim]the events hold no step spans: the tables below cover only their {events_without_steps:,} "
                "events, not the steps (those are the vendor's figures above)[/dim]"
            )
        )
    return out


def steps_line(metas: list[dict[str, Any]], steps: list[dict[str, Any]]) -> str:
    """ "steps: N per rank" (or each rank's count when they differ), and how they were found."""
    per: dict[int, int] = {}
    for r in steps:
        if r["step"] is not None:
            per[r["rank"]] = per.get(r["rank"], 0) + 1
    recorded = any(m.get("record") for m in metas)
    partial = [m for m in metas if m.get("partial")]
    if not per and recorded and partial:
        # Cut short: the steps were lost with what the recorder had not written yet (a
        # crash, a kill), not missing from the loop.
        reasons = sorted({str(m["partial_reason"]) for m in partial if m.get("partial_reason")})
        why = f" ({'; '.join(reasons)})" if reasons else ""
        text = f"steps: none found: the recording was cut short{why}, so its steps may have been lost"
    elif not per and recorded:
        text = "steps: none found (mark them with aiprof.record.mark_step())"
    elif not per:
        # An imported trace: its profiler marks steps (torch.profiler's prof.step(),
        # ProfilerStep#N), or it has none.
        text = "steps: none in the trace (torch.profiler marks them when the loop calls prof.step())"
    elif len(set(per.values())) == 1:
        n = next(iter(per.values()))
        text = f"steps: {n}" + (f" per rank ({len(per)} ranks)" if len(per) > 1 else "")
    else:
        text = "steps: " + ", ".join(f"rank {r}: {n}" for r, n in sorted(per.items()))
    rules = {str((m.get("record") or {}).get("steps", {}).get("rule")) for m in metas if m.get("record")}
    if not rules:  # an imported trace: the recording package is not worth its import
        return text
    from ..record.finalizer import HOW_TEXT

    words = [HOW_TEXT[r] for r in sorted(rules) if r in HOW_TEXT]
    return text + (f" ({'; '.join(words)})" if per and words else "")


def _energy(prof: Profile) -> list[Item]:
    """One line per device with power or energy counters (docs/energy.md)."""
    from ..analysis.energy import device_summary
    from ..render.terminal import format_cell

    out = []
    for e in device_summary(prof):
        line = f"energy: rank {e['rank']} {e['device_type']} {e['device']}: {format_cell(e['energy_j'])} J"
        line += f" (±{format_cell(e['error_j'])}), {format_cell(e['avg_w'])} W average"
        if e["j_per_step"] is not None:
            line += f", {format_cell(e['j_per_step'])} J per step"
        if e["j_per_sample"] is not None:
            line += f", {format_cell(e['j_per_sample'])} J per sample"
        out.append(_line(line, highlight=False))
    return out


def _advice(prof: Profile, of: str = "step time") -> list[Item]:
    """The three advice items with the largest expected gain, when the proposer exists
    (``of``: what the gain is a share of: "the profiled time" without steps)."""
    try:
        from .. import advise as adv  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return []
    from rich.markup import escape

    found = adv.advise(prof)[:3]
    if not found:
        return []
    out = [_hint(f"[bold]top advice[/bold] (aiprof advise {PATH_SLOT} for all)")]
    for a in found:
        out.append(
            _line(escape(f"  - [{a.severity}] {a.title}: {a.summary} (expected gain {100 * a.gain:.1f}% of {of})"))
        )
    return out


# -- printing ----------------------------------------------------------------------------


def shell_words(paths: list[Path] | list[str]) -> str:
    """``paths`` as they go on a command line: each quoted for a POSIX shell where it
    needs it (a space, a quote, a ``$``)."""
    import shlex

    return " ".join(shlex.quote(str(p)) for p in paths)


def print_overview(paths: list[Path] | list[str], items: list[Item]) -> None:
    """Print the overview: its header line, then ``items``."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(f"[bold]aiprof report[/bold] {escape(', '.join(str(p) for p in paths))}", soft_wrap=True)
    named = escape(shell_words(paths))
    for it in items:
        if it["t"] == "line":
            text = it["text"].replace(PATH_SLOT, named) if it.get("path") else it["text"]
            console.print(text, highlight=bool(it["highlight"]))
            continue
        t = Table(title=it["title"], header_style="bold")
        for name, justify, overflow, max_width in it["cols"]:
            if overflow is None:
                t.add_column(name, justify=justify)
            else:
                t.add_column(name, justify=justify, overflow=overflow, max_width=max_width)
        for row in it["rows"]:
            t.add_row(*([Text(c) for c in row] if it["plain"] else row))
        console.print(t)
