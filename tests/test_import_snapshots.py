"""Snapshot tests of every importer on small samples committed in tests/samples/.

The samples were written for these tests in each tool's own format (see
tests/samples/README.md); none is a copy of ../shared/data, so the importers are tested
on a machine without it. Each sample is imported and everything the store then holds
(every table, sorted, and the profile's metadata without what depends on the machine)
is compared with its snapshot, tests/samples/snapshots/NAME.json.

After a change that is meant to change what an importer writes, regenerate the
snapshots and read the diff before committing it:

    AIPROF_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/test_import_snapshots.py
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from aiprof.importers import choose, import_paths, importers
from aiprof.importers.kineto.columnar import ENGINE_ENV
from aiprof.store import open_profile
from aiprof.store.schema import TABLES

SAMPLES = Path(__file__).parent / "samples"
SNAPSHOTS = SAMPLES / "snapshots"
UPDATE_ENV = "AIPROF_UPDATE_SNAPSHOTS"

#: Sample (file or folder under tests/samples) -> the importer that must take it.
CASES = {
    "kineto_a100_rank0.pt.trace.json": "kineto",
    "nsys_report.sql": "nsys",
    "ncu_details.csv": "ncu",
    "dmon_d10.txt": "nvidia-dmon",
    "nvidia_query.csv": "smi-query-csv",
    "cnperf_timechart.json": "cnperf",
    "cnmon.txt": "cnmon",
    "hl-smi.txt": "hl-smi",
    "npu-smi_info.txt": "npu-smi",
    "ascend_pt": "ascend-pt",
    "ascend_pt/trace_view.json": "ascend-trace",
    "msprof_PROF_000002": "ascend-msprof",
    "ascend_cluster": "ascend-cluster",
    "mindspore_1x": "mindspore-legacy",
    "mindspore_job": "mindspore-job",
    "mindspore_files/hwts.log.data.45.dev.profiler_default_tag.0.slice_0": "mindspore-hwts",
    "mindspore_files/DATA_PREPROCESS.dev.AICPU.0.slice_0": "mindspore-aicpu",
    "mindspore_files/training_trace.46.dev.profiler_default_tag.0.slice_0": "mindspore-step-trace",
    "mindspore_files/Framework.host.vm.task_desc_info.0.slice_0": "mindspore-framework",
    "mindspore_files/device_queue_profiling_0.txt": "mindspore-text",
    "mindspore_files/ascend_cluster_analyse_data-parallel_1_2_0.csv": "mindspore-cluster",
}

#: Metadata that depends on when and where the import ran.
VOLATILE_META = ("created_unix_ns", "aiprof_version")
VOLATILE_SOURCE = ("path", "mtime_ns")


def _input(name: str, tmp: Path) -> Path:
    """The path to import: the sample itself, or for an SQL dump (nsys), the SQLite
    file it describes, built as `nsys export` would have written it."""
    src = SAMPLES / name
    if src.suffix != ".sql":
        return src
    db = tmp / f"{src.stem}.sqlite"
    with sqlite3.connect(db) as con:
        con.executescript(src.read_text())
    return db


def _plain(v: Any, column: str) -> Any:
    if column == "args" and isinstance(v, str):
        # The columnar engine keeps the trace's own JSON text of args, the event engine
        # writes it compactly: the same object either way.
        return json.loads(v)
    if isinstance(v, float):
        return None if math.isnan(v) else v
    return v


def snapshot(profile: Path) -> dict[str, Any]:
    """Everything the store holds for ``profile``, in a stable order."""
    meta = json.loads((profile / "profile.json").read_text())
    for key in VOLATILE_META:
        meta.pop(key, None)
    meta.pop("derived", None)  # not the importer's output: test_derived.py holds it to the events
    for src in meta.get("sources", []):
        for key in VOLATILE_SOURCE:
            src.pop(key, None)
    tables: dict[str, Any] = {}
    with open_profile(profile) as p:
        for t in TABLES:
            table = p.sql(f"SELECT * FROM {t}")
            cols = [c for c in table.column_names if c != "profile"]
            if not table.num_rows:
                continue
            rows = [[_plain(r[c], c) for c in cols] for r in table.select(cols).to_pylist()]
            rows.sort(key=lambda r: json.dumps(r, sort_keys=True, default=str))
            tables[t] = {"columns": cols, "rows": rows}
    return {"meta": meta, "tables": tables}


def _check(name: str, got: dict[str, Any]) -> None:
    path = SNAPSHOTS / f"{name.replace('/', '__')}.json"
    text = json.dumps(got, indent=1, sort_keys=True, default=str) + "\n"
    if os.environ.get(UPDATE_ENV):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path.name}: run with {UPDATE_ENV}=1 and read what it wrote"
    want = json.loads(path.read_text())
    got = json.loads(text)
    assert got["meta"] == want["meta"]
    assert sorted(got["tables"]) == sorted(want["tables"])
    for t, w in want["tables"].items():
        g = got["tables"][t]
        assert g["columns"] == w["columns"], t
        assert len(g["rows"]) == len(w["rows"]), t
        for i, (gr, wr) in enumerate(zip(g["rows"], w["rows"], strict=True)):
            assert gr == wr, f"{t} row {i}: {dict(zip(w['columns'], gr, strict=True))}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_importer_snapshot(name: str, tmp_path: Path) -> None:
    src = _input(name, tmp_path)
    assert choose(src).name == CASES[name]
    out, _ = import_paths([src], tmp_path / "p")
    got = snapshot(out)
    assert got["tables"], "the sample imported nothing"
    _check(name, got)


@pytest.mark.parametrize("engine", ["columnar", "python"])
def test_both_kineto_engines_write_the_same_store(engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar path and the event-by-event path state the same rules: the same
    sample gives the same snapshot through either."""
    monkeypatch.setenv(ENGINE_ENV, engine)
    name = "kineto_a100_rank0.pt.trace.json"
    out, _ = import_paths([SAMPLES / name], tmp_path / "p")
    if not os.environ.get(UPDATE_ENV):
        _check(name, snapshot(out))


def test_every_importer_has_a_sample() -> None:
    """A new importer comes with a sample here. PopVision's is the exception: its files
    are SQLite databases built by tests/test_import_popvision.py."""
    names = {imp.name for imp in importers()}
    missing = names - set(CASES.values()) - {"popvision"}
    assert not missing, f"importers without a sample in tests/samples: {sorted(missing)}"
