"""aiprof monitor: groups, line formats, the loop, --record, Prometheus, and the CLI."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from aiprof.devices.base import DeviceBackend, DeviceInfo, Sample
from aiprof.errors import AiprofError
from aiprof.importers.nvidia.dmon import parse_dmon
from aiprof.monitor.live import sparkline
from aiprof.monitor.loop import Monitor, Selector, parse_selectors
from aiprof.monitor.prom import MetricsServer, exposition, parse_listen
from aiprof.render.monitor import LineRenderer, parse_groups, parse_options
from aiprof.store import open_profile


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiprof", *args], capture_output=True, text=True, timeout=120)


def test_groups_follow_letter_order() -> None:
    assert parse_groups("puc") == [
        "power", "gpu_temp", "mem_temp", "sm_util", "mem_util", "enc_util", "dec_util", "mem_clock", "sm_clock"
    ]  # fmt: skip
    assert parse_groups("tc") == ["pcie_rx", "pcie_tx", "mem_clock", "sm_clock"]
    assert parse_groups("e") == ["sbecc", "dbecc", "pci_replays"]
    assert parse_groups("vm") == ["power_violation", "thermal_violation", "fb_used", "bar1_used"]
    with pytest.raises(AiprofError, match="unknown metric group 'x'"):
        parse_groups("px")
    assert parse_options("DT") == (True, True) and parse_options("t") == (False, True)
    with pytest.raises(AiprofError):
        parse_options("DX")


def test_selectors() -> None:
    assert parse_selectors("0,cuda:1,cpu") == [Selector(None, 0), Selector("cuda", 1), Selector("cpu", None)]
    with pytest.raises(AiprofError, match="unknown device type"):
        parse_selectors("gpu:0")


def gpu_samples(ts: int = 1_700_000_000 * 10**9) -> list[Sample]:
    return [
        Sample("cuda", 0, ts, {"power": 65.4, "gpu_temp": 41.0, "mem_temp": None, "sm_util": 97.0, "fb_used": 3072.0}),
        Sample("cuda", 1, ts, {"power": 300.0, "gpu_temp": 60.0, "mem_temp": 70.0, "sm_util": 0.0, "fb_used": 1.0}),
    ]


@pytest.mark.parametrize("options", ["", "T", "DT"])
def test_dmon_lines_read_back_as_dmon(options: str) -> None:
    out = io.StringIO()
    date, time = parse_options(options)
    r = LineRenderer(out, parse_groups("pu"), fmt="dmon", date=date, time=time)
    r.write(gpu_samples())
    r.write(gpu_samples(1_700_000_001 * 10**9))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("#") and lines[1].startswith("#") and len(lines) == 6
    assert lines[0].split()[-7:] == ["pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec"]
    assert lines[1].split()[-7:] == ["W", "C", "C", "%", "%", "%", "%"]
    log = parse_dmon(lines)  # our own dmon reader, which reads real dmon logs
    assert log.problems == [] and len(log.rows) == 4
    assert log.rows[0].values["power"] == 65 and log.rows[0].values["mem_temp"] is None
    assert log.rows[3].device == 1 and log.rows[3].values["mem_temp"] == 70
    assert lines[2].split()[-7:] == ["65", "41", "-", "97", "-", "-", "-"]


def test_cpu_row_uses_its_equivalents_and_mixed_labels() -> None:
    out = io.StringIO()
    r = LineRenderer(out, parse_groups("uc"), mixed=True, label_width=6)
    r.write([Sample("cpu", 0, 0, {"cpu_util": 12.4, "cpu_freq": 2600.0}), gpu_samples()[0]])
    rows = out.getvalue().splitlines()[2:]
    assert rows[0].split() == ["cpu:0", "12", "-", "-", "-", "-", "2600"]
    assert rows[1].split()[0] == "cuda:0"


def test_csv_and_json_lines() -> None:
    out = io.StringIO()
    LineRenderer(out, ["power", "mem_temp"], fmt="csv").write(gpu_samples())
    lines = out.getvalue().splitlines()
    assert lines[0] == "timestamp,device_type,device,power [W],mem_temp [C]"
    assert lines[1].split(",")[1:] == ["cuda", "0", "65.4", ""]
    out = io.StringIO()
    LineRenderer(out, ["power"], fmt="json").write(gpu_samples())
    rec = json.loads(out.getvalue().splitlines()[1])
    assert rec["device"] == 1 and rec["values"]["mem_temp"] == 70 and rec["ts_ns"] == 1_700_000_000 * 10**9


class Scripted(DeviceBackend):
    """A backend replaying given values; raises where the script says so."""

    name = "scripted"
    device_type = "cuda"

    def __init__(self, script: list[float | Exception]) -> None:
        self.script = script
        self.closed = False

    @classmethod
    def available(cls) -> bool:
        return True

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo("cuda", 0, "x", "NVIDIA"), DeviceInfo("cuda", 1, "y", "NVIDIA")]

    def sample(self) -> list[Sample]:
        v = self.script.pop(0)
        if isinstance(v, Exception):
            raise v
        return [Sample("cuda", 0, 0, {"power": v}), Sample("cuda", 1, 0, {"power": v + 1})]

    def close(self) -> None:
        self.closed = True


def test_loop_fixed_rate_selection_and_drop() -> None:
    t = [0.0]
    waits: list[float] = []

    def wait(s: float) -> bool:
        waits.append(round(s, 6))
        t[0] += s + 0.01  # each wait oversleeps a little; the loop must not drift
        return False

    b = Scripted([1.0, 2.0, 3.0, RuntimeError("gone")])
    warnings: list[str] = []
    mon = Monitor(
        [b], interval_s=0.25, selectors=parse_selectors("1"), clock=lambda: t[0], wait=wait, warn=warnings.append
    )
    ticks = list(mon.run(count=3))
    assert [[(s.device, s.values["power"]) for s in tick] for tick in ticks] == [[(1, 2.0)], [(1, 3.0)], [(1, 4.0)]]
    assert waits == [0.25, 0.24]
    assert mon.tick() == [] and b.closed and len(warnings) == 1 and "gone" in warnings[0]
    with pytest.raises(AiprofError, match="no device backend left"):
        next(mon.run())
    with pytest.raises(AiprofError):
        Monitor([b], interval_s=0)


def test_prometheus_over_http() -> None:
    srv = MetricsServer("127.0.0.1", 0, [DeviceInfo("cuda", 0, "NVIDIA H100", "NVIDIA")])
    try:
        srv.update(gpu_samples())
        cpu = {"cpu_util": 25.0, "cpu_util.core1": 50.0, "cpu_freq": 2600.0, "mem_total": 1024.0}
        srv.update([Sample("cpu", 0, 0, cpu)])
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/metrics", timeout=10) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = resp.read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/other", timeout=10)
    finally:
        srv.close()
    lines = body.splitlines()
    assert 'hw_power_watts{device_type="cuda",device="0",name="NVIDIA H100"} 65.4' in lines
    assert (
        'hw_gpu_utilization_ratio{device_type="cuda",device="0",name="NVIDIA H100",hw_gpu_task="general"} 0.97' in lines
    )
    assert 'hw_gpu_memory_usage_bytes{device_type="cuda",device="1"} 1048576' in lines
    assert 'hw_temperature_celsius{device_type="cuda",device="1",sensor="memory"} 70' in lines
    assert 'system_cpu_utilization_ratio{device_type="cpu",device="0",cpu="1"} 0.5' in lines
    assert 'system_cpu_frequency_hertz{device_type="cpu",device="0"} 2600000000' in lines
    assert 'system_memory_limit_bytes{device_type="cpu",device="0"} 1073741824' in lines
    assert lines.count("# TYPE hw_power_watts gauge") == 1
    assert "mem_temp" not in exposition([Sample("cuda", 0, 0, {"mem_temp": None})])
    assert parse_listen("9400") == ("127.0.0.1", 9400) and parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)
    with pytest.raises(AiprofError):
        parse_listen("host:http")


def test_sparkline() -> None:
    assert sparkline([0.0, 50.0, 100.0, None], 0.0, 100.0) == "▁▅█ "
    assert sparkline([None, None]) == "  "


# -- the command line ------------------------------------------------------------------


def test_cli_dmon_lines_on_this_cpu() -> None:
    r = run_cli("monitor", "-c", "3", "-d", "0.05", "-s", "pucm")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["#", "gpu", "pwr", "gtemp", "mtemp"] and len(lines) == 5
    log = parse_dmon(lines)
    assert len(log.rows) == 3 and all(0 <= (row.values["sm_util"] or 0) <= 100 for row in log.rows)
    assert all((row.values["fb_used"] or 0) > 0 for row in log.rows)  # host memory stands in for fb
    # The '# gpu' header is dmon's: the note says no accelerator is behind it.
    assert "no accelerator found: showing the host CPU" in r.stderr
    assert "sm = cpu_util" in r.stderr and "fb = mem_used" in r.stderr


def test_cli_record_writes_counters(tmp_path: Path) -> None:
    out = tmp_path / "mon.aiprof"
    r = run_cli("monitor", "-c", "3", "-d", "0.05", "--format", "csv", "--record", str(out))
    assert r.returncode == 0, r.stderr
    assert "recorded" in r.stderr and len(r.stdout.splitlines()) == 4
    prof = open_profile(out)
    try:
        rows = prof.sql("select metric, unit, count(*) n, min(ts) t0 from counters group by all").to_pylist()
        meta = prof.metas[0]
    finally:
        prof.close()
    by = {x["metric"]: x for x in rows}
    assert by["cpu_util"]["n"] == 3 and by["cpu_util"]["unit"] == "%" and by["cpu_util"]["t0"] == 0
    assert by["mem_total"]["unit"] == "MB" and by["cpu_util.core0"]["unit"] == "%"
    assert meta["clock"] == "unix" and meta["devices"][0]["type"] == "cpu"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-s", "pz"], "unknown metric group"),
        (["-d", "0"], "must be above 0"),
        (["-d", "abc"], "is not a valid float"),
        (["-o", "X"], "use D, T or DT"),
        (["-i", "cuda"], "no device backend is available"),
        (["-i", "9"], "no device matches -i 9"),
        (["--serve", "x:y"], "expected HOST:PORT"),
        (["--backend", "foo"], "unknown foo"),
    ],
)
def test_cli_bad_flags_exit_2(args: list[str], message: str) -> None:
    r = run_cli("monitor", "-c", "1", *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_sigterm_ends_the_monitor_and_keeps_the_recording(tmp_path: Path) -> None:
    import signal

    out = tmp_path / "term.aiprof"
    cmd = [sys.executable, "-m", "aiprof", "monitor", "-d", "0.05", "--format", "csv", "--record", str(out)]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.readline()  # the header
    child.stdout.readline()  # a first sample: the loop is running
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0 and "recorded" in err  # stopping is the normal end of a monitor
    prof = open_profile(out)
    try:
        assert prof.sql("select count(*) n from counters where metric = 'cpu_util'").to_pylist()[0]["n"] >= 1
    finally:
        prof.close()
