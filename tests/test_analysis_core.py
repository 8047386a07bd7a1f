"""Core analysers on small traces whose answers are worked out by hand, and on real ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import Query, run, views
from aiprof.errors import QueryError
from aiprof.importers import import_paths
from aiprof.store import Profile, open_profile
from kineto_builders import kernel, launch, span, two_step_trace, write_trace


@pytest.fixture()
def two_steps(tmp_path: Path) -> Profile:
    out, _ = import_paths([write_trace(tmp_path / "t.json", two_step_trace())], tmp_path / "t")
    return open_profile(out)


def _rows(prof: Profile, view: str, *filters: str, **kw: Any) -> list[dict[str, Any]]:
    return run(prof, view, Query.parse(list(filters), kw.get("sort"), kw.get("limit"), kw.get("offset", 0))).rows


def test_breakdown_counts_each_instant_once_in_priority(two_steps: Profile) -> None:
    got = {(r["step"], r["category"]): r["time_us"] for r in _rows(two_steps, "overview", "section=breakdown")}
    # Step 1: kernel [200,500); memcpy [550,650); runtime [100,110); op [0,600).
    assert [got[(1, c)] for c in ("kernel", "memcpy", "memset", "communication", "runtime", "cpu_exec", "other")] == [
        300,
        100,
        0,
        0,
        10,
        240,
        350,
    ]
    # Step 2: kernel [1100,1900); runtime [1050,1060); op [1000,1200).
    assert [got[(2, c)] for c in ("kernel", "runtime", "cpu_exec", "other")] == [800, 10, 90, 100]
    assert [got[(None, c)] for c in ("kernel", "memcpy", "runtime", "cpu_exec", "other")] == [1100, 100, 20, 330, 450]
    pcts = {r["category"]: r["percent"] for r in _rows(two_steps, "overview", "section=breakdown", "step=null")}
    assert pcts["kernel"] == pytest.approx(55.0)
    assert sum(pcts.values()) == pytest.approx(100.0)


def test_device_breakdown_follows_hta_window(two_steps: Profile) -> None:
    # Two steps: HTA keeps device work launched before the last step began, and only
    # work with a launch. That is the first kernel alone: busy and all compute.
    dev = {r["category"]: r for r in _rows(two_steps, "overview", "section=device")}
    assert dev["idle"]["time_us"] == 0 and dev["compute"]["percent"] == 100.0
    util = _rows(two_steps, "overview", "section=utilization")[0]
    assert util["time_us"] == 1200 and util["percent"] == pytest.approx(60.0)


def test_steps_view(two_steps: Profile) -> None:
    s = _rows(two_steps, "steps")
    assert [
        (r["step"], r["duration_us"], r["device_busy_us"], r["idle_us"], r["compute_us"], r["non_compute_us"])
        for r in s
    ] == [(1, 1000, 400, 600, 300, 100), (2, 1000, 800, 200, 800, 0)]


def test_kernels_and_operators(two_steps: Profile) -> None:
    k = _rows(two_steps, "kernels")
    assert len(k) == 1
    r = k[0]
    assert (r["name"], r["count"], r["total_us"], r["mean_us"], r["median_us"], r["min_us"], r["max_us"], r["pct"]) == (
        "sgemm_a",
        2,
        1100,
        550,
        550,
        300,
        800,
        100,
    )
    ops = {o["name"]: o for o in _rows(two_steps, "operators")}
    mm = ops["aten::mm"]
    assert (mm["calls"], mm["host_total_us"], mm["host_self_us"], mm["device_self_us"], mm["kernels"]) == (
        2,
        800,
        780,
        1100,
        2,
    )


def test_idle_causes(tmp_path: Path) -> None:
    evs = [
        span("ProfilerStep#0", "user_annotation", 0, 300),
        launch(0, 5, 1),
        kernel("k1", 10, 10, 1),
        launch(50, 5, 2),
        kernel("k2", 60, 10, 2),  # launched after k1 ended: host wait 40
        launch(55, 5, 3),
        kernel("k3", 75, 5, 3),  # queued, 5 µs gap: kernel wait
        launch(56, 5, 4),
        kernel("k4", 200, 10, 4),  # queued, 120 µs gap: other
    ]
    out, _ = import_paths([write_trace(tmp_path / "i.json", evs)], tmp_path / "i")
    with open_profile(out) as prof:
        (r,) = _rows(prof, "idle")
    assert (r["stream"], r["ops"], r["host_wait_us"], r["kernel_wait_us"], r["other_us"], r["idle_us"]) == (
        7,
        4,
        40,
        5,
        120,
        165,
    )
    assert r["span_us"] == 200 and r["busy_us"] == 35


def test_memory_peak_and_owners(tmp_path: Path) -> None:
    def mem(ts: float, addr: int, b: int, alloc: int) -> dict[str, Any]:
        return {
            "ph": "i",
            "name": "[memory]",
            "pid": 100,
            "tid": 100,
            "ts": ts,
            "s": "t",
            "args": {
                "Device Type": 1,
                "Device Id": 0,
                "Addr": addr,
                "Bytes": b,
                "Total Allocated": alloc,
                "Total Reserved": 4096,
            },
        }

    evs = [
        span("aten::empty", "cpu_op", 0, 10),
        mem(1, 1, 1000, 1000),
        span("aten::mm", "cpu_op", 20, 10),
        mem(21, 2, 2000, 3000),
        span("aten::add", "cpu_op", 40, 10),
        mem(41, 3, 500, 3500),
        mem(45, 1, -1000, 2500),
        mem(60, 2, -2000, 500),
    ]
    out, _ = import_paths([write_trace(tmp_path / "m.json", evs)], tmp_path / "m")
    with open_profile(out) as prof:
        rows = _rows(prof, "memory")
    assert {r["operator"]: r["live_bytes"] for r in rows} == {"aten::empty": 1000, "aten::mm": 2000, "aten::add": 500}
    assert {r["peak_allocated_bytes"] for r in rows} == {3500}
    assert rows[0]["peak_ts_us"] == 41 and rows[0]["operator"] == "aten::mm"


def test_counters_view(two_steps: Profile) -> None:
    (r,) = _rows(two_steps, "counters")
    assert (r["metric"], r["samples"], r["min"], r["max"], r["last"]) == ("gpu_util", 1, 55.5, 55.5, 55.5)


def test_query_filters_sort_and_page(two_steps: Profile) -> None:
    ev = _rows(two_steps, "events", "kind=kernel,memcpy", sort="-dur")
    assert [e["name"] for e in ev] == ["sgemm_a", "sgemm_a", "Memcpy HtoD (Pageable -> Device)"]
    res = run(two_steps, "events", Query.parse(["kind!=other,instant"], "ts", 2, 1))
    assert res.total == 9 and [e["name"] for e in res.rows] == ["aten::mm", "cudaLaunchKernel"]
    assert [e["name"] for e in _rows(two_steps, "events", "name~SGEMM")] == ["sgemm_a", "sgemm_a"]
    assert [e["dur_us"] for e in _rows(two_steps, "events", "kind=kernel", "dur_us=300..800", sort="dur")] == [300, 800]
    assert [e["dur_us"] for e in _rows(two_steps, "events", "kind=kernel", "dur_us>300")] == [800]
    j = Query.from_json(
        {
            "filters": [{"column": "kind", "op": "in", "values": ["kernel"]}],
            "sort": [{"column": "ts", "desc": True}],
            "limit": 1,
        }
    )
    assert run(two_steps, "events", j).rows[0]["ts_us"] == 1100


def test_bad_queries_are_user_errors(two_steps: Profile) -> None:
    with pytest.raises(QueryError, match="no column 'nope'"):
        _rows(two_steps, "kernels", "nope=1")
    with pytest.raises(QueryError, match="holds numbers"):
        _rows(two_steps, "kernels", "count>=many")
    with pytest.raises(QueryError, match="unknown view"):
        run(two_steps, "flamegraph")
    with pytest.raises(QueryError, match="bad filter"):
        Query.parse(["just words"])


def test_every_view_runs_on_an_empty_profile(tmp_path: Path) -> None:
    out, _ = import_paths([write_trace(tmp_path / "e.json", [span("x", "cpu_op", 0, 1)])], tmp_path / "e")
    with open_profile(out) as prof:
        for name in views():
            run(prof, name)


# Holistic Trace Analysis 0.5.0 on the same files (bench/hta_compare.py prints both):
# idle / compute / non-compute %, for traces with integer µs timestamps, where HTA does
# not round, so the figures must agree to within 0.01 pp.
HTA = {
    "V100/df_index_resolver.json.gz": (1, 46.08, 35.55, 18.37),
    "sampled-128-ranks/sampled_rank-0.json.gz": (0, 53.56, 17.71, 28.74),
    "sampled-128-ranks/sampled_rank-1.json.gz": (1, 54.72, 22.57, 22.72),
}


@pytest.mark.parametrize("name", sorted(HTA))
def test_device_breakdown_agrees_with_hta(shared_data: Path, tmp_path: Path, name: str) -> None:
    out, _ = import_paths([shared_data / "kineto" / name], tmp_path / "h")
    rank, idle, compute, non_compute = HTA[name]
    with open_profile(out) as prof:
        got = {r["category"]: r["percent"] for r in _rows(prof, "overview", "section=device", f"rank={rank}")}
    assert got["idle"] == pytest.approx(idle, abs=0.01)
    assert got["compute"] == pytest.approx(compute, abs=0.01)
    assert got["non_compute"] == pytest.approx(non_compute, abs=0.01)


def test_idle_breakdown_agrees_with_hta(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "kineto/V100/df_index_resolver.json.gz"], tmp_path / "h")
    with open_profile(out) as prof:
        got = {r["stream"]: (r["host_wait_us"], r["kernel_wait_us"], r["other_us"]) for r in _rows(prof, "idle")}
    # HTA 0.5.0 get_idle_time_breakdown on this file (µs).
    assert got == {7: (791330, 16727, 73829), 14: (933139, 5568, 4444)}


def test_views_run_on_a_counters_only_profile(tmp_path: Path) -> None:
    from aiprof.store import ProfileWriter

    with ProfileWriter(tmp_path / "c") as w:
        w.append(
            "counters",
            {
                "rank": [0, 0],
                "device_type": ["cuda"] * 2,
                "device": [0, 0],
                "ts": [0, 10],
                "metric": ["sm_util"] * 2,
                "value": [10.0, 30.0],
                "unit": ["%"] * 2,
            },
        )
    with open_profile(tmp_path / "c.aiprof") as prof:
        for name in views():
            run(prof, name)
        (r,) = _rows(prof, "counters")
        assert (r["mean"], r["last"]) == (20.0, 30.0)
        assert _rows(prof, "operators", sort="-host_self_us") == []


def test_events_view_params(two_steps: Profile) -> None:
    assert {r["kind"] for r in run(two_steps, "events", Query(), {"kinds": ["kernel"]}).rows} == {"kernel"}
    assert run(two_steps, "events", Query(), {"kinds": "kernel,memcpy"}).total == 3
    with pytest.raises(QueryError, match=r"params\.kinds"):
        run(two_steps, "events", Query(), {"kinds": 5})


def test_python_view_self_and_total(tmp_path: Path) -> None:
    from aiprof.store import ProfileWriter

    # main -> fib -> fib (recursion) -> leaf; and main -> io. Samples every 10 ms:
    # 3 at the deep leaf, 1 in the inner fib, 2 in io.
    frames = {
        "frame_id": [0, 1, 2, 3, 4],
        "parent": [None, 0, 1, 2, 0],
        "function": ["main", "fib", "fib", "leaf", "io"],
        "file": ["m.py"] * 5,
        "line": [1, 2, 2, 3, 4],
        "rank": [0] * 5,
    }
    stacks = [3, 3, 3, 2, 4, 4]
    with ProfileWriter(tmp_path / "py") as w:
        w.append("frames", frames)
        w.append(
            "samples",
            {
                "rank": [0] * 6,
                "ts": [i * 10_000_000 for i in range(6)],
                "pid": [1] * 6,
                "tid": [1] * 6,
                "stack_id": stacks,
            },
        )
    with open_profile(tmp_path / "py.aiprof") as prof:
        rows = {r["function"]: r for r in run(prof, "python").rows}
    assert (rows["leaf"]["self_samples"], rows["leaf"]["total_samples"]) == (3, 3)
    # fib is on the stack in 4 samples (recursion counted once), running in 1.
    assert (rows["fib"]["self_samples"], rows["fib"]["total_samples"]) == (1, 4)
    assert (rows["main"]["total_samples"], rows["main"]["total_pct"]) == (6, 100.0)
    assert rows["io"]["self_us"] == 20_000.0  # µs, as every view's times
