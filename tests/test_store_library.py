"""store/library.py: every profile below a folder, a recording's ranks as one run."""

from __future__ import annotations

from pathlib import Path

from aiprof.importers import import_paths
from aiprof.store.library import discover
from kineto_builders import span, write_trace


def _profile(tmp_path: Path, dest: Path, rank: int = 0) -> None:
    f = write_trace(tmp_path / f"t{rank}.json", [span("ProfilerStep#1", "user_annotation", 0, 1000)])
    dest.parent.mkdir(parents=True, exist_ok=True)
    import_paths([f], dest)


def test_runs_below_a_folder_are_found_with_unique_readable_names(tmp_path: Path) -> None:
    top = tmp_path / "top"
    _profile(tmp_path, top / "runs" / "mnist" / "rank0.aiprof")
    _profile(tmp_path, top / "runs" / "lstm" / "rank0.aiprof")
    _profile(tmp_path, top / "runs" / "ddp" / "rank0.aiprof", 0)
    _profile(tmp_path, top / "runs" / "ddp" / "rank1.aiprof", 1)
    _profile(tmp_path, top / "one.aiprof")
    (top / "runs" / "ddp" / ".rank0.aiprof.raw").mkdir()
    found = discover(top)
    assert [(f.name, f.ranks) for f in found] == [
        ("one.aiprof", 1),
        ("runs/ddp", 2),
        ("runs/lstm", 1),
        ("runs/mnist", 1),
    ]
    assert discover(top / "runs" / "ddp")[0].name == "ddp"
    assert discover(tmp_path / "missing") == []


def test_serve_lists_each_recording_once(tmp_path: Path) -> None:
    from aiprof.web.server import Library

    top = tmp_path / "top"
    _profile(tmp_path, top / "runs" / "a" / "rank0.aiprof")
    _profile(tmp_path, top / "runs" / "b" / "rank0.aiprof", 0)
    _profile(tmp_path, top / "runs" / "b" / "rank1.aiprof", 1)
    lib = Library([top])
    summaries = sorted((e.summary()["name"], e.summary()["status"]) for e in lib.scan())
    assert summaries == [("runs/a", "ok"), ("runs/b", "ok")]
    entry = next(e for e in lib.scan() if e.name == "runs/b")
    got = lib.get(entry.id)
    assert got.profile is not None and [p.name for p in got.profile.paths] == ["rank0.aiprof", "rank1.aiprof"]
