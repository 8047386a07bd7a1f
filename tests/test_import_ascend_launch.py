"""torch_npu's task queue: operator -> launch (Enqueue) -> NPU task, as in a CUDA trace.

The operator's thread queues its work (``Enqueue``); the CANN launch call
(``AscendCL@aclnn...``, HostToDevice flow to the tasks) runs inside ``Dequeue@op`` on the
queue's thread. The Enqueue takes the launch's correlation, so the operators view
(nesting on the operator's thread), operator-kernels and launches find the tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.importers import import_paths
from aiprof.store.reader import open_profile


def _import(src: Path, out: Path) -> Any:
    path, _ = import_paths([src], out)
    return open_profile(path)


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


@pytest.fixture(scope="module", params=["torch_npu", "torch_npu/trace_view.json"])
def npu(request: pytest.FixtureRequest, shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real torch_npu output, as its folder and as trace_view.json alone."""
    return _import(shared_data / "ascend" / request.param, tmp_path_factory.mktemp("npu") / "p")


def test_operators_have_device_time(npu: Any) -> None:
    ops = {r["name"]: r for r in run(npu, "operators", params={}).rows}
    assert len(ops) == 107
    assert sum(1 for r in ops.values() if r["device_total_us"] > 0) == 77
    mm = ops["aclnnMm"]
    assert (mm["calls"], mm["kernels"]) == (6, 42)
    assert mm["device_self_us"] == pytest.approx(209.109)
    assert ops["aten::mm"]["device_total_us"] == pytest.approx(209.109)
    assert ops["aten::mm"]["device_self_us"] == 0  # launched by its child aclnnMm
    assert ops["Optimizer.step#Adam.step"]["device_total_us"] == pytest.approx(229.6, abs=0.05)
    # Every correlated NPU task is counted once, for one operator: 274 tasks (253
    # kernels, 21 memsets; the two MEMCPY_ASYNC tasks have no launch flow).
    assert sum(r["kernels"] for r in ops.values()) == 274
    dev = _rows(
        npu,
        "select sum(dur) d from events where device_type = 'npu' and correlation is not null"
        " and kind in ('kernel', 'memset', 'memcpy', 'collective')",
    )[0]["d"]
    assert int(dev) == 1_788_251
    assert sum(r["device_self_us"] for r in ops.values()) == pytest.approx(int(dev) / 1000)


def test_operator_kernels(npu: Any) -> None:
    rows = run(npu, "operator-kernels", params={"name": "aclnnMm"}).rows
    got = {r["name"]: (r["count"], round(r["total_us"], 3)) for r in rows}
    assert got == {
        "aclnnMm_TransData_TransData": (18, 121.96),
        "aclnnMm_MatMulCommon_MemSet": (6, 37.98),
        "aclnnMm_CastAiCore_Cast": (12, 28.709),
        "aclnnMm_MatMulCommon_MatMulV2": (6, 20.46),
    }


def test_launches_name_their_operator(npu: Any) -> None:
    rows = run(npu, "launches", params={}).rows
    assert len(rows) == 274
    # The launch is the AscendCL call (the last hop, on the queue thread); the Enqueue on
    # the operator's thread, which carries the same correlation, names the operator.
    assert {r["runtime"].split("@")[0] for r in rows} == {"AscendCL"}
    assert not [r for r in rows if r["operator"] == "(no operator)"]
    first = min(rows, key=lambda r: r["ts_us"])
    assert (first["operator"], first["kernel"]) == ("aclnnInplaceZero", "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike")


def test_enqueue_chain_matches_async_npu(npu: Any) -> None:
    # torch_npu's own attribution (its async_npu flows: operator -> task, external_id)
    # agrees with the chain: the operator around each Enqueue is the one of its tasks.
    rows = _rows(
        npu,
        """
        with q as (select * from events where cat = 'enqueue' and correlation is not null),
        op as (
            select q.correlation, any_value(q.external_id) ext, arg_max(o.external_id, o.ts) op_ext
            from q join events o on o.pid = q.pid and o.tid = q.tid and o.kind = 'cpu_op'
              and o.ts <= q.ts and o.ts + o.dur >= q.ts + q.dur
            group by q.correlation),
        calls as (
            select correlation, count(*) n, count(distinct external_id) exts from events
            where kind = 'runtime' and cat is null and correlation is not null group by correlation),
        tasks as (
            select correlation, count(distinct external_id) exts, any_value(external_id) ext from events
            where device_type = 'npu' and correlation is not null group by correlation)
        select op.*, calls.n calls, tasks.exts task_exts, tasks.ext task_ext
        from op join calls using (correlation) join tasks using (correlation)
        """,
    )
    assert len(rows) == 146
    assert all(r["ext"] == r["op_ext"] == r["task_ext"] for r in rows)
    assert all(r["calls"] == 1 and r["task_exts"] == 1 for r in rows)


