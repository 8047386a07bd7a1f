"""A raw MindSpore 1.x Ascend profiling job (MindInsight's JOB3: Wide&Deep on Ascend 910):
the HWTS log, the framework files, the step trace and the AI CPU file, joined as one
profile; each file alone; and inputs built from them (slices, a cut record, the newer
end tag, the GE backend, a clock with cntvct)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import advise
from aiprof.analysis import run, views
from aiprof.importers import choose, import_paths
from aiprof.importers.mindspore.framework import parse_graph_desc, short_name
from aiprof.importers.mindspore.hwts import decode_hwts
from aiprof.store.reader import open_profile

JOB = "ascend/mindspore-raw-job"
HWTS = "hwts.log.data.45.dev.profiler_default_tag.1.slice_0"
TRACE = "data/training_trace.46.dev.profiler_default_tag.1.slice_0"
TASKS = "Framework.host.vm.task_desc_info.1.slice_0"
GRAPH = "Framework.host.vm.graph_desc_info.1.slice_0"
POINT = "Framework.host.vm.point.1.slice_0"


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


@pytest.fixture(scope="module")
def job(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out, ctx = import_paths([shared_data / JOB], tmp_path_factory.mktemp("job") / "j")
    return open_profile(out), ctx


def test_job_folder_is_one_profile(shared_data: Path, job: Any) -> None:
    assert choose(shared_data / JOB).name == "mindspore-job"
    p, ctx = job
    kinds = {(r["kind"], r["cat"]): r["n"] for r in _rows(p, "select kind, cat, count(*) n from events group by all")}
    # 31,462 Start of task records, 77 of them without an end; 113 of the named tasks
    # are AtomicAddrClean (memory set); 323 AI CPU thread records; 322 steps with 11
    # point pairs each.
    assert kinds == {
        # HCCL's tasks (not in task_desc_info) lie between their step trace points.
        ("kernel", "HWTS"): 3_228,
        ("collective", "HWTS"): 28_044,
        ("memset", "HWTS"): 113,
        ("instant", "HWTS"): 77,
        ("kernel", "AI_CPU"): 323,
        ("step", "step_trace"): 322,
        ("collective", "step_trace"): 3_542,
    }
    assert {(d["type"], d["index"]) for d in p.metas[0]["devices"]} == {("npu", 1)}  # host_start.log.1
    assert _rows(p, "select distinct device from events") == [{"device": 1}]
    assert p.metas[0]["clock"] == "device"  # host_start.log.1 gives no cntvct
    assert p.metas[0]["mindspore"]["host_start.log.1"] == {
        "clock_realtime": 1591183963784568740,
        "clock_monotonic_raw": 261003032627,
    }
    w = " | ".join(ctx.warnings)
    assert "DATA_PREPROCESS.dev.TDT.1.slice_0: data transfer enqueue records not imported" in w
    assert "empty, nothing to import: DATA_PREPROCESS.dev.AICPUMI.1.slice_0" in w
    # The framework files of this sample describe 199 of the job's ops.
    assert "28645 of 31462 HWTS tasks have no operator" in w


def test_kernels_named_by_operator_with_type_and_shapes(job: Any) -> None:
    p, _ = job
    rows = _rows(
        p,
        "select count(*) n, avg(dur) d, any_value(args) a, any_value(tid) s from events "
        "where name = 'GatherV2-op55' group by name",
    )
    assert len(rows) == 1
    r = rows[0]
    # 14 runs, 4.2 ms each (MindSpore's op compute time parser: end minus start cycle).
    assert r["n"] == 14 and round(r["d"] / 1000, 3) == 42220.212
    a = json.loads(r["a"])
    assert a["type"] == "GatherV2"
    assert a["fullname"].endswith("network-WideDeepModel/GatherV2-op55")
    # task_desc_info: "...GatherV2-op55 32 31236 15" (block dim, task id, stream id).
    assert a["task_id"] == "31236" and a["stream_id"] == r["s"] and a["block_dim"] == 32
    assert (a["input_shapes"], a["output_shapes"]) == ("184696,8;128000,39", "128000,39,8")
    assert a["input_1"] == {"format": "DefaultFormat", "data_type": "NUMBER_TYPE_INT32", "shape": "128000,39"}
    assert a["output_formats"] == "DefaultFormat"
    # TransData-op216: 128x1 float16 in, FRACTAL_NZ out.
    t = json.loads(_rows(p, "select args from events where name = 'TransData-op216' limit 1")[0]["args"])
    assert (t["type"], t["block_dim"], t["input_shapes"], t["output_formats"]) == (
        "TransData",
        8,
        "128,1",
        "FRACTAL_NZ",
    )
    unnamed = _rows(p, "select name, tid from events where name like 'unnamed task %' order by ts limit 1")[0]
    assert unnamed == {"name": "unnamed task 60002", "tid": 513}


def test_steps_match_mindinsight(job: Any) -> None:
    """MindInsight's own test of JOB3 (tests/st/func/profiler/test_analyse.py): 322 steps;
    averaged over steps 2..322, iteration interval 0.2038 ms, fp+bp 118.054 ms, tail
    87.1231 ms, total 205.3809 ms; stream 540's communication 49.281 ms."""
    p, _ = job
    steps = _rows(p, "select step, dur, args from events where kind = 'step' order by step")
    assert len(steps) == 322
    later = [json.loads(s["args"]) for s in steps[1:]]

    def avg_ms(key: str) -> float:
        return round(float(sum(a[key] for a in later)) / len(later) / 1e6, 4)

    assert (avg_ms("iteration_interval_ns"), avg_ms("fp_and_bp_ns"), avg_ms("tail_ns")) == (0.2038, 118.0539, 87.1231)
    assert round(sum(s["dur"] for s in steps[1:]) / 321 / 1e6, 4) == 205.3809
    # The fp / bp points named by the point file.
    assert (later[0]["fp_start_op"], later[0]["bp_end_op"]) == ("Default/Cast-op6", "Default/TransData-op7")
    c = _rows(
        p,
        "select count(*) n, avg(dur) d from events where kind = 'collective' and cat = 'step_trace' and tid = 540 and step > 1",
    )[0]
    assert c["n"] == 321 and round(c["d"] / 1e6, 3) == 49.281
    # Tags 3/4, 5/6, 7/8 are named by the point file.
    named = _rows(
        p,
        "select name, tid, args from events where kind = 'collective' and cat = 'step_trace' and step = 1 order by ts limit 3",
    )
    assert [(n["name"], n["tid"]) for n in named] == [
        ("AllGather-op136", 520),
        ("ReduceScatter-op145", 522),
        ("AllGather-op147", 524),
    ]
    assert json.loads(named[0]["args"])["start_tag"] == 3


