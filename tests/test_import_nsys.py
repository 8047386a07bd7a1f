"""Nsight Systems SQLite importer: real exports (2022.4 / schema 3.0.0 and 2025.6 / 3.24.7)
plus small exports the tests build or alter themselves."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis.base import run
from aiprof.errors import ImportFormatError
from aiprof.importers import choose, import_paths
from aiprof.importers.nvidia.nsys import export_report
from aiprof.store import open_profile
from aiprof.store.vocabulary import STEP_NAME_RE

V2022 = "nsys/nsys_2022.4_vecadd_streams_T4_report1.sqlite"
V2025 = "nsys/nsys_2025.6_laplace_openacc_report1.sqlite"


def _import(src: Path, out: Path) -> tuple[Any, Any]:
    path, ctx = import_paths([src], out)
    return open_profile(path), ctx


def _rows(prof: Any, sql: str) -> list[dict[str, Any]]:
    return list(prof.sql(sql).to_pylist())


@pytest.fixture(scope="module")
def vecadd(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("nsys") / "vecadd.aiprof"
    prof, ctx = _import(shared_data / V2022, out)
    yield prof, ctx
    prof.close()


def test_vecadd_kernels(vecadd: Any) -> None:
    prof, _ = vecadd
    k = _rows(prof, "SELECT * FROM events WHERE kind = 'kernel' ORDER BY ts")
    assert [r["name"] for r in k] == ["vecAdd(double *, double *, double *, int)"] * 2
    assert [r["dur"] for r in k] == [486112338 - 486107954, 486202896 - 486198769]  # 4384, 4127 ns
    assert [r["tid"] for r in k] == [13, 14]  # streams
    assert {r["device"] for r in k} == {0}
    assert {r["device_type"] for r in k} == {"cuda"}
    assert {r["pid"] for r in k} == {142385}
    assert {r["grid"] for r in k} == {"[16,1,1]"}
    assert {r["block"] for r in k} == {"[256,1,1]"}
    args = json.loads(k[0]["args"])
    assert args["registersPerThread"] == 16
    assert args["staticSharedMemory"] == 0 and args["dynamicSharedMemory"] == 0
    assert args["shortName"] == "vecAdd" and args["mangledName"] == "_Z6vecAddPdS_S_i"
    assert args["launchType"] == "Regular"  # an ENUM reference, resolved to its label


def test_vecadd_memcpy(vecadd: Any) -> None:
    prof, _ = vecadd
    m = _rows(prof, "SELECT * FROM events WHERE kind = 'memcpy' ORDER BY ts")
    assert len(m) == 6
    assert {r["bytes"] for r in m} == {32768}
    directions = [json.loads(r["args"])["direction"] for r in m]
    assert directions == ["HtoD", "HtoD", "DtoH", "HtoD", "HtoD", "DtoH"]
    assert {json.loads(r["args"])["host_memory"] for r in m} == {"pageable"}
    assert m[0]["name"] == "Memcpy HtoD (Pageable -> Device)"
    assert m[2]["name"] == "Memcpy DtoH (Device -> Pageable)"
    assert m[0]["dur"] == 485954261 - 485949108


def test_vecadd_api_calls_and_correlation(vecadd: Any) -> None:
    prof, _ = vecadd
    api = _rows(prof, "SELECT * FROM events WHERE cat = 'cuda_api' ORDER BY ts")
    assert len(api) == 24
    assert sum(r["kind"] == "runtime" for r in api) == 23
    assert [r["name"] for r in api if r["kind"] == "driver"] == ["cuModuleGetLoadingMode"]
    names = [r["name"] for r in api]
    assert names.count("cudaLaunchKernel") == 2 and names.count("cudaMemcpyAsync") == 6
    # The version suffix is dropped from the name but kept in args.
    launch = next(r for r in api if r["name"] == "cudaLaunchKernel")
    assert json.loads(launch["args"])["function"] == "cudaLaunchKernel_v7000"
    assert launch["device_type"] == "cpu" and launch["tid"] == 142385
    linked = _rows(
        prof,
        "SELECT h.name AS api, h.correlation, d.name AS kernel, d.dur FROM events h JOIN events d "
        "ON h.correlation = d.correlation AND d.kind = 'kernel' WHERE h.device_type = 'cpu' ORDER BY h.ts",
    )
    assert [(r["api"], r["correlation"], r["dur"]) for r in linked] == [
        ("cudaLaunchKernel", 114, 4384),
        ("cudaLaunchKernel", 118, 4127),
    ]


def test_vecadd_sync_osrt_and_totals(vecadd: Any) -> None:
    prof, ctx = vecadd
    sync = _rows(prof, "SELECT * FROM events WHERE kind = 'sync'")
    assert len(sync) == 1 and sync[0]["correlation"] == 120 and sync[0]["name"] == "Event sync"
    osrt = _rows(prof, "SELECT kind, count(*) AS n FROM events WHERE cat = 'osrt' GROUP BY kind ORDER BY kind")
    # OS runtime calls (poll, ioctl, sem_wait...) are host work of no kind of their own,
    # not CUDA runtime calls; the OSRT start/finish marks are instants.
    assert osrt == [{"kind": "instant", "n": 3}, {"kind": "other", "n": 808}]
    assert ctx.kinds == {"other": 808, "runtime": 23, "memcpy": 6, "instant": 3, "kernel": 2, "driver": 1, "sync": 1}


def _overview(prof: Any, section: str) -> dict[str, tuple[float, float] | None]:
    rows = run(prof, "overview").rows
    return {
        r["category"]: None if r["time_us"] is None else (round(r["time_us"], 3), round(r["percent"], 3))
        for r in rows
        if r["section"] == section
    }


def test_vecadd_breakdown_runtime_is_cuda_runtime_only(vecadd: Any) -> None:
    """The breakdown's runtime is the CUDA API calls (cudaMalloc's 299.6 ms, the CUDA
    context's creation, most of it), not the OS calls around them (poll 399.6 ms, ioctl
    277.0 ms on other threads). Without steps the window is the span of the CUDA work:
    from cuModuleGetLoadingMode (161.800928 ms) to the last cudaFree (464.218105 ms)."""
    prof, _ = vecadd
    b = _overview(prof, "breakdown")
    assert b["runtime"] == (300121.005, 99.241)  # was 449,710.751 µs, 99.546%, with the OS calls
    assert b["other"] == (2257.451, 0.746)
    assert b["kernel"] == (8.511, 0.003) and b["memcpy"] == (30.21, 0.01)
    # No host operator, NVTX range or DataLoader span in the report: not measured (null), not 0.
    assert b["cpu_exec"] is None and b["dataloader"] is None
    # The runtime figure is the CUDA API calls (one thread, none overlap: 300,158.751 µs)
    # less the 37.746 µs the device's copies and kernels take first (priority rule).
    (u,) = _rows(prof, "SELECT sum(dur)::BIGINT AS t FROM events WHERE cat = 'cuda_api'")
    assert u["t"] == 300158751 and u["t"] - 300121005 == 37746
    (w,) = run(prof, "steps").rows
    assert (w["step"], w["start_us"], round(w["duration_us"], 3)) == (None, 161800.928, 302417.177)
    # HTA's device figures are of the device's own active span (463.508 -> 463.811 ms).
    assert _overview(prof, "device") == {
        "idle": (260.514, 86.002),
        "compute": (8.511, 2.81),
        "non_compute": (33.892, 11.189),
    }
    assert _overview(prof, "utilization") == {"device_busy": (42.403, 0.014)}
    # Nothing but CUDA calls in the runtime view and in the attribution's causes: the
    # first cudaMalloc is the CUDA context's creation, the other allocator calls 135.6 µs.
    causes = {r["cause"]: round(r["time_us"], 1) for r in run(prof, "attribution").rows}
    assert causes["context_init"] == 299624.0 and causes["memory_mgmt"] == 135.6
    assert causes["unaccounted"] == 2257.5


def test_vecadd_meta_devices_tracks(vecadd: Any) -> None:
    prof, ctx = vecadd
    meta = prof.metas[0]
    # Session-relative ns + the session's wall-clock start; the first event is an OSRT row.
    assert meta["clock"] == "unix"
    assert meta["time_origin_ns"] == 1736083415788563960 + 22441019
    first = _rows(prof, "SELECT min(ts) AS t FROM events")[0]["t"]
    assert first == 0
    (dev,) = meta["devices"]
    assert dev["name"] == "Tesla T4" and dev["compute_capability"] == "7.5"
    assert dev["numSms"] == 40 and dev["memory_bytes"] == 15642329088 and dev["index"] == 0
    assert meta["hosts"] == ["instance-20241130-200210"]
    assert meta["trace_info"]["export_schema"] == "3.0.0"
    assert meta["sources"][0]["nsys_version"] == "2022.4.2.1"
    tracks = _rows(prof, "SELECT * FROM tracks")
    assert {t["process_name"] for t in tracks} == {"./lab4_VectorAdd_Streams"}
    assert {(t["device_type"], t["tid"]) for t in tracks if t["device_type"] == "cuda"} == {
        ("cuda", 13),
        ("cuda", 14),
        ("cuda", -1),
    }
    assert any(t["thread_name"] == "lab4_VectorAdd_" for t in tracks)
    # PROFILER_OVERHEAD is not imported: it is said, not dropped silently.
    assert any("PROFILER_OVERHEAD (32)" in w for w in ctx.warnings)


def test_2025_export_without_cuda_trace(shared_data: Path, tmp_path: Path) -> None:
    prof, ctx = _import(shared_data / V2025, tmp_path / "laplace.aiprof")
    with prof:
        kinds = _rows(prof, "SELECT kind, cat, count(*) AS n FROM events GROUP BY ALL ORDER BY kind")
        assert kinds == [{"kind": "instant", "cat": "osrt", "n": 1}, {"kind": "other", "cat": "osrt", "n": 797}]
        assert _rows(prof, "SELECT DISTINCT pid FROM events") == [{"pid": 158702}]
        first = _rows(prof, "SELECT name, dur FROM events WHERE cat = 'osrt' AND dur > 0 ORDER BY ts LIMIT 1")[0]
        assert first == {"name": "fopen", "dur": 933927407 - 933878145}
        meta = prof.metas[0]
        assert meta["trace_info"]["export_schema"] == "3.24.7"
        assert meta["time_origin_ns"] == 1776156712269666776 + 586129003
        (dev,) = meta["devices"]
        assert dev["name"] == "Quadro RTX 6000" and dev["numSms"] == 72 and dev["index"] == 0
        assert {t["process_name"] for t in _rows(prof, "SELECT * FROM tracks")} == {"./laplace_gpu"}
        assert meta["trace_info"]["tables_not_imported"]["SCHED_EVENTS"] == 32930
        # No CUDA trace: no CUDA runtime time. The 1.35 s of sem_wait, 0.46 s of poll and
        # 0.28 s of ioctl are OS calls (was: runtime 1,054,838.4 µs, 97.529%).
        assert [r for r in run(prof, "overview").rows if r["category"] == "runtime" and r["time_us"] > 0] == []
        assert run(prof, "runtime").rows == []
        waits = _rows(prof, "SELECT round(sum(dur) / 1e6, 3) AS ms FROM events WHERE name = 'sem_wait'")
        assert waits == [{"ms": 1346.715}]
    assert any("no CUDA trace" in w for w in ctx.warnings)


def test_detection_by_content(shared_data: Path, tmp_path: Path) -> None:
    for name in (V2022, V2025):
        dst = tmp_path / "unknown"
        shutil.copy(shared_data / name, dst)
        assert choose(dst).name == "nsys"
        assert choose(shared_data / name).name == "nsys"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", *args], capture_output=True, text=True, env=env, check=False)


def test_other_sqlite_is_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "app.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.execute("INSERT INTO users VALUES (1, 'a')")
    con.commit()
    con.close()
    r = _cli("import", str(db), "-o", str(tmp_path / "o.aiprof"))
    assert r.returncode == 2
    assert "not an Nsight Systems export" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _cli("import", "-f", "nsys", str(db), "-o", str(tmp_path / "o.aiprof"))
    assert r.returncode == 2 and "not an Nsight Systems export" in r.stderr
    assert not (tmp_path / "o.aiprof").exists()


def test_damaged_schema_is_exit_2(shared_data: Path, tmp_path: Path) -> None:
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes((shared_data / V2022).read_bytes()[: 87 * 4096])
    r = _cli("import", str(bad), "-o", str(tmp_path / "o.aiprof"))
    assert r.returncode == 2
    assert "damaged SQLite database" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_damaged_table_keeps_the_rest(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / V2022
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    page = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    data = bytearray(src.read_bytes())
    data[(root - 1) * page : root * page] = b"\xff" * page  # the kernel table's only page
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(bytes(data))
    prof, ctx = _import(bad, tmp_path / "broken.aiprof")
    with prof:
        assert ctx.kinds["kernel"] == 0
        assert ctx.kinds["memcpy"] == 6 and ctx.kinds["runtime"] == 23 and ctx.kinds["other"] == 808
        assert prof.metas[0]["partial"] is True
    assert any("CUPTI_ACTIVITY_KIND_KERNEL is damaged" in w for w in ctx.warnings)


def _add_tables(db: Path) -> None:
    """NVTX ranges and marks, a memset, GPU metrics: none of the real samples has them."""
    con = sqlite3.connect(db)
    tid = 283863800753201  # the vecadd main thread
    con.executescript(
        """
        CREATE TABLE NVTX_EVENTS (
            start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
            category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
            textId INTEGER, -- REFERENCES StringIds(id)
            domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL,
            uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
            start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
            streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
            bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER -- REFERENCES ENUM_CUDA_MEM_KIND(id)
        );
        CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, typeName TEXT,
            metricId INTEGER, metricName TEXT);
        CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, metricId INTEGER, value INTEGER);
        INSERT INTO StringIds VALUES (90001, 'ProfilerStep#7');
        """
    )
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId, category) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (485000000, None, 75, "my_domain", tid, None, 5, None),  # NvtxDomainCreate
            (485000000, None, 33, "io", tid, None, 5, 2),  # NvtxCategory
            (485900000, 486300000, 59, "train step 3", tid, None, 0, None),  # push/pop, a step
            (485910000, 486100000, 59, "forward", tid, None, 5, 2),
            (486000000, 486000000, 34, "checkpoint", tid, None, 0, None),  # mark
            (486110000, 486200000, 60, None, tid, 90001, 0, None),  # start/end, name by textId
            (486210000, None, 59, "never closed", tid, None, 0, None),
        ],
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (486000100, 486000600, 0, 1, 13, 200, 283863800610816, 0, 4096, None, 2),
    )
    con.executemany(
        "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?, ?, ?)",
        [(0x10000, 0, "GPU 0", 1, "SMs Active [Throughput %]"), (0x10000, 0, "GPU 0", 2, "GPC Clock Frequency [MHz]")],
    )
    con.executemany(
        "INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
        [(485000000, 0x10000, 1, 37), (485000000, 0x10000, 2, 1590), (485100000, 0x10000, 1, 41)],
    )
    con.commit()
    con.close()


def test_nvtx_memset_gpu_metrics(shared_data: Path, tmp_path: Path) -> None:
    db = tmp_path / "more.sqlite"
    shutil.copy(shared_data / V2022, db)
    os.chmod(db, stat.S_IRUSR | stat.S_IWUSR)
    _add_tables(db)
    prof, ctx = _import(db, tmp_path / "more.aiprof")
    with prof:
        nv = _rows(prof, "SELECT kind, name, dur, step, args FROM events WHERE cat = 'nvtx' ORDER BY ts")
        assert [(r["kind"], r["name"]) for r in nv] == [
            ("step", "train step 3"),
            ("user_annotation", "forward"),
            ("instant", "checkpoint"),
            ("step", "ProfilerStep#7"),
            ("user_annotation", "never closed"),
        ]
        assert [r["step"] for r in nv if r["kind"] == "step"] == [3, 7]
        assert nv[0]["dur"] == 400000 and nv[4]["dur"] == 0
        fwd = json.loads(nv[1]["args"])
        assert fwd["domain"] == "my_domain" and fwd["category_name"] == "io" and fwd["nvtx_type"] == "NvtxPushPopRange"
        # Kernel 1 (launched at 485965513) lies inside "train step 3": it takes the step via its launch.
        steps = _rows(prof, "SELECT step FROM events WHERE kind = 'kernel' ORDER BY ts")
        assert steps[0]["step"] == 3
        ms = _rows(prof, "SELECT name, bytes, dur, tid FROM events WHERE kind = 'memset'")
        assert ms == [{"name": "Memset (Device)", "bytes": 4096, "dur": 500, "tid": 13}]
        c = _rows(prof, "SELECT metric, unit, value, device, ts FROM counters ORDER BY ts, metric")
        assert [(r["metric"], r["unit"], r["value"], r["device"]) for r in c] == [
            ("GPC Clock Frequency", "MHz", 1590.0, 0),
            ("SMs Active", "%", 37.0, 0),
            ("SMs Active", "%", 41.0, 0),
        ]
        origin = 22441019
        assert c[0]["ts"] == 485000000 - origin
    assert any("1 NVTX ranges never ended" in w for w in ctx.warnings)


def test_export_without_enum_tables(tmp_path: Path) -> None:
    """A minimal export with no ENUM_* tables and no session start: fallback numbering, trace clock."""
    db = tmp_path / "mini.sqlite"
    con = sqlite3.connect(db)
    con.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, bytes INT, copyKind INT, srcKind INT, dstKind INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, demangledName INT, gridX INT, gridY INT, gridZ INT,
            blockX INT, blockY INT, blockZ INT);
        INSERT INTO StringIds VALUES (1, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)');
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (1000, 2000, 1, 1, 7, 5, 4278190080, 64, 2, 2, 1);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (3000, 9000, 1, 1, 7, 6, 4278190080, 1, 2, 1, 1, 512, 1, 1);
        """
    )
    con.commit()
    con.close()
    prof, ctx = _import(db, tmp_path / "mini.aiprof")
    with prof:
        rows = _rows(prof, "SELECT kind, name, ts, dur, device, pid, tid, args FROM events ORDER BY ts")
        assert rows[0]["name"] == "Memcpy DtoH (Device -> Pinned)"
        assert json.loads(rows[0]["args"])["host_memory"] == "pinned"
        assert rows[1]["kind"] == "collective" and rows[1]["dur"] == 6000 and rows[1]["ts"] == 2000
        assert rows[1]["pid"] == 255 and rows[1]["device"] == 1 and rows[1]["tid"] == 7
        assert prof.metas[0]["clock"] == "trace" and prof.metas[0]["time_origin_ns"] == 1000
    assert any("ENUM_CUDA_MEM_KIND" in w for w in ctx.warnings)


