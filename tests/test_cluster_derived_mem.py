"""A rank's derived tables computed from its events in memory (cluster/derived_mem.py)
against the reference SQL over the profile read back (analysis/derived.py), on real
traces, generated ranks and traces edited to hold what only the SQL spells; and a rank
task writes the reference tables whichever path computed them."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from aiprof.analysis.derived import derived_tables  # noqa: E402
from aiprof.cluster.derived_mem import derive_rank  # noqa: E402
from aiprof.cluster.summary_mem import Unsure, rank_events  # noqa: E402
from aiprof.importers import import_paths  # noqa: E402
from aiprof.store import open_profile  # noqa: E402
from make_fleet import SMALL_TEMPLATE, make_fleet  # noqa: E402
from test_cluster_summary import REAL, _rewrite  # noqa: E402

_KEYS = {
    "kernel_stats": ["name"],
    "stream_idle": ["rank", "device", "stream"],
    "step_totals": ["rank", "step", "start"],
    "device_totals": ["rank"],
}


def both(trace: Path, out: Path) -> tuple[dict[str, pa.Table] | None, dict[str, pa.Table] | None]:
    """(the in-memory derived tables or None where that path declines, the SQL's)."""
    path, ctx = import_paths([trace], out, keep_events=True)
    kept = ctx.writer.kept_events
    assert kept is not None
    meta = json.loads((path / "profile.json").read_text())
    try:
        fast: dict[str, pa.Table] | None = derive_rank(rank_events(kept, meta))
    except Unsure:
        fast = None
    with open_profile(path) as prof:
        ref = derived_tables(prof, meta)
    return fast, ref


def rows(t: pa.Table, name: str) -> list[dict[str, Any]]:
    """The rows in key order (neither path orders a GROUP BY's rows)."""
    out: list[dict[str, Any]] = t.sort_by([(k, "ascending") for k in _KEYS[name]]).to_pylist()
    return out


def assert_same(fast: dict[str, pa.Table] | None, ref: dict[str, pa.Table] | None) -> None:
    """Equal tables: the same schema, rows and integers; floats to the last digits (the
    SQL divides a HUGEINT sum and casts a DECIMAL in its own order of operations)."""
    assert fast is not None and ref is not None
    assert set(fast) == set(ref) == set(_KEYS)
    for name, t in ref.items():
        assert fast[name].schema == t.schema, name
        a, b = rows(fast[name], name), rows(t, name)
        assert len(a) == len(b), name
        for x, y in zip(a, b, strict=True):
            for k, v in y.items():
                if isinstance(v, float):
                    assert math.isclose(x[k], v, rel_tol=1e-12, abs_tol=1e-12), (name, k, x[k], v)
                else:
                    assert x[k] == v, (name, k, x[k], v)


@pytest.mark.parametrize("name", REAL)
def test_in_memory_derived_tables_equal_the_sql_on_real_traces(tmp_path: Path, shared_data: Path, name: str) -> None:
    fast, ref = both(shared_data / "kineto" / name, tmp_path / "p.aiprof")
    assert_same(fast, ref)
    assert ref is not None and ref["step_totals"].num_rows >= 1


def test_in_memory_derived_tables_equal_the_sql_on_generated_ranks(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path / "traces", 8, template=SMALL_TEMPLATE, seed=5)
    for rank in sorted({0, fleet.straggler, *fleet.slow_pair}):
        fast, ref = both(fleet.files[rank], tmp_path / f"rank{rank}.aiprof")
        assert_same(fast, ref)
        assert ref is not None
        k = ref["kernel_stats"].to_pylist()
        assert any(r["grid"] and r["registers_per_thread"] is not None for r in k)
        assert sum(r["count"] for r in k) > 100 and any(r["kind"] == "collective" for r in k)
        idle = ref["stream_idle"].to_pylist()
        assert idle and all(r["idle_us"] >= r["host_wait_us"] for r in idle)


def _kernel_args(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e.setdefault("args", {}) for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _set_first(key: str, value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        _kernel_args(doc)[0][key] = value

    return edit


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("registers per thread", 27.5),  # TRY_CAST rounds it: 28
        ("registers per thread", "27"),  # TRY_CAST reads the text: 27
        ("grid", None),  # a JSON null: the shape 'null'
        ("grid", [1.5, 2]),
        ("est. achieved occupancy %", "high"),  # counted in the weights, not the sum
    ],
    ids=["float-int", "text-int", "null-shape", "float-shape", "text-occupancy"],
)
def test_args_only_the_sql_spells_are_left_to_it(tmp_path: Path, shared_data: Path, key: str, value: Any) -> None:
    trace = _rewrite(shared_data / "kineto" / REAL[0], tmp_path / "odd.json.gz", _set_first(key, value))
    fast, ref = both(trace, tmp_path / "p.aiprof")
    assert fast is None
    assert ref is not None and ref["kernel_stats"].num_rows > 0


def test_a_rank_task_writes_the_sql_tables_whichever_path_computed_them(tmp_path: Path, shared_data: Path) -> None:
    """The rank task (cluster/parallel.py) keeps the in-memory tables where that path
    answers and the SQL's where it declines: both written tables are the reference."""
    from aiprof.cluster.job import RankFile
    from aiprof.cluster.parallel import _import_into

    plain = shared_data / "kineto" / REAL[0]
    doc = json.loads(gzip.decompress(plain.read_bytes()))
    first = next(e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    odd = _rewrite(plain, tmp_path / "odd.json.gz", _set_first("registers per thread", 999_999.7))
    for i, trace in enumerate((plain, odd)):
        target = tmp_path / f"task{i}" / "rank0.aiprof"
        _import_into(RankFile(trace, 0, "distributedInfo", None), target, None, None)
        meta = json.loads((target / "profile.json").read_text())
        assert meta.get("derived"), meta.get("warnings")
        written = {n: pq.read_table(target / f"{n}.parquet") for n in _KEYS}
        # The reference: the SQL over the same events, imported again without derived tables.
        _, ref = both(trace, tmp_path / f"ref{i}.aiprof")
        assert_same(written, ref)
        regs = {r["name"]: r["registers_per_thread"] for r in written["kernel_stats"].to_pylist()}
        assert (regs[first] == 1_000_000) == (i == 1)  # the SQL's TRY_CAST rounds the float


def _ranks_both(trace: Path, out: Path) -> tuple[pa.Table, pa.Table, dict[str, int]]:
    from aiprof.cluster.summary import ranks_table
    from aiprof.cluster.summary_mem import SPAN_TABLES, ranks_of

    path, ctx = import_paths([trace], out, keep_events=True)
    kept = ctx.writer.kept_events
    assert kept is not None
    meta = json.loads((path / "profile.json").read_text())
    other = {n: ctx.writer.kept_table(n) for n in SPAN_TABLES}
    fast = ranks_of(rank_events(kept, meta), other, path, meta)
    with open_profile(path) as prof:
        ref = ranks_table(prof)
    return fast, ref, meta["tables"]


@pytest.mark.parametrize("name", REAL)
def test_the_ranks_table_from_memory_equals_the_sql(tmp_path: Path, shared_data: Path, name: str) -> None:
    fast, ref, _ = _ranks_both(shared_data / "kineto" / name, tmp_path / "p.aiprof")
    assert fast.schema == ref.schema
    assert fast.to_pylist() == ref.to_pylist()
    assert ref.column("first_ns")[0].as_py() is not None


def _with_allocations(doc: dict[str, Any]) -> None:
    """Kineto allocator records (``[memory]`` instants) on the CPU and on device 0, the
    first one before every other event."""
    ts = [e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), int | float)]
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    for i, (dev_type, dev) in enumerate([(1, 0), (1, 0), (0, -1), (1, 0)]):
        doc["traceEvents"].append(
            {
                "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": pid,
                "ts": min(ts) - 50 + i * 1000,
                "args": {"Device Type": dev_type, "Device Id": dev, "Addr": 1 << 40, "Bytes": 4096 * (i + 1),
                         "Total Allocated": 4096 * (i + 1), "Total Reserved": 1 << 20},
            }
        )  # fmt: skip