def _ev(name: str, pid: int, tid: int, ts: str, dur: float, **kw: Any) -> dict[str, Any]:
    return {"name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "ph": "X", **kw}


def _flow(cat: str, fid: Any, ph: str, pid: int, tid: int, ts: str) -> dict[str, Any]:
    return {"name": cat, "ph": ph, "cat": cat, "id": fid, "pid": pid, "tid": tid, "ts": ts, "bp": "e"}


def test_built_queue_two_launch_calls(tmp_path: Path) -> None:
    # One queued item whose Dequeue runs two CANN launch calls (HostToDevice 71, 72):
    # one launch: the calls, their tasks and the Enqueue share one correlation, and the
    # operator's external id (async_npu) reaches the Enqueue and the calls.
    py, cann, hw = 10, 1002, 7
    evs = [
        {"name": "process_name", "pid": py, "tid": 0, "args": {"name": "Python"}, "ph": "M"},
        {"name": "process_name", "pid": cann, "tid": 0, "args": {"name": "CANN"}, "ph": "M"},
        {"name": "process_name", "pid": hw, "tid": 0, "args": {"name": "Ascend Hardware"}, "ph": "M"},
        _ev("aten::foo", py, 1, "1700000000000000.000", 10.0, cat="cpu_op"),
        _ev("Enqueue", py, 1, "1700000000000001.000", 2.0, cat="enqueue"),
        _ev("Dequeue@foo", py, 2, "1700000000000004.000", 10.0, cat="dequeue"),
        _ev("AscendCL@a", cann, 2, "1700000000000005.000", 2.0),
        _ev("AscendCL@b", cann, 2, "1700000000000008.000", 2.0),
        _ev("TaskA", hw, 3, "1700000000000020.000", 1.0, args={"Task Type": "AI_CORE"}),
        _ev("TaskB", hw, 3, "1700000000000022.000", 1.0, args={"Task Type": "AI_CORE"}),
        _flow("async_task_queue", 5, "s", py, 1, "1700000000000001.000"),
        _flow("async_task_queue", 5, "f", py, 2, "1700000000000004.000"),
        _flow("HostToDevice", "71", "s", cann, 2, "1700000000000005.500"),
        _flow("HostToDevice", "71", "f", hw, 3, "1700000000000020.000"),
        _flow("HostToDevice", "72", "s", cann, 2, "1700000000000008.500"),
        _flow("HostToDevice", "72", "f", hw, 3, "1700000000000022.000"),
        _flow("async_npu", 900, "s", py, 1, "1700000000000000.000"),
        _flow("async_npu", 900, "f", hw, 3, "1700000000000020.000"),
        _flow("async_npu", 901, "s", py, 1, "1700000000000000.000"),
        _flow("async_npu", 901, "f", hw, 3, "1700000000000022.000"),
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps(evs))
    p = _import(src, tmp_path / "b")
    rows = _rows(p, "select name, correlation, external_id from events where dur > 0 order by ts")
    assert rows == [
        {"name": "aten::foo", "correlation": None, "external_id": 900},
        {"name": "Enqueue", "correlation": 71, "external_id": 900},
        {"name": "Dequeue@foo", "correlation": None, "external_id": None},
        {"name": "AscendCL@a", "correlation": 71, "external_id": 900},
        {"name": "AscendCL@b", "correlation": 71, "external_id": 900},
        {"name": "TaskA", "correlation": 71, "external_id": 900},
        {"name": "TaskB", "correlation": 71, "external_id": 900},
    ]
    op = {r["name"]: r for r in run(p, "operators", params={}).rows}["aten::foo"]
    assert (op["kernels"], op["device_self_us"]) == (2, 2.0)
