"""The command line as a user runs it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kineto_builders import two_step_trace, write_trace

AIPROF = [sys.executable, "-m", "aiprof"]


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIPROF_DEBUG"}
    env["COLUMNS"] = "200"
    return subprocess.run([*AIPROF, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def advise_doc(path: Path) -> dict[str, Any]:
    """``aiprof advise PATH --format json``'s document (the command must succeed)."""
    r = cli("advise", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def test_import_report_sql_round(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json.gz", two_step_trace())
    r = cli("import", trace, "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and "kernel 2" in r.stdout
    prof = tmp_path / "run.aiprof"
    r = cli("report", prof, "--view", "kernels", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["total"] == 1 and doc["rows"][0]["name"] == "sgemm_a" and doc["rows"][0]["total_us"] == 1100
    r = cli(
        "report",
        prof,
        "--view",
        "overview",
        "--format",
        "json",
        "--filter",
        "section=breakdown",
        "--filter",
        "step=null",
    )
    cats = {row["category"]: row for row in json.loads(r.stdout)["rows"]}
    assert isinstance(cats["kernel"]["time_us"], float) and cats["kernel"]["percent"] == 55.0
    r = cli("report", prof)
    assert r.returncode == 0 and "step time breakdown" in r.stdout and "sgemm_a" in r.stdout
    assert "rank 0: device time" in r.stdout and "no device activity" not in r.stdout
    r = cli(
        "report",
        prof,
        "--view",
        "events",
        "--format",
        "csv",
        "--filter",
        "kind=kernel",
        "--sort",
        "-dur",
        "--limit",
        "1",
    )
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 1 and rows[0]["name"] == "sgemm_a" and rows[0]["dur"] == "800000"
    r = cli("sql", prof, "SELECT count(*) AS n FROM events WHERE kind = 'kernel'", "--format", "json")
    assert json.loads(r.stdout)["rows"] == [{"n": 2}]


def test_report_accepts_a_trace_file_directly(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", two_step_trace())
    r = cli("report", trace, "--view", "steps", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [row["step"] for row in json.loads(r.stdout)["rows"]] == [1, 2]
    # The overview's heading names the file given, not the temporary profile made of it.
    r = cli("report", trace)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"aiprof report {trace}"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "empty"),
        (b'{"hello": "world"}', "traceEvents"),
        (bytes(range(256)) * 4, "no importer"),
        (b'{"traceEvents": [', "no events"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: bytes, words: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    r = cli("import", bad, "-o", tmp_path / "x")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x.aiprof").exists()


def test_folder_with_nothing_importable_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    r = cli("import", tmp_path / "empty")
    assert r.returncode == 2 and "no importer" in r.stderr and "Traceback" not in r.stderr
    r = cli("report", tmp_path / "nope.aiprof")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = cli("report", tmp_path / "empty", "--view", "kernels")
    assert r.returncode == 2


def test_an_output_that_cannot_be_written_is_named_as_given(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", two_step_trace())
    missing = tmp_path / "no" / "such" / "dir"
    for args, name in (
        (("timechart", trace, "-o", missing / "x.json"), "x.json"),
        (("report", trace, "--html", missing / "x.html"), "x.html"),
    ):
        r = cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        # The file the user named, not the temporary one it is written to first.
        assert r.stderr.strip() == f"aiprof: error: No such file or directory: {missing / name}", r.stderr


def test_the_device_figures_say_their_span_leaves_the_last_step_out(tmp_path: Path) -> None:
    two = write_trace(tmp_path / "two.json", two_step_trace())
    r = cli("report", two)
    assert r.returncode == 0, r.stderr
    # The second step's kernel (800 µs) is out of HTA's window: compute is the first's 300.
    device = r.stdout[r.stdout.index("device time") :]
    assert (
        "compute (of active span)" in device and "300.0" in device.split("compute (of active span)")[1].split("\n")[0]
    )
    assert "active span: the device's first operation to its last one launched before the last step" in " ".join(
        r.stdout.split()
    )
    one = write_trace(tmp_path / "one.json", [e for e in two_step_trace() if e.get("name") != "ProfilerStep#2"])
    r = cli("report", one)
    assert r.returncode == 0 and "device time" in r.stdout and "active span: the device" not in r.stdout


def test_an_import_never_replaces_a_profile_unasked(tmp_path: Path) -> None:
    import json

    trace = write_trace(tmp_path / "t.json", two_step_trace())
    out = tmp_path / "run.aiprof"
    assert cli("import", trace, "-o", out).returncode == 0
    first = json.loads((out / "profile.json").read_text())["created_unix_ns"]
    r = cli("import", trace, "-o", out)
    assert (
        r.returncode == 2
        and r.stderr.strip() == f"aiprof: error: {out} already exists: give another -o, or --force to replace it"
    )
    assert json.loads((out / "profile.json").read_text())["created_unix_ns"] == first
    r = cli("import", trace, "-o", out, "--force")
    assert r.returncode == 0 and json.loads((out / "profile.json").read_text())["created_unix_ns"] > first


def test_bad_query_is_exit_2(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", two_step_trace())
    r = cli("report", trace, "--view", "kernels", "--filter", "nosuch=1")
    assert r.returncode == 2 and "no column 'nosuch'" in r.stderr
    r = cli("report", trace, "--limit", "-1")
    assert r.returncode == 2


def test_truncated_gzip_imports_what_it_holds(tmp_path: Path) -> None:
    events = two_step_trace() * 200
    data = gzip.compress(json.dumps({"traceEvents": events}).encode())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    r = cli("import", cut, "-o", tmp_path / "cut")
    assert r.returncode == 0, r.stderr
    assert "warning" in r.stderr and ("cut short" in r.stderr or "gzip" in r.stderr)
    meta = json.loads((tmp_path / "cut.aiprof" / "profile.json").read_text())
    assert meta["partial"] is True
    assert meta["warnings"]


def test_help_and_version() -> None:
    r = cli("--help")
    assert r.returncode == 0 and "import" in r.stdout and "report" in r.stdout
    r = cli("--version")
    assert r.returncode == 0 and "aiprof" in r.stdout


def test_tables_print_brackets_as_text(tmp_path: Path) -> None:
    # Names like "[memory]" or "a[1]" are text, not terminal markup, in every table.
    trace = write_trace(tmp_path / "t.json.gz", two_step_trace())
    assert cli("import", trace, "-o", tmp_path / "run").returncode == 0
    r = cli("sql", tmp_path / "run.aiprof", "SELECT '[memory]' AS x, '[bold]k[/bold]' AS y, 'a[1]' AS z")
    assert r.returncode == 0, r.stderr
    assert "[memory]" in r.stdout and "[bold]k[/bold]" in r.stdout and "a[1]" in r.stdout
    r = cli("report", tmp_path / "run.aiprof")
    assert r.returncode == 0, r.stderr
    assert "ranks: [0]" in r.stdout


def test_an_empty_table_says_why(tmp_path: Path) -> None:
    # A view with no rows prints one line that says why (found by a new-user trial: an
    # empty 18-column box on a CPU-only trace), for a filter and for the profile itself;
    # the CSV and JSON stay machine-readable, with nothing added.
    events = [e for e in two_step_trace() if e.get("cat") not in ("kernel", "cuda_runtime", "ac2g")]
    trace = write_trace(tmp_path / "cpu.json", events)
    r = cli("report", trace, "--view", "kernels")
    assert r.returncode == 0 and "Kernels: no rows (no device kernels" in r.stderr, r.stderr
    r = cli("report", trace, "--view", "operators", "--filter", "name~zzz")
    assert r.returncode == 0 and "Operators: no rows (none match --filter name~zzz)" in r.stderr
    r = cli("report", trace, "--view", "operators")
    assert r.returncode == 0 and "no rows" not in r.stderr
    r = cli("report", trace, "--view", "kernels", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["total"] == 0 and "no rows" not in r.stderr


def test_an_imported_trace_without_steps_is_not_told_to_mark_them_with_aiprof(tmp_path: Path) -> None:
    # aiprof.record.mark_step() is for a recording; an imported trace's steps are its
    # profiler's (prof.step()).
    events = [e for e in two_step_trace() if not str(e.get("name", "")).startswith("ProfilerStep")]
    r = cli("report", write_trace(tmp_path / "nosteps.json", events))
    assert r.returncode == 0, r.stderr
    assert "steps: none in the trace (torch.profiler marks them when the loop calls prof.step())" in r.stdout
    assert "mark_step" not in r.stdout


def test_each_input_is_detected_once(tmp_path: Path) -> None:
    # The CLI checks its inputs before it writes anything and hands what it found to the
    # import: `-v` tells each file's format once.
    a = write_trace(tmp_path / "a.json", two_step_trace())
    r = cli("-v", "import", a, "-o", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("as kineto") == 1, r.stderr
