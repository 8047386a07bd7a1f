"""PopVision: only through libpva. libpva ships with the Poplar SDK and cannot be
installed here, so the mapping is tested on a minimal stand-in with libpva's documented
attribute names; the real-library path is the clear message when it is missing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from aiprof.importers import choose
from aiprof.importers.base import ImportContext
from aiprof.importers.popvision import _load
from aiprof.store import ProfileWriter, open_profile
from test_cli import cli


def _report() -> NS:
    def ipu(i: int, cycles: int) -> NS:
        return NS(id=i, cycles=cycles)

    steps = [
        NS(program=NS(name="StreamCopy"), ipus=[ipu(0, 1000), ipu(1, 500)]),
        NS(program=NS(name="Execute"), ipus=[ipu(0, 2000), ipu(1, 2000)]),
    ]
    target = NS(clockFrequency=1e9, numIPUs=2, numTiles=1472)
    tiles = [NS(memory=NS(total=NS(includingGaps=100))), NS(memory=NS(total=NS(includingGaps=250)))]
    return NS(execution=NS(steps=steps), compilation=NS(target=target, tiles=tiles), poplarVersion=NS(string="3.3.0"))


def test_steps_become_ipu_events(tmp_path: Path) -> None:
    pop = tmp_path / "profile.pop"
    pop.write_bytes(b"opaque")
    fake_pva = NS(openReport=lambda path: _report())
    with ProfileWriter(tmp_path / "p") as w:
        _load(pop, ImportContext(writer=w), pva=fake_pva)
    with open_profile(tmp_path / "p.aiprof") as prof:
        rows = prof.sql("SELECT device, name, ts, dur FROM events ORDER BY device, ts").to_pylist()
        assert rows == [
            {"device": 0, "name": "StreamCopy", "ts": 0, "dur": 1000},
            {"device": 0, "name": "Execute", "ts": 1000, "dur": 2000},
            {"device": 1, "name": "StreamCopy", "ts": 0, "dur": 500},
            {"device": 1, "name": "Execute", "ts": 500, "dur": 2000},
        ]
        assert [d["tiles"] for d in prof.devices] == [1472, 1472]
        mem = prof.sql("SELECT metric, value FROM counters ORDER BY metric").to_pylist()
        assert mem == [{"metric": "tile_memory.tile0", "value": 100.0}, {"metric": "tile_memory.tile1", "value": 250.0}]


def test_without_libpva_a_clear_error(tmp_path: Path) -> None:
    try:
        import pva  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("libpva is installed here: the missing-library message cannot be shown")
    pop = tmp_path / "profile.pop"
    pop.write_bytes(b"opaque")
    assert choose(pop).name == "popvision"
    r = cli("import", pop, "-o", tmp_path / "x")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "PopVision Analysis Library" in r.stderr and "not installed" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
