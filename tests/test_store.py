from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aiprof.errors import AiprofError
from aiprof.store import SCHEMA_VERSION, ProfileWriter, open_profile


def _events(n: int, rank: int = 0, t0: int = 0) -> dict[str, list[object]]:
    return {
        "rank": [rank] * n,
        "device_type": ["cpu"] * n,
        "device": [-1] * n,
        "kind": ["cpu_op"] * n,
        "name": [f"op{i}" for i in range(n)],
        "ts": [t0 + 10 * i for i in range(n)],
        "dur": [5] * n,
    }


def test_commit_is_atomic_and_readable(tmp_path: Path) -> None:
    with ProfileWriter(tmp_path / "a") as w:
        w.append("events", _events(3))
        w.meta["time_origin_ns"] = 1000
    assert (tmp_path / "a.aiprof" / "profile.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["a.aiprof"]  # no temp folder left
    meta = json.loads((tmp_path / "a.aiprof" / "profile.json").read_text())
    assert meta["schema_version"] == SCHEMA_VERSION
    assert meta["tables"] == {"events": 3}
    with open_profile(tmp_path / "a.aiprof") as p:
        assert p.sql("SELECT count(*) AS n, sum(dur) AS d FROM events").to_pylist() == [{"n": 3, "d": 15}]
        # Tables never written are still there, empty and typed.
        assert p.sql("SELECT count(*) AS n FROM counters").to_pylist() == [{"n": 0}]


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ProfileWriter(tmp_path / "b") as w:
        w.append("events", _events(2))
        raise RuntimeError("importer died")
    assert list(tmp_path.iterdir()) == []


def test_vocabulary_is_enforced(tmp_path: Path) -> None:
    w = ProfileWriter(tmp_path / "c")
    ev = _events(1)
    ev["kind"] = ["gpu_kernel"]
    with pytest.raises(ValueError, match="vocabulary"):
        w.append("events", ev)
    with pytest.raises(ValueError, match="unknown columns"):
        w.append("events", {"nam": ["x"]})
    w.abort()


def test_folder_of_profiles_shares_one_time_axis(tmp_path: Path) -> None:
    for rank, origin in ((0, 5_000), (1, 7_000)):
        with ProfileWriter(tmp_path / "run" / f"rank{rank}") as w:
            w.append("events", _events(2, rank=rank))
            w.meta["time_origin_ns"] = origin
            w.meta["ranks"] = [rank]
    with open_profile(tmp_path / "run") as p:
        rows = p.sql("SELECT rank, min(ts) AS t FROM events GROUP BY rank ORDER BY rank").to_pylist()
        assert rows == [{"rank": 0, "t": 0}, {"rank": 1, "t": 2_000}]
        assert p.time_origin_ns == 5_000


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    with ProfileWriter(tmp_path / "d") as w:
        w.append("events", _events(1))
    meta_path = tmp_path / "d.aiprof" / "profile.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = SCHEMA_VERSION + 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(AiprofError, match="newer"):
        open_profile(tmp_path / "d.aiprof")


def _write_steps(dest: Path, numbers: list[int]) -> None:
    """A profile of one step span (ProfilerStep#N, 100 ns) and three operators in it per
    number, the steps 100 ns apart."""
    with ProfileWriter(dest) as w:
        for i, n in enumerate(numbers):
            ev = _events(4, t0=i * 100)
            ev["kind"] = ["step"] + ["cpu_op"] * 3
            ev["name"] = [f"ProfilerStep#{n}"] + ["op"] * 3
            ev["dur"] = [100, 5, 5, 5]
            w.append("events", ev)


def test_events_spill_past_the_memory_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aiprof.store.writer as writer

    monkeypatch.setattr(writer, "SPOOL_BYTES", 1)  # spill from the first batch on
    _write_steps(tmp_path / "e", [0, 1, 2])
    with open_profile(tmp_path / "e.aiprof") as p:
        rows = p.sql("SELECT step, count(*) AS n FROM events GROUP BY step ORDER BY step").to_pylist()
    assert rows == [{"step": 0, "n": 4}, {"step": 1, "n": 4}, {"step": 2, "n": 4}]
    assert not list((tmp_path / "e.aiprof").glob(".*spill*"))


def test_spilled_events_come_back_in_order_over_several_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spill is read back in row groups of SPILL_ROW_GROUP rows, whatever the batches:
    # the rows keep their order and steps across groups.
    import aiprof.store.writer as writer

    monkeypatch.setattr(writer, "SPOOL_BYTES", 1)
    monkeypatch.setattr(writer, "SPILL_ROW_GROUP", 8)  # 15 steps x 4 rows = 60 rows: 8 groups
    _write_steps(tmp_path / "g", list(range(15)))
    with open_profile(tmp_path / "g.aiprof") as p:
        rows = p.sql("SELECT ts, step FROM events").to_pylist()
    assert rows == [{"ts": i * 100 + 10 * d, "step": i} for i in range(15) for d in range(4)]
    assert pq.ParquetFile(tmp_path / "g.aiprof" / "events.parquet").metadata.num_row_groups == 8


def test_a_step_number_marking_several_spans_is_said(tmp_path: Path) -> None:
    # Two runs joined into one trace: ProfilerStep#0 twice on rank 0. Their events share
    # the number, so the profile says so (the step would otherwise silently span both).
    _write_steps(tmp_path / "j", [0, 1, 0, 1])
    meta = json.loads((tmp_path / "j.aiprof" / "profile.json").read_text())
    (said,) = [m for m in meta["warnings"] if "marks" in m]
    assert said.startswith("step 0 of rank 0 marks 2 spans at different times (and 1 more step numbers)")
    _write_steps(tmp_path / "k", [0, 1])  # each number once: nothing said
    assert json.loads((tmp_path / "k.aiprof" / "profile.json").read_text())["warnings"] == []