def test_hccl_tasks_take_the_op_of_their_step_trace_points(job: Any) -> None:
    """The task_desc_info file names one task per kernel op; HCCL's tasks (on the op's
    stream and its three slave streams) take the op whose trace points bracket their
    task ids: AllGather-op136's points are tasks 30112 / 30278 on stream 520."""
    p, _ = job
    rows = _rows(
        p,
        "select tid, count(*) n, any_value(kind) k from events where name = 'AllGather-op136' and cat = 'HWTS' "
        "group by tid order by tid",
    )
    assert [(r["tid"], r["n"], r["k"]) for r in rows] == [
        (520, 630, "collective"),
        (542, 555, "collective"),
        (543, 555, "collective"),
        (544, 555, "collective"),
    ]
    a = json.loads(_rows(p, "select args from events where name = 'AllGather-op136' and tid = 542 limit 1")[0]["args"])
    assert a["op_by"] == "between step trace points 3-4 (stream 520)"
    assert a["fullname"].endswith("network-WideDeepModel/AllGather-op136")
    assert 30112 < int(a["task_id"]) < 30278
    # Tags 23/24 (stream 540) are not named by the point file: communication, as
    # MindInsight reads every pair, named as MindInsight names the pair.
    u = _rows(
        p,
        "select tid, count(*) n, any_value(kind) k, any_value(args) a from events "
        "where name = 'stream_540_parallel_0' and cat = 'HWTS' group by tid order by tid",
    )
    assert [(r["tid"], r["n"], r["k"]) for r in u] == [
        (540, 630, "collective"),
        (572, 518, "collective"),
        (573, 518, "collective"),
        (574, 518, "collective"),
    ]
    assert "MindInsight reads every pair as communication" in json.loads(u[0]["a"])["kind_evidence"]
    # What no file names and no points bracket: the runtime's tasks (598), kernels.
    left = _rows(
        p, "select count(*) n, any_value(kind) k from events where name like 'unnamed task %' and cat = 'HWTS'"
    )
    assert left == [{"n": 598, "k": "kernel"}]
    src = next(s for s in p.metas[0]["sources"] if s.get("importer") == "mindspore-hwts" and "named" in s)
    assert (src["named"], src["between_comm_points"], src["between_other_points"]) == (2_817, 28_047, 0)


