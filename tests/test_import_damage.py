"""Each cause of the fuzz run's crashes and hangs (issue 19), fed the exact kind of input.

The inputs are minimised copies of what crashed, built here (a few KB each): gzip
tricks, corrupt streams, values past 64 bits or of the wrong type, deep nesting, odd
flow ids, a 128 KiB line, a flipped byte. Each must import what can be read and warn,
or fail with aiprof's own error; through the CLI, one line and exit 2.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

import aiprof.importers.jsonstream as js
from aiprof.errors import AiprofError, ImportFormatError, UnexpectedInputError
from aiprof.importers import import_paths
from aiprof.importers.base import ImportContext, Importer, yes
from kineto_builders import span, two_step_trace, write_corrupt_gzip

ROOT = Path(__file__).resolve().parents[1]


def _events(out: Path, where: str = "true") -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    rows = con.execute(
        f"select name, ts, dur, external_id, args from read_parquet('{out}/events.parquet') where {where} order by ts"
    ).fetchall()
    con.close()
    return rows


def _trace_bytes(n: int) -> bytes:
    evs = [span(f"op{i}", "cpu_op", i * 10, 5) for i in range(n)]
    return json.dumps({"traceEvents": evs}).encode()


# -- 1. gzip: trailing bytes, several members --------------------------------------------


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Members bigger than the read chunk (the hang needed > 8 MiB; 4 KiB shows it)."""
    monkeypatch.setattr(js, "CHUNK", 4096)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("junk", [b"junk after the end", b"\0" * 3000, b"\x1f"])
def test_bytes_after_the_gzip_end_marker(tmp_path: Path, junk: bytes) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(_trace_bytes(2000)) + junk)
    out, ctx = import_paths([p], tmp_path / "o.aiprof", forced="kineto")
    assert len(_events(out)) == 2000
    if junk.strip(b"\0"):
        assert any("gzip" in w for w in ctx.warnings), ctx.warnings


@pytest.mark.usefixtures("small_chunks")
def test_every_member_of_a_multi_member_gzip_is_read(tmp_path: Path) -> None:
    text = _trace_bytes(3000)
    cuts = [0, 5000, len(text) // 2, len(text)]  # `cat a.gz b.gz c.gz`
    p = tmp_path / "t.json.gz"
    p.write_bytes(b"".join(gzip.compress(text[a:b]) for a, b in itertools.pairwise(cuts)))
    out, ctx = import_paths([p], tmp_path / "o.aiprof", forced="kineto")
    assert [r[0] for r in _events(out)] == [f"op{i}" for i in range(3000)]
    assert not ctx.warnings


def test_a_member_past_8_mib_with_trailing_bytes_ends(tmp_path: Path) -> None:
    # The real size of the hang: one member inflating past the 8 MiB read chunk.
    text = b'{"traceEvents": [' + b",".join([b'{"ph":"i","name":"x","ts":1,"pid":1,"tid":1}'] * 200_000) + b"]}"
    assert len(text) > js.CHUNK
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text, 1) + b"trailing" + gzip.compress(b""))
    chunks, problems = js.open_bytes(p)
    assert b"".join(chunks) == text
    assert problems == ["bytes after the end of the gzip data (not another gzip member) were ignored"]


# -- 2. corrupt zlib streams ----------------------------------------------------------


@pytest.mark.usefixtures("small_chunks")
def test_corrupt_deflate_data_past_the_first_read(tmp_path: Path) -> None:
    text = _trace_bytes(3000)
    p = write_corrupt_gzip(tmp_path / "t.json.gz", text)
    try:
        out, ctx = import_paths([p], tmp_path / "o.aiprof", forced="kineto")
    except ImportFormatError:
        return  # a clean error is fine; a zlib.error or a hang is not
    assert 0 < len(_events(out)) < 3000
    assert any("gzip data is corrupt" in w or "cut short" in w for w in ctx.warnings), ctx.warnings


# -- 3. values too large or of the wrong type -----------------------------------------


def test_integers_past_64_bits_keep_the_event_and_the_value(tmp_path: Path) -> None:
    evs = [*two_step_trace(), span("huge", "cpu_op", 10, 5, **{"External id": 2**70})]
    evs.append(span("late", "cpu_op", 2**70, 5))
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    out, ctx = import_paths([p], tmp_path / "o.aiprof", forced="kineto")
    (row,) = _events(out, "name = 'huge'")
    assert row[3] is None and json.loads(row[4])["external_id"] == str(2**70)
    assert len(_events(out, "name = 'late'")) == 1
    assert any("events.external_id did not fit" in w for w in ctx.warnings)
    assert any("without a usable timestamp" in w for w in ctx.warnings)


