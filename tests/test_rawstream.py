"""The recorder's append-only raw data files (record.rawstream): a checkpoint appends
what changed; a file cut anywhere (a job killed while writing) reads as every whole
record before the cut."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

from aiprof.record.rawstream import MAGIC, RawStream, read_stream


def _grow(data: dict[str, Any], i: int) -> None:
    data["ts"].extend(range(i * 100, i * 100 + 100))  # a long list: appended to
    series = data["series"].setdefault("cpu", [[], []])  # [ts, values]: followed item by item
    series[0].append(i)
    series[1].append(i / 2)
    data["names"][str(i)] = f"thread {i}"  # a dict that gains keys
    data["own"] = sorted({1, i})  # a short list rebuilt each time: written again
    data["rate"] = 100.0 + (i % 2)  # a value that changes


def _snapshots(path: Path) -> list[tuple[int, dict[str, Any]]]:
    s = RawStream(path)
    data: dict[str, Any] = {"ts": [], "series": {}, "names": {}, "own": [], "rate": 0.0}
    snaps = []
    for i in range(12):
        _grow(data, i)
        if i == 7:
            data["ts"] = data["ts"][:150]  # a list that shrank: written again whole
        s.write(copy.deepcopy(data))
        snaps.append((s.size, copy.deepcopy(data)))
    s.close()
    return snaps


def test_each_checkpoint_appends_and_reads_back_whole(tmp_path: Path) -> None:
    snaps = _snapshots(tmp_path / "x")
    blob = (tmp_path / "x").read_bytes()
    assert blob.startswith(MAGIC) and len(blob) == snaps[-1][0]
    got, cut = read_stream(blob)
    assert got == snaps[-1][1] and cut == 0
    # Appending only: a checkpoint costs its new data, not the whole list again.
    sizes = [n for n, _ in snaps]
    steps = [b - a for a, b in itertools.pairwise(sizes)]
    assert max(steps[8:]) < sizes[0] * 2 < sizes[-1]


def test_a_cut_anywhere_keeps_every_whole_record(tmp_path: Path) -> None:
    snaps = _snapshots(tmp_path / "x")
    blob = (tmp_path / "x").read_bytes()
    for (end, want), (nxt, _) in itertools.pairwise(snaps):
        for at in range(end, nxt, max(1, (nxt - end) // 17)):
            got, cut = read_stream(blob[:at])
            assert got == want and cut == at - end


def test_a_damaged_record_ends_the_stream_there(tmp_path: Path) -> None:
    snaps = _snapshots(tmp_path / "x")
    blob = bytearray((tmp_path / "x").read_bytes())
    blob[snaps[4][0] + 20] ^= 0xFF  # a flipped byte inside the sixth record
    got, cut = read_stream(bytes(blob))
    assert got == snaps[4][1] and cut == len(blob) - snaps[4][0]


def test_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    s = RawStream(tmp_path / "x")
    data: dict[str, Any] = {"ts": list(range(1000)), "names": {"1": "main"}}
    s.write(data)
    size = s.size
    s.write(copy.deepcopy(data))
    assert s.size == size
    s.close()
