"""The one-line error for a file no importer takes: short, about the file, all on demand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _import(src: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiprof", "import", str(src), "-o", str(tmp_path / "o.aiprof")],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_an_empty_file_is_called_empty(tmp_path: Path) -> None:
    src = tmp_path / "trace.json"
    src.write_bytes(b"")
    r = _import(src, tmp_path)
    assert r.returncode == 2
    assert r.stderr == f"aiprof: error: {src}: the file is empty (0 bytes): nothing to import\n"


def test_a_json_object_names_what_the_json_importers_missed_in_a_short_line(tmp_path: Path) -> None:
    src = tmp_path / "odd.json"
    src.write_text('{"foo": 1}\n')
    r = _import(src, tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    line = r.stderr.strip()
    assert len(line) < 400, line
    assert "a JSON file" in line and "kineto: a JSON object without traceEvents" in line
    assert "not a folder" not in line  # the folder importers' answers are noise here
    assert "AIPROF_DEBUG=1" in line and "--format NAME" in line
    full = _import(src, tmp_path, AIPROF_DEBUG="1")
    assert full.returncode == 2
    assert "ascend-msprof: not a folder" in full.stderr and "nsys: not an SQLite database" in full.stderr


def test_plain_text_says_how_many_formats_were_asked(tmp_path: Path) -> None:
    src = tmp_path / "notes.txt"
    src.write_text("hello\n")
    r = _import(src, tmp_path)
    assert r.returncode == 2
    assert "a text file; " in r.stderr and " formats checked" in r.stderr
    assert int(r.stderr.split("a text file; ")[1].split(" ")[0]) >= 20
