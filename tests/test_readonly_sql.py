"""The SQL page's connection (store/readonly_sql.py) on a real profile: queries answer as
the profile's own connection does; writes, file access and setting changes are refused
by each layer on its own (the statement check, the read-only database, the disabled
external access, the locked configuration); the time and row limits hold.
And the timeline window's Chrome trace (export/chrome_trace.py, ``window=``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import orjson
import pytest

from aiprof.errors import AiprofError
from aiprof.export.chrome_trace import chrome_trace_bytes
from aiprof.importers import import_paths
from aiprof.store import Profile, open_profile
from aiprof.store.readonly_sql import ReadOnlySql, Refused, TimedOut

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
SLOW = "SELECT count(*) FROM range(100000000000) a, range(1000) b WHERE a.range % 7 = b.range"


@pytest.fixture(scope="module")
def prof(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Profile]:
    out, _ = import_paths([shared_data / V100], tmp_path_factory.mktemp("sql") / "r0.aiprof")
    with open_profile(out) as p:
        yield p


@pytest.fixture
def ro(prof: Profile) -> Iterator[ReadOnlySql]:
    s = ReadOnlySql(prof)
    yield s
    s.close()


def test_a_select_answers_as_the_profile_does(prof: Profile, ro: ReadOnlySql) -> None:
    q = "SELECT kind, count(*) AS n, sum(dur) AS total FROM events GROUP BY kind ORDER BY kind"
    a = ro.query(q)
    assert a.table.to_pylist() == prof.sql(q).to_pylist()
    assert not a.truncated and a.types == ["VARCHAR", "BIGINT", "HUGEINT"]
    kernels = [r for r in a.table.to_pylist() if r["kind"] == "kernel"]
    assert kernels[0]["n"] == 4350
    # Every table is there, with its row count and columns (an empty one too).
    schema = {t["name"]: t for t in ro.schema()}
    assert schema["events"]["rows"] == 68656 and schema["counters"]["rows"] == 0
    assert {"ts", "dur", "name", "kind"} <= {c["name"] for c in schema["events"]["columns"]}
    assert ro.query("SELECT count(*) AS n FROM counters").table.to_pylist() == [{"n": 0}]


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("DROP VIEW events", "DROP"),
        ("COPY (SELECT 1) TO 'out.csv'", "COPY"),
        ("COPY events TO 'out.parquet'", "COPY"),
        ("ATTACH 'other.duckdb' AS o", "ATTACH"),
        ("INSTALL httpfs", "LOAD"),
        ("LOAD httpfs", "LOAD"),
        ("PRAGMA threads=8", "SET"),
        ("SET enable_external_access = true", "SET"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("INSERT INTO tracks SELECT * FROM tracks", "INSERT"),
        ("DELETE FROM events", "DELETE"),
        ("EXPORT DATABASE 'dump'", "EXPORT"),
    ],
)
def test_writes_are_refused_before_they_run(ro: ReadOnlySql, prof: Profile, query: str, kind: str) -> None:
    with pytest.raises(Refused, match=f"refused: {kind} statements are not allowed"):
        ro.query(query)
    assert ro.query("SELECT count(*) AS n FROM events").table.to_pylist() == [{"n": 68656}]


def test_more_than_one_statement_is_refused(ro: ReadOnlySql) -> None:
    with pytest.raises(Refused, match="one statement at a time"):
        ro.query("SELECT 1; DROP VIEW events")
    with pytest.raises(Refused, match="empty"):
        ro.query("  ")


def test_each_layer_holds_without_the_statement_check(ro: ReadOnlySql, tmp_path: Path) -> None:
    con = ro.con
    # The database is opened read-only...
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("CREATE TABLE t AS SELECT 1")
    with pytest.raises(duckdb.Error, match="read-only"):
        con.execute("DROP VIEW events")
    # ...no file outside the profile can be written or read...
    target = tmp_path / "out.csv"
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        con.execute(f"COPY (SELECT 1) TO '{target}'")
    assert not target.exists()
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        con.execute(f"ATTACH '{tmp_path / 'x.duckdb'}' AS x")
    # ...even by a SELECT, which the statement check lets through...
    with pytest.raises(AiprofError, match="disabled by configuration"):
        ro.query("SELECT * FROM read_csv('/etc/passwd')")
    # ...and the settings cannot be changed back.
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET enable_external_access = true")


def test_time_limit_interrupts_and_the_connection_still_works(ro: ReadOnlySql) -> None:
    with pytest.raises(TimedOut, match=r"ran past its time limit \(0.5 s\) and was stopped"):
        ro.query(SLOW, timeout_s=0.5)
    assert ro.query("SELECT 41 + 1 AS x").table.to_pylist() == [{"x": 42}]


def test_row_limit(ro: ReadOnlySql) -> None:
    a = ro.query("SELECT * FROM events ORDER BY ts", max_rows=250)
    assert a.table.num_rows == 250 and a.truncated
    b = ro.query("SELECT * FROM tracks", max_rows=250)
    assert b.table.num_rows == 18 and not b.truncated
    with pytest.raises(AiprofError, match="Parser Error"):
        ro.query("SELEC 1")


def test_chrome_trace_of_a_window(prof: Profile) -> None:
    lo, hi = prof.sql("SELECT min(ts) AS a, max(ts + dur) AS b FROM events").to_pylist()[0].values()
    t0 = lo + (hi - lo) // 3
    t1 = t0 + (hi - lo) // 20
    data, counts = chrome_trace_bytes(prof, (t0, t1))
    doc = orjson.loads(data)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    # Every span overlaps the window (ts and dur are µs from the base, like the store's ns).
    assert spans and all(e["ts"] * 1000 <= t1 + 1 and (e["ts"] + e["dur"]) * 1000 >= t0 - 1 for e in spans)
    want = prof.sql(
        f"""SELECT count(*) AS n FROM events WHERE ts <= {t1} AND ts + greatest(dur, 0) >= {t0}
            AND NOT coalesce(kind = 'other' AND dur = 0 AND starts_with(args, '{{"ph":'), FALSE)"""
    ).to_pylist()[0]["n"]
    assert counts["events"] == want == len([e for e in doc["traceEvents"] if e["ph"] in ("X", "i")])
    whole, all_counts = chrome_trace_bytes(prof)
    assert all_counts["events"] == 68656 - all_counts["flows"] and all_counts["events"] > counts["events"]
    assert doc["baseTimeNanoseconds"] == orjson.loads(whole)["baseTimeNanoseconds"]


def test_views_an_analyser_added_over_arrow_data_are_left_out(prof: Profile) -> None:
    """The cluster views register Arrow tables on the profile's connection and a view over
    them (seen: ``cluster_collectives`` on an Ascend cluster capture, after the
    distributed page): the SQL page's file has only the profile's tables."""
    import pyarrow as pa

    extra = pa.table({"x": [1, 2, 3]})
    prof.con.register("_test_extra_arrow", extra)
    prof.con.execute("CREATE VIEW test_extra AS SELECT * FROM _test_extra_arrow")
    try:
        ro = ReadOnlySql(prof)
        try:
            assert ro.query("SELECT count(*) AS n FROM events").table.to_pylist()[0]["n"] == prof.tables["events"]
            with pytest.raises(AiprofError):
                ro.query("SELECT * FROM test_extra")
        finally:
            ro.close()
    finally:
        prof.con.execute("DROP VIEW test_extra")
        prof.con.unregister("_test_extra_arrow")


def test_a_job_folder_of_ranks_is_queried_and_stays_inside_it(shared_data: Path, tmp_path: Path) -> None:
    """A job folder's views read ``rank*.aiprof`` by glob and join a table of each rank's
    clock shift: both must reach the file (seen: the SQL page answered 500 on a job)."""
    import subprocess
    import sys

    from aiprof.cluster.opened import open_job

    ranks = [str(shared_data / f"kineto/sampled-128-ranks/sampled_rank-{i}.json.gz") for i in (0, 1)]
    job = tmp_path / "served" / "job"
    subprocess.run([sys.executable, "-m", "aiprof", "import", *ranks, "-o", str(job), "--workers", "1"], check=True)
    other, _ = import_paths([shared_data / V100], tmp_path / "served" / "other.aiprof")
    q = "SELECT rank, count(*) AS n, min(ts) AS t0 FROM events GROUP BY rank ORDER BY rank"
    with open_job(job) as prof:
        ro = ReadOnlySql(prof)
        try:
            got = ro.query(q).table.to_pylist()
            assert got == prof.sql(q).to_pylist() and [r["rank"] for r in got] == [0, 1]
            assert {t["name"]: t["rows"] for t in ro.schema()}["events"] == prof.tables["events"]
            # The job's folder is readable, its neighbours are not.
            with pytest.raises(AiprofError, match="disabled by configuration"):
                ro.query(f"SELECT count(*) FROM read_parquet('{other}/events.parquet')")
        finally:
            ro.close()
