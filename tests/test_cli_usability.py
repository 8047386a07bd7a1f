"""What a new user trips on at the terminal: the help names every view, the overview's
hints name the profile as typed, units in the headers, code that pastes as written,
kernel names that stay told apart at 80 columns, and a --group-by a view ignores."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiprof.analysis import views
from aiprof.cli.overview import print_overview
from aiprof.cli.report import view_names
from aiprof.render.terminal import _shorten, header, shorten_distinct

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / ".." / "shared" / "data" / "kineto" / "V100"
TRACE = KINETO / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
OTHER = KINETO / "df_index_resolver.json.gz"


def run(*args: str | Path, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AIPROF_DEBUG"}
    env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def _import(trace: Path, out: Path) -> Path:
    if not trace.is_file():
        pytest.skip("../shared/data is absent (outside users)")
    r = run("-q", "import", trace, "-o", out)
    assert r.returncode == 0, r.stderr
    return out.with_suffix(".aiprof")


@pytest.fixture(scope="module")
def v100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The V100 trace imported into a folder whose name has a space."""
    return _import(TRACE, tmp_path_factory.mktemp("p") / "my runs" / "v100")


# -- 1. the help names every view ---------------------------------------------------------


def test_report_help_lists_every_registered_view_by_whole_names() -> None:
    r = run("report", "--help", columns=80)
    assert r.returncode == 0, r.stderr
    section = r.stdout.split("Views (--view NAME):\n", 1)[1]
    listed = [n for n in re.split(r"[,\s]+", section) if n]
    assert listed == sorted(views())  # every one, each whole (kernel-metrics not cut at its hyphen)
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    # The help's list is read from the sources, without importing the analysis.
    assert view_names() == sorted(views())


def test_readme_views_table_has_one_line_per_view() -> None:
    text = (ROOT / "README.md").read_text()
    table = text.split("### Views (`aiprof report --view`", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert sorted(rows) == sorted(views())  # one row each, no row naming several


# -- 2. the overview's hints name the profile as typed -----------------------------------


def test_overview_hints_name_the_profile_as_typed_and_quoted(v100: Path) -> None:
    for _ in range(2):  # computed, then printed from the kept summary
        r = run("report", v100)
        assert r.returncode == 0, r.stderr
        assert f"top advice (aiprof advise '{v100}' for all)" in r.stdout
        assert f"more: aiprof report '{v100}' --view steps|" in r.stdout
        assert "PROFILE" not in r.stdout


def test_only_the_hints_are_filled_with_the_path(capsys: pytest.CaptureFixture[str]) -> None:
    items = [
        {"t": "line", "text": "sources: kineto:PROFILE_step.json", "highlight": False},
        {"t": "line", "text": "more: aiprof report PROFILE --view steps", "highlight": False, "path": True},
        {
            "t": "table",
            "title": "top kernels",
            "cols": [["name", "left", None, None]],
            "rows": [["PROFILE_k"]],
            "plain": True,
        },
    ]
    print_overview(["runs/a b.aiprof"], items)
    out = capsys.readouterr().out
    assert "more: aiprof report 'runs/a b.aiprof' --view steps" in out
    assert "sources: kineto:PROFILE_step.json" in out and "PROFILE_k" in out


# -- 3. units ---------------------------------------------------------------------------------


def test_events_table_says_ts_and_dur_are_ns(v100: Path) -> None:
    r = run("report", v100, "--view", "events", "--limit", "1", columns=400)
    assert r.returncode == 0, r.stderr
    head = next(line for line in r.stdout.splitlines() if "rank" in line and "kind" in line)
    cols = [c.strip() for c in head.strip("┃ ").split("┃")]
    assert "ts (ns)" in cols and "dur (ns)" in cols and "ts_us" in cols and "dur_us" in cols
    doc = json.loads(run("report", v100, "--view", "events", "--limit", "1", "--format", "json").stdout)
    units = {c["name"]: c["unit"] for c in doc["columns"]}
    assert units["ts"] == units["dur"] == "ns" and units["ts_us"] == "µs"


def test_every_column_says_its_unit_even_those_made_per_category(v100: Path) -> None:
    """The steps view's per-category columns (kernel_us, runtime_us, idle_us...) had unit
    null in the JSON and the API: only start_us and duration_us were named."""
    doc = json.loads(run("report", v100, "--view", "steps", "--format", "json").stdout)
    units = {c["name"]: c["unit"] for c in doc["columns"]}
    timed = [c for c in units if c.endswith("_us")]
    assert {"kernel_us", "runtime_us", "idle_us", "other_us"} <= set(timed)
    assert all(units[c] == "µs" for c in timed), units
    assert units["rank"] is None and units["step"] is None


def test_header_adds_the_unit_only_where_the_name_lacks_it() -> None:
    assert header("ts", "ns") == "ts (ns)"
    assert header("total_us", "µs") == "total_us"
    assert header("pct", "%") == "pct" and header("name", None) == "name"


# -- 4. code pastes as written; kernel names stay told apart ---------------------------------


def test_advice_code_is_printed_whole_at_80_columns(v100: Path) -> None:
    r = run("advise", v100, columns=80)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    doc = json.loads(run("advise", v100, "--format", "json").stdout)
    codes = [a["snippets"]["pytorch"] for a in doc["advice"] if "pytorch" in a["snippets"]]
    assert codes and any("torch.amp.GradScaler('cuda')" in c for c in codes)
    for code in codes:
        for line in code.splitlines():
            assert line in lines  # a whole line of its own, never folded mid-token
    assert "scaler = torch.amp.GradScaler('cuda')" in lines


def test_diff_at_80_columns_keeps_kernel_names_apart(v100: Path, tmp_path: Path) -> None:
    other = _import(OTHER, tmp_path / "b")
    r = run("diff", v100, other, "--filter", "name~bn_fw_tr_1C11_kernel_NCHW", columns=80)
    assert r.returncode == 0, r.stderr
    names: list[str] = []
    for line in r.stdout.split("kernels: B - A", 1)[1].splitlines():
        cells = line.split("│")
        if len(cells) < 3:
            continue
        if cells[2].strip():  # a row's first line: its numbers
            names.append(cells[1].strip())
        else:
            names[-1] += " " + cells[1].strip()
    assert len(names) == 3 and len(set(names)) == 3, names
    assert all(re.search(rf"\b{n}, true\b", " ".join(names)) for n in ("32", "128", "512"))


def test_shorten_distinct_tells_alike_names_apart() -> None:
    def name(arg: str) -> str:
        return (
            f"void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, {arg}, true, 1, true>("
            + "float, " * 30
            + "float)"
        )

    names = [name("512"), name("32"), name("128"), "volta_sgemm_128x64_nn", "x" * 300]
    assert len({_shorten(n) for n in names[:3]}) == 1  # what the table showed: one name three times
    out = shorten_distinct(names)
    assert len(set(out)) == 5 and all(len(o) < 160 for o in out)
    assert out[3:] == [_shorten(n) for n in names[3:]]  # the others as before
    assert all(f"int, {a}, true" in o for a, o in zip(("512", "32", "128"), out))
    assert shorten_distinct(["a" * 200, "a" * 200]) == [_shorten("a" * 200)] * 2  # equal texts stay equal


# -- 5. a --group-by the view does not read ------------------------------------------------


def test_group_by_a_view_ignores_is_one_line_and_exit_2(v100: Path) -> None:
    r = run("report", v100, "--view", "kernels", "--group-by", "shapes")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "aiprof: error: --group-by shapes: the kernels view does not group by shapes; views that do: operators\n"
    )
    r = run("report", v100, "--group-by", "stack")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "views that do: operators" in r.stderr