def test_the_writer_keeps_an_odd_value_in_args(tmp_path: Path) -> None:
    from aiprof.store.writer import ProfileWriter

    with ProfileWriter(tmp_path / "w.aiprof") as w:
        w.append(
            "events",
            {
                "kind": ["cpu_op", "cpu_op"],
                "name": ["a", "b"],
                "ts": [1, [1, 2]],
                "dur": [2**64, 3],
                "args": ['{"x": 1}', None],
            },
        )
        w.append("counters", {"metric": ["m", "m"], "ts": [1, 2], "value": [1.0, "high"]})
    assert w.unfit == {"events.ts": 1, "events.dur": 1, "counters.value": 1}
    rows = _events(w.path)
    assert [(r[0], r[1], r[2]) for r in rows] == [("a", 1, None), ("b", None, 3)]
    assert json.loads(rows[0][4]) == {"x": 1, "dur": str(2**64)}
    assert json.loads(rows[1][4]) == {"ts": [1, 2]}


# -- 4. deep nesting ------------------------------------------------------------------


@pytest.mark.parametrize("depth", [950, 100_000])
def test_deeply_nested_args_cost_only_their_event(tmp_path: Path, depth: int) -> None:
    evs = two_step_trace()
    deep = "[" * depth + "]" * depth
    text = json.dumps({"traceEvents": evs}).replace(
        '"traceEvents": [',
        '"traceEvents": [{"ph": "X", "cat": "cpu_op", '
        '"name": "deep", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": ' + deep + "}, ",
        1,
    )
    p = tmp_path / "t.json"
    p.write_text(text)
    out, _ = import_paths([p], tmp_path / "o.aiprof", forced="kineto")
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps({"traceEvents": evs}))
    base, _ = import_paths([clean], tmp_path / "base.aiprof", forced="kineto")

    def parsed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted(((*r[:4], json.loads(r[4]) if r[4] else None) for r in rows), key=repr)

    assert parsed(_events(out, "name <> 'deep'")) == parsed(_events(base))


def test_deeply_nested_header_and_small_json(tmp_path: Path) -> None:
    deep = '{"a": ' * 990 + "1" + "}" * 990  # orjson reads it; Python's repr of it recurses too deep
    p = tmp_path / "t.json"
    trace = json.dumps({"traceEvents": two_step_trace()})
    p.write_text('{"deviceProperties": [{"computeMajor": ' + deep + "}], " + trace[1:])
    out, _ = import_paths([p], tmp_path / "o.aiprof", forced="kineto")
    assert len(_events(out, "name like 'ProfilerStep#%'")) == 2
    summary = tmp_path / "ascend_timeline_summary_1.json"
    summary.write_text('{"total_time": 5, "num_of_streams": 1, "num_of_ops": 2, "nested": ' + deep + "}")
    out2, _ = import_paths([summary], tmp_path / "s.aiprof", forced="mindspore-text")
    meta = json.loads((out2 / "profile.json").read_text())
    assert meta["mindspore"][summary.name]["total_time"] == 5


# -- 5. Ascend flow ids, hl-smi lines, the AI CPU binary -------------------------------


@pytest.mark.parametrize("fid", [1.5, [3], {"id": 1}, 2**70, True])
def test_ascend_flow_id_of_any_type(tmp_path: Path, fid: Any) -> None:
    evs = [
        {"ph": "X", "name": "aclnnMm", "pid": 1, "tid": 1, "ts": "100.0", "dur": 10, "args": {}},
        {"ph": "X", "name": "MatMul", "pid": 2, "tid": 2, "ts": "120.0", "dur": 5, "args": {"Task Type": "AI_CORE"}},
        {"ph": "s", "cat": "async_npu", "id": fid, "name": "flow", "pid": 1, "tid": 1, "ts": "100.0"},
        {"ph": "f", "cat": "async_npu", "id": fid, "name": "flow", "pid": 2, "tid": 2, "ts": "120.0", "bp": "e"},
    ]
    p = tmp_path / "trace_view.json"
    p.write_text(json.dumps(evs))
    out, _ = import_paths([p], tmp_path / "o.aiprof", forced="ascend-trace")
    con = duckdb.connect()
    rows = con.execute(
        f"select name, correlation from read_parquet('{out}/events.parquet') where name <> 'flow' order by name"
    ).fetchall()
    assert [r[0] for r in rows] == ["MatMul", "aclnnMm"]  # the odd id costs at most the flow


HLSMI = (
    "timestamp, name, index, utilization.aip [%], memory.used [MiB], power.draw [W]\n"
    "2024/01/01 00:00:00.000, HL-225, 0, 10 %, 100 MiB, 90.0 W\n"
)


def test_a_128_kib_line_in_hl_smi_text(tmp_path: Path) -> None:
    p = tmp_path / "hl-smi.txt"
    p.write_text(HLSMI + "x" * (128 << 10) + "\n" + HLSMI.splitlines()[1].replace("00.000", "01.000") + "\n")
    out, _ = import_paths([p], tmp_path / "o.aiprof", forced="hl-smi")
    con = duckdb.connect()
    n = con.execute(f"select count(distinct ts) from read_parquet('{out}/counters.parquet')").fetchone()
    assert n == (2,)


