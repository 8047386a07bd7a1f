"""The store's DuckDB connections: bounded memory, a spill folder each, a clear error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aiprof.errors import AiprofError
from aiprof.store import duck, open_profile
from aiprof.store.writer import ProfileWriter


def _setting(con: object, name: str) -> str:
    return str(con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0])  # type: ignore[attr-defined]


def test_default_limit_threads_and_own_spill_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(duck.MEMORY_ENV, raising=False)
    a, b = duck.connect(), duck.connect(threads=None)
    try:
        assert _setting(a, "memory_limit") == "1.0 GiB"
        assert _setting(a, "threads") == "2"
        assert int(_setting(b, "threads")) == os.cpu_count()
        ta, tb = _setting(a, "temp_directory"), _setting(b, "temp_directory")
        assert ta != tb and f"aiprof-duckdb-{os.getpid()}-" in ta
    finally:
        a.close()
        b.close()


def test_a_query_past_the_limit_spills_and_the_folder_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(duck.MEMORY_ENV, "64MB")
    con = duck.connect()
    spill = Path(_setting(con, "temp_directory"))
    # A sort of 8M rows of 24 bytes (~190 MB) cannot stay within 64 MB.
    row = con.execute(
        "SELECT count(*), min(k), max(k) FROM (SELECT hash(i) AS k, i, i * 2 AS j FROM range(8000000) t(i) ORDER BY k)"
    ).fetchone()
    assert row is not None and row[0] == 8_000_000 and row[1] <= row[2]
    assert spill.is_dir() and any(spill.iterdir())  # it did spill
    con.close()
    assert not spill.exists()


def test_profiles_open_with_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(duck.MEMORY_ENV, "300MB")
    with ProfileWriter(tmp_path / "p.aiprof") as w:
        w.append("events", {"kind": ["cpu_op"], "name": ["a"], "ts": [0], "dur": [5], "device_type": ["cpu"]})
    p = open_profile(tmp_path / "p.aiprof")
    try:
        assert _setting(p.con, "memory_limit") == "286.1 MiB"
        assert p.sql("SELECT sum(dur) AS d FROM events").to_pylist() == [{"d": 5}]
    finally:
        p.close()


def test_a_bad_limit_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(duck.MEMORY_ENV, "lots")
    with pytest.raises(AiprofError, match=r"^AIPROF_MEMORY_LIMIT='lots': not a memory size \(") as e:
        duck.connect()
    assert "\n" not in str(e.value)


def _profile(folder: Path, name: str, dur: int) -> Path:
    with ProfileWriter(folder / f"{name}.aiprof") as w:
        w.append("events", {"kind": ["cpu_op"], "name": [name], "ts": [0], "dur": [dur], "device_type": ["cpu"]})
    return folder / f"{name}.aiprof"


def test_profiles_open_in_one_process_share_a_database_and_see_only_their_own(tmp_path: Path) -> None:
    a, b = open_profile(_profile(tmp_path, "a", 5)), open_profile(_profile(tmp_path, "b", 7))
    try:
        assert a._session and b._session and a._session != b._session
        # One database: the process's; each profile a catalog of its own in it.
        dbs = {r[0] for r in a.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
        assert {a._session, b._session} <= dbs
        assert a.sql("SELECT name, dur FROM events").to_pylist() == [{"name": "a", "dur": 5}]
        assert b.sql("SELECT name, dur FROM events").to_pylist() == [{"name": "b", "dur": 7}]
        # What one profile's user creates stays in its catalog.
        a.sql("CREATE TABLE mine AS SELECT 1 AS x")
        with pytest.raises(AiprofError, match="mine"):
            b.sql("SELECT * FROM mine")
    finally:
        gone = a._session
        a.close()
    # Its catalog went with it (other tests' profiles may still be open in this process).
    dbs = {r[0] for r in b.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert a._session is None and gone not in dbs and b._session in dbs
    b.close()


def test_a_forked_child_opens_a_database_of_its_own(tmp_path: Path) -> None:
    p = _profile(tmp_path, "a", 5)
    with open_profile(p) as prof:
        parent = prof.sql("SELECT sum(dur) AS d FROM events").to_pylist()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's database (and its threads) is not used
        try:
            with open_profile(p) as prof:
                ok = prof.sql("SELECT sum(dur) AS d FROM events").to_pylist() == parent
            os.write(w, b"ok" if ok and (os.getpid(), duck.memory_limit()) in duck._shared else b"bad")
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 8) == b"ok"


def test_a_profile_dropped_unclosed_gives_its_catalog_back(tmp_path: Path) -> None:
    import gc

    p = open_profile(_profile(tmp_path, "a", 5))
    name = p._session
    del p
    gc.collect()
    with open_profile(_profile(tmp_path, "b", 7)) as b:
        dbs = {r[0] for r in b.con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert name and name not in dbs