def test_ai_cpu_thread_records(job: Any) -> None:
    p, _ = job
    rows = _rows(p, "select name, ts, dur, args from events where cat = 'AI_CPU' order by ts limit 1")
    a = json.loads(rows[0]["args"])
    # Thread[ 1] ... tickBeforeRun=38753270138, tickAfterRun=38753416849, dispatchTime=100 us, totalTime=1567 us
    assert rows[0]["name"] == "AI CPU task"
    assert rows[0]["dur"] == (38753416849 - 38753270138) * 10
    assert (a["dispatchTime"], a["totalTime"], a["thread"], a["aicpu"]) == (100, 1567, 1, 0)
    # The same counter as the HWTS log: the first HWTS start (38753186165) is the origin.
    assert rows[0]["ts"] == (38753270138 - 38753186165) * 10


def test_every_view_and_the_advice(job: Any) -> None:
    p, _ = job
    for name in views():
        run(p, name)
    assert sum(a.gain for a in advise(p)) <= 1.0 + 1e-9


@pytest.mark.parametrize(
    ("rel", "importer", "tables"),
    [
        (HWTS, "mindspore-hwts", {"events": 31_462}),
        (TASKS, "mindspore-framework", {"kernel_metrics": 597}),
        (GRAPH, "mindspore-framework", {"kernel_metrics": 398}),
        (POINT, "mindspore-framework", {"kernel_metrics": 8}),
        ("DATA_PREPROCESS.dev.AICPU.1.slice_0", "mindspore-aicpu", {"events": 323}),
    ],
)
def test_each_file_alone_and_renamed(shared_data: Path, tmp_path: Path, rel: str, importer: str, tables: Any) -> None:
    src = shared_data / JOB / rel
    for path in (src, tmp_path / "renamed"):
        if path != src:
            shutil.copy(src, path)
        assert choose(path).name == importer
        out, ctx = import_paths([path], tmp_path / f"o{len(list(tmp_path.iterdir()))}")
        p = open_profile(out)
        assert {k: v for k, v in p.metas[0]["tables"].items() if v} == tables
        if importer in ("mindspore-hwts", "mindspore-framework"):
            assert any("import the job folder" in w for w in ctx.warnings)


def test_hwts_alone_keeps_task_keys(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / JOB / HWTS], tmp_path / "h")
    p = open_profile(out)
    r = _rows(p, "select name, tid, dur from events where kind = 'kernel' order by ts limit 1")[0]
    assert r == {"name": "task 60002", "tid": 513, "dur": 10}  # cycles 38753186165 .. 38753186166


@pytest.mark.parametrize("rel", ["host_start.log.1", "DATA_PREPROCESS.dev.TDT.1.slice_0"])
def test_files_that_hold_no_profile_say_what_is_needed(shared_data: Path, tmp_path: Path, rel: str) -> None:
    out = tmp_path / "o.aiprof"
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(shared_data / JOB / rel), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "import the job folder" in lines[0] and "hwts.log.data" in lines[0], r.stderr
    assert not out.exists()