def test_a_flipped_digit_in_the_ai_cpu_binary(tmp_path: Path, shared_data: Path) -> None:
    src = (shared_data / "ascend/mindspore-1.x-raw/DATA_PREPROCESS.dev.AICPU.0.slice_0").read_bytes()
    good, _ = import_paths([_write(tmp_path / "a" / "DATA_PREPROCESS.dev.AICPU.0.slice_0", src)], tmp_path / "g")
    i = src.index(b"Run tart:") + len(b"Run tart:") + 2  # a digit of the first run start
    bad = src[:i] + b"r" + src[i + 1 :]
    out, ctx = import_paths([_write(tmp_path / "b" / "DATA_PREPROCESS.dev.AICPU.0.slice_0", bad)], tmp_path / "o")
    assert len(_events(out)) == len(_events(good)) - 1
    assert any("skipped" in w for w in ctx.warnings)


def _write(p: Path, data: bytes) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


# -- 6. through the CLI: one line, exit 2 ---------------------------------------------


def _aiprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("AIPROF_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "aiprof", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "data",
    [b"\x1f\x8b\x08\x00garbage", b"[" * 200_000, b'{"traceEvents": {"not": "a list"}}', b"\xff\xfe\x00"],
    ids=["gzip-garbage", "deep", "events-not-a-list", "binary"],
)
def test_damaged_input_through_the_cli(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "t.json").write_bytes(data)
    r = _aiprof("import", "t.json", "-f", "kineto", "-o", "x.aiprof", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiprof: error: "), r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_an_importer_bug_is_our_error_with_the_file_named(tmp_path: Path) -> None:
    """The boundary: whatever an importer raises on input it did not foresee becomes
    one line naming the file and format (the fuzz harness counts these as crashes)."""

    def load(path: Path, ctx: ImportContext) -> None:
        {}["a key the file lacks"]

    imp = Importer("strict-format", "a format whose reader trusts its input", lambda p: yes("any"), load)
    p = tmp_path / "in.txt"
    p.write_text("x")
    from aiprof.importers import _import

    with pytest.raises(UnexpectedInputError) as e:
        _import([(p, imp)], tmp_path / "o.aiprof", None, lambda _n: None, columnar=False)
    assert isinstance(e.value, AiprofError)
    assert str(e.value).startswith(f"{p}: cannot read this strict-format input")
    assert "KeyError" in str(e.value)
    assert not list(tmp_path.glob("*.aiprof")) and not list(tmp_path.glob(".o.aiprof*"))


def _unterminated(events: list[dict[str, Any]], at: int, layout_indent: int | None) -> tuple[bytes, int]:
    """A trace whose event ``at`` has a string that never closes; and where it starts."""
    text = json.dumps({"traceEvents": events}, indent=layout_indent).encode()
    mark = f'"op{at}"'.encode()
    i = text.index(mark)
    return text[:i] + b'"op' + text[i + len(mark) :], i


@pytest.mark.parametrize("layout_indent", [2, None])
def test_an_unterminated_string_says_how_much_it_cost(tmp_path: Path, layout_indent: int | None) -> None:
    # A string that never closes in the middle of the trace: the events before it are
    # kept, and the warning says how many bytes and about how many events could not be
    # read (it said "1 malformed trace event", or "trace cut short" of a whole file).
    n = 20_000
    events = [span(f"op{i}", "cpu_op", i * 10, 5) for i in range(n)]
    text, at = _unterminated(events, n // 2, layout_indent)
    src = tmp_path / "t.json"
    src.write_bytes(text)
    out, ctx = import_paths([src], tmp_path / "t.aiprof")
    kept = len(_events(out))
    assert n // 2 - 2_000 <= kept < n // 2 + 1
    (said,) = [w for w in ctx.warnings if "unterminated" in w]
    lost = int(said.split("about ")[1].split(" events")[0].replace(",", ""))
    assert abs((n - kept) - lost) <= 2, said
    if "at byte" in said:  # the whole rest of the list could not be cut into events
        assert f"at byte {at:,}" in said or int(said.split("at byte ")[1].split(" ")[0].replace(",", "")) <= at


def test_an_unreadable_stretch_of_a_run_counts_its_events(tmp_path: Path) -> None:
    # The event path's slow lane: a run of events that does not parse is cut by
    # structure; an unterminated string makes the rest of the run one piece, and the
    # warning counts the events in it, not one.
    from aiprof.importers.kineto.decode import decode_events
    from aiprof.store.writer import ProfileWriter

    events = [span(f"op{i}", "cpu_op", i * 10, 5) for i in range(300)]
    text, _ = _unterminated(events, 100, 2)
    run = text[text.index(b"[") : text.rindex(b"]") + 1]
    w = ProfileWriter(tmp_path / "w")
    ctx = ImportContext(writer=w)
    got = decode_events(run, ctx)
    w.abort()
    assert len(got) == 100
    (said,) = ctx.warnings
    assert "1 malformed stretch of the trace skipped" in said and "about 200 events" in said, said
