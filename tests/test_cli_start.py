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