def test_group_by_stack_on_a_trace_without_stacks_says_so(v100: Path, tmp_path: Path) -> None:
    r = run("report", v100, "--view", "operators", "--group-by", "stack", "--limit", "3")
    assert r.returncode == 0, r.stderr
    assert r.stderr == (
        "aiprof: this trace has no call stacks: call_stack is empty (record with torch.profiler's with_stack=True)\n"
    )
    assert "call_stack" in r.stdout
    r = run("report", v100, "--view", "operators", "--group-by", "shapes", "--limit", "3")
    assert r.returncode == 0 and r.stderr == ""


def test_group_by_stack_with_stacks_says_nothing(tmp_path: Path) -> None:
    from kineto_builders import two_step_trace, write_trace

    doc = two_step_trace()
    for e in doc:
        if e.get("cat") == "cpu_op":
            e.setdefault("args", {})["Call stack"] = "train.py(10): step;train.py(3): <module>"
    trace = write_trace(tmp_path / "t.json.gz", doc)
    prof = _import_any(trace, tmp_path / "s")
    r = run("report", prof, "--view", "operators", "--group-by", "stack")
    assert r.returncode == 0 and "no call stacks" not in r.stderr, r.stderr
    assert "train.py" in r.stdout


def _import_any(trace: Path, out: Path) -> Path:
    r = run("-q", "import", trace, "-o", out)
    assert r.returncode == 0, r.stderr
    return out.with_suffix(".aiprof")


def test_a_profile_without_steps_titles_its_breakdown_as_the_whole_profile(shared_data: Path, tmp_path: Path) -> None:
    """The Nsight Systems vecadd report has no steps: the report said "steps: none in the
    trace" above "step time breakdown (all steps)" and "busy (of step time)"."""
    from aiprof.cli.overview import WHOLE_RUN_BREAKDOWN, compute_items
    from aiprof.importers import import_paths
    from aiprof.store import open_profile

    out, _ = import_paths([shared_data / "nsys/nsys_2022.4_vecadd_streams_T4_report1.sqlite"], tmp_path / "v")
    with open_profile(out) as p:
        items = compute_items(p)
    titles = [it["title"] for it in items if it["t"] == "table"]
    assert f"rank 0: {WHOLE_RUN_BREAKDOWN}" in titles and not any("step time" in t for t in titles), titles
    device = next(it for it in items if it.get("title") == "rank 0: device time")
    assert device["rows"][0][0] == "busy (of profiled time)"
    assert not any("of step time" in str(row[0]) for row in device["rows"])
