"""One time axis per MindSpore 1.x folder import: the timeline (µs from its own origin)
and the device-tick files (step trace, HWTS, AI CPU) joined by the offset the folder's
own spans give (importers/mindspore/clock.py), or kept apart with a warning."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from aiprof.advise import advise
from aiprof.analysis import run
from aiprof.importers import import_paths
from aiprof.importers.mindspore.clock import timeline_clock
from aiprof.importers.mindspore.legacy import file_kind
from aiprof.store.reader import open_profile

MS = "ascend/mindspore-1.x"
TRACE = "ascend/mindspore-1.x-raw/training_trace.46.dev.profiler_default_tag.0.slice_0"
#: The device counter (ns) at the timeline's ts = 0: the first AI CPU op's run_start (µs).
OFFSET_NS = 154901853050 * 1000
#: The files that tie the timeline to the device counter.
ANCHORS = ("aicpu_intermediate_1.csv", "output_data_preprocess_aicpu_1.txt", "output_format_data_hwts_1.txt")


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


def _copy(src: Path, dest: Path, drop: tuple[str, ...] = ()) -> Path:
    dest.mkdir()
    for f in src.iterdir():
        if f.name not in drop:
            shutil.copy(f, dest / f.name)
            (dest / f.name).chmod(0o644)
    return dest


def test_offset_from_the_folders_own_spans(shared_data: Path) -> None:
    d = shared_data / MS
    files = [(p, file_kind(p) or "") for p in sorted(d.iterdir())]
    from aiprof.importers.mindspore.text import file_kind as text_kind

    files = [(p, k or text_kind(p) or "") for p, k in files]
    c = timeline_clock(d / "ascend_timeline_display_1.json", files)
    assert c is not None
    # 5 AI CPU ops and 107 AI Core launches (HWTS task via framework_raw's ids), all agreeing.
    assert (c.offset_ns, c.pairs, c.agree) == (OFFSET_NS, 112, 112)
    assert set(c.via) == {"aicpu_intermediate_1.csv", "output_format_data_hwts_1.txt", "framework_raw_1.csv"}


def test_steps_hold_the_kernels(shared_data: Path, tmp_path: Path) -> None:
    out, ctx = import_paths([shared_data / MS], tmp_path / "ms")
    p = open_profile(out)
    st = _rows(p, "select ts, dur, step from events where kind = 'step'")
    # step_trace_raw_1_detail_time.csv: 15490789606875 .. 15490791977780 ticks of 10 ns.
    assert st == [{"ts": 15490789606875 * 10 - OFFSET_NS, "dur": (15490791977780 - 15490789606875) * 10, "step": 1}]
    assert st[0]["ts"] == 6_043_018_750
    meta = p.metas[0]
    assert meta["time_origin_ns"] == OFFSET_NS and meta["clock"] == "device"
    assert meta["mindspore"]["clock_alignment"]["ascend_timeline_display_1.json"]["agree"] == 112
    # 105 of the 112 timeline spans run inside the step (MatMul-op19 among them).
    k = _rows(p, "select step, count(*) n from events where kind in ('kernel', 'memset') group by all order by all")
    assert k == [{"step": 1, "n": 105}, {"step": None, "n": 7}]
    assert _rows(p, "select step from events where name = 'MatMul-op19'") == [{"step": 1}]
    ov = {(r["section"], r["category"]): r for r in run(p, "overview").rows if r["step"] is None}
    assert ov[("breakdown", "kernel")]["time_us"] == 23056.75
    assert ov[("breakdown", "memset")]["time_us"] == 30.12
    assert ov[("breakdown", "other")]["time_us"] == 622.18
    busy = ov[("utilization", "device_busy")]
    assert busy["time_us"] == round(23056.75 + 30.12, 2) and round(busy["percent"], 3) == 97.376
    # No "idle 100% of the device's span" advice against a device 97% busy in its step.
    assert not [a for a in advise(p) if "low device utilization" in a.title.lower()]
    # Each file is one source.
    paths = [s["path"] for s in meta["sources"]]
    assert len(paths) == len(set(paths)) == 16
    timeline = [s for s in meta["sources"] if s["path"].endswith("ascend_timeline_display_1.json")]
    assert timeline[0]["file_kind"] == "timeline" and timeline[0]["events_by_phase"] == {"X": 112}
    # The host clock of the device queue cannot be tied to the device's: said once.
    assert [w for w in ctx.warnings if "offset unresolved" in w and "device_queue_profiling_1.txt" in w]


def test_timeline_alone_is_one_source(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / MS / "ascend_timeline_display_1.json"], tmp_path / "t")
    assert len(open_profile(out).metas[0]["sources"]) == 1


def test_without_anchors_the_steps_stay_apart(shared_data: Path, tmp_path: Path) -> None:
    d = _copy(shared_data / MS, tmp_path / "ms", drop=ANCHORS)
    shutil.copy(shared_data / TRACE, d / "training_trace.46.dev.profiler_default_tag.1.slice_0")
    out, ctx = import_paths([d], tmp_path / "o")
    p = open_profile(out)
    warn = [w for w in ctx.warnings if "offset unresolved" in w and "ascend_timeline_display_1.json" in w]
    assert len(warn) == 1
    assert "step_trace_raw_1_detail_time.csv" in warn[0] and "training_trace.46" in warn[0]
    assert "their 21 steps" in warn[0]  # 1 + 20
    # No step span windows the timeline's kernels from another clock ...
    assert _rows(p, "select count(*) n from events where kind = 'step' or cat = 'step_trace'") == [{"n": 0}]
    assert _rows(p, "select count(*) n from events where step is not null") == [{"n": 0}]
    # ... and nothing is lost: the steps' points are kernel_metrics rows.
    fb = _rows(p, "select value from kernel_metrics where section = 'step_trace_raw' and metric = 'fp_and_bp'")
    assert {"value": 2366808.0} in fb
    tt = _rows(
        p,
        "select count(distinct launch_id) n from kernel_metrics where section = 'training_trace' "
        "and kernel = 'step' and metric = 'end_point'",
    )
    assert tt == [{"n": 20}]
    srcs = {Path(s["path"]).name: s for s in p.metas[0]["sources"]}
    assert srcs["step_trace_raw_1_detail_time.csv"]["steps_not_aligned"] == 1
    assert "time_origin_ns" in p.metas[0] and p.metas[0]["time_origin_ns"] == 0
    assert "clock_alignment" not in json.dumps(p.metas[0].get("mindspore", {}))