def _job_copy(shared_data: Path, dst: Path) -> Path:
    shutil.copytree(shared_data / JOB, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    dst.chmod(0o755)
    return dst


def test_renamed_folder_and_hwts_in_slices(shared_data: Path, tmp_path: Path, job: Any) -> None:
    d = _job_copy(shared_data, tmp_path / "renamed")
    log = d / HWTS
    data = log.read_bytes()
    cut = (len(data) // 64 // 2) * 64
    log.unlink()
    (d / "hwts.log.data.45.dev.profiler_default_tag.1.slice_0").write_bytes(data[:cut])
    (d / "hwts.log.data.45.dev.profiler_default_tag.1.slice_1").write_bytes(data[cut:])
    assert choose(d).name == "mindspore-job"
    out, _ = import_paths([d], tmp_path / "s")
    q = open_profile(out)
    p, _ = job
    query = "select name, kind, ts, dur, tid from events order by all"
    # Two slices are the one log: a task started in one and ended in the next is one span.
    assert _rows(q, query) == _rows(p, query)


def test_cut_record_and_zero_padding(shared_data: Path, tmp_path: Path) -> None:
    data = (shared_data / JOB / HWTS).read_bytes()[: 64 * 10]
    cols, bad = decode_hwts(data + bytes(64) + data[:30])
    assert bad == 1 and len(cols.typ) == 10  # the padding record is skipped, the cut one counted
    # The first record: Start of task 60002 on stream 513 at cycle 38753186165.
    assert (cols.typ[0], cols.task[0], cols.stream[0], cols.cycle[0]) == (0, 60002, 513, 38753186165)
    assert (cols.typ[1], cols.cnt[1]) == (1, 1)
    f = tmp_path / "hwts.log.data.45.dev.profiler_default_tag.0.slice_0"
    f.write_bytes(data + data[:30])
    out, ctx = import_paths([f], tmp_path / "c")
    assert any("1 unreadable HWTS records" in w for w in ctx.warnings)
    # Four Start/End pairs, then two starts whose ends are past the cut.
    assert _rows(open_profile(out), "select kind, count(*) n from events group by all order by all") == [
        {"kind": "instant", "n": 2},
        {"kind": "kernel", "n": 4},
    ]


def test_clock_with_cntvct_is_unix(shared_data: Path, tmp_path: Path) -> None:
    d = _job_copy(shared_data, tmp_path / "j")
    # A start log that also gives the system counter at clock_realtime.
    (d / "host_start.log.1").write_text(
        "[Device1]\nclock_realtime: 1591183963784568740\nclock_monotonic_raw: 261003032627\ncntvct: 38753000000\n"
    )
    out, _ = import_paths([d], tmp_path / "u")
    p = open_profile(out)
    assert p.metas[0]["clock"] == "unix"
    # The origin is the first HWTS start, 38753186165 ticks: 186165 ticks after cntvct.
    assert p.metas[0]["time_origin_ns"] == 1591183963784568740 + 186165 * 10


def test_new_end_tag(tmp_path: Path) -> None:
    """Step traces written since December 2020 end a step with tag 65535 (and open it with
    a job id above it)."""
    rec = struct.Struct("<QHHQ")
    job = 70000
    data = b"".join(
        rec.pack(tag, 1, 5, t)
        for step in range(3)
        for tag, t in (
            (job, 1000 + step * 100),
            (1, 1010 + step * 100),
            (2, 1080 + step * 100),
            (65535, 1090 + step * 100),
        )
    )
    f = tmp_path / "training_trace.46.dev.profiler_default_tag.0.slice_0"
    f.write_bytes(data)
    assert choose(f).name == "mindspore-step-trace"
    out, _ = import_paths([f], tmp_path / "t")
    p = open_profile(out)
    rows = _rows(p, "select step, ts, dur from events where kind = 'step' order by step")
    # The first step starts at its fp point; the next ones where the previous one ended.
    assert rows == [
        {"step": 1, "ts": 0, "dur": 800},
        {"step": 2, "ts": 800, "dur": 1000},
        {"step": 3, "ts": 1800, "dur": 1000},
    ]


def test_ge_backend_graph_desc() -> None:
    line = (
        "op_name:Default/network/Conv2D-op1 op_type:Conv2D input_id:0 input_format:3 input_data_type:1 "
        'input_shape:"32,1,224,224,16" output_id:0 output_format:0 output_data_type:0 output_shape:"32,64,112,112"'
    )
    ops, bad = parse_graph_desc([line], "ge")
    assert bad == 0
    assert ops[0].io == {
        "input_0": {"format": "FORMAT_NC1HWC0", "data_type": "DT_FLOAT16", "shape": "32,1,224,224,16"},
        "output_0": {"format": "FORMAT_NCHW", "data_type": "DT_FLOAT", "shape": "32,64,112,112"},
    }
    # Without the backend the numeric formats say GE.
    assert parse_graph_desc([line])[0][0].io == ops[0].io
    assert short_name("Default/network/Conv2D-op1") == "Conv2D-op1"
    assert short_name("Default/a/Add-op1Default/b/Relu-op2") == "Add-op1+Relu-op2"


def test_steps_view_has_mindinsights_breakdown(job: Any) -> None:
    p, _ = job
    rows = {r["step"]: r for r in run(p, "steps").rows}
    assert len(rows) == 322
    a = json.loads(_rows(p, "select args from events where kind = 'step' and step = 2")[0]["args"])
    r = rows[2]
    assert r["iteration_interval_us"] == a["iteration_interval_ns"] / 1000
    assert (r["fp_and_bp_us"], r["tail_us"]) == (a["fp_and_bp_ns"] / 1000, a["tail_ns"] / 1000)
    assert r["iteration_interval_us"] + r["fp_and_bp_us"] + r["tail_us"] == pytest.approx(r["duration_us"])
    comm = int(
        _rows(p, "select sum(dur) d from events where kind = 'collective' and cat = 'step_trace' and step = 2")[0]["d"]
    )
    assert r["step_trace_comm_us"] == comm / 1000


def test_steps_view_without_points_has_no_breakdown(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "ascend/msprof-PROF_000001"], tmp_path / "m")
    cols = run(open_profile(out), "steps").table.column_names
    assert "fp_and_bp_us" not in cols and "duration_us" in cols


def test_a_folder_of_job_folders_is_one_profile_a_rank_per_device(shared_data: Path, tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    a = _job_copy(shared_data, root / "JOBA")
    b = _job_copy(shared_data, root / "JOBB")
    # JOBB is device 2, its counter 500 ticks ahead of device 1's at the same realtime.
    for f in [f for f in b.rglob("*") if f.is_file()]:
        if ".1." in f.name:
            f.rename(f.with_name(f.name.replace(".1.", ".2.")))
        elif f.name.endswith(".1"):
            f.rename(f.with_name(f.name[:-2] + ".2"))
    log = "[Device{}]\nclock_realtime: 1591183963784568740\nclock_monotonic_raw: 261003032627\ncntvct: {}\n"
    (a / "host_start.log.1").write_text(log.format(1, 38753000000))
    (b / "host_start.log.2").write_text(log.format(2, 38753000500))
    assert choose(root).name == "mindspore-job"
    out, _ = import_paths([root], tmp_path / "o")
    prof = open_profile(out)
    assert prof.metas[0]["ranks"] == [1, 2] and prof.metas[0]["clock"] == "unix"
    assert sorted((d["rank"], d["index"]) for d in prof.metas[0]["devices"]) == [(1, 1), (2, 2)]
    steps = {
        r["rank"]: r["n"] for r in _rows(prof, "select rank, count(*) n from events where kind = 'step' group by 1")
    }
    assert steps == {1: 322, 2: 322}
    q = "select ts from events where kind = 'step' and rank = {} order by ts"
    one, two = [r["ts"] for r in _rows(prof, q.format(1))], [r["ts"] for r in _rows(prof, q.format(2))]
    assert [y - x for x, y in zip(one, two, strict=True)] == [-5000] * 322
