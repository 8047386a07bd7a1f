"""CLI start (issue 18): the help lists verbs without importing them, and the verbs that
read a profile import neither the web server, the recorder, torch, pandas nor Dask."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from aiprof.cli import SUMMARIES, VERBS, cli

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / ".." / "shared" / "data" / "kineto" / "V100" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
HEAVY = ("duckdb", "pyarrow", "numpy", "pandas", "fastapi", "uvicorn", "torch", "dask", "distributed", "rich")
NEVER_IN_REPORT = ("pandas", "fastapi", "uvicorn", "torch", "dask", "distributed", "aiprof.record", "aiprof.web")

_PROBE = """
import json, sys
from aiprof.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules(*argv: str) -> tuple[str, set[str]]:
    p = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True)
    return p.stdout, set(json.loads(p.stderr.strip().splitlines()[-1]))


def _loaded(mods: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in mods)]


def test_each_summary_is_its_verbs_own_help() -> None:
    ctx = click.Context(cli)
    assert list(SUMMARIES) == list(VERBS)
    for name in VERBS:
        cmd = cli.get_command(ctx, name)
        assert cmd is not None
        for limit in (30, 45, 60, 80, 120, 300):
            assert click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit) == cmd.get_short_help_str(limit)


@pytest.mark.parametrize("argv", [("--help",), ("report", "--help")])
def test_help_imports_no_heavy_module(argv: tuple[str, ...]) -> None:
    out, mods = _modules(*argv)
    assert "Usage: aiprof" in out
    if argv == ("--help",):
        assert all(f"  {v} " in out for v in VERBS)
    assert _loaded(mods, HEAVY) == []


def test_report_imports_no_server_recorder_torch_pandas_or_dask(tmp_path: Path) -> None:
    if not TRACE.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    prof = tmp_path / "v.aiprof"
    subprocess.run([sys.executable, "-m", "aiprof", "-q", "import", str(TRACE), "-o", str(prof)], check=True)
    out, mods = _modules("report", str(prof))
    assert "top kernels by total time" in out and "steps: 5" in out
    assert _loaded(mods, NEVER_IN_REPORT) == []


_HEAVY_FOR_OVERVIEW = ("duckdb", "pyarrow", "numpy", "pandas", "torch", "msgspec", "aiprof.store", "aiprof.analysis")


def test_overview_kept_in_the_profile_prints_the_same_without_the_store(tmp_path: Path) -> None:
    """The first report computes the overview and keeps it (overview.json); the next
    prints the same text without importing DuckDB, Arrow, NumPy or the analysis; a
    changed profile.json (an upgrade, a warning added) is computed again."""
    from aiprof.cli.overview import SUMMARY_FILE

    if not TRACE.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    prof = tmp_path / "v.aiprof"
    subprocess.run([sys.executable, "-m", "aiprof", "-q", "import", str(TRACE), "-o", str(prof)], check=True)
    first, mods1 = _modules("report", str(prof))
    assert (prof / SUMMARY_FILE).is_file()
    assert "duckdb" in mods1
    second, mods2 = _modules("report", str(prof))
    assert second == first
    assert "top kernels by total time" in second and "steps: 5" in second
    assert _loaded(mods2, _HEAVY_FOR_OVERVIEW) == []
    # Another view, or the overview as JSON, still reads the store.
    _, mods3 = _modules("report", str(prof), "--format", "json")
    assert "duckdb" in mods3

    meta = json.loads((prof / "profile.json").read_text())
    meta["warnings"].append("a warning added after the first report")
    (prof / "profile.json").write_text(json.dumps(meta))
    third, mods4 = _modules("report", str(prof))
    assert "a warning added after the first report" in third
    assert "duckdb" in mods4
    assert third.replace("warning: a warning added after the first report\n", "") == first
    fourth, mods5 = _modules("report", str(prof))
    assert fourth == third and _loaded(mods5, _HEAVY_FOR_OVERVIEW) == []


def test_overview_summary_is_keyed_by_profile_json_and_code(tmp_path: Path) -> None:
    from aiprof.cli.overview import SUMMARY_FILE, read_summary, single_profile, write_summary

    folder = tmp_path / "p.aiprof"
    folder.mkdir()
    assert single_profile((str(folder),)) is None  # no profile.json
    (folder / "profile.json").write_text('{"schema_version": 1}')
    assert single_profile((str(folder),)) == folder
    assert single_profile((str(folder), str(folder))) is None
    assert read_summary(folder) is None
    items = [{"t": "line", "text": "steps: 3", "highlight": True}]
    assert write_summary(folder, (folder / "profile.json").read_bytes(), items)
    assert read_summary(folder) == items
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temp file left
    (folder / "profile.json").write_text('{"schema_version": 1, "warnings": ["x"]}')
    assert read_summary(folder) is None
    (folder / SUMMARY_FILE).write_text("not json")
    assert read_summary(folder) is None
    assert not write_summary(tmp_path / "missing.aiprof", b"{}", items)
    (folder / "cluster").mkdir()
    (folder / "cluster" / "index.json").write_text("{}")
    assert single_profile((str(folder),)) is None  # a job folder opens through its index
