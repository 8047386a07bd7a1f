"""Both gzip inflaters (igzip from the ``isal`` package, and zlib) give the same bytes
and the same warnings on every kind of gzip input the stream meets."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import aiprof.importers.jsonstream as js
from aiprof.importers import gunzip
from kineto_builders import write_corrupt_gzip

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "kineto"


@pytest.fixture(params=["isal", "zlib"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "isal":
        pytest.importorskip("isal", reason="the optional extra 'fast' (isal) is not installed")
        monkeypatch.delenv(gunzip.ENV, raising=False)
    else:
        monkeypatch.setenv(gunzip.ENV, "zlib")
    monkeypatch.setattr(js, "CHUNK", 4096)  # many reads and many outputs per member
    assert gunzip.engine() == request.param
    return str(request.param)


def _read(p: Path) -> tuple[bytes, list[str]]:
    chunks, problems = js.open_bytes(p)
    return b"".join(chunks), problems


def _text(n: int) -> bytes:
    return (
        b'{"traceEvents": [' + b",".join(b'{"ph":"X","name":"op%d","ts":%d,"dur":5}' % (i, i) for i in range(n)) + b"]}"
    )


def test_a_real_trace_inflates_to_gzips_bytes(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    f = DATA / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    if not f.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    monkeypatch.setattr(js, "CHUNK", 1 << 20)
    out, problems = _read(f)
    assert out == gzip.decompress(f.read_bytes())
    assert len(out) > 15_000_000  # the README's 15.4 MB raw
    assert problems == []


def test_several_members_padding_and_junk(engine: str, tmp_path: Path) -> None:
    text = _text(2000)
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text[:7000]) + gzip.compress(text[7000:]) + b"\0" * 100)
    assert _read(p) == (text, [])
    p.write_bytes(gzip.compress(text) + b"junk")
    assert _read(p) == (text, ["bytes after the end of the gzip data (not another gzip member) were ignored"])


def test_a_cut_stream_keeps_what_it_holds(engine: str, tmp_path: Path) -> None:
    text = _text(3000)
    z = gzip.compress(text)
    p = tmp_path / "t.json.gz"
    p.write_bytes(z[: len(z) // 2])
    out, problems = _read(p)
    assert 0 < len(out) < len(text) and text.startswith(out)
    assert problems == ["gzip stream ends before its end marker (file cut short)"]


def test_a_corrupt_stream_warns_and_keeps_the_bytes_before(engine: str, tmp_path: Path) -> None:
    text = _text(3000)
    p = write_corrupt_gzip(tmp_path / "t.json.gz", text)
    out, problems = _read(p)
    assert len(problems) == 1 and ("gzip data is corrupt" in problems[0] or "cut short" in problems[0]), problems
    assert out[:1000] == text[:1000]
