"""The Kineto importer's two engines: the columnar path (DuckDB + Arrow, the default)
and the event path (AIPROF_IMPORT_ENGINE=python) make the same profile."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import import_paths, jsonstream
from aiprof.importers.jsonstream import ArrayParts, TraceStream
from aiprof.importers.kineto import columnar as kineto_columnar
from aiprof.store import open_profile
from kineto_builders import kernel, launch, span, two_step_trace, write_trace
from test_import_kineto import KINETO

EVENT_COLS = (
    "rank, device_type, device, kind, cat, name, ts, dur, correlation, external_id, step, bytes, grid, block, "
    "json(args)::VARCHAR AS args"
)
# Processes and threads named by a string get synthetic ids (1 << 32 + n) whose order
# may differ between the engines; every other id is compared as is.
IDS = "CASE WHEN pid >= 4294967296 THEN -2 ELSE pid END AS pid, CASE WHEN tid >= 4294967296 THEN -2 ELSE tid END AS tid"


def _rows(prof: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in prof.sql(sql).to_pylist()]


def _tables(p: Path) -> dict[str, list[tuple[Any, ...]]]:
    # Times are compared absolute: each engine takes the earliest time of its first
    # batch as ts = 0, and its batches differ (profile.json says which origin it took).
    with open_profile(p) as prof:
        origin = prof.metas[0]["time_origin_ns"]
        cols = EVENT_COLS.replace(" ts,", f" ts + {origin} AS ts,")
        out = {"events": _rows(prof, f"SELECT {cols}, {IDS} FROM events ORDER BY ALL")}
        out["memory"] = _rows(
            prof, f"SELECT * EXCLUDE (pid, tid) REPLACE (ts + {origin} AS ts), {IDS} FROM memory ORDER BY ALL"
        )
        out["counters"] = _rows(prof, f"SELECT * REPLACE (ts + {origin} AS ts) FROM counters ORDER BY ALL")
        out["meta"] = [
            (m["clock"], m["partial"], json.dumps(m["devices"]), m["ranks"], m["world_size"]) for m in prof.metas
        ]
    return out


def _both(src: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any, Any]:
    monkeypatch.setenv(kineto_columnar.ENGINE_ENV, "python")
    a, ctx_a = import_paths([src], tmp / "events.aiprof")
    monkeypatch.setenv(kineto_columnar.ENGINE_ENV, "columnar")
    b, ctx_b = import_paths([src], tmp / "columnar.aiprof")
    monkeypatch.delenv(kineto_columnar.ENGINE_ENV)
    return a, ctx_a, b, ctx_b


@pytest.mark.parametrize("name", KINETO)
def test_engines_agree_on_every_real_trace(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    a, ctx_a, b, ctx_b = _both(shared_data / "kineto" / name, tmp_path, monkeypatch)
    ta, tb = _tables(a), _tables(b)
    for table in ("events", "memory", "counters", "meta"):
        assert len(ta[table]) == len(tb[table]), table
        assert ta[table] == tb[table], table
    assert ctx_a.kinds == ctx_b.kinds
    assert ctx_a.tables == ctx_b.tables


def test_columnar_path_is_the_one_taken(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A large file takes the columnar path by default: the event path's converter sees
    # only the rows Arrow leaves (metadata, the string-named "Traces" process), not the
    # 188k spans. A small one takes the event path.
    monkeypatch.delenv(kineto_columnar.ENGINE_ENV, raising=False)
    small = shared_data / "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    assert kineto_columnar.wanted(shared_data / "kineto/V100/df_index_resolver.json.gz")
    assert not kineto_columnar.wanted(small)
    seen: list[int] = []
    real = kineto_columnar.BatchConverter._event_path

    def spy(self: Any, batch: Any) -> None:
        seen.append(batch.num_rows)
        real(self, batch)

    monkeypatch.setattr(kineto_columnar.BatchConverter, "_event_path", spy)
    _, ctx = import_paths([shared_data / "kineto/V100/df_index_resolver.json.gz"], tmp_path / "p.aiprof")
    assert 0 < sum(seen) < 100
    assert ctx.kinds["kernel"] == 17350 and ctx.kinds["runtime"] == 42373 and ctx.tables["memory"] == 28010


def _odd_trace() -> list[dict[str, Any]]:
    ev = two_step_trace()
    ev += [
        # string timestamps with sub-ns digits, float µs, exponent: exact ns
        span("str_ts", "cpu_op", 0, 1) | {"ts": "1000.0005", "dur": "2.25"},
        span("exp_ts", "cpu_op", 0, 1) | {"ts": 1.0005e3, "dur": 1e-3},
        # processes and threads named by strings, a counter, B/E, a flow with a string id
        {"ph": "X", "cat": "cpu_op", "name": "named", "pid": "Spans", "tid": "stream 3", "ts": 1100, "dur": 5},
        {"ph": "C", "name": "util", "pid": 100, "ts": 1200, "args": {"value": 3.5}},
        {"ph": "B", "cat": "user_annotation", "name": "region", "pid": 100, "tid": 100, "ts": 1300},
        {"ph": "E", "pid": 100, "tid": 100, "ts": 1350},
        {"ph": "s", "cat": "ac2g", "name": "x", "id": "k7", "pid": 100, "tid": 100, "ts": 1400},
        {"ph": "f", "cat": "ac2g", "name": "x", "id": 7, "pid": 0, "tid": 7, "ts": 1410, "bp": "e"},
        # an args key of an odd type (Triton's "grid": "grid(100,)") keeps the others
        span("triton_k", "cpu_op", 1500, 3, **{"External id": 9, "grid": "grid(100,)"}),
        # [memory] instants on two devices, an unknown phase, an event timechart drew
        {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": 100,
            "tid": 100,
            "ts": 1600,
            "args": {
                "Device Type": 1,
                "Device Id": 0,
                "Addr": 5,
                "Bytes": 512,
                "Total Allocated": 512,
                "Total Reserved": 2048,
            },
        },
        {
            "ph": "i",
            "s": "t",
            "name": "[memory]",
            "pid": 100,
            "tid": 100,
            "ts": 1601,
            "args": {"Device Type": 0, "Addr": 6, "Bytes": -8, "Total Allocated": 0, "Total Reserved": 0},
        },
        {"ph": "R", "name": "mark", "pid": 100, "tid": 100, "ts": 1700},
        {
            "ph": "s",
            "cat": "ac2g",
            "name": "drawn",
            "id": 3,
            "pid": 100,
            "tid": 100,
            "ts": 1800,
            "aiprof_synthetic": True,
        },
        kernel("void ncclKernel_AllReduce", 1900, 10, corr=77)
        | {"args": {"correlation": 77, "device": "0x1", "stream": 9}},
        launch(1890, 2, corr=77),
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoH",
            "pid": 0,
            "tid": 7,
            "ts": 1950,
            "dur": 4,
            "args": {"correlation": 78, "bytes": 4096.0, "device": 0},
        },
    ]
    return ev


def test_engines_agree_on_odd_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_trace(tmp_path / "odd.json", _odd_trace(), distributedInfo={"rank": 3, "world_size": 8})
    a, ctx_a, b, ctx_b = _both(src, tmp_path, monkeypatch)
    ta, tb = _tables(a), _tables(b)
    for table in ("events", "memory", "counters", "meta"):
        assert ta[table] == tb[table], table
    assert ctx_a.kinds == ctx_b.kinds
    with open_profile(b) as prof:
        got = {r[0]: r[1:] for r in _rows(prof, "SELECT name, ts, dur, device, bytes, external_id FROM events")}
        mem = _rows(prof, "SELECT device_type, device, bytes FROM memory WHERE addr IN (5, 6) ORDER BY ts")
    # "1000.0005" µs -> 1000000.5 ns, rounded half up; 1.0005e3 µs -> 1000500 ns
    assert got["exp_ts"][0] - got["str_ts"][0] == 1000500 - 1000001
    assert got["str_ts"][1] == 2250 and got["exp_ts"][1] == 1
    assert got["void ncclKernel_AllReduce"][2] == 1  # "0x1"
    assert got["Memcpy DtoH"][3] == 4096
    assert got["triton_k"][4] == 9
    assert "drawn" not in got and "region" in got and "mark" in got
    assert mem == [("cuda", 0, 512), ("cpu", -1, -8)]


@pytest.mark.parametrize("gz", [False, True])
def test_copy_finds_the_list_end_before_trailing_keys(tmp_path: Path, gz: bool) -> None:
    # Trailing keys that hold lists and brackets in strings: the list ends before them.
    events = two_step_trace()
    text = json.dumps(
        {
            "schemaVersion": 1,
            "traceEvents": events,
            "deviceProperties": [{"id": 0, "name": "A]"}],
            "traceName": "x]",
            "more": [[1], [2]],
        },
        indent=1,
    ).encode()
    src = tmp_path / ("t.json.gz" if gz else "t.json")
    src.write_bytes(gzip.compress(text) if gz else text)
    stream = TraceStream(src)
    out = tmp_path / "events.json"
    with out.open("wb") as f:
        assert stream.copy_events(f)
    assert json.loads(out.read_bytes()) == events
    assert stream.header["traceName"] == "x]" and stream.header["more"] == [[1], [2]]
    assert stream.header["deviceProperties"][0]["name"] == "A]" and stream.complete


def test_copy_declines_a_cut_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A job killed mid-write: the copy cannot find the end; the scanner keeps every
    # complete event and says what was lost, on the columnar path as on the event path.
    src = write_trace(tmp_path / "t.json", two_step_trace())
    data = src.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: int(len(data) * 0.7)])
    with (tmp_path / "x.json").open("wb") as f:
        assert not TraceStream(cut).copy_events(f)
    a, ctx_a, b, ctx_b = _both(cut, tmp_path, monkeypatch)
    assert _tables(a)["events"] == _tables(b)["events"] and len(_tables(b)["events"]) > 0
    assert any("cut short" in w for w in ctx_b.warnings)
    assert [w for w in ctx_a.warnings] == [w for w in ctx_b.warnings]


def test_damage_deep_in_the_file_starts_over_by_the_event_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A malformed event after the first batch: the half-written profile is dropped and
    # the event path imports every readable event, saying what it skipped.
    # Small reads and batches, so that DuckDB hands over rows before it meets the damage.
    monkeypatch.setattr(kineto_columnar, "_BATCH", 1024)
    monkeypatch.setattr(kineto_columnar, "_MAX_EVENT", 1 << 16)
    events = [span(f"op{i}", "cpu_op", i * 10, 5) for i in range(200000)]
    src = tmp_path / "t.json"
    text = json.dumps({"traceEvents": events})
    bad = text.replace('"name": "op190000"', '"name": op190000', 1)
    assert bad != text
    src.write_text(bad)
    import aiprof.importers as importers

    engines: list[bool] = []
    real = importers._import

    def spy(*args: Any, columnar: bool, **kw: Any) -> Any:
        engines.append(columnar)
        return real(*args, columnar=columnar, **kw)

    monkeypatch.setattr(importers, "_import", spy)
    out, ctx = import_paths([src], tmp_path / "p.aiprof")
    assert engines == [True, False]  # begun by DuckDB, done again event by event
    with open_profile(out) as prof:
        names = {r[0] for r in _rows(prof, "SELECT name FROM events")}
    assert len(names) == 199999 and "op190000" not in names and {"op189999", "op190001"} <= names
    assert any("1 malformed trace events" in w for w in ctx.warnings)


@pytest.mark.parametrize("gz", [False, True])
def test_engines_agree_on_a_bare_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gz: bool) -> None:
    text = json.dumps(_odd_trace()).encode()
    src = tmp_path / ("bare.json.gz" if gz else "bare.json")
    src.write_bytes(gzip.compress(text) if gz else text)
    with (tmp_path / "x.json").open("wb") as f:
        assert TraceStream(src).copy_events(f)
    assert json.loads((tmp_path / "x.json").read_bytes()) == _odd_trace()
    a, ctx_a, b, ctx_b = _both(src, tmp_path, monkeypatch)
    assert _tables(a) == _tables(b) and ctx_a.kinds == ctx_b.kinds


def _kineto_layout(events: list[dict[str, Any]]) -> bytes:
    """The layout torch.profiler writes: one key per line in an event, args indented."""
    head = '{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
    return (
        head + ",\n".join("  " + json.dumps(e, indent=2) for e in events) + '\n  ],\n  "traceName": "t"\n}'
    ).encode()


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_array_parts_are_cut_between_events(tmp_path: Path, layout: str, gz: bool) -> None:
    # The event list copied out as several arrays (from a plain file: each part's range
    # copied by the kernel; from gzip: as it is inflated): each file is valid JSON,
    # together they hold every event in order, and they are about the size asked for.
    events = [
        span(f"op{i}", "cpu_op", i * 10, 5) | {"args": {"External id": i, "Input Dims": [[2, 3], []]}}
        for i in range(3000)
    ]
    text = _kineto_layout(events) if layout == "kineto" else json.dumps({"traceEvents": events}).encode()
    src = tmp_path / ("t.json.gz" if gz else "t.json")
    src.write_bytes(gzip.compress(text) if gz else text)
    parts = ArrayParts(tmp_path / "parts", 16 << 10)
    (tmp_path / "parts").mkdir()
    assert TraceStream(src).copy_events(parts)
    parts.close()
    got = [json.loads(p.read_bytes()) for p in parts.paths]
    assert [e for part in got for e in part] == events
    assert len(parts.paths) >= len(text) // (16 << 10) - 1
    assert all(len(p) > 0 for p in got)


def _nested_last(i: int) -> dict[str, Any]:
    # An event whose last key holds objects in a list: most of its text is '}, {'
    # inside it, where a cut made by the layout alone falls inside the event.
    return span(f"n{i}", "cpu_op", 100_000 + i * 10, 5) | {
        "args": {"External id": 50_000 + i, "dims": [{"a": i + k} for k in range(40)]}
    }


def test_a_cut_inside_an_event_is_refused_and_the_list_read_as_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Every event holds '}, {': some cuts fall inside an event. DuckDB refuses those
    # parts before any row is written and the list is read again as one file: the
    # profile is the event path's.
    monkeypatch.setattr(kineto_columnar, "PIECE_BYTES", 4 << 10)
    events = [_nested_last(i) for i in range(2000)]
    src = tmp_path / "t.json"
    src.write_bytes(json.dumps({"traceEvents": events}).encode())
    with caplog.at_level("INFO", logger="aiprof.import"):
        a, ctx_a, b, ctx_b = _both(src, tmp_path, monkeypatch)
    assert any("reading them as one file" in r.getMessage() for r in caplog.records)
    ta, tb = _tables(a), _tables(b)
    assert len(tb["events"]) == 2000 and ta == tb and ctx_a.kinds == ctx_b.kinds


def test_a_cut_inside_an_event_after_rows_were_written_starts_over_in_one_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The first parts are sound and their rows are written; a later cut falls inside an
    # event: the import starts over with the list read as one file (not by the slow
    # event path), and the profile is the event path's.
    monkeypatch.setattr(kineto_columnar, "PIECE_BYTES", 4 << 10)
    monkeypatch.setattr(kineto_columnar, "ORIGIN_EVENTS", 64)
    monkeypatch.setattr(kineto_columnar, "_BATCH", 64)
    events = [span(f"op{i}", "cpu_op", i * 10, 5) for i in range(2000)] + [_nested_last(i) for i in range(2000)]
    src = tmp_path / "t.json"
    src.write_bytes(json.dumps({"traceEvents": events}).encode())
    with caplog.at_level("INFO", logger="aiprof.import"):
        a, ctx_a, b, ctx_b = _both(src, tmp_path, monkeypatch)
    messages = [r.getMessage() for r in caplog.records]
    assert any("importing again in one part" in m for m in messages)
    assert not any("event by event" in m for m in messages)
    ta, tb = _tables(a), _tables(b)
    assert len(tb["events"]) == 4000 and ta == tb and ctx_a.kinds == ctx_b.kinds


@pytest.mark.parametrize(
    "name",
    [
        "A100-nccl-parser/nccl_data.json.gz",
        "sampled-128-ranks/sampled_rank-0.json.gz",
        "V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    ],
)
def test_engines_agree_when_the_events_are_read_in_small_parts(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # Real traces cut into 64 KiB parts, parsed two at a time: the same profile as the
    # event path, whatever the cuts.
    monkeypatch.setattr(kineto_columnar, "PIECE_BYTES", 64 << 10)
    parts: list[int] = []
    spool = kineto_columnar.spool_events

    def counted(*a: Any) -> Any:
        got = spool(*a)
        parts.append(len(got[1]))
        return got

    monkeypatch.setattr(kineto_columnar, "spool_events", counted)
    a, ctx_a, b, ctx_b = _both(shared_data / "kineto" / name, tmp_path, monkeypatch)
    assert parts and parts[0] > 8
    assert _tables(a) == _tables(b) and ctx_a.kinds == ctx_b.kinds and ctx_a.tables == ctx_b.tables


def test_a_bare_array_of_torch_events_is_a_kineto_trace(shared_data: Path, tmp_path: Path) -> None:
    # A Chrome trace written as a bare array whose events carry a category is the Kineto
    # importer's (cpu_op spans on the host), not a MindSpore 1.x timeline (whose events
    # have no category and are all NPU ops); the MindSpore sample is still MindSpore's.
    from aiprof.importers import choose

    src = tmp_path / "bare.json"
    src.write_text(json.dumps([span(f"op{i}", "cpu_op", i * 10, 5) for i in range(50)]))
    assert choose(src).name == "kineto"
    _, ctx = import_paths([src], tmp_path / "bare.aiprof")
    assert ctx.kinds == {"cpu_op": 50}
    timeline = shared_data / "ascend" / "mindspore-1.x" / "ascend_timeline_display_1.json"
    assert choose(timeline).name == "mindspore-legacy"


def test_both_engines_take_the_time_origin_from_as_many_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The event path reads 8 MiB at a time; here its first read holds fewer than
    # ORIGIN_EVENTS events, and the earliest of the first ORIGIN_EVENTS comes after it.
    # Both engines hold their first reads until they have ORIGIN_EVENTS events, so both
    # take the same origin (found by a new-user trial: 79.5 ms apart on a real trace).
    pad = "x" * 400
    events = [span(f"op{i}", "cpu_op", 1_000_000 + i * 10, 5) | {"args": {"pad": pad}} for i in range(66_000)]
    events[60_000]["ts"] = 500_000  # the earliest of the first ORIGIN_EVENTS, past the first reads
    src = tmp_path / "t.json"
    src.write_bytes(json.dumps({"traceEvents": events}).encode())
    assert src.stat().st_size > 3 * jsonstream.CHUNK
    a, _, b, _ = _both(src, tmp_path, monkeypatch)
    with open_profile(a) as pa_, open_profile(b) as pb:
        assert pa_.metas[0]["time_origin_ns"] == pb.metas[0]["time_origin_ns"] == 500_000_000
        assert pa_.sql("SELECT min(ts) AS t FROM events").to_pylist() == [{"t": 0}]


def test_parts_are_copied_through_memory_where_the_kernel_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # copy_file_range refused (another file system, an old kernel): the same parts,
    # copied by reads and writes.
    events = [span(f"op{i}", "cpu_op", i * 10, 5) for i in range(3000)]
    src = tmp_path / "t.json"
    src.write_bytes(_kineto_layout(events))

    def refuse(*_a: Any) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse)
    (tmp_path / "parts").mkdir()
    parts = ArrayParts(tmp_path / "parts", 16 << 10)
    stream = TraceStream(src)
    assert stream.copy_events(parts) and stream.complete and stream.header["traceName"] == "t"
    parts.close()
    assert len(parts.paths) > 3
    assert [e for p in parts.paths for e in json.loads(p.read_bytes())] == events
