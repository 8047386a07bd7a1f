"""CANN msprof output written in timeline slices, and several device folders of one job:
built from the real ``msprof-PROF_000001`` capture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.importers import choose, import_paths
from aiprof.importers.ascend.msprof import merge_slices
from aiprof.store.reader import open_profile

PROF = "ascend/msprof-PROF_000001"
SLICES = 10


def _rows(p: Any, q: str) -> list[dict[str, Any]]:
    return list(p.sql(q).to_pylist())


def _writable(d: Path) -> None:
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def _sliced(src: Path, dst: Path) -> Path:
    """``dst``: the device folder with every timeline file cut into slices, the metadata
    events and the whole step trace repeated in each slice (as msprof writes them)."""
    shutil.copytree(src, dst)
    _writable(dst)
    for f in sorted((dst / "timeline").glob("*_0_2_1.json")):
        events = json.loads(f.read_bytes())
        meta = [e for e in events if e.get("ph") == "M"]
        steps = [e for e in events if e.get("ph") != "M" and _is_step_trace(e, events)]
        rest = [e for e in events if e.get("ph") != "M" and e not in steps]
        f.unlink()
        for i in range(SLICES):
            part = rest[i::SLICES]
            (f.parent / f.name.replace("_1.json", f"_{i + 1}.json")).write_text(json.dumps(meta + steps + part))
    return dst


def _is_step_trace(e: dict[str, Any], events: list[dict[str, Any]]) -> bool:
    names = {x["pid"]: x["args"]["name"] for x in events if x.get("ph") == "M" and x.get("name") == "process_name"}
    return names.get(e.get("pid")) == "Step Trace" or str(e.get("name", "")).startswith("Iteration")


@pytest.fixture(scope="module")
def whole(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out, _ = import_paths([shared_data / PROF], tmp_path_factory.mktemp("w") / "w")
    return open_profile(out)


QUERY = "select rank, device, kind, name, ts, dur, tid from events order by all"


def test_slices_merge_into_the_device(shared_data: Path, tmp_path: Path, whole: Any) -> None:
    dev = _sliced(shared_data / PROF / "device_0", tmp_path / "PROF_1" / "device_0")
    assert len(list((dev / "timeline").glob("*.json"))) == 4 * SLICES
    assert choose(dev.parent).name == "ascend-msprof"
    out, _ = import_paths([dev.parent], tmp_path / "s")
    p = open_profile(out)
    # 10 steps, not 100: the step trace each slice repeats is counted once.
    assert _rows(p, "select count(*) n from events where kind = 'step'") == [{"n": 10}]
    assert _rows(p, QUERY) == _rows(whole, QUERY)
    assert p.metas[0]["time_origin_ns"] == whole.metas[0]["time_origin_ns"]
    notes = " | ".join(p.metas[0].get("import_notes", []))
    assert f"{SLICES} slices of msprof_0_2 merged" in notes
    steps = run(p, "steps").rows
    assert len(steps) == 10


def test_an_event_repeated_inside_one_slice_is_kept(shared_data: Path, tmp_path: Path) -> None:
    events = json.loads((shared_data / PROF / "device_0" / "timeline" / "task_time_0_2_1.json").read_bytes())
    span = next(e for e in events if e.get("ph") == "X")
    meta = [e for e in events if e.get("ph") == "M"]
    one, two = tmp_path / "task_time_0_2_1.json", tmp_path / "task_time_0_2_2.json"
    one.write_text(json.dumps([*events, span]))  # written twice in the same slice: two events
    two.write_text(json.dumps([*meta, span, span, span]))  # two repeat slice 1, the third is new
    out = tmp_path / "merged.json"
    n, dropped = merge_slices([one, two], out)
    assert (n, dropped) == (len(events) + 2, len(meta) + 2)
    merged = json.loads(out.read_bytes())
    assert sum(1 for e in merged if e == span) == 3


def _second_device(src: Path, dst: Path, *, index: int, mono_shift_ns: int, rank_id: int = 0) -> Path:
    shutil.copytree(src, dst)
    _writable(dst)
    info = json.loads((dst / "info.json.0").read_bytes())
    info["DeviceInfo"][0]["id"] = index
    info["rank_id"] = rank_id
    (dst / "info.json.0").unlink()
    (dst / f"info.json.{index}").write_text(json.dumps(info))
    st = json.loads((dst / "start_info.0").read_bytes())
    # The same Unix start, read against a monotonic clock `mono_shift_ns` ahead: this
    # device's timestamps run that much ahead of device 0's for the same instants.
    st["clockMonotonicRaw"] = str(int(st["clockMonotonicRaw"]) + mono_shift_ns)
    (dst / "start_info.0").unlink()
    (dst / f"start_info.{index}").write_text(json.dumps(st))
    for f in (dst / "timeline").glob("*_0_2_1.json"):
        events = json.loads(f.read_bytes())
        for e in events:
            if "ts" in e:
                e["ts"] = float(e["ts"]) + mono_shift_ns / 1000 if not isinstance(e["ts"], str) else e["ts"]
        f.unlink()
        (f.parent / f.name.replace("_0_2_1", f"_{index}_2_1")).write_text(json.dumps(events))
    return dst


def test_several_prof_folders_of_one_job(shared_data: Path, tmp_path: Path, whole: Any) -> None:
    job = tmp_path / "job"
    shutil.copytree(shared_data / PROF, job / "PROF_000001")
    _writable(job)
    # Distinct rank ids (0 and 3): the ranks are theirs.
    _second_device(
        shared_data / PROF / "device_0", job / "PROF_000002" / "device_1", index=1, mono_shift_ns=5_000_000, rank_id=3
    )
    assert choose(job).name == "ascend-msprof"
    out, _ = import_paths([job], tmp_path / "j")
    p = open_profile(out)
    assert p.metas[0]["ranks"] == [0, 3]
    assert sorted((d["rank"], d["index"]) for d in p.metas[0]["devices"]) == [(0, 0), (3, 1)]
    per = _rows(p, "select rank, device, count(*) n from events where kind = 'step' group by all order by all")
    assert per == [{"rank": 0, "device": 0, "n": 10}, {"rank": 3, "device": 1, "n": 10}]
    kernels = _rows(p, "select rank, count(*) n from events where kind = 'kernel' group by all order by all")
    assert kernels == [{"rank": 0, "n": 115}, {"rank": 3, "n": 115}]
    # Each device on Unix time by its own start_info: the same instants line up.
    q = "select name, ts, dur from events where kind = 'step' and rank = {} order by ts"
    assert _rows(p, q.format(0)) == _rows(p, q.format(3))
    assert p.metas[0]["clock"] == "unix"
    assert p.metas[0]["time_origin_ns"] == whole.metas[0]["time_origin_ns"]
    ranks = run(p, "ranks").rows
    assert {r["rank"] for r in ranks} == {0, 3}


def test_device_folders_side_by_side_and_sliced(shared_data: Path, tmp_path: Path) -> None:
    prof = tmp_path / "PROF_X"
    _sliced(shared_data / PROF / "device_0", prof / "device_0")
    d1 = _second_device(shared_data / PROF / "device_0", tmp_path / "d1", index=1, mono_shift_ns=0)
    _sliced(d1, prof / "device_1")
    out, _ = import_paths([prof], tmp_path / "p")
    p = open_profile(out)
    # Both info.json files say rank_id 0: the device ids rank them.
    per = _rows(p, "select rank, count(*) n from events where kind = 'step' group by all order by all")
    assert per == [{"rank": 0, "n": 10}, {"rank": 1, "n": 10}]
