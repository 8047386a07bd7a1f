"""Small builders shared by tests: write tiny Kineto-style traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def span(name: str, cat: str, ts: float, dur: float, pid: int = 100, tid: int = 100, **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = args
    return ev


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, device: int = 0) -> dict[str, Any]:
    return span(
        name,
        "kernel",
        ts,
        dur,
        pid=device,
        tid=stream,
        correlation=corr,
        stream=stream,
        device=device,
        **{"External id": corr},
    )


def launch(ts: float, dur: float, corr: int, tid: int = 100) -> dict[str, Any]:
    return span("cudaLaunchKernel", "cuda_runtime", ts, dur, tid=tid, correlation=corr, **{"External id": corr})


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    doc = {"schemaVersion": 1, **top, "traceEvents": events}
    data = json.dumps(doc, indent=1).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def two_step_trace() -> list[dict[str, Any]]:
    """Two 1000 µs steps on one host thread, kernels launched inside each.

    Step 1 [0, 1000): op [0, 600) launching k1 (corr 1) at 100 (runtime [100, 110)),
    k1 on the device [200, 500); a memcpy [550, 650); the rest is idle.
    Step 2 [1000, 2000): op [1000, 1200) launching k2 (corr 2) at 1050 ([1050, 1060)),
    k2 [1100, 1900).
    """
    return [
        span("ProfilerStep#1", "user_annotation", 0, 1000),
        span("aten::mm", "cpu_op", 0, 600, **{"External id": 11}),
        launch(100, 10, 1),
        kernel("sgemm_a", 200, 300, 1),
        span(
            "Memcpy HtoD (Pageable -> Device)",
            "gpu_memcpy",
            550,
            100,
            pid=0,
            tid=7,
            correlation=3,
            bytes=4096,
            device=0,
            stream=7,
        ),
        span("ProfilerStep#2", "user_annotation", 1000, 1000),
        span("aten::mm", "cpu_op", 1000, 200, **{"External id": 12}),
        launch(1050, 10, 2),
        kernel("sgemm_a", 1100, 800, 2),
        {"ph": "s", "id": 1, "pid": 100, "tid": 100, "ts": 100, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 200, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "python main"}},
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": 100,
            "tid": 100,
            "ts": 120,
            "args": {
                "Device Type": 1,
                "Device Id": 0,
                "Addr": 1,
                "Bytes": 1024,
                "Total Allocated": 1024,
                "Total Reserved": 2048,
            },
        },
        {"ph": "C", "name": "gpu_util", "pid": 0, "ts": 500, "args": {"value": 55.5}},
    ]


def one_step_profile(tmp_path: Path) -> Path:
    """A profile of one step and nothing else (no samples, one rank)."""
    from aiprof.importers import import_paths

    f = write_trace(tmp_path / "t.json", [span("ProfilerStep#1", "user_annotation", 0, 1000)])
    out, _ = import_paths([f], tmp_path / "t.aiprof")
    return out


def write_corrupt_gzip(path: Path, data: bytes) -> Path:
    """``data`` gzipped with one byte three quarters in flipped: a stream that breaks
    part way (what a bad disk or a cut download leaves)."""
    import zlib

    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    z = bytearray(co.compress(data) + co.flush())
    z[len(z) * 3 // 4] ^= 0xFF
    path.write_bytes(bytes(z))
    return path
