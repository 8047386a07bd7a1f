"""Energy per step: integration on built counter series, the real dmon and hl-smi
captures, the steps view's columns and ``aiprof diff`` on energy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aiprof.analysis import Query, run
from aiprof.analysis.energy import integrate_energy, integrate_power
from aiprof.importers import import_paths
from aiprof.store import open_profile
from diff_builders import build_run
from test_cli import cli

S = 1e9  # ns per second


def test_constant_and_linear_power_are_exact() -> None:
    ts = np.arange(11) * 0.1 * S
    j, err = integrate_power(ts, np.full(11, 200.0), np.array([0.0, 0.25 * S]), np.array([1.0 * S, 0.5 * S]))
    assert j == pytest.approx([200.0, 50.0]) and err == pytest.approx([0.0, 0.0])
    # A ramp 0 -> 100 W over 1 s: the integral over [0.25 s, 0.75 s] is 25 J, and the
    # trapezoid is exact on a line even for windows cutting intervals.
    j, err = integrate_power(ts, np.linspace(0, 100, 11), np.array([0.25 * S]), np.array([0.75 * S]))
    assert j[0] == pytest.approx(25.0)
    assert err[0] > 0  # the bound does not know the signal is a line


def test_bound_holds_for_monotone_paths_between_samples() -> None:
    # The true power moves monotonically between samples (a jump at a random instant of
    # each interval); the coarse estimate must stay within its bound on any window.
    rng = np.random.default_rng(7)
    coarse_t = np.arange(0, 21) * 0.1 * S
    coarse_p = rng.uniform(50, 400, 21)
    fine_t = np.arange(0, 2 * S + 1, 1e5)  # 0.1 ms
    jump = coarse_t[:-1] + rng.uniform(0, 0.1 * S, 20)
    k = np.clip(np.searchsorted(coarse_t, fine_t, side="right") - 1, 0, 19)
    fine_p = np.where(fine_t < jump[k], coarse_p[k], coarse_p[k + 1])
    w0 = rng.uniform(0, 1.5 * S, 50)
    w1 = w0 + rng.uniform(0.001 * S, 0.5 * S, 50)
    est, bound = integrate_power(coarse_t, coarse_p, w0, w1)
    true, _ = integrate_power(fine_t, fine_p, w0, w1)
    assert (np.abs(est - true) <= bound + 1e-6).all()
    assert (bound > 0).all()


def test_energy_counter() -> None:
    # 150 W through a cumulative counter read every 0.2 s (reset between 1.4 and 1.6 s).
    ts = np.arange(0, 11) * 0.2 * S
    e = 150.0 * ts / S
    e[8:] -= e[8]  # the counter restarts: the increases after it still count
    j, err = integrate_energy(ts, e, np.array([0.1 * S, 0.0]), np.array([0.9 * S, 2.0 * S]))
    assert j[1] == pytest.approx(150.0 * 2.0 - 150.0 * 0.2)  # the reset interval is lost
    assert j[0] == pytest.approx(120.0) and err[0] == pytest.approx(2 * 0.5 * 30.0)
    assert err[1] == 0.0


def _hand_trapezoid(prof_path: Path) -> dict[tuple[str, int], float]:
    out: dict[tuple[str, int], float] = {}
    with open_profile(prof_path) as p:
        rows = p.sql("SELECT device_type, device, ts, value FROM counters WHERE metric = 'power' ORDER BY 1, 2, 3")
        last: dict[tuple[str, int], tuple[int, float]] = {}
        for dt, dev, ts, v in zip(*(rows.column(i).to_pylist() for i in range(4))):
            key = (dt, dev)
            if key in last:
                t0, v0 = last[key]
                out[key] = out.get(key, 0.0) + (ts - t0) / S * (v + v0) / 2
            last[key] = (ts, v)
    return out


@pytest.mark.parametrize(
    ("sub", "name", "forced"),
    [
        ("nvidia-smi", "dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt", "nvidia-dmon"),
        ("nvidia-smi", "dmon_pucvmet_DT_idle.txt", "nvidia-dmon"),
        ("habana", "hl-smi_samples.txt", None),
    ],
)
def test_real_smi_captures(shared_data: Path, tmp_path: Path, sub: str, name: str, forced: str | None) -> None:
    out, _ = import_paths([shared_data / sub / name], tmp_path / "s.aiprof", forced=forced)
    expected = _hand_trapezoid(out)
    assert expected
    with open_profile(out) as p:
        rows = run(p, "energy", Query()).rows
    got = {(r["device_type"], r["device"]): r for r in rows}
    for key, joules in expected.items():
        r = got[key]
        assert r["source"] == "power" and r["step"] is None
        assert r["energy_j"] == pytest.approx(joules)
        assert r["avg_w"] == pytest.approx(joules / (r["duration_us"] / 1e6))
        assert r["error_j"] >= 0
    if name.startswith("dmon_pcut"):
        # Checked by hand: GPU 0 read 365, 367, 369, 364 W ten seconds apart (the log's
        # command line, `nvidia-smi dmon -s pcut -d 10`, names the interval).
        assert got[("cuda", 0)]["energy_j"] == pytest.approx(11005.0)
        assert got[("cuda", 0)]["error_j"] == pytest.approx(45.0)
        assert got[("cuda", 0)]["duration_us"] == pytest.approx(30e6)
    if name.startswith("hl-smi"):
        assert got[("hpu", 0)]["energy_j"] == pytest.approx(385.0) and got[("hpu", 0)]["error_j"] == 71


def _dmon_d10(path: Path, *, clock: bool, command: bool = False) -> Path:
    """Two GPUs sampled by `nvidia-smi dmon -s p -d 10` (with -o T when ``clock``)."""
    lines = ["# nvidia-smi dmon -s p -d 10" + (" -o T" if clock else "")] if command else []
    lines += ["#Time        gpu    pwr", "#HH:MM:SS    Idx      W"] if clock else ["# gpu    pwr", "# Idx      W"]
    for i, (p0, p1) in enumerate([(100, 50), (200, 50), (300, 80)]):
        at = f"09:00:{10 * i:02d}    " if clock else ""
        lines += [f" {at}  0    {p0}", f" {at}  1    {p1}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _energies(prof: Path) -> dict[int, float]:
    with open_profile(prof) as p:
        return {r["device"]: r["energy_j"] for r in run(p, "energy", Query()).rows}


# GPU 0: 100, 200, 300 W and GPU 1: 50, 50, 80 W, ten seconds apart.
D10_JOULES = {0: 10 * 150 + 10 * 250, 1: 10 * 50 + 10 * 65}


def test_dmon_d10_log_integrates_over_its_real_interval(tmp_path: Path) -> None:
    """A `dmon -d 10` log gave 10x too little energy: samples were placed 1 s apart."""
    out, ctx = import_paths([_dmon_d10(tmp_path / "t.txt", clock=True)], tmp_path / "t.aiprof")
    assert _energies(out) == pytest.approx(D10_JOULES)  # -o T: the timestamps' spacing
    assert not ctx.warnings
    out, ctx = import_paths([_dmon_d10(tmp_path / "c.txt", clock=False, command=True)], tmp_path / "c.aiprof")
    assert _energies(out) == pytest.approx(D10_JOULES)  # the log's own command line
    assert ctx.warnings == ["c.txt: no timestamps; samples placed 10 s apart, as the log's command line says"]
    bare = _dmon_d10(tmp_path / "bare.txt", clock=False)
    out, ctx = import_paths([bare], tmp_path / "bare.aiprof")
    assert _energies(out) == pytest.approx({d: j / 10 for d, j in D10_JOULES.items()})  # nothing says 10 s
    assert "aiprof import --interval SECONDS" in ctx.warnings[0]
    r = cli("import", bare, "-o", tmp_path / "given.aiprof", "--interval", "10")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    assert _energies(tmp_path / "given.aiprof") == pytest.approx(D10_JOULES)
    with open_profile(tmp_path / "given.aiprof") as p:
        assert [s.get("interval_s") for m in p.metas for s in m["sources"]] == [10.0]
    # The user's interval wins over the log's; timestamps win over both.
    out, _ = import_paths([tmp_path / "c.txt"], tmp_path / "c5.aiprof", sample_interval_ns=5 * 10**9)
    assert _energies(out) == pytest.approx({d: j / 2 for d, j in D10_JOULES.items()})
    out, _ = import_paths([tmp_path / "t.txt"], tmp_path / "t5.aiprof", sample_interval_ns=5 * 10**9)
    assert _energies(out) == pytest.approx(D10_JOULES)
    r = cli("import", bare, "-o", tmp_path / "bad.aiprof", "--interval", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_steps_view_energy_and_diff(tmp_path: Path) -> None:
    steps = [1000.0 + 10 * (i % 3) for i in range(12)]
    a = build_run(tmp_path / "a", steps, power_w=300.0, batch_size=32)
    b = build_run(tmp_path / "b", [s * 1.2 for s in steps], power_w=300.0, batch_size=32)
    with open_profile(a) as p:
        st = run(p, "steps", Query()).rows
        en = run(p, "energy", Query()).rows
    assert len(st) == 12
    for r in st:
        assert r["energy_j"] == pytest.approx(300.0 * r["duration_us"] / 1e6)
        assert r["j_per_sample"] == pytest.approx(r["energy_j"] / 32)
        assert r["avg_w"] == pytest.approx(300.0)
        assert r["energy_error_j"] == pytest.approx(0.0)
    assert {(r["device_type"], r["device"], r["source"]) for r in en} == {("cuda", 0, "power")}
    r = cli("diff", a, b, "--fail-if", "energy_j>+10%", "--format", "json")
    assert r.returncode == 1, r.stderr
    import json

    doc = json.loads(r.stdout)
    v = {x["figure"]: x for x in doc["verdicts"]}
    assert v["energy_j"]["verdict"] == "higher" and v["energy_j"]["unit"] == "J"
    assert v["energy_j"]["change_pct"] == pytest.approx(20.0, abs=0.5)
    assert v["j_per_sample"]["verdict"] == "higher"
    assert v["avg_w"]["verdict"] == "no significant change"


def test_recorded_sample_counts(tmp_path: Path) -> None:
    # A real recording: annotate(..., samples=N) counts per step; batch_size is kept.
    from aiprof.analysis.energy import batch_size, step_samples
    from aiprof.record import Profiler, annotate

    with Profiler(output=tmp_path / "r.aiprof", host=[], device=False, batch_size=48) as prof:
        for n in (16, 32, 48):
            with annotate("forward", samples=n):
                sum(range(1000))
            with annotate("backward"):
                sum(range(1000))
            prof.step()
    with open_profile(tmp_path / "r.aiprof") as p:
        assert batch_size(p) == 48
        counted = step_samples(p)
        steps = sorted(k for k in counted if k[1] >= 0)
        assert [counted[k] for k in steps] == [16.0, 32.0, 48.0]
        assert counted[(steps[0][0], -1)] == 96.0


def test_overview_energy_line(tmp_path: Path) -> None:
    a = build_run(tmp_path / "a", [1000.0] * 6, power_w=250.0, batch_size=10)
    r = cli("report", a)
    assert r.returncode == 0, r.stderr
    # 250 W over 1 ms steps: 0.25 J a step, 0.025 J a sample, 6 steps in all.
    assert "energy: rank 0 cuda 0: 1.5 J (±0), 250.0 W average, 0.25 J per step, 0.025 J per sample" in r.stdout


def test_record_cli_keeps_batch_size(tmp_path: Path) -> None:
    import sys

    from aiprof.analysis.energy import batch_size

    example = Path(__file__).resolve().parents[1] / "examples" / "train_cpu.py"
    r = cli("record", "-o", tmp_path / "r", "--batch-size", "32", "--", sys.executable, example, "--steps", "3")
    assert r.returncode == 0, r.stderr
    with open_profile(tmp_path / "r") as p:
        assert batch_size(p) == 32
    r = cli("record", "-o", tmp_path / "bad", "--batch-size", "0", "--", sys.executable, "-c", "pass")
    assert r.returncode == 2


def test_overview_of_an_smi_log_names_its_device(tmp_path: Path) -> None:
    """dmon names no GPU model: the overview printed "devices: None"."""
    log = tmp_path / "dmon.log"
    log.write_text(
        "#Date        Time         gpu    pwr\n"
        "#YYYYMMDD    HH:MM:SS     Idx      W\n"
        " 20260816    09:22:34       0    100\n"
        " 20260816    09:22:35       0    120\n"
        " 20260816    09:22:34       1     90\n"
        " 20260816    09:22:35       1     95\n"
    )
    r = cli("report", log)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("ranks:"))
    assert line.endswith("devices: cuda 0, cuda 1"), line
    assert "energy" in r.stdout.split("more:")[-1]


def test_energy_view_without_counters_says_why(tmp_path: Path) -> None:
    """A profile without power counters (no RAPL access, no GPU) showed an empty box."""
    from kineto_builders import two_step_trace, write_trace

    r = cli("report", write_trace(tmp_path / "t.json", two_step_trace()), "--view", "energy")
    assert r.returncode == 0, r.stderr
    assert "no power or energy counters in this profile" in r.stderr
    r = cli("report", tmp_path / "t.json", "--view", "energy", "--format", "json")
    assert r.returncode == 0 and '"total":0' in r.stdout
