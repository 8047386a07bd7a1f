"""The per-rank summaries a rank task computes from its events in memory
(cluster/summary_mem.py) against the reference SQL over the profile read back
(cluster/summary.py), the events kept by the writer, rank tasks grouped several to a
Dask task on a real LocalCluster, and the LocalCluster's worker settings."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from aiprof.cluster.summary import summarize  # noqa: E402
from aiprof.cluster.summary_mem import summarize_events  # noqa: E402
from aiprof.importers import import_paths  # noqa: E402
from aiprof.store import open_profile  # noqa: E402
from make_fleet import SMALL_TEMPLATE, make_fleet  # noqa: E402

#: Real Kineto traces (../shared/data/kineto) of one rank each, under 50,000 events (no
#: derived tables): NCCL collectives with sizes in the kernels' args and without, CPU
#: only, ROCm, a Triton kernel, CUPTI counters.
REAL = (
    "sampled-128-ranks/sampled_rank-0.json.gz",
    "sampled-128-ranks/sampled_rank-1.json.gz",
    "A100-nccl-parser/nccl_data.json.gz",
    "cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "triton/triton_example.json.gz",
    "cupti-counters/benchmark_result_924719_1679055439_trace.json.gz",
    "cuda-event-sync/event_sync_trace.json.gz",
)


def both(trace: Path, out: Path) -> tuple[dict[str, pa.Table] | None, dict[str, pa.Table]]:
    """(the in-memory summaries, the reference ones) of ``trace`` imported at ``out``."""
    path, ctx = import_paths([trace], out, keep_events=True)
    kept = ctx.writer.kept_events
    assert kept is not None
    meta = json.loads((path / "profile.json").read_text())
    fast = summarize_events(kept, path, meta)
    with open_profile(path) as prof:
        ref = summarize(prof)
    return fast, ref


def assert_same(fast: dict[str, pa.Table] | None, ref: dict[str, pa.Table]) -> None:
    assert fast is not None
    # The ranks table is always the SQL's (summary.ranks_table): its span and devices
    # read the counters and memory tables too.
    assert {"steps", "collectives"} <= set(fast) <= set(ref)
    for name, t in ref.items():
        if name not in fast:
            continue
        assert fast[name].schema == t.schema, name
        assert fast[name].to_pylist() == t.to_pylist(), name


def test_kept_events_are_the_written_table(tmp_path: Path, shared_data: Path) -> None:
    path, ctx = import_paths([shared_data / "kineto" / REAL[2]], tmp_path / "a.aiprof", keep_events=True)
    kept = ctx.writer.kept_events
    assert kept is not None and kept.num_rows > 40_000
    assert kept.equals(pq.read_table(path / "events.parquet"))
    # Not asked: nothing kept.
    _, ctx = import_paths([shared_data / "kineto" / REAL[2]], tmp_path / "b.aiprof")
    assert ctx.writer.kept_events is None


@pytest.mark.parametrize("name", REAL)
def test_in_memory_summaries_equal_the_sql_on_real_traces(tmp_path: Path, shared_data: Path, name: str) -> None:
    fast, ref = both(shared_data / "kineto" / name, tmp_path / "p.aiprof")
    assert_same(fast, ref)
    assert ref["steps"].num_rows >= 1 and ref["ranks"].num_rows == 1


def test_in_memory_summaries_equal_the_sql_on_generated_ranks(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path / "traces", 8, template=SMALL_TEMPLATE, seed=5)
    for rank in sorted({0, fleet.straggler, *fleet.slow_pair}):
        fast, ref = both(fleet.files[rank], tmp_path / f"rank{rank}.aiprof")
        assert_same(fast, ref)
        coll = ref["collectives"].to_pylist()
        assert coll and all(c["bytes"] and c["seq"] is not None for c in coll)


def _rewrite(src: Path, dst: Path, edit: Any) -> Path:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    edit(doc)
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def _collective_args(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["args"] for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]


def test_sizes_from_the_launching_host_call_when_the_kernel_says_none(tmp_path: Path, shared_data: Path) -> None:
    """Kernels without dtype and sizes: the rows take the record_param_comms' (coalesce)
    or the enclosing host call's sizes, as the SQL does."""

    def strip(doc: dict[str, Any]) -> None:
        for a in _collective_args(doc):
            for k in ("dtype", "In msg nelems", "Out msg nelems", "Seq"):
                a.pop(k, None)

    trace = _rewrite(shared_data / "kineto" / REAL[0], tmp_path / "stripped.json.gz", strip)
    fast, ref = both(trace, tmp_path / "p.aiprof")
    assert_same(fast, ref)
    assert any(c["bytes"] for c in ref["collectives"].to_pylist())


