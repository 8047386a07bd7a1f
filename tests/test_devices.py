"""Device backends: the CPU live, NVML on a stand-in module, CLI backends on real subprocesses."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from aiprof.devices import METRICS, available_backends, metric_unit
from aiprof.devices.cli_backend import BackendError
from aiprof.devices.cnmon import CnmonBackend
from aiprof.devices.cpu import CpuBackend, RaplReader
from aiprof.devices.hlsmi import HlSmiBackend
from aiprof.devices.nvml import NvmlBackend
from aiprof.monitor.loop import Monitor


class FakeClock:
    def __init__(self, start: int = 1_700_000_000 * 10**9) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


# -- CPU (live, psutil runs here) --------------------------------------------------------


def test_cpu_backend_live() -> None:
    clock = FakeClock()
    b = CpuBackend(clock=clock)
    assert CpuBackend.available()
    (info,) = b.devices()
    assert info.device_type == "cpu" and info.memory_bytes == psutil.virtual_memory().total
    # Some CPU time and some wall time between the two readings: the kernel counts
    # both in 10 ms ticks, and a busy machine may run this loop inside one tick.
    sum(i * i for i in range(200_000))
    time.sleep(0.05)
    (s,) = b.sample()
    assert s.ts_ns == clock.now and (s.device_type, s.device) == ("cpu", 0)
    cores = [k for k in s.values if k.startswith("cpu_util.core")]
    assert len(cores) == psutil.cpu_count()
    assert s.values["cpu_util"] is not None and 0 <= s.values["cpu_util"] <= 100
    assert all(0 <= (s.values[k] or 0) <= 100 for k in cores)
    assert s.values["mem_total"] == pytest.approx(psutil.virtual_memory().total / 2**20)
    assert 0 < (s.values["mem_used"] or 0) <= (s.values["mem_total"] or 0)
    assert metric_unit("cpu_util.core0") == "%" and METRICS["mem_used"].unit == "MB"


def test_cpu_slow_metrics_refresh_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = psutil.cpu_freq

    def counting() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(psutil, "cpu_freq", counting)
    clock = FakeClock()
    b = CpuBackend(clock=clock)
    for _ in range(5):
        b.sample()
        clock.now += 100_000_000
    assert len(calls) == 1
    clock.now += 1_000_000_000
    b.sample()
    assert len(calls) == 2


def _rapl(root: Path, name: str, uj: int, rng: int = 262143328850) -> None:
    d = root / name
    d.mkdir(exist_ok=True)
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{rng}\n")


def test_rapl_power_from_energy_files(tmp_path: Path) -> None:
    _rapl(tmp_path, "intel-rapl:0", 1_000_000)
    _rapl(tmp_path, "intel-rapl:1", 5_000_000)
    _rapl(tmp_path, "intel-rapl:0:0", 7)  # a sub-domain of package 0: not added twice
    r = RaplReader(tmp_path)
    assert len(r.domains) == 2
    assert r.power(10**9) is None  # first reading: nothing to difference yet
    _rapl(tmp_path, "intel-rapl:0", 51_000_000)  # +50 J
    _rapl(tmp_path, "intel-rapl:1", 35_000_000)  # +30 J
    assert r.power(3 * 10**9) == pytest.approx(40.0)  # 80 J over 2 s
    assert r.energy_j == pytest.approx(80.0)  # the cumulative counter energy per step reads
    _rapl(tmp_path, "intel-rapl:0", 1_000_000, rng=100_000_000)  # wrapped around
    r2 = RaplReader(tmp_path)
    r2.power(0)
    _rapl(tmp_path, "intel-rapl:0", 500_000, rng=100_000_000)
    _rapl(tmp_path, "intel-rapl:1", 35_000_000)
    assert r2.power(10**9) == pytest.approx(99.5)  # (100 - 1 + 0.5) J in 1 s
    assert r2.energy_j == pytest.approx(99.5)


# -- NVML: no GPU here, so a minimal stand-in for the pynvml module -----------------------


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value


def fake_pynvml(calls: dict[str, int]) -> Any:
    """The few pynvml functions and constants the backend uses, returning values in NVML's
    own units (mW, bytes, KB/s, ns). Encoder utilization is 'not supported'."""

    def counted(name: str, result: Any) -> Any:
        def fn(*_a: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            if isinstance(result, Exception):
                raise result
            return result(*_a) if callable(result) else result

        return fn

    viol = {"t": 0}

    def violation(_h: Any, policy: int) -> Any:
        viol["t"] += 250_000_000 if policy == 0 else 0
        return SimpleNamespace(violationTime=viol["t"] if policy == 0 else 0, referenceTime=0)

    return SimpleNamespace(
        NVMLError=NVMLError,
        NVML_ERROR_NOT_SUPPORTED=3,
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_PERF_POLICY_POWER=0,
        NVML_PERF_POLICY_THERMAL=1,
        NVML_FI_DEV_MEMORY_TEMP=82,
        nvmlInit=counted("init", None),
        nvmlShutdown=counted("shutdown", None),
        nvmlDeviceGetCount=counted("count", 1),
        nvmlDeviceGetHandleByIndex=counted("handle", "h0"),
        nvmlDeviceGetName=counted("name", b"NVIDIA H100 80GB HBM3"),
        nvmlDeviceGetMemoryInfo=counted("mem", SimpleNamespace(total=80 * 2**30, used=3 * 2**30, free=77 * 2**30)),
        nvmlDeviceGetPowerUsage=counted("power", 65123),
        nvmlDeviceGetTotalEnergyConsumption=counted("energy", 123456789),
        nvmlDeviceGetTemperature=counted("temp", 41),
        nvmlDeviceGetFieldValues=counted(
            "fields", [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=52))]
        ),
        nvmlDeviceGetUtilizationRates=counted("util", SimpleNamespace(gpu=97, memory=44)),
        nvmlDeviceGetEncoderUtilization=counted("enc", NVMLError(3)),
        nvmlDeviceGetDecoderUtilization=counted("dec", [5, 167000]),
        nvmlDeviceGetClockInfo=counted("clock", lambda _h, kind: 1980 if kind == 1 else 2619),
        nvmlDeviceGetViolationStatus=counted("viol", violation),
        nvmlDeviceGetBAR1MemoryInfo=counted("bar1", SimpleNamespace(bar1Used=5 * 2**20)),
        nvmlDeviceGetTotalEccErrors=counted("ecc", lambda _h, kind, _c: 0 if kind == 0 else 1),
        nvmlDeviceGetPcieReplayCounter=counted("replay", 0),
        nvmlDeviceGetCurrentClocksEventReasons=counted("reasons", 4),
        nvmlDeviceGetPcieThroughput=counted("pcie", lambda _h, d: 21846000 if d == 1 else 6849000),
        nvmlDeviceGetComputeRunningProcesses=counted("procs", [object(), object()]),
    )


def test_nvml_units_and_slow_calls() -> None:
    calls: dict[str, int] = {}
    clock = FakeClock()
    b = NvmlBackend(nvml=fake_pynvml(calls), clock=clock)
    (info,) = b.devices()
    assert (info.name, info.vendor, info.memory_bytes) == ("NVIDIA H100 80GB HBM3", "NVIDIA", 80 * 2**30)
    (s,) = b.sample()
    v = s.values
    assert v["power"] == pytest.approx(65.123)  # mW -> W
    assert v["energy"] == pytest.approx(123456.789)  # mJ -> J
    assert v["fb_used"] == 3 * 1024 and v["mem_total"] == 80 * 1024  # bytes -> MiB
    assert v["bar1_used"] == 5
    assert v["pcie_rx"] == pytest.approx(21846) and v["pcie_tx"] == pytest.approx(6849)  # KB/s -> MB/s
    assert v["sm_util"] == 97 and v["mem_util"] == 44 and v["dec_util"] == 5 and v["enc_util"] is None
    assert v["gpu_temp"] == 41 and v["mem_temp"] == 52
    assert v["sm_clock"] == 1980 and v["mem_clock"] == 2619
    assert v["sbecc"] == 0 and v["dbecc"] == 1 and v["processes"] == 2 and v["throttle_reasons"] == 4
    assert v["power_violation"] is None  # needs two readings
    clock.now += 500_000_000
    (s2,) = b.sample()
    # 250 ms of power capping in 500 ms of wall time
    assert s2.values["power_violation"] == pytest.approx(50.0) and s2.values["thermal_violation"] == 0
    assert s2.values["pcie_rx"] == pytest.approx(21846)  # reused, not re-read
    assert calls["pcie"] == 2 and calls["procs"] == 1  # blocking calls: once a second
    assert calls["enc"] == 1  # 'not supported' is not asked again
    clock.now += 1_000_000_000
    b.sample()
    assert calls["pcie"] == 4 and calls["procs"] == 2
    b.close()
    assert calls["shutdown"] == 1


def test_nvml_not_available_without_driver() -> None:
    # The real nvidia-ml-py is installed; this machine has no NVIDIA driver.
    assert NvmlBackend.available() is False


# -- CLI backends on real subprocesses ----------------------------------------------------

HLSMI_OUT = (
    "index, uuid, name, driver_version, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
    "power.draw [W], power.max [W], temperature.aip [C], utilization.aip [%]\n"
    "0, 01P4-A, HL-325L, 1.22.1, 131072 MiB, 672 MiB, 130400 MiB, 226 W, 850 W, 36 C, 7 %\n"
    "1, 01P4-B, HL-325L, 1.22.1, 131072 MiB, 700 MiB, 130372 MiB, 230 W, 850 W, 39 C, 0 %\n"
)


def fake_tool(bindir: Path, name: str, body: str) -> Path:
    """A stand-in for a vendor CLI: a small Python script on PATH."""
    bindir.mkdir(exist_ok=True)
    p = bindir / name
    p.write_text(f"#!{sys.executable}\n{body}")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def test_hlsmi_backend_reads_its_csv(tmp_path: Path) -> None:
    exe = fake_tool(
        tmp_path / "bin", "hl-smi", f"import sys\nassert sys.argv[1] == '-Q'\nprint({HLSMI_OUT!r}, end='')\n"
    )
    b = HlSmiBackend(executable=str(exe), background=False)
    assert [(d.index, d.name, d.memory_bytes) for d in b.devices()] == [(i, "HL-325L", 131072 * 2**20) for i in (0, 1)]
    s = b.sample()
    assert [(x.device_type, x.device) for x in s] == [("hpu", 0), ("hpu", 1)]
    assert s[0].values["sm_util"] == 7 and s[1].values["power"] == 230 and s[1].values["fb_used"] == 700


def test_cnmon_backend_reads_real_capture(shared_data: Path, tmp_path: Path) -> None:
    capture = shared_data / "cambricon" / "cnmon_table_samples.txt"
    exe = fake_tool(tmp_path / "bin", "cnmon", f"print(open({str(capture)!r}).read())\n")
    b = CnmonBackend(executable=str(exe), background=False)
    names = [(d.index, d.name) for d in b.devices()]
    assert names[:2] == [(0, "MLU370-X8"), (1, "MLU370-X8")]


def test_cli_backend_that_hangs_is_dropped(tmp_path: Path) -> None:
    state = tmp_path / "calls"
    body = (
        "import os, sys, time\n"
        f"p = {str(state)!r}\n"
        "n = int(open(p).read()) if os.path.exists(p) else 0\n"
        "open(p, 'w').write(str(n + 1))\n"
        f"if n == 0:\n    print({HLSMI_OUT!r})\nelse:\n    time.sleep(60)\n"
    )
    exe = fake_tool(tmp_path / "bin", "hl-smi", body)
    b = HlSmiBackend(executable=str(exe), background=False, timeout_s=0.5, period_s=0.0)
    with pytest.raises(BackendError, match=r"did not answer within 0\.5 s"):
        b.sample()  # the second run hangs: killed at the timeout
    with pytest.raises(BackendError):
        b.sample()  # stays broken


def test_cli_backend_that_exits_drops_out_and_monitor_goes_on(tmp_path: Path) -> None:
    state = tmp_path / "calls"
    body = (
        "import os, sys\n"
        f"p = {str(state)!r}\n"
        "n = int(open(p).read()) if os.path.exists(p) else 0\n"
        "open(p, 'w').write(str(n + 1))\n"
        f"if n == 0:\n    print({HLSMI_OUT!r})\nelse:\n    sys.stderr.write('hl-smi: device lost\\n'); sys.exit(3)\n"
    )
    exe = fake_tool(tmp_path / "bin", "hl-smi", body)
    gaudi = HlSmiBackend(executable=str(exe), background=False, period_s=0.0)
    warnings: list[str] = []
    t = [0.0]
    mon = Monitor([gaudi, CpuBackend()], interval_s=0.1, clock=lambda: t[0], wait=lambda s: False, warn=warnings.append)
    ticks = list(mon.run(count=3))
    assert [sorted({s.device_type for s in tick}) for tick in ticks] == [["cpu"], ["cpu"], ["cpu"]]
    assert len(warnings) == 1 and "hl-smi" in warnings[0] and "exited with status 3: hl-smi: device lost" in warnings[0]
    assert [b.name for b in mon.backends] == ["cpu"]


def test_cli_backend_background_thread_reports_failure(tmp_path: Path) -> None:
    state = tmp_path / "calls"
    body = (
        "import os, sys\n"
        f"p = {str(state)!r}\n"
        "n = int(open(p).read()) if os.path.exists(p) else 0\n"
        "open(p, 'w').write(str(n + 1))\n"
        f"if n == 0:\n    print({HLSMI_OUT!r})\nelse:\n    sys.exit(1)\n"
    )
    exe = fake_tool(tmp_path / "bin", "hl-smi", body)
    b = HlSmiBackend(executable=str(exe), period_s=0.01)
    assert len(b.sample()) == 2  # the first reading, taken at start-up; starts the thread
    assert b._thread is not None
    b._thread.join(timeout=30)  # the thread ends when the tool fails
    with pytest.raises(BackendError, match="exited with status 1"):
        b.sample()
    b.close()


def test_available_backends_finds_tools_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tool(tmp_path / "bin", "hl-smi", f"print({HLSMI_OUT!r})\n")
    fake_tool(tmp_path / "bin", "cnmon", "import sys; sys.exit(1)\n")  # present but broken: skipped
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    found = available_backends(["hl-smi", "cnmon", "cpu"])
    try:
        assert [b.name for b in found] == ["hl-smi", "cpu"]
    finally:
        for b in found:
            b.close()
    with pytest.raises(ValueError, match="unknown device backend"):
        available_backends(["nope"])