def test_nsys_rep_without_nsys(tmp_path: Path) -> None:
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"not really a report")
    env = dict(os.environ, PATH=str(tmp_path / "empty"))
    r = _cli("import", str(rep), "-o", str(tmp_path / "o.aiprof"), env=env)
    assert r.returncode == 2
    assert "nsys export --type sqlite" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_nsys_rep_converted_by_nsys_on_path(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in nsys (the real one does not run here) that writes the sample export where asked."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "a = sys.argv[1:]\n"
        "assert a[:3] == ['export', '--type', 'sqlite'], a\n"
        f"shutil.copy({str(shared_data / V2022)!r}, a[a.index('--output') + 1])\n"
    )
    fake.chmod(0o755)
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"binary report")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert export_report(rep, tmp_path).name == "report1.sqlite"
    prof, ctx = _import(rep, tmp_path / "rep.aiprof")
    with prof:
        assert ctx.kinds["kernel"] == 2
        assert prof.metas[0]["sources"][0]["path"].endswith("report1.nsys-rep")


def test_nsys_rep_export_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text("#!/bin/sh\necho 'ERROR: cannot open report' >&2\nexit 3\n")
    fake.chmod(0o755)
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"x")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ImportFormatError, match="cannot open report"):
        export_report(rep, tmp_path)


@pytest.mark.parametrize(
    ("name", "step"),
    [("ProfilerStep#12", 12), ("step 3", 3), ("Step_4", 4), ("train_step 5", 5), ("iteration 6", 6), ("iter#7", 7)],
)
def test_step_names(name: str, step: int) -> None:
    m = STEP_NAME_RE.match(name)
    assert m is not None and int(m.group(1)) == step


@pytest.mark.parametrize("name", ["forward", "step", "stepper 3", "optimizer.step", "backward 2"])
def test_not_step_names(name: str) -> None:
    assert STEP_NAME_RE.match(name) is None
