"""Cambricon CNPerf timechart importer on the real MLU590 excerpt and built inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from aiprof.importers import choose, import_paths
from aiprof.store.reader import open_profile


def _import(src: Path, out: Path) -> tuple[Any, Any]:
    path, ctx = import_paths([src], out)
    return open_profile(path), ctx


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


def test_cnperf_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "cambricon/cnperf_timechart_MLU590_excerpt.json"
    assert choose(src).name == "cnperf"
    p, ctx = _import(src, tmp_path / "c")
    k = {
        (r["kind"], r["device_type"]): r["n"]
        for r in _rows(p, "select kind, device_type, count(*) n from events group by all")
    }
    assert k[("kernel", "mlu")] == 71
    assert k[("runtime", "cpu")] == 33  # cnInvokeKernel and other CN driver calls
    assert k[("instant", "cpu")] == 2  # the start_tracing / stop markers
    assert sum(k.values()) == 248  # every event (this excerpt has no empty {} one; see the built test)
    first = _rows(
        p,
        "select name, ts, dur, grid, correlation, device, pid, tid from events where kind='kernel' order by ts limit 1",
    )[0]
    assert first["name"].startswith("void MLUTransposeKernel3DDefaultPipe3Union1<short")
    assert first["dur"] == 42000 and first["grid"] == "[4,12,1]" and first["device"] == 0
    assert first["correlation"] == 1995  # the id of the flow host -> device that ends on it
    # Unsorted µs floats: ts 0 is the earliest event, not the first written.
    assert _rows(p, "select min(ts) t from events")[0]["t"] == 0
    tracks = _rows(
        p, "select pid, tid, process_name, thread_name from tracks where thread_name is not null order by thread_name"
    )
    names = {(r["process_name"], r["thread_name"]) for r in tracks}
    assert ("Device0 task[Async]", "[PID 138269] Ctx:1 Q:1") in names
    assert first["pid"] == next(r["pid"] for r in tracks if r["process_name"] == "Device0 task[Async]")
    meta = p.metas[0]
    dev = meta["devices"]
    assert len(dev) == 8 and dev[0]["name"] == "MLU590-M9" and dev[0]["type"] == "mlu"
    assert dev[0]["peak_bandwidth_Bps"] == 2764080 * 1e6
    assert dev[0]["core_count"] == 48
    assert "peak_flops" not in dev[0]  # CNPerf wrote zeros: unknown, not zero
    assert meta["clock"] == "unix" and meta["time_origin_ns"] >= 1735281619128548180
    # The excerpt keeps the host ends of 70 flows but not the spans around them: said.
    assert any("70 flow ends" in w for w in ctx.warnings)


def test_cnperf_renamed_unknown(shared_data: Path, tmp_path: Path) -> None:
    src = tmp_path / "unknown"
    shutil.copy(shared_data / "cambricon/cnperf_timechart_MLU590_excerpt.json", src)
    assert choose(src).name == "cnperf"


def test_cnperf_built_memcpy_and_flow(tmp_path: Path) -> None:
    doc = {
        "metadata": {
            "systemInformation": {"07#cnperf version": "5.13.1", "08#device count": 1, "09#device name": "MLU370"}
        },
        "traceEvents": [
            {},
            {
                "ph": "X",
                "cat": "memcpy",
                "pid": "Device0 task[Async]",
                "tid": "Q:1",
                "ts": 10.5,
                "dur": 2.0,
                "name": "Memcpy HtoD",
                "args": {"size": 4096, "bandwidth": "2.0 GB/s"},
            },
            {"cat": "", "ph": "X", "tid": "stack trace", "ts": 5.0, "pid": 42, "dur": 1.0, "name": "cnMemcpyAsync"},
            {"name": "flow event", "ph": "s", "cat": "memcpy", "tid": "stack trace", "id": 7, "pid": 42, "ts": 5.5},
            {
                "name": "flow event",
                "ph": "f",
                "bp": "e",
                "cat": "memcpy",
                "id": 7,
                "pid": "Device0 task[Async]",
                "tid": "Q:1",
                "ts": 10.5,
            },
        ],
    }
    src = tmp_path / "t.json"
    src.write_text(json.dumps(doc))
    assert choose(src).name == "cnperf"
    p, ctx = _import(src, tmp_path / "b")
    rows = _rows(
        p, "select name, kind, device_type, ts, bytes, correlation, args from events where dur > 0 order by ts"
    )
    assert [(r["name"], r["kind"], r["device_type"], r["ts"], r["correlation"]) for r in rows] == [
        ("cnMemcpyAsync", "runtime", "cpu", 0, 7),
        ("Memcpy HtoD", "memcpy", "mlu", 5500, 7),
    ]
    assert rows[1]["bytes"] == 4096 and "2.0 GB/s" in rows[1]["args"]
    assert not ctx.warnings
    assert p.metas[0]["devices"][0]["name"] == "MLU370"


def test_cnperf_wrong_content_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "cnperf_bad.json"
    bad.write_text('{"metadata": {"x": "cnperf"}, "traceEvents": []}')
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(bad), "-f", "cnperf", "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("aiprof: error:") and "Traceback" not in r.stderr
