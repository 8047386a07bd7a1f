from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

import aiprof.importers.jsonstream as js
from aiprof.errors import ImportFormatError


def _fast(b: bytes) -> list[Any] | None:
    try:
        got = orjson.loads(b)
    except orjson.JSONDecodeError:
        return None  # the contract: None sends the text down the exact path
    assert isinstance(got, list)
    return got


def _events(stream: js.TraceStream) -> list[Any]:
    out: list[Any] = []
    for batch in stream.batches(_fast, lambda b: orjson.loads(b)):
        out.extend(batch)
    return out


TRICKY = [
    {"ph": "X", "name": 'a "quoted" }, { name', "ts": 1, "args": {"nested": {"x": [1, {"y": "]"}]}}},
    {"ph": "X", "name": "back\\slash\\", "ts": 2},
    {"ph": "i", "name": "},{", "ts": 3, "args": {"list": [{"a": 1}, {"b": 2}]}},
]


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_tricky_strings_and_nesting_survive_any_chunking(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(js, "CHUNK", chunk)
    events = TRICKY * 50
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"deviceProperties": [{"id": 0}], "traceEvents": events, "traceName": "x"}))
    s = js.TraceStream(p)
    assert _events(s) == events
    assert s.complete and s.lost == 0
    assert s.header == {"deviceProperties": [{"id": 0}], "traceName": "x"}


def test_bare_array_and_gzip(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(TRICKY).encode()))
    s = js.TraceStream(p)
    assert _events(s) == TRICKY
    assert s.bare_array and s.complete


def test_cut_file_yields_complete_events_and_says_what_was_lost(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": TRICKY * 10})
    cut = text[: len(text) - 40]
    p = tmp_path / "t.json"
    p.write_text(cut)
    s = js.TraceStream(p)
    got = _events(s)
    assert 0 < len(got) < 30
    assert got == (TRICKY * 10)[: len(got)]
    assert not s.complete and s.lost > 0
    assert any("cut short" in m for m in s.problems)


def test_cut_gzip_stream_is_reported(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"traceEvents": TRICKY * 200}).encode())
    p = tmp_path / "t.json.gz"
    p.write_bytes(data[: len(data) // 2])
    s = js.TraceStream(p)
    got = _events(s)
    assert got and got == (TRICKY * 200)[: len(got)]
    assert any("gzip" in m for m in s.problems)


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty"), (b"   ", "empty"), (b'{"a": 1}', "without a traceEvents"), (b"\x00\x01garbage", "not JSON")],
)
def test_not_a_trace(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(content)
    with pytest.raises(ImportFormatError, match=message):
        _events(js.TraceStream(p))