@pytest.mark.parametrize(
    "value",
    [1.5, True, [1, 2], "+7"],
    ids=["float", "bool", "list", "signed-text"],
)
def test_values_only_the_sql_spells_are_left_to_it(tmp_path: Path, shared_data: Path, value: Any) -> None:
    """A collective field whose text DuckDB's JSON and casts define (a float, a boolean,
    a list, a text TRY_CAST reads): the in-memory path declines, the SQL answers."""

    def odd(doc: dict[str, Any]) -> None:
        _collective_args(doc)[0]["Seq"] = value

    trace = _rewrite(shared_data / "kineto" / REAL[0], tmp_path / "odd.json.gz", odd)
    fast, ref = both(trace, tmp_path / "p.aiprof")
    assert fast is None
    assert ref["collectives"].num_rows > 0


def test_a_profile_with_derived_tables_is_left_to_the_sql(tmp_path: Path, shared_data: Path) -> None:
    trace = shared_data / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    fast, ref = both(trace, tmp_path / "p.aiprof")
    assert fast is None and ref["steps"].num_rows >= 1


# -- on a real LocalCluster ---------------------------------------------------------------


def test_rank_tasks_grouped_on_a_local_cluster(tmp_path: Path) -> None:
    """Several ranks per Dask task: each rank's outcome on its own (a broken file fails
    alone, in the middle of a group), its tables the reference summaries of the profile
    it wrote; the LocalCluster's workers run without Dask's malloc trim and profiler."""
    pytest.importorskip("distributed", reason="the cluster extra (dask, distributed) is not installed")
    from aiprof.cluster.engine import Where, client, local_config, map_tasks, per_task
    from aiprof.cluster.job import expand, plan
    from aiprof.cluster.parallel import import_rank

    make_fleet(tmp_path / "traces", 10, template=SMALL_TEMPLATE, seed=2)
    (tmp_path / "traces" / "rank-9.pt.trace.json.gz").unlink()
    (tmp_path / "traces" / "rank-6.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    job = plan(expand([tmp_path / "traces"]))
    assert [f.rank for f in job.files] == list(range(9))
    out = tmp_path / "job"
    changes: list[tuple[int, int, int]] = []
    with client(Where("local", None, 2)) as c:
        env = c.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert list(env.values()) == [None, None]
        import dask

        profiling = c.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
        assert list(profiling.values()) == [False, False]
        # Forked with what a rank task needs already imported (cluster/preload.py).
        preloaded = c.run(lambda: [m in sys.modules for m in ("aiprof.cluster.preload", "duckdb")])
        assert list(preloaded.values()) == [[True, True], [True, True]]
        # The fork server, started before Dask spawns a worker, had the nanny's variables:
        # one hash seed, Dask's, for every worker.
        seeded = subprocess.run(
            [sys.executable, "-c", "print(hash('aiprof'))"],
            env={**os.environ, "PYTHONHASHSEED": "6640"},
            capture_output=True,
            text=True,
            check=True,
        )
        assert list(c.run(lambda: hash("aiprof")).values()) == [int(seeded.stdout)] * 2
        got = map_tasks(
            c, import_rank, job.files, (str(out), None, None), lambda d, f, r: changes.append((d, f, r)), group=4
        )
    # Its workers were forked from a fork server, stopped (and waited for) with the cluster.
    from multiprocessing import forkserver

    assert local_config()["distributed.worker.multiprocessing-method"] == "forkserver"
    assert forkserver._forkserver._forkserver_pid is None  # type: ignore[attr-defined]
    assert [o.item.rank for o in got] == list(range(9))
    assert [o.error is not None for o in got] == [r == 6 for r in range(9)]
    assert "holds no events" in (got[6].error or "")
    assert changes[-1][:2] == (8, 1) and len(changes) == 3  # one report per task of 4, 4, 1
    for o in got:
        if o.error is not None:
            continue
        with open_profile(out / f"rank{o.item.rank}.aiprof") as prof:
            ref = summarize(prof)
        assert_same(o.value["tables"], ref)
    assert per_task(17, 2) == 1 and per_task(64, 2) == 4 and per_task(1024, 2) == 4


def test_the_last_tasks_are_single_ranks() -> None:
    # 64 ranks on 2 slots: groups of 4, then shorter ones, then one rank per task, so
    # that no slot waits on another's last group of 4; every rank once, in order.
    from aiprof.cluster.engine import task_groups

    groups = task_groups(64, 2, 4)
    assert [len(g) for g in groups] == [4] * 13 + [3, 3, 2, 1, 1, 1, 1]
    assert [i for g in groups for i in g] == list(range(64))
    assert [len(g) for g in task_groups(5, 2, 4)] == [2, 1, 1, 1]
    assert task_groups(0, 2, 4) == []


def test_spawned_workers_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiprof.cluster.engine import ENV_START, local_config

    monkeypatch.setenv(ENV_START, "spawn")
    assert local_config()["distributed.worker.multiprocessing-method"] == "spawn"
    monkeypatch.setenv(ENV_START, "no-such-method")
    assert "distributed.worker.multiprocessing-method" not in local_config()


def test_a_task_lost_whole_fails_each_of_its_ranks() -> None:
    """A task that dies with its worker process is each of its items' failure; the
    other tasks go on."""
    pytest.importorskip("distributed", reason="the cluster extra (dask, distributed) is not installed")
    import dask

    from aiprof.cluster.engine import Where, client, map_tasks

    def exit_on_two(x: int) -> int:
        if x == 2:
            os._exit(3)
        return 10 * x

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), client(Where("local", None, 2)) as c:
        got = map_tasks(c, exit_on_two, [1, 2, 3, 4, 5], (), group=2)
    assert [o.item for o in got] == [1, 2, 3, 4, 5]
    assert got[0].error and got[0].error == got[1].error and "KilledWorker" in got[0].error
    # The other tasks ran (or, queued on a worker as it died twice, were lost with it).
    for o in got[2:]:
        assert o.value == 10 * o.item or "KilledWorker" in (o.error or "")
    assert any(o.value for o in got[2:])


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "json"])
def test_distributed_info_read_a_step_at_a_time(tmp_path: Path, gz: bool) -> None:
    """The rank's distributedInfo is found where it is in the first 4 MiB (before the
    events, or after 200 KiB of them), and not past them, as the whole head would say."""
    from aiprof.cluster.job import HEAD_BYTES, distributed_info

    info = {"rank": 3, "world_size": 8, "backend": "nccl", "note": "é" * 10}
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}
    one = len(json.dumps(ev)) + 2

    def write(name: str, n_before: int) -> Path:
        text = '{"traceEvents": [' + ", ".join([json.dumps(ev)] * n_before) + '], "distributedInfo": '
        text += json.dumps(info, ensure_ascii=False) + "}"
        p = tmp_path / name
        p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
        return p

    assert distributed_info(write("first.json", 0)) == info
    assert distributed_info(write("after.json", (200 << 10) // one)) == info
    assert distributed_info(write("past.json", HEAD_BYTES // one + 10)) is None
