"""``aiprof timechart``: Chrome Trace JSON that re-imports to the same events."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import import_paths
from aiprof.store import open_profile

KINETO = [
    "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "kineto/V100/df_index_resolver.json.gz",
    "kineto/A100-nccl-parser/nccl_data.json.gz",
    "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "kineto/cuda-event-sync/event_sync_trace.json.gz",
    "kineto/triton/triton_example.json.gz",
]

#: What must survive the round trip, per table. ``ts`` is compared on the absolute
#: time axis (origin + ts): a re-import picks its own origin, the instants are the same.
EVENT_COLS = "kind, cat, name, abs_ts, dur, pid, tid, correlation, external_id, device_type, device, step, rank"
MEMORY_COLS = "abs_ts, bytes, allocated, reserved, addr, device_type, device"


def _rows(path: Path, table: str, cols: str) -> list[tuple[Any, ...]]:
    with open_profile(path) as p:
        origin = p.time_origin_ns
        q = f"SELECT {cols} FROM (SELECT *, ts + {origin}::HUGEINT AS abs_ts FROM {table}) ORDER BY ALL"
        return [tuple(r.values()) for r in p.sql(q).to_pylist()]


def _timechart(profile: Path, out: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "timechart", str(profile), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout


@pytest.mark.parametrize("rel", KINETO)
def test_round_trip_keeps_every_event(shared_data: Path, tmp_path: Path, rel: str) -> None:
    src = shared_data / rel
    a, _ = import_paths([src], tmp_path / "a.aiprof")
    trace = tmp_path / "trace.json.gz"
    _timechart(a, trace)
    b, _ = import_paths([trace], tmp_path / "b.aiprof")
    ea, eb = _rows(a, "events", EVENT_COLS), _rows(b, "events", EVENT_COLS)
    assert len(ea) == len(eb)
    assert ea == eb
    assert _rows(a, "memory", MEMORY_COLS) == _rows(b, "memory", MEMORY_COLS)
    with open_profile(a) as pa_, open_profile(b) as pb:
        assert pb.devices == pa_.devices or [d["name"] for d in pb.devices] == [d["name"] for d in pa_.devices]
        assert pb.metas[0]["ranks"] == pa_.metas[0]["ranks"]


def test_v100_relative_ts_identical_to_the_ns(shared_data: Path, tmp_path: Path) -> None:
    a, _ = import_paths([shared_data / KINETO[0]], tmp_path / "a.aiprof")
    _timechart(a, tmp_path / "t.json")
    b, _ = import_paths([tmp_path / "t.json"], tmp_path / "b.aiprof")
    cols = "kind, name, ts, dur"
    with open_profile(a) as pa_, open_profile(b) as pb:
        qa = pa_.sql(f"SELECT {cols} FROM events ORDER BY ALL").to_pylist()
        qb = pb.sql(f"SELECT {cols} FROM events ORDER BY ALL").to_pylist()
    assert qa == qb and len(qa) == 68656


def test_trace_shape_for_perfetto(shared_data: Path, tmp_path: Path) -> None:
    a, _ = import_paths([shared_data / KINETO[0]], tmp_path / "a.aiprof")
    out = tmp_path / "t.json.gz"
    _timechart(a, out)
    with gzip.open(out, "rt") as f:
        doc = json.load(f)
    evs = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ns" and isinstance(doc["baseTimeNanoseconds"], int)
    meta = [e for e in evs if e["ph"] == "M"]
    assert {"process_name", "thread_name"} <= {e["name"] for e in meta}
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in evs)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    host = [e for e in evs if e.get("cat") == "cpu_op"]
    assert kernels and host
    assert {(e["pid"], e["tid"]) for e in kernels}.isdisjoint({(e["pid"], e["tid"]) for e in host})
    assert "stream 7" in names[(kernels[0]["pid"], kernels[0]["tid"])]
    flows = [e for e in evs if e["ph"] in ("s", "f")]
    assert len(flows) == 23234 and all("id" in e for e in flows)
    assert {e["ph"] for e in evs} >= {"X", "s", "f", "M", "i"}
    # µs with exactly three decimals, exact from the int ns.
    raw = gzip.open(out, "rt").read()
    assert '"ts":3488.500,' in raw and '"dur":4.928,' in raw
    ts = [e["ts"] for e in evs if "ts" in e]
    assert ts == sorted(ts)


def test_counters_written_as_C_events(tmp_path: Path) -> None:
    """A small trace with counters (built here): they come back as C events and re-import."""
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.5, "dur": 3.25},
            {"ph": "C", "name": "gpu_util", "pid": 0, "ts": 10.0, "args": {"gpu_util": 55.5}},
            {"ph": "C", "name": "gpu_util", "pid": 0, "ts": 12.0, "args": {"gpu_util": 60}},
        ]
    }
    src = tmp_path / "small.json"
    src.write_text(json.dumps(trace))
    a, _ = import_paths([src], tmp_path / "a.aiprof")
    _timechart(a, tmp_path / "out.json")
    doc = json.loads((tmp_path / "out.json").read_text())
    cs = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [e["args"]["gpu_util"] for e in cs] == [55.5, 60.0]
    b, _ = import_paths([tmp_path / "out.json"], tmp_path / "b.aiprof")
    with open_profile(a) as pa_, open_profile(b) as pb:
        q = "SELECT metric, value, ts FROM counters ORDER BY ts"
        assert pa_.sql(q).to_pylist() == pb.sql(q).to_pylist()
