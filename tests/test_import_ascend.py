"""Ascend importers (torch_npu / MindSpore / CANN msprof / msprof-analyze) on real captures
and on small inputs built here from the documented column names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import choose, import_paths
from aiprof.importers.ascend.tables import csv_header, split_unit
from aiprof.importers.ascend.trace import npu_task_kind
from aiprof.importers.base import ImportContext
from aiprof.store.reader import open_profile


def _import(src: Path, out: Path, forced: str | None = None) -> tuple[Any, ImportContext]:
    path, ctx = import_paths([src], out, forced=forced)
    return open_profile(path), ctx


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


def _kinds(p: Any) -> dict[tuple[str, str], int]:
    return {
        (r["kind"], r["device_type"]): r["n"]
        for r in _rows(p, "select kind, device_type, count(*) n from events group by all")
    }


# -- trace_view.json -----------------------------------------------------------------------------


def test_trace_view_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "ascend/torch_npu/trace_view.json"
    assert choose(src).name == "ascend-trace"
    p, ctx = _import(src, tmp_path / "tv")
    k = _kinds(p)
    assert k[("kernel", "npu")] == 253
    assert k[("memset", "npu")] == 21
    assert k[("memcpy", "npu")] == 2  # the two MEMCPY_ASYNC tasks
    assert k[("cpu_op", "cpu")] == 708
    assert k[("runtime", "cpu")] == 382 + 148 + 148  # AscendCL calls + enqueue + dequeue
    assert k[("other", "npu")] == 547  # Overlap Analysis: derived, never counted as work
    assert sum(k.values()) == 3670 - 32  # every event but the metadata
    # String µs timestamps keep their ns digits: the first NPU task starts at ...422904.204 µs.
    first = _rows(
        p, "select name, ts, dur, tid, correlation, external_id from events where kind='kernel' order by ts limit 1"
    )[0]
    assert first["name"] == "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike"
    assert first["ts"] + p.metas[0]["time_origin_ns"] == 1704161511422904204
    assert first["dur"] == 1350
    assert first["tid"] == 3
    # HostToDevice flow: the AscendCL call that launched it shares its correlation, and
    # so does the operator thread's Enqueue that queued it (test_import_ascend_launch.py).
    launch = _rows(
        p, f"select name, kind from events where correlation={first['correlation']} and kind='runtime' order by ts"
    )
    assert launch == [{"name": "Enqueue", "kind": "runtime"}, {"name": "AscendCL@aclnnInplaceZero", "kind": "runtime"}]
    # async_npu flow: the framework op shares its external id.
    assert first["external_id"] == 1704161511422904204
    assert _rows(p, "select count(*) n from events where kind='kernel' and correlation is null")[0]["n"] == 0
    meta = p.metas[0]
    assert meta["clock"] == "unix"
    assert _rows(p, "select min(ts) t from events")[0]["t"] == 0
    tracks = {r["process_name"] for r in _rows(p, "select process_name from tracks")}
    assert {"Ascend Hardware", "CANN", "Python", "Overlap Analysis"} <= tracks
    assert not ctx.warnings


def test_trace_view_renamed_unknown(shared_data: Path, tmp_path: Path) -> None:
    src = tmp_path / "unknown"
    shutil.copy(shared_data / "ascend/torch_npu/trace_view.json", src)
    assert choose(src).name == "ascend-trace"
    p, _ = _import(src, tmp_path / "u")
    assert _kinds(p)[("kernel", "npu")] == 253


def test_npu_task_kinds() -> None:
    assert npu_task_kind("MEMCPY_ASYNC", "MEMCPY_ASYNC") == "memcpy"
    assert npu_task_kind("NOTIFY_WAIT", "NOTIFY_WAIT") == "sync"
    assert npu_task_kind("EVENT_RECORD", None) == "sync"
    assert npu_task_kind("REDUCE_ASYNC_V2", "REDUCE_ASYNC_V2") == "collective"
    assert npu_task_kind("hcom_allReduce__123", "Other") == "collective"
    assert npu_task_kind("Default/MemSet-op550", "AI_CORE") == "memset"
    assert npu_task_kind("aclnnMm_MatMulCommon_MemSet", "Other") == "memset"
    assert npu_task_kind("aclnnMm_MatMulCommon_MatMulV2", "AI_CORE") == "kernel"


def test_trace_built_metadata_after_events(tmp_path: Path) -> None:
    # Metadata written after the events it names still decides their kind.
    evs = [
        {"name": "MatMul", "pid": 7, "tid": 2, "ts": "1700000000000001.500", "dur": 3.0, "ph": "X", "args": {}},
        {"name": "AscendCL@aclnnMm", "pid": 9, "tid": 11, "ts": "1700000000000000.000", "dur": 2.0, "ph": "X"},
        {
            "name": "HostToDevice1",
            "ph": "s",
            "cat": "HostToDevice",
            "id": "77",
            "pid": 9,
            "tid": 11,
            "ts": "1700000000000000.500",
        },
        {
            "name": "HostToDevice1",
            "ph": "f",
            "cat": "HostToDevice",
            "id": "77",
            "pid": 7,
            "tid": 2,
            "ts": "1700000000000001.500",
            "bp": "e",
        },
        {"name": "process_name", "pid": 7, "tid": 0, "args": {"name": "Ascend Hardware"}, "ph": "M"},
        {"name": "process_name", "pid": 9, "tid": 0, "args": {"name": "CANN"}, "ph": "M"},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps(evs))
    p, _ = _import(src, tmp_path / "b")
    rows = _rows(p, "select name, kind, device_type, ts, correlation from events where dur > 0 order by ts")
    assert rows == [
        {"name": "AscendCL@aclnnMm", "kind": "runtime", "device_type": "cpu", "ts": 0, "correlation": 77},
        {"name": "MatMul", "kind": "kernel", "device_type": "npu", "ts": 1500, "correlation": 77},
    ]


# -- ASCEND_PROFILER_OUTPUT folder -------------------------------------------------------------


def test_folder_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "ascend/torch_npu"
    assert choose(src).name == "ascend-pt"
    p, _ = _import(src, tmp_path / "pt")
    assert _kinds(p)[("kernel", "npu")] == 253  # from trace_view; kernel_details adds metrics only
    km = {r["section"]: r["n"] for r in _rows(p, "select section, count(*) n from kernel_metrics group by all")}
    assert km == {"task": 618, "aic": 348, "aiv": 319}
    row = _rows(
        p,
        "select kernel, value, unit from kernel_metrics where launch_id=0 and metric in ('Duration', 'cube_utilization') order by metric",
    )
    assert row == [
        {"kernel": "aclnnMatmul_MatMulCommon_MatMulV2", "value": 185.504, "unit": "us"},
        {"kernel": "aclnnMatmul_MatMulCommon_MatMulV2", "value": 79.295, "unit": "%"},
    ]
    # The trailing TAB inside the quoted start time is gone and the digits are exact.
    start = _rows(p, "select text from kernel_metrics where launch_id=0 and metric='Start Time'")[0]["text"]
    assert start == "1736413971558972.912"


def test_folder_renamed(shared_data: Path, tmp_path: Path) -> None:
    dst = tmp_path / "whatever_name"
    shutil.copytree(shared_data / "ascend/torch_npu", dst)
    assert choose(dst).name == "ascend-pt"


def test_kernel_details_alone_makes_events(shared_data: Path, tmp_path: Path) -> None:
    src = tmp_path / "unknown"
    shutil.copy(shared_data / "ascend/torch_npu/kernel_details.csv", src)
    assert choose(src).name == "ascend-pt"
    p, _ = _import(src, tmp_path / "kd")
    rows = _rows(p, "select name, ts, dur, tid, kind from events where args like '{\"launch_id\":0,%'")
    assert len(rows) == 1
    assert rows[0]["name"] == "aclnnMatmul_MatMulCommon_MatMulV2" and rows[0]["dur"] == 185504 and rows[0]["tid"] == 2
    assert rows[0]["ts"] + p.metas[0]["time_origin_ns"] == 1736413971558972912
    assert _rows(p, "select count(*) n from events")[0]["n"] == 29


def test_kernel_details_cut_short(shared_data: Path, tmp_path: Path) -> None:
    text = (shared_data / "ascend/torch_npu/kernel_details.csv").read_text()
    src = tmp_path / "kernel_details.csv"
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    src.write_text(text.rstrip("\n")[: -len(last) // 2])
    p, ctx = _import(src, tmp_path / "cut")
    assert _rows(p, "select count(*) n from events")[0]["n"] == 28
    assert any("cut-short" in w for w in ctx.warnings)


def _write(path: Path, header: str, *rows: str) -> None:
    path.write_text("\n".join([header, *rows]) + "\n")


def test_folder_built_summaries(tmp_path: Path) -> None:
    out = tmp_path / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    _write(
        out / "op_statistic.csv",
        "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)",
        "0,MatMulV2,AI_CORE,4,800.0,150.0,200.0,250.0,61.5",
    )
    _write(
        out / "step_trace_time.csv",
        "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
        "Communication(Not Overlapped and Exclude Receive),Preparing",
        "0,3,1000.5,20,5,25,7,0,0,20,1.5",
    )
    _write(
        out / "operator_memory.csv",
        "Name,Size(KB),Allocation Time(us),Release Time(us),Active Release Time(us),Duration(us),Active Duration(us),"
        "Allocation Total Allocated(MB),Allocation Total Reserved(MB),Allocation Total Active(MB),"
        "Release Total Allocated(MB),Release Total Reserved(MB),Release Total Active(MB),Stream Ptr,Device Type",
        'aten::empty,4,"1700000000000010.000\t","1700000000000030.000\t",,20,,1,2,1,0.5,2,0.5,123,NPU:0',
    )
    _write(
        out / "memory_record.csv",
        "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Total Active(MB),Stream Ptr,Device Type",
        "PTA,1700000000000010.000,1.5,2,1.5,123,NPU:0",
    )
    (out / "communication.json").write_text(
        json.dumps(
            {
                "step3": {
                    "collective": {
                        "hcom_allReduce__1_0_1@9": {
                            "Communication Time Info": {
                                "Start Timestamp(us)": 1700000000000050.0,
                                "Elapse Time(ms)": 0.25,
                            },
                            "Communication Bandwidth Info": {
                                "HCCS": {"Transit Size(MB)": 8.0, "Bandwidth(GB/s)": 32.0}
                            },
                        }
                    }
                }
            }
        )
    )
    (out / "communication_matrix.json").write_text(
        json.dumps(
            {
                "step3": {
                    "collective": {
                        "allreduce-top1@9": {
                            "0-1": {
                                "Transport Type": "HCCS",
                                "Transit Size(MB)": 8.0,
                                "Transit Time(ms)": 0.2,
                                "Bandwidth(GB/s)": 40.0,
                            }
                        }
                    }
                }
            }
        )
    )
    root = out.parent
    assert choose(root).name == "ascend-pt"
    p, ctx = _import(root, tmp_path / "s")
    assert not ctx.warnings
    q = "select kernel, launch_id, value from kernel_metrics where section=? and metric=?"
    assert p.sql(q.replace("?", "'op_statistic/AI_CORE'", 1).replace("?", "'Total Time'")).to_pylist() == [
        {"kernel": "MatMulV2", "launch_id": None, "value": 800.0}
    ]
    assert p.sql(q.replace("?", "'step_trace_time'", 1).replace("?", "'Computing'")).to_pylist() == [
        {"kernel": "step", "launch_id": 3, "value": 1000.5}
    ]
    st = _rows(p, "select metric, unit from kernel_metrics where section='step_trace_time' and metric like 'Comm%'")
    assert sorted(r["metric"] for r in st) == [
        "Communication",
        "Communication(Not Overlapped and Exclude Receive)",
        "Communication(Not Overlapped)",
    ] and {r["unit"] for r in st} == {"us"}
    mem = _rows(p, "select ts, bytes, allocated, name from memory order by ts")
    assert mem == [
        {"ts": 0, "bytes": 4096, "allocated": 1 << 20, "name": "aten::empty"},
        {"ts": 20000, "bytes": -4096, "allocated": 1 << 19, "name": "aten::empty"},
    ]
    ctr = _rows(p, "select metric, value from counters where metric like '%allocated'")
    assert ctr == [{"metric": "memory.PTA.total_allocated", "value": 1.5 * (1 << 20)}]
    comm = _rows(p, "select section, value from kernel_metrics where kernel like 'hcom%' and metric='Bandwidth'")
    assert comm == [{"section": "communication/step3/collective/Communication Bandwidth Info/HCCS", "value": 32.0}]
    mat = _rows(
        p,
        "select text, value, unit from kernel_metrics where section like 'communication_matrix%' and metric='Bandwidth'",
    )
    assert mat == [{"text": "0-1", "value": 40.0, "unit": "GB/s"}]


# -- CANN msprof device folder ------------------------------------------------------------------


def test_msprof_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "ascend/msprof-PROF_000001"
    assert choose(src).name == "ascend-msprof"
    p, ctx = _import(src, tmp_path / "m")
    k = _kinds(p)
    assert k[("kernel", "npu")] == 115
    assert k[("sync", "npu")] == 292  # NOTIFY / EVENT tasks
    assert k[("memcpy", "npu")] == 29
    assert k[("collective", "npu")] == 31  # 30 REDUCE_ASYNC_V2 tasks + the AllReduce op
    steps = _rows(p, "select name, step, dur from events where kind='step' order by ts")
    assert len(steps) == 10  # from step_trace_*.json; msprof_*.json's copy of step 1 is skipped
    assert steps[0] == {"name": "Iteration 1", "step": 1, "dur": 47587810}
    kern = _rows(p, "select dur from events where name='Default/network-WithLossCell/_backbone-AlexNet/Cast-op239'")
    assert kern[0]["dur"] == 23100
    meta = p.metas[0]
    dev = meta["devices"][0]
    assert dev["type"] == "npu" and dev["ai_core_num"] == 32 and dev["ai_cpu_core_num"] == 14
    assert meta["hosts"][0]["hostname"] == "A2007104679"
    # monotonic-raw µs -> Unix: collectionTimeBegin 1692340024324979 µs at 56579931060630 ns.
    assert meta["clock"] == "unix"
    first = _rows(p, "select min(ts) t from events")[0]["t"]
    assert meta["time_origin_ns"] + first == 56635864386800 + 1692340024324979000 - 56579931060630
    assert not ctx.warnings


def test_msprof_renamed(shared_data: Path, tmp_path: Path) -> None:
    dst = tmp_path / "somewhere"
    shutil.copytree(shared_data / "ascend/msprof-PROF_000001/device_0", dst / "dev")
    assert choose(dst).name == "ascend-msprof"
    single = tmp_path / "unknown"
    shutil.copy(shared_data / "ascend/msprof-PROF_000001/device_0/timeline/task_time_0_2_1.json", single)
    assert choose(single).name == "ascend-trace"
    named = tmp_path / "task_time_0_2_1.json"
    shutil.copy(single, named)
    assert choose(named).name == "ascend-trace"
    p, _ = _import(single, tmp_path / "tt")
    assert _kinds(p)[("kernel", "npu")] == 115


# -- msprof-analyze cluster ---------------------------------------------------------------------


def test_cluster_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "ascend/cluster"
    assert choose(src).name == "ascend-cluster"
    p, _ = _import(src, tmp_path / "c")
    ev = _rows(p, "select rank, name, dur from events where kind='collective' order by rank, ts")
    assert len(ev) == 4
    assert ev[0] == {"rank": 0, "name": "hcom_broadcast__501_0@6297232067196334501", "dur": 121736944}
    comp = _rows(
        p, "select rank, value from kernel_metrics where metric='Computing' and rank is not null order by rank"
    )
    assert len(comp) == 8 and comp[1] == {"rank": 1, "value": 80435.74650000008}
    stage = _rows(p, "select text, value from kernel_metrics where section like '%/stage' and metric='Free'")
    assert stage == [{"text": "(0, 1, 2, 3, 4, 5, 6, 7)", "value": 1488610.0587500026}]
    assert p.metas[0]["world_size"] == 8
    # "Communication(Not Overlapped)" is its own metric (the suffix is no unit), beside
    # the real "Communication" column; every figure of the file is in µs.
    r0 = _rows(
        p,
        "select metric, unit, value from kernel_metrics where section='cluster_step_trace_time' and rank=0 "
        "and metric like 'Communication%' order by metric",
    )
    assert r0 == [
        {"metric": "Communication", "unit": "us", "value": 689255.834328125},
        {"metric": "Communication(Not Overlapped and Exclude Receive)", "unit": "us", "value": 683731.2897031249},
        {"metric": "Communication(Not Overlapped)", "unit": "us", "value": 683731.2897031249},
    ]
    per_rank = _rows(
        p,
        "select count(*) n, count(distinct metric) m, count(*) filter (where unit <> 'us') other_units "
        "from kernel_metrics where section='cluster_step_trace_time' group by rank",
    )
    assert per_rank == [{"n": 8, "m": 8, "other_units": 0}] * 8
    alone = _rows(
        p,
        "select value from kernel_metrics where metric='Communication(Not Overlapped)' and section like '%/stage'",
    )
    assert alone == [{"value": 756374.86}]
    for name in ("cluster_step_trace_time.csv", "cluster_communication.json"):
        u = tmp_path / "r" / "unknown"
        u.parent.mkdir(exist_ok=True)
        shutil.copy(src / name, u)
        assert choose(u).name == "ascend-cluster"


def test_header_units_real(shared_data: Path, tmp_path: Path) -> None:
    """The header rule on the real files: a parenthesised suffix is a unit only when it
    is one (``Duration(us)``, ``cube_utilization(%)``); other suffixes stay in the name."""
    header = csv_header(shared_data / "ascend/cluster/cluster_step_trace_time.csv")
    assert header is not None
    assert [split_unit(h) for h in header if "(" in h] == [
        ("Communication(Not Overlapped)", None),
        ("Communication(Not Overlapped and Exclude Receive)", None),
    ]
    # kernel_details.csv keeps every unit it gives (14 in µs, one in %).
    p, _ = _import(shared_data / "ascend/torch_npu/kernel_details.csv", tmp_path / "k")
    units = _rows(p, "select distinct metric, unit from kernel_metrics where unit is not null order by metric")
    assert len(units) == 15
    assert {"metric": "Start Time", "unit": "us"} in units and {"metric": "cube_utilization", "unit": "%"} in units
    assert not _rows(p, "select metric from kernel_metrics where metric like '%(%'")


# -- MindSpore 1.x --------------------------------------------------------------------------------


def test_mindspore_legacy_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "ascend/mindspore-1.x"
    assert choose(src).name == "mindspore-legacy"
    p, ctx = _import(src, tmp_path / "ms")
    k = {(r["kind"], r["cat"]): r["n"] for r in _rows(p, "select kind, cat, count(*) n from events group by all")}
    assert k == {
        ("kernel", "AI_CORE"): 98,
        ("memset", "AI_CORE"): 9,
        ("kernel", "AI_CPU"): 5,
        ("step", "step_trace"): 1,
    }
    # step_trace_raw_1_detail_time.csv's one step (15490789606875 .. 15490791977780 ticks of
    # 10 ns) is a span on the timeline's clock: µs of the same counter from the tick the
    # timeline counts from (154,901,853,050 µs, found from the spans both files hold:
    # tests/test_import_mindspore_clock.py).
    st = _rows(p, "select ts, dur, args from events where kind = 'step'")[0]
    assert st["dur"] == (15490791977780 - 15490789606875) * 10
    assert json.loads(st["args"])["fp_and_bp_ns"] == 2366808 * 10
    assert st["ts"] == 15490789606875 * 10 - 154901853050 * 1000
    mm = _rows(
        p,
        "select value from kernel_metrics where section='aicore_type' and kernel='MatMul' and metric='execution_time'",
    )
    assert mm == [{"value": 20.65774}]
    fw = _rows(
        p,
        "select launch_id, text from kernel_metrics where section='framework' and metric='block_dim' or "
        "(section='framework' and kernel='Default/TransData-op118' and metric='op_type')",
    )
    assert {"launch_id": 6, "text": "TransData"} in fw
    step = _rows(
        p, "select value from kernel_metrics where section='step_trace_raw' and launch_id=1 and metric='fp_and_bp'"
    )
    assert step == [{"value": 2366808.0}]
    # The text outputs beside the intermediates are read too (tests/test_import_mindspore_files.py).
    assert not any("not imported" in w for w in ctx.warnings)
    assert _rows(p, "select count(*) n from kernel_metrics where section='op_compute_time'")[0]["n"] == 212
    dst = tmp_path / "renamed"
    shutil.copytree(src, dst)
    assert choose(dst).name == "mindspore-legacy"


def test_aicpu_raw_renders_expected_text(shared_data: Path) -> None:
    from aiprof.importers.mindspore.aicpu import parse_aicpu, render_text

    d = shared_data / "ascend/mindspore-1.x-raw"
    ops, bad = parse_aicpu((d / "DATA_PREPROCESS.dev.AICPU.0.slice_0").read_bytes())
    assert bad == 0
    assert [o.op_type for o in ops] == ["InitData", "GetNext", "TruncatedNormal"]
    assert render_text(ops).encode() == (d / "output_data_preprocess_aicpu_0.txt").read_bytes()


def test_aicpu_raw_import(shared_data: Path, tmp_path: Path) -> None:
    src = tmp_path / "unknown"
    shutil.copy(shared_data / "ascend/mindspore-1.x-raw/DATA_PREPROCESS.dev.AICPU.0.slice_0", src)
    assert choose(src).name == "mindspore-aicpu"
    p, _ = _import(src, tmp_path / "a")
    rows = _rows(p, "select name, ts, dur from events order by ts")
    assert rows[1] == {"name": "GetNext", "ts": (2302769932 - 2298200409) * 1000, "dur": 48000}


def test_aicpu_built_records(tmp_path: Path) -> None:
    from aiprof.importers.mindspore.aicpu import parse_aicpu, render_text

    thread = "Thread[ 1] process device[0]:aicpu[ 0] task end, tickDrvTopHalf=1,tickDrvBottomHalf=2, tickBeforeRun=3,tickAfterRun=4, "
    data = (
        b"[1] Node:Cast, Run start:100, Run end:150\x00"
        + (thread + "dispatchTime=20 us, totalTime=250 us.").encode()
        + b"\x00"
        b"[2] Node:Lonely, Run start:1, Run end:2\x00"
    )
    ops, bad = parse_aicpu(data)
    assert [(o.op_type, o.total_ms, o.dispatch_ms, o.run_start, o.run_end) for o in ops] == [
        ("Cast", 0.25, 0.02, "100", "150")
    ]
    assert bad == 1  # the last Node has no Thread record after it: counted as lost
    text = render_text(ops)
    assert text.splitlines()[2].split() == ["1", "Cast", "0.25", "0.02", "100", "150"]
    assert text.endswith("AI CPU Total Time(ms):  0.250000\n")


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt", ["ascend-pt", "ascend-msprof", "ascend-cluster", "mindspore-legacy", "mindspore-aicpu", "ascend-trace"]
)
def test_wrong_content_exits_2(tmp_path: Path, fmt: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("hello,world\n1,2\n")
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(bad), "-f", fmt, "-o", str(tmp_path / "o.aiprof")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("aiprof: error:") and "Traceback" not in r.stderr
    assert not (tmp_path / "o.aiprof").exists()


def test_unrecognised_folder_exits_2(tmp_path: Path) -> None:
    d = tmp_path / "PROF_000002"
    d.mkdir()
    (d / "notes.txt").write_text("nothing here")
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(d), "-o", str(tmp_path / "o")], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert "ascend-msprof:" in r.stderr
