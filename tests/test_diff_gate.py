"""``aiprof diff`` as a CI gate: verdicts on built runs, exit codes, reports, baselines."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np

from aiprof.analysis.gate import parse_rule, parse_slower
from aiprof.analysis.regression import step_series, verdicts
from aiprof.analysis.stats import compare_samples
from aiprof.store import open_profile
from diff_builders import build_run
from test_cli import cli


def _steps(seed: int, n: int, base: float, slow: float = 1.0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(base * slow * (1 + rng.normal(0, 0.03, n)))


def test_verdicts_on_built_runs(tmp_path: Path) -> None:
    a = build_run(tmp_path / "a", _steps(1, 30, 1000.0))
    b = build_run(tmp_path / "b", [*_steps(2, 30, 1000.0, 1.15), 9000.0])  # and one outlier step
    with open_profile(a) as pa_, open_profile(b) as pb:
        sa, sb = step_series([pa_]), step_series([pb], ["kernel:nccl*"])
        assert (sa.steps, sb.steps, sb.outliers) == (30, 30, 1)
        rows = {r["figure"]: r for r in verdicts(sa, sb).to_pylist()}
    st = rows["step_time_us"]
    assert st["verdict"] == "slower" and st["p_value"] < 1e-6
    assert 10 < st["change_pct"] < 20 and st["ci_low_pct"] < 15 < st["ci_high_pct"]
    assert st["a_n"] == 30 and st["b_n"] == 30  # the 9000 µs step is left out
    assert rows["kernel_us"]["verdict"] == "slower"
    assert "memcpy_us" not in rows  # zero in every step of both runs


def test_rules_parse() -> None:
    r = parse_rule("kernel:ncclKernel*>+20%")
    assert (r.figure, r.op, r.threshold_pct) == ("kernel:ncclKernel*", ">", 20.0)
    assert parse_rule("communication_us > 10%").threshold_pct == 10.0
    assert parse_rule("step_time<-5%").figure == "step_time_us"
    assert parse_slower("5%").text == "--fail-if-slower 5%" and parse_slower("5%").steady


def test_gate_exit_codes_and_reports(tmp_path: Path) -> None:
    base = build_run(tmp_path / "base", _steps(1, 20, 1000.0))
    same = build_run(tmp_path / "same", _steps(2, 20, 1000.0))
    slow = build_run(tmp_path / "slow", _steps(3, 20, 1000.0, 1.15), comm_share=0.2)

    r = cli("diff", base, same, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["gate"][0]["failed"] is False and doc["failed"] is False

    r = cli("diff", base, slow, "--fail-if-slower", "5%", "--fail-if", "kernel:nccl*>+50%", "--format", "junit")
    assert r.returncode == 1, r.stderr
    root = ET.fromstring(r.stdout)
    suite = root.find("testsuite")
    assert suite is not None and suite.get("failures") == "2"
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["--fail-if-slower 5%", "kernel:nccl*>+50%"]
    assert "ncclKernel_AllReduce" in (suite.findtext("system-out") or "")

    # A higher threshold than the change: passes, though the change is significant.
    r = cli("diff", base, slow, "--fail-if-slower", "30%", "--format", "markdown")
    assert r.returncode == 0, r.stderr
    assert "✅ no regression" in r.stdout and "| step_time_us |" in r.stdout and "slower" in r.stdout
    assert "`sm90_gemm`" in r.stdout and "cuda: NVIDIA H100" in r.stdout

    for bad in (("--fail-if", "nonsense"), ("--fail-if", "no_such_us>+5%"), ("--fail-if", "kernel:zzz*>+5%")):
        r = cli("diff", base, slow, *bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = cli("diff", base, tmp_path / "missing", "--fail-if-slower", "5%")
    assert r.returncode == 2


def _load_runq(n: int, every: int = 4, waiting: int = 2, wait_us: float = 400.0) -> list[float]:
    """A run-queue wait of ``wait_us`` in ``waiting`` steps of every ``every``: other
    processes' load, which makes those steps and the ones after them disturbed."""
    return [wait_us if i % every < waiting else 0.0 for i in range(n)]


