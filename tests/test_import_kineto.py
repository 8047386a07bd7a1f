"""The Kineto importer on every real trace in ../shared/data/kineto and on built ones."""

from __future__ import annotations

import gzip
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from aiprof.importers import choose, import_paths
from aiprof.store import open_profile
from kineto_builders import two_step_trace, write_trace


def _raw(path: Path) -> list[dict[str, Any]]:
    data = orjson.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    return data["traceEvents"] if isinstance(data, dict) else data


def _kinds(p: Path) -> dict[str, int]:
    with open_profile(p) as prof:
        return {r["kind"]: r["n"] for r in prof.sql("SELECT kind, count(*) AS n FROM events GROUP BY kind").to_pylist()}


KINETO = [
    "V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "V100/df_index_resolver.json.gz",
    "A100-nccl-parser/nccl_data.json.gz",
    "MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "cuda-event-sync/event_sync_trace.json.gz",
    "cupti-counters/benchmark_result_924719_1679055439_trace.json.gz",
    "sampled-128-ranks/sampled_rank-0.json.gz",
    "sampled-128-ranks/sampled_rank-1.json.gz",
    "triton/triton_example.json.gz",
]


@pytest.mark.parametrize("name", KINETO)
def test_nothing_is_dropped(shared_data: Path, tmp_path: Path, name: str) -> None:
    src = shared_data / "kineto" / name
    raw = _raw(src)
    out, ctx = import_paths([src], tmp_path / "p.aiprof")
    by_ph = Counter(e.get("ph") for e in raw)
    memory = sum(1 for e in raw if e.get("ph") in ("i", "I") and e.get("name") == "[memory]")
    with open_profile(out) as prof:
        n_events = prof.sql("SELECT count(*) AS n FROM events").to_pylist()[0]["n"]
        n_memory = prof.sql("SELECT count(*) AS n FROM memory").to_pylist()[0]["n"]
        n_counters = prof.sql("SELECT count(*) AS n FROM counters").to_pylist()[0]["n"]
        step_rows = prof.sql("SELECT count(*) AS n FROM events WHERE kind = 'step'").to_pylist()[0]["n"]
    # Every event is an event row, a memory row, a counter sample or track metadata.
    assert n_events == len(raw) - by_ph["M"] - memory - by_ph["C"]
    assert n_memory == memory
    assert n_counters >= by_ph["C"]
    assert sum(ctx.kinds.values()) == n_events
    steps = [
        e for e in raw if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"
    ]
    assert step_rows == len(steps)
    # Every span keeps its raw category; kinds match the category mapping.
    kernels = sum(1 for e in raw if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel")
    kinds = _kinds(out)
    assert kinds.get("kernel", 0) + kinds.get("collective", 0) == kernels
    runtime = sum(1 for e in raw if e.get("ph") == "X" and str(e.get("cat")) in ("cuda_runtime", "Runtime"))
    assert kinds.get("runtime", 0) == runtime


def test_v100_single_rank_facts(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"], tmp_path / "a")
    with open_profile(out) as prof:
        meta = prof.metas[0]
        assert meta["ranks"] == [0]
        assert {d["name"] for d in meta["devices"]} == {"Tesla V100-SXM2-32GB"}
        assert meta["devices"][0]["compute_capability"] == "7.0"
        # 4,350 kernels on one stream, 5 steps (data/README.md).
        streams = prof.sql("SELECT DISTINCT tid FROM events WHERE kind = 'kernel'").to_pylist()
        assert len(streams) == 1
        assert prof.sql("SELECT count(*) AS n FROM events WHERE kind = 'kernel'").to_pylist()[0]["n"] == 4350
        steps = prof.sql("SELECT step, count(*) AS n FROM events WHERE kind = 'kernel' GROUP BY step ORDER BY step")
        assert len(steps.to_pylist()) >= 5


def test_multi_rank_nccl_trace(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "kineto/V100/df_index_resolver.json.gz"
    raw = _raw(src)
    out, _ = import_paths([src], tmp_path / "b")
    nccl = [e for e in raw if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    with open_profile(out) as prof:
        assert prof.metas[0]["ranks"] == [1]
        assert prof.metas[0]["world_size"] == 2
        rows = prof.sql(
            "SELECT name, count(*) AS n, sum(dur) AS d FROM events WHERE kind = 'collective' GROUP BY name"
        ).to_pylist()
        assert len(nccl) == 2020
        assert {r["name"] for r in rows} == {e["name"] for e in nccl}
        assert sum(r["n"] for r in rows) == 2020
        assert sum(int(r["d"]) for r in rows) == sum(e["dur"] for e in nccl) * 1000
        # Launch correlation: every kernel's correlation is a runtime call's correlation.
        orphans = prof.sql(
            "SELECT count(*) AS n FROM events k WHERE k.kind IN ('kernel','collective') AND NOT EXISTS "
            "(SELECT 1 FROM events r WHERE r.kind = 'runtime' AND r.correlation = k.correlation)"
        ).to_pylist()[0]["n"]
        assert orphans == 0
        # Memory events: the allocator's own totals are kept.
        peak = max(e["args"]["Total Allocated"] for e in raw if e.get("name") == "[memory]")
        assert prof.sql("SELECT max(allocated) AS m FROM memory").to_pylist()[0]["m"] == peak


def test_amd_trace_is_rocm(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths(
        [shared_data / "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz"], tmp_path / "c"
    )
    with open_profile(out) as prof:
        types = {
            r["device_type"]
            for r in prof.sql("SELECT DISTINCT device_type FROM events WHERE kind = 'kernel'").to_pylist()
        }
        assert types == {"rocm"}
        assert prof.metas[0]["devices"][0]["vendor"] == "AMD"
        names = {r["name"] for r in prof.sql("SELECT DISTINCT name FROM events WHERE kind = 'runtime'").to_pylist()}
        assert any(n.startswith("hip") for n in names)


def test_cpu_only_trace(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths(
        [shared_data / "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"], tmp_path / "d"
    )
    with open_profile(out) as prof:
        assert prof.metas[0]["ranks"] == [34]
        assert prof.metas[0]["world_size"] == 300
        assert prof.sql("SELECT count(*) AS n FROM events WHERE device_type <> 'cpu'").to_pylist()[0]["n"] == 0


def test_string_timestamps_keep_nanoseconds(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "ascend/torch_npu/trace_view.json"
    raw = _raw(src)
    out, _ = import_paths([src], tmp_path / "e", forced="kineto")
    first = raw[0]
    assert first["ts"] == "1704161511420306.491"
    with open_profile(out) as prof:
        origin = prof.metas[0]["time_origin_ns"]
        row = prof.sql(
            "SELECT ts, dur FROM events WHERE name = ? AND pid = ? ORDER BY ts LIMIT 1", [first["name"], first["pid"]]
        ).to_pylist()[0]
    assert origin + row["ts"] == 1704161511420306491
    assert row["dur"] == 13080


def test_detection_by_content_agrees_with_name(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "kineto/triton/triton_example.json.gz"
    renamed = tmp_path / "unknown"
    shutil.copy(src, renamed)
    assert choose(src).name == choose(renamed).name == "kineto"
    a, _ = import_paths([src], tmp_path / "a")
    b, _ = import_paths([renamed], tmp_path / "b")
    assert _kinds(a) == _kinds(b)


def test_built_trace_steps_flows_memory_counters_tracks(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "t.json", two_step_trace(), distributedInfo={"rank": 3, "world_size": 4})
    out, ctx = import_paths([src], tmp_path / "t")
    with open_profile(out) as prof:
        rows = prof.sql("SELECT name, kind, step, device_type, correlation FROM events ORDER BY ts, kind").to_pylist()
        by_name = {(r["name"], r["step"]): r for r in rows}
        # The kernel gets its step through its launch's correlation.
        assert by_name[("sgemm_a", 1)]["device_type"] == "cuda"
        assert by_name[("sgemm_a", 2)]["correlation"] == 2
        assert by_name[("ProfilerStep#2", 2)]["kind"] == "step"
        flows = [r for r in rows if r["kind"] == "other"]
        assert [f["correlation"] for f in flows] == [1, 1]
        mem = prof.sql("SELECT device_type, device, bytes, allocated, reserved FROM memory").to_pylist()
        assert mem == [{"device_type": "cuda", "device": 0, "bytes": 1024, "allocated": 1024, "reserved": 2048}]
        assert prof.sql("SELECT metric, value FROM counters").to_pylist() == [{"metric": "gpu_util", "value": 55.5}]
        tracks = prof.sql("SELECT pid, tid, process_name, thread_name FROM tracks ORDER BY pid").to_pylist()
        assert {"pid": 0, "tid": -1, "process_name": "GPU 0", "thread_name": None} in tracks
        assert {"pid": 100, "tid": 100, "process_name": None, "thread_name": "python main"} in tracks
        assert prof.metas[0]["ranks"] == [3]
    assert ctx.kinds["step"] == 2


def test_old_kineto_categories_and_string_streams(tmp_path: Path) -> None:
    # 2021-era traces: "Operator"/"Kernel"/"Runtime"/"Memcpy" and tid "stream 7".
    evs = [
        {"ph": "X", "cat": "Operator", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 2,
            "dur": 3,
            "args": {"correlation": 9, "external id": 4},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "add_kernel",
            "pid": 0,
            "tid": "stream 7",
            "ts": 6,
            "dur": 2,
            "args": {"correlation": 9, "external id": 4, "device": 0, "stream": 7},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": "stream 7",
            "ts": 9,
            "dur": 1,
            "args": {"bytes": 64},
        },
        {"ph": "X", "cat": "SomethingNew", "name": "mystery", "pid": 1, "tid": 1, "ts": 11, "dur": 1},
    ]
    out, _ = import_paths([write_trace(tmp_path / "old.json", evs)], tmp_path / "o")
    with open_profile(out) as prof:
        rows = {
            r["name"]: r for r in prof.sql("SELECT name, kind, cat, tid, external_id, bytes FROM events").to_pylist()
        }
    assert rows["aten::add"]["kind"] == "cpu_op"
    assert rows["add_kernel"]["kind"] == "kernel" and rows["add_kernel"]["tid"] == 7
    assert rows["add_kernel"]["external_id"] == 4
    assert rows["Memcpy HtoD"]["kind"] == "memcpy" and rows["Memcpy HtoD"]["bytes"] == 64
    assert rows["mystery"]["kind"] == "other" and rows["mystery"]["cat"] == "SomethingNew"


def test_begin_end_pairs_become_spans(tmp_path: Path) -> None:
    evs = [
        {"ph": "B", "name": "outer", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 9},
        {"ph": "B", "name": "never closed", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10},
    ]
    out, ctx = import_paths([write_trace(tmp_path / "be.json", evs)], tmp_path / "be")
    with open_profile(out) as prof:
        rows = prof.sql("SELECT name, ts, dur FROM events ORDER BY ts").to_pylist()
    assert [(r["name"], r["ts"], r["dur"]) for r in rows] == [
        ("outer", 0, 9000),
        ("inner", 2000, 3000),
        ("never closed", 10000, 0),
    ]
    assert any("never closed" in w or "B events" in w for w in ctx.warnings)


def test_mtia_trace_kinds(tmp_path: Path) -> None:
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {
            "ph": "X",
            "cat": "mtia_runtime",
            "name": "runFunction",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 2,
            "args": {"correlation": 5},
        },
        {
            "ph": "X",
            "cat": "mtia_ccp_events",
            "name": "mm_kernel",
            "pid": 0,
            "tid": 3,
            "ts": 4,
            "dur": 3,
            "args": {"correlation": 5, "stream": 3, "device": 0},
        },
    ]
    out, _ = import_paths([write_trace(tmp_path / "mtia.json", evs)], tmp_path / "m")
    with open_profile(out) as prof:
        rows = {r["name"]: r for r in prof.sql("SELECT name, kind, device_type FROM events").to_pylist()}
    assert rows["runFunction"] == {"name": "runFunction", "kind": "runtime", "device_type": "cpu"}
    assert rows["mm_kernel"] == {"name": "mm_kernel", "kind": "kernel", "device_type": "mtia"}


def test_header_keys_are_kept(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    out, _ = import_paths([src], tmp_path / "h")
    with open_profile(out) as prof:
        info = prof.metas[0]["trace_info"]
    for key in set(doc) - {"traceEvents", "deviceProperties", "distributedInfo"}:
        assert info[key] == doc[key]
    assert info["INFO"][0].startswith("INFO:")