def test_the_ranks_table_from_memory_counts_allocator_records(tmp_path: Path, shared_data: Path) -> None:
    """Allocator records: their times widen the span and they count as the device's
    records, as in the SQL."""
    trace = _rewrite(shared_data / "kineto" / REAL[0], tmp_path / "mem.json.gz", _with_allocations)
    fast, ref, tables = _ranks_both(trace, tmp_path / "p.aiprof")
    assert tables.get("memory", 0) == 4
    assert fast.to_pylist() == ref.to_pylist()
    plain, _, _ = _ranks_both(shared_data / "kineto" / REAL[0], tmp_path / "plain.aiprof")
    assert fast.column("first_ns")[0].as_py() < plain.column("first_ns")[0].as_py()
    used = {(d["type"], d["index"]): d["records"] for d in json.loads(fast.column("devices_used")[0].as_py())}
    was = {(d["type"], d["index"]): d["records"] for d in json.loads(plain.column("devices_used")[0].as_py())}
    assert used[("cuda", 0)] == was[("cuda", 0)] + 3


def test_tables_too_big_to_keep_are_read_back(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the writer's bound the other tables are not kept: ranks_of declines, and the
    rank task reads the profile back for the ranks table (the same table)."""
    import aiprof.store.writer as writer
    from aiprof.cluster.job import RankFile
    from aiprof.cluster.parallel import _import_into
    from aiprof.cluster.summary_mem import SPAN_TABLES, ranks_of

    trace = _rewrite(shared_data / "kineto" / REAL[0], tmp_path / "mem.json.gz", _with_allocations)
    monkeypatch.setattr(writer, "KEPT_TABLE_BYTES", 1)
    path, ctx = import_paths([trace], tmp_path / "p.aiprof", keep_events=True)
    assert ctx.writer.kept_table("memory") is None and ctx.writer.kept_events is not None
    meta = json.loads((path / "profile.json").read_text())
    e = rank_events(ctx.writer.kept_events, meta)
    with pytest.raises(Unsure):
        ranks_of(e, {n: ctx.writer.kept_table(n) for n in SPAN_TABLES}, path, meta)
    got = _import_into(RankFile(trace, 0, "distributedInfo", None), tmp_path / "task" / "rank0.aiprof", None, None)
    monkeypatch.setattr(writer, "KEPT_TABLE_BYTES", 64 << 20)
    _, ref, _ = _ranks_both(trace, tmp_path / "ref.aiprof")
    assert got["tables"]["ranks"].drop_columns(["source"]).to_pylist() == ref.drop_columns(["source"]).to_pylist()


def test_a_plain_rank_is_never_read_back(tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a rank the in-memory paths answer, the task does not open the profile it wrote
    (each path's fault would otherwise hide behind the SQL that answers for it)."""
    import aiprof.store as store
    from aiprof.cluster.job import RankFile
    from aiprof.cluster.parallel import _import_into

    def refused(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the profile was read back")

    monkeypatch.setattr(store, "open_profile", refused)
    for name in REAL[:2]:
        got = _import_into(RankFile(shared_data / "kineto" / name, 0, "order", None), tmp_path / name, None, None)
        assert set(got["tables"]) == {"steps", "collectives", "ranks"}
        assert got["tables"]["collectives"].num_rows > 0