def test_slower_gate_tests_the_steady_step_not_the_load(tmp_path: Path) -> None:
    """B does A's work but waits for a CPU in half of its steps: its wall step time is
    significantly slower (the old gate, on wall time, failed it); the steady step leaves
    those waits and the step after each out, and passes. A B that is slower by itself
    still fails, and the result says what the steady step can and cannot tell."""
    n = 100
    work = _steps(2, n, 1000.0)
    runq = _load_runq(n)
    a = build_run(tmp_path / "a", _steps(1, n, 1000.0), runq_us=[0.0] * n)
    loaded = build_run(tmp_path / "loaded", [w + q for w, q in zip(work, runq)], runq_us=runq)
    slower = build_run(tmp_path / "slower", _steps(3, n, 1000.0, 1.15), runq_us=[0.0] * n)

    r = cli("diff", a, loaded, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {v["figure"]: v for v in doc["verdicts"]}
    assert rows["step_time_us"]["verdict"] == "slower" and rows["step_time_us"]["change_pct"] > 5
    assert rows["runq_us"]["b_total"] == sum(runq)
    # Three of four of B's steps are disturbed: the waiting ones and the ones right after them.
    assert (rows["steady_step_us"]["a_n"], rows["steady_step_us"]["b_n"]) == (n - 1, n // 4)
    g = doc["gate"][0]
    assert (g["figure"], g["failed"]) == ("steady_step_us", False)
    assert "cannot be told from a slower program" in g["basis"] and f"{n - 1} and {n // 4} undisturbed" in g["basis"]

    r = cli("diff", a, slower, "--fail-if-slower", "5%", "--format", "markdown")
    assert r.returncode == 1, r.stderr
    assert "`--fail-if-slower 5%` | FAIL | steady_step_us: median +1" in r.stdout
    assert "tested on steady_step_us is the step's wall time less its wait for a CPU" in r.stdout


def test_a_loaded_run_with_many_steps_is_not_said_to_have_too_few(tmp_path: Path) -> None:
    """Every step of A waited for a CPU: its steady step has no value, so that figure
    alone is "too few steps". The diff said "too few steps for a statistical test
    (fewer than 4 on a side...): the mean step compared only" above a table that tested
    40 steps a side with p-values; it now says why the steady step was not tested."""
    n = 40
    a = build_run(tmp_path / "a", _steps(1, n, 1000.0), runq_us=[400.0] * n)
    b = build_run(tmp_path / "b", _steps(2, n, 1000.0), runq_us=[0.0] * n)
    r = cli("diff", a, b, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = {v["figure"]: v for v in doc["verdicts"]}
    assert rows["steady_step_us"]["verdict"] == "too few steps"
    assert rows["step_time_us"]["verdict"] != "too few steps" and rows["step_time_us"]["p_value"] is not None
    assert doc["too_few_steps"] is False
    assert doc["note"] == (
        f"steady_step_us not tested: too few steps that did not wait for a CPU (0 in A, {n - 1} in B; "
        "the machine was loaded): --fail-if-slower tests the wall step time"
    )
    text = cli("diff", a, b)
    assert text.returncode == 0 and "fewer than 4 on a side" not in text.stdout
    assert doc["note"] in text.stdout
    # Either way round, a side without a steady value has no change (it read -100% with
    # the loaded run as B: "faster" to a script reading change_pct).
    back = json.loads(cli("diff", b, a, "--format", "json").stdout)
    for d in (doc, back):
        (steady,) = [v for v in d["verdicts"] if v["figure"] == "steady_step_us"]
        assert steady["change_pct"] is None and steady["verdict"] == "too few steps", steady


def test_recordings_made_together_are_compared_block_by_block(tmp_path: Path) -> None:
    """The machine slows by 40% over both runs, made at the same time; A's undisturbed steps
    are mostly early (fast), B's mostly late (slow). Pooled, B's steady step reads ~+20%
    slower with nothing changed; block by block the drift cancels. A B 15% slower by
    itself under the same drift still fails."""
    n = 200
    span = n * 1000.0 * 1.25  # µs: the machine is 40% slower at the end of it than at 0
    late = [400.0 if i >= n // 2 and i % 4 < 2 else 0.0 for i in range(n)]
    early = [400.0 if i < n // 2 and i % 4 < 2 else 0.0 for i in range(n)]

    def run(name: str, seed: int, runq: list[float], slow: float = 1.0) -> Path:
        steps, t = [], 0.0
        for work, wait in zip(_steps(seed, n, 1000.0, slow), runq):
            steps.append(work * (1 + 0.4 * t / span) + wait)
            t += steps[-1]
        return build_run(tmp_path / name, steps, runq_us=runq)

    a, same, slower = run("a", 1, late), run("same", 2, early), run("slower", 3, early, 1.15)
    with open_profile(a) as pa_, open_profile(same) as pb:
        sa, sb = step_series([pa_]), step_series([pb])
    pooled = compare_samples(sa.values["steady_step_us"], sb.values["steady_step_us"])
    assert pooled.verdict == "slower" and pooled.change_pct is not None and pooled.change_pct > 10

    doc = json.loads(cli("diff", a, same, "--fail-if-slower", "5%", "--format", "json").stdout)
    st = next(v for v in doc["verdicts"] if v["figure"] == "steady_step_us")
    assert st["test"].startswith("t on same-time block ratios") and st["verdict"] == "no significant change"
    assert abs(st["change_pct"]) < 3 and not doc["failed"]

    r = cli("diff", a, slower, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 1, r.stdout
    st = next(v for v in json.loads(r.stdout)["verdicts"] if v["figure"] == "steady_step_us")
    assert st["verdict"] == "slower" and 10 < st["change_pct"] < 20


def test_slower_gate_without_cpu_waits_tests_wall_time_and_says_so(tmp_path: Path) -> None:
    """Recordings without per-step CPU waits (an imported trace, or another OS): the gate
    tests the wall step time and says the load is part of the verdict."""
    a = build_run(tmp_path / "a", _steps(1, 30, 1000.0))
    b = build_run(tmp_path / "b", _steps(2, 30, 1000.0, 1.15))
    r = cli("diff", a, b, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 1, r.stderr
    g = json.loads(r.stdout)["gate"][0]
    assert g["figure"] == "step_time_us" and "no per-step CPU waits" in g["basis"]
    assert "load is part of this verdict" in g["basis"]
    # Too few undisturbed steps on a side: wall time again, with the counts.
    n = 30
    quiet = build_run(tmp_path / "quiet", _steps(1, n, 1000.0), runq_us=[0.0] * n)
    busy = build_run(tmp_path / "busy", _steps(3, n, 1000.0), runq_us=_load_runq(n, every=2, waiting=1))
    g = json.loads(cli("diff", quiet, busy, "--fail-if-slower", "5%", "--format", "json").stdout)["gate"][0]
    assert g["figure"] == "step_time_us" and "too few steps that did not wait for a CPU (29 and 0" in g["basis"]


def test_csv_holds_the_verdicts_then_the_view(tmp_path: Path) -> None:
    """`diff --format csv` wrote the kernels table only, without the verdicts."""
    import csv
    import io

    base = build_run(tmp_path / "base", _steps(1, 20, 1000.0))
    slow = build_run(tmp_path / "slow", _steps(3, 20, 1000.0, 1.15), comm_share=0.2)
    r = cli("diff", base, slow, "--fail-if-slower", "5%", "--format", "csv")
    assert r.returncode == 1, r.stderr  # the gate still decides the exit status
    head, _, tail = r.stdout.partition("\n\n")
    verdict_rows = list(csv.DictReader(io.StringIO(head)))
    doc = json.loads(cli("diff", base, slow, "--format", "json").stdout)
    assert [v["figure"] for v in verdict_rows] == [v["figure"] for v in doc["verdicts"]]
    st = next(v for v in verdict_rows if v["figure"] == "step_time_us")
    want = next(v for v in doc["verdicts"] if v["figure"] == "step_time_us")
    assert st["verdict"] == "slower" == want["verdict"]
    assert float(st["change_pct"]) == want["change_pct"] and float(st["p_value"]) == want["p_value"]
    view_rows = list(csv.DictReader(io.StringIO(tail)))
    assert [v["name"] for v in view_rows] == [v["name"] for v in doc["rows"]]
    assert {v["name"] for v in view_rows} == {"sm90_gemm", "ncclKernel_AllReduce_RING_LL_Sum_float"}


def test_one_step_compares_totals(tmp_path: Path) -> None:
    a = build_run(tmp_path / "a", [1000.0])
    b = build_run(tmp_path / "b", [1200.0])
    r = cli("diff", a, b, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    st = next(v for v in doc["verdicts"] if v["figure"] == "step_time_us")
    assert st["verdict"] == "too few steps" and st["p_value"] is None and abs(st["change_pct"] - 20) < 1e-9
    assert "mean step" in doc["note"] and "means only" in doc["gate"][0]["detail"]


def test_too_few_steps_compare_the_mean_step_not_the_total(tmp_path: Path) -> None:
    """5 steps against 2 steps each 50% slower: B's total is smaller (the gate passed it
    at -40% of the totals); its mean step is 50% more."""
    a = build_run(tmp_path / "a", [1000.0, 1010.0, 990.0])
    b = build_run(tmp_path / "b", [1500.0, 1500.0])
    r = cli("diff", a, b, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 1, r.stdout
    doc = json.loads(r.stdout)
    st = next(v for v in doc["verdicts"] if v["figure"] == "step_time_us")
    assert st["verdict"] == "too few steps" and abs(st["change_pct"] - 50.0) < 1e-9
    assert st["a_total"] == 3000.0 and st["b_total"] == 3000.0
    assert doc["gate"][0]["detail"] == "step_time_us: mean step +50.0% (too few steps for a test; means only)"


def test_one_step_runs_against_a_baseline_folder_compare_per_run(tmp_path: Path) -> None:
    """Three one-step baseline runs of 1000 µs against one of 1000 µs read "total -66.7%" once
    (the pooled total against one run's): a regression of up to 3x passed the gate."""
    folder = tmp_path / "baselines"
    for i in range(3):
        build_run(folder / f"run{i}", [1000.0])
    same = build_run(tmp_path / "same", [1000.0])
    r = cli("diff", folder, same, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 0, r.stderr
    st = next(v for v in json.loads(r.stdout)["verdicts"] if v["figure"] == "step_time_us")
    assert st["verdict"] == "too few steps" and abs(st["change_pct"]) < 1e-9
    slow = build_run(tmp_path / "slow", [2000.0])
    r = cli("diff", folder, slow, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 1, r.stderr
    assert "mean step +100.0%" in json.loads(r.stdout)["gate"][0]["detail"]


def test_baseline_folder_pools_runs(tmp_path: Path) -> None:
    folder = tmp_path / "baselines"
    for i in range(3):
        build_run(folder / f"run{i}", _steps(10 + i, 10, 1000.0))
    new = build_run(tmp_path / "new", _steps(20, 10, 1000.0, 1.2))
    r = cli("diff", folder, new, "--fail-if-slower", "5%", "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["a"]["runs"] == 3 and doc["a"]["steps"] == 30 and doc["b"]["runs"] == 1
    gemm = next(x for x in doc["top"]["kernels"] if x["name"] == "sm90_gemm")
    # Per-run means: 10 launches a run on each side.
    assert gemm["a_count"] == 10 and gemm["b_count"] == 10 and gemm["delta_pct"] > 10


def test_cross_vendor_diff_names_devices(tmp_path: Path) -> None:
    a = build_run(tmp_path / "cuda", _steps(1, 10, 1000.0))
    b = build_run(
        tmp_path / "npu",
        _steps(2, 10, 1000.0),
        device_type="npu",
        device_name="Ascend910B",
        kernel_name="sm90_gemm",  # the same name on another device type is another kernel
        comm_name="hcom_allReduce",
    )
    r = cli("diff", a, b, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["a"]["devices"] == ["cuda: NVIDIA H100"] and doc["b"]["devices"] == ["npu: Ascend910B"]
    status = {(x["device_type"], x["name"]): x["status"] for x in doc["rows"]}
    assert status == {
        ("cuda", "sm90_gemm"): "removed",
        ("npu", "sm90_gemm"): "added",
        ("cuda", "ncclKernel_AllReduce_RING_LL_Sum_float"): "removed",
        ("npu", "hcom_allReduce"): "added",
    }
    st = next(v for v in doc["verdicts"] if v["figure"] == "step_time_us")
    assert st["verdict"] == "no significant change"


def test_rule_on_a_figure_only_b_has() -> None:
    # A kernel that appears in B (A's median 0) is an unbounded, significant increase.
    row = {"figure": "kernel:nccl*", "change_pct": None, "verdict": "slower", "a_median": 0.0, "b_median": 50.0}
    failed, detail = parse_rule("kernel:nccl*>+20%").check(row)
    assert failed and "from 0" in detail
    row = {**row, "verdict": "no significant change", "b_median": 0.0}
    assert parse_rule("kernel:nccl*>+20%").check(row)[0] is False
    row = {"figure": "x_us", "change_pct": None, "verdict": "too few steps", "a_total": 0.0, "b_total": 9.0}
    assert parse_rule("x_us>+5%").check(row)[0] is True


def test_table_shows_a_tiny_p_value_not_zero(tmp_path: Path) -> None:
    """The terminal table printed a p-value of 1e-10 as "0" (three decimals)."""
    a = build_run(tmp_path / "a", _steps(1, 30, 1000.0))
    b = build_run(tmp_path / "b", _steps(2, 30, 1000.0, 1.15))
    r = cli("diff", a, b)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "step_time_us" in x and "slower" in x)
    cells = [c.strip() for c in line.split("│") if c.strip()]
    p = float(cells[6])
    assert 0 < p < 1e-6
    # The change is signed with one decimal, like the interval beside it.
    assert cells[4].startswith("+") and len(cells[4].split(".")[1]) == 1 and 10 < float(cells[4]) < 20


def test_no_kernels_in_either_run_says_so(tmp_path: Path) -> None:
    """A CPU-only diff printed an empty 'kernels: B - A' box."""
    from kineto_builders import span, write_trace

    ops = [span("aten::mm", "cpu_op", 10.0 * i, 5.0) for i in range(5)]
    a = write_trace(tmp_path / "a.json", ops)
    b = write_trace(tmp_path / "b.json", ops)
    r = cli("diff", a, b)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "kernels: none in either run"
    r = cli("diff", a, b, "--view", "operators")
    assert "aten::mm" in r.stdout
    r = cli("diff", a, b, "--view", "operators", "--filter", "name~conv")
    assert r.stdout.splitlines()[-1] == "operators: none match the filter"


def test_a_partial_side_is_said_whatever_the_format(tmp_path: Path) -> None:
    base = build_run(tmp_path / "base", _steps(1, 20, 1000.0))
    cut = build_run(tmp_path / "cut", _steps(2, 12, 1000.0))
    meta_path = cut / "profile.json"
    meta = json.loads(meta_path.read_text())
    meta.update(partial=True, partial_reason="killed by signal SIGKILL")
    meta_path.write_text(json.dumps(meta))

    r = cli("diff", base, cut, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["a"]["partial"] == [] and doc["b"]["partial"] == ["killed by signal SIGKILL"]
    assert r.stderr.strip().splitlines() == [
        "aiprof: warning: B: 1 partial profile(s) (killed by signal SIGKILL): their steps end where the run "
        "stopped; compare them knowing that"
    ]
    r = cli("diff", base, base)
    assert r.returncode == 0 and "partial" not in r.stderr
