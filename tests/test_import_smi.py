"""SMI importers on the real captures in ../shared/data and on inputs built here."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from aiprof.errors import ImportFormatError
from aiprof.importers import import_paths
from aiprof.importers.base import Importer
from aiprof.importers.nvidia.dmon import parse_dmon
from aiprof.importers.nvidia.query_csv import parse_query_csv
from aiprof.importers.smi_table import device_values, parse_tables
from aiprof.store import open_profile

MINE = ["nvidia.dmon", "nvidia.query_csv", "smi_cnmon", "smi_hlsmi", "smi_npu"]


def mine() -> list[Importer]:
    return [importlib.import_module(f"aiprof.importers.{m}").IMPORTER for m in MINE]


def as_unknown(src: Path, tmp_path: Path) -> Path:
    p = tmp_path / "unknown"
    p.write_bytes(src.read_bytes())
    return p


def detected(path: Path) -> list[str]:
    return [i.name for i in mine() if i.detect(path)]


def counters(out: Path) -> list[dict[str, object]]:
    prof = open_profile(out)
    try:
        return prof.sql("select * from counters order by ts, device_type, device, metric").to_pylist()
    finally:
        prof.close()


def value(rows: list[dict[str, object]], device: int, metric: str, nth: int = 0) -> object:
    return [r["value"] for r in rows if r["device"] == device and r["metric"] == metric][nth]


# -- dmon ------------------------------------------------------------------------------


def test_dmon_pcut_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "nvidia-smi" / "dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt"
    log = parse_dmon(src.open())
    assert len(log.rows) == 25 and log.problems == []
    first = log.rows[0]
    # -s pcut puts clocks before utilization: the values must follow the header names.
    assert list(first.values)[:6] == ["power", "gpu_temp", "mem_temp", "mem_clock", "sm_clock", "sm_util"]
    assert first.values["power"] == 365 and first.values["mem_clock"] == 12481 and first.values["sm_clock"] == 2415
    assert first.values["sm_util"] == 99 and first.values["mem_temp"] is None
    assert log.rows[7].device == 7 and log.rows[7].values["pcie_rx"] == 25966
    assert [r.sample for r in log.rows][-2:] == [2, 3]
    path = as_unknown(src, tmp_path)
    assert detected(path) == ["nvidia-dmon"]
    out, ctx = import_paths([path], tmp_path / "d.aiprof", forced="nvidia-dmon")
    rows = counters(out)
    assert len(rows) == 25 * 12  # mtemp is '-' everywhere
    assert value(rows, 5, "pcie_tx") == 2 and value(rows, 4, "power", 2) == 390
    assert {r["unit"] for r in rows if r["metric"] == "pcie_rx"} == {"MB/s"}
    # Untimed: the log's command line (`nvidia-smi dmon -s pcut -d 10`) names 10 s per sample.
    assert log.interval_s == 10.0
    assert max(r["ts"] for r in rows) == 30_000_000_000
    assert any("no timestamps; samples placed 10 s apart" in w for w in ctx.warnings)


def test_dmon_pucvmet_dt_ctrl_c_pmon_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "nvidia-smi" / "dmon_pucvmet_DT_idle.txt"
    log = parse_dmon(src.open())
    # 4 dmon lines (the ^C one still holds all 24 columns); the pmon line is not a sample.
    assert len(log.rows) == 4
    assert [r.values["pcie_tx"] for r in log.rows] == [2, 0, 2, 0]
    assert log.rows[0].ts_ns == 1786872154 * 10**9  # 2026-08-16 09:22:34 (read as UTC)
    assert log.rows[3].ts_ns - log.rows[0].ts_ns == 3 * 10**9
    r = log.rows[0].values
    assert r["sbecc"] is None and r["dbecc"] is None and r["fb_used"] == 2 and r["thermal_violation"] == 0
    assert r["mem_clock"] == 405 and r["sm_clock"] == 180 and r["dmon.ccpm"] == 0
    out, ctx = import_paths([as_unknown(src, tmp_path)], tmp_path / "d.aiprof", forced="nvidia-dmon")
    rows = counters(out)
    assert len(rows) == 4 * 18
    assert open_profile(out).metas[0]["time_origin_ns"] == 1786872154 * 10**9
    assert {r["unit"] for r in rows if r["metric"] == "pci_replays"} == {"errors"}
    assert ctx.warnings == []


def test_dmon_built_cut_line_time_only_and_order(tmp_path: Path) -> None:
    text = (
        "#Time        gpu     sm    mem   pwr\n"
        "#HH:MM:SS    Idx      %      %     W\n"
        " 23:59:59      0     10     20    30\n"
        " 23:59:59      1      -      5   100\n"
        " 00:00:00      0     11     21    31\n"
        " 00:00:00      1     12  ^C\n"
    )
    log = parse_dmon(text.splitlines())
    assert [(r.device, r.values["sm_util"]) for r in log.rows] == [(0, 10), (1, None), (0, 11)]
    assert log.rows[2].ts_ns - log.rows[0].ts_ns == 10**9  # past midnight, not a day back
    assert len(log.problems) == 1 and "cut short" in log.problems[0]
    p = tmp_path / "log.txt"
    p.write_text(text)
    out, ctx = import_paths([p], tmp_path / "x.aiprof", forced="nvidia-dmon")
    assert any("cut short" in w for w in ctx.warnings)
    assert value(counters(out), 1, "power") == 100


# -- cnmon -----------------------------------------------------------------------------


def test_cnmon_three_versions_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "cambricon" / "cnmon_table_samples.txt"
    tables = parse_tables(src.read_text())
    assert [t.title.split()[:2] for t in tables] == [["CNMON", "v5.10.22"], ["CNMON", "v4.20.11"], ["CNMON", "1.16.0"]]
    assert [len(t.devices) for t in tables] == [2, 1, 1]
    idx, name, v = device_values(tables[0].devices[1])
    assert (idx, name) == (1, "MLU370-X8")
    assert v["gpu_temp"] == 32 and v["power"] == 107 and v["power_limit"] == 250 and v["mem_total"] == 20638
    _, name, v = device_values(tables[1].devices[0])
    assert name == "MLU370-X4" and v["power"] == 30 and v["mem_total"] == 23308 and v["ecc_errors"] is None
    _, name, v = device_values(tables[2].devices[0])
    assert name == "MLU220-M2" and v["power"] == 3.70 and v["power_limit"] == 8.25 and v["fb_used"] == 967
    assert v["gpu_temp"] == 51 and v["sm_util"] == 0
    assert tables[0].ts_ns == 1699460205 * 10**9  # Wed Nov  8 16:16:45 2023
    path = as_unknown(src, tmp_path)
    assert detected(path) == ["cnmon"]
    out, _ = import_paths([path], tmp_path / "c.aiprof", forced="cnmon")
    rows = counters(out)
    assert {r["device_type"] for r in rows} == {"mlu"}
    assert sorted(r["value"] for r in rows if r["metric"] == "power") == [3.7, 30, 107, 107]


# -- hl-smi ----------------------------------------------------------------------------


def test_hlsmi_tables_and_csv_real(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "habana" / "hl-smi_samples.txt"
    tables = [t for t in parse_tables(src.read_text()) if "HL-SMI" in t.title]
    assert [len(t.devices) for t in tables] == [2, 1]
    _, name, v = device_values(tables[0].devices[1])
    assert name == "HL-225" and v["power"] == 83 and v["power_limit"] == 600 and v["dbecc"] == 2
    assert v["fb_used"] == 768 and v["mem_total"] == 98304 and v["gpu_temp"] == 22
    _, name, v = device_values(tables[1].devices[0])
    assert name == "HL-325L" and v["power"] == 228 and v["mem_total"] == 131072
    csv = parse_query_csv(src.read_text())
    assert csv.vendor == "hpu" and [r.device for r in csv.rows] == [0, 1]
    assert csv.rows[1].values["power"] == 230 and csv.rows[1].values["gpu_temp"] == 39
    assert csv.rows[0].values["power_limit"] == 850 and csv.rows[0].values["fb_used"] == 672
    path = as_unknown(src, tmp_path)
    assert detected(path) == ["hl-smi"]
    out, _ = import_paths([path], tmp_path / "h.aiprof", forced="hl-smi")
    rows = counters(out)
    assert sorted(r["value"] for r in rows if r["metric"] == "power") == [83, 88, 226, 228, 230]
    assert {r["device_type"] for r in rows} == {"hpu"}


def test_hlsmi_noheader_csv_alone_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "unknown"
    p.write_text("0, 01P4-X, HL-325L, 1.22.1, 131072 MiB, 1000 MiB, 130072 MiB, 300 W, 850 W, 40 C, 55 %\n")
    assert detected(p) == ["hl-smi"]
    out, _ = import_paths([p], tmp_path / "h.aiprof", forced="hl-smi")
    assert value(counters(out), 0, "sm_util") == 55


# -- nvidia-smi --query-gpu CSV and npu-smi (built here: no capture in shared data) ------


def test_query_csv_built(tmp_path: Path) -> None:
    p = tmp_path / "unknown"
    p.write_text(
        "timestamp, index, name, power.draw [W], utilization.gpu [%], memory.used [MiB], clocks.sm [MHz]\n"
        "2024/01/02 10:11:12.345, 0, NVIDIA A100-SXM4-40GB, 65.12 W, 3 %, 1024 MiB, 1410 MHz\n"
        "2024/01/02 10:11:12.345, 1, NVIDIA A100-SXM4-40GB, [N/A], 0 %, 2 MiB, 210 MHz\n"
        "2024/01/02 10:11:13.345, 0, NVIDIA A100-SXM4-40GB, 70 W, 90 %, 2048 MiB, 1410 MHz\n"
    )
    assert detected(p) == ["smi-query-csv"]
    out, _ = import_paths([p], tmp_path / "q.aiprof", forced="smi-query-csv")
    rows = counters(out)
    assert value(rows, 0, "power") == 65.12 and value(rows, 0, "power", 1) == 70
    assert not [r for r in rows if r["device"] == 1 and r["metric"] == "power"]
    assert [r["ts"] for r in rows if r["device"] == 0 and r["metric"] == "sm_util"] == [0, 1_000_000_000]
    assert {r["unit"] for r in rows if r["metric"] == "fb_used"} == {"MB"}


NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc2                 Version: 23.0.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.6        40                0    / 0             |
| 0                         | 0000:C1:00.0  | 17          0    / 0          3384 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 89.1        39                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3385 / 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
"""


def test_npu_smi_built(tmp_path: Path) -> None:
    tables = parse_tables(NPU_SMI)
    assert len(tables) == 1 and len(tables[0].devices) == 2
    idx, name, v = device_values(tables[0].devices[0])
    assert (idx, name) == (0, "910B3")
    assert v["power"] == 93.6 and v["gpu_temp"] == 40 and v["sm_util"] == 17
    assert v["fb_used"] == 3384 and v["mem_total"] == 65536  # HBM, not the empty DDR pair
    p = tmp_path / "unknown"
    p.write_text(NPU_SMI)
    assert detected(p) == ["npu-smi"]


def test_not_an_smi_file(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("hello\nworld\n")
    assert detected(p) == []
    with pytest.raises(ImportFormatError):
        import_paths([p], tmp_path / "x.aiprof", forced="nvidia-dmon")
    j = tmp_path / "t.json"
    j.write_text('{"traceEvents": []}')
    assert detected(j) == []


def test_a_markdown_table_that_names_a_tool_is_not_its_output(tmp_path: Path) -> None:
    # A README's Markdown table row mentioning cnmon, npu-smi or hl-smi: no boxed table.
    md = tmp_path / "README.md"
    md.write_text(
        "# data\n\n| folder | what |\n|---|---|\n| cambricon/ | CNMON tables |\n| ascend/ | npu-smi info (NPU) |\n"
        "| habana/ | HL-SMI tables |\n"
    )
    assert detected(md) == []


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("nvidia-smi/dmon_pcut_8gpu_gnosia93_slurm-on-aws.txt", "nvidia-dmon"),
        ("nvidia-smi/dmon_pucvmet_DT_idle.txt", "nvidia-dmon"),
        ("cambricon/cnmon_table_samples.txt", "cnmon"),
        ("habana/hl-smi_samples.txt", "hl-smi"),
    ],
)
def test_whole_registry_chooses_by_content(shared_data: Path, tmp_path: Path, rel: str, expected: str) -> None:
    from aiprof.importers import choose

    assert choose(as_unknown(shared_data / rel, tmp_path)).name == expected


@pytest.mark.parametrize(
    ("comment", "interval"),
    [
        ("# nvidia-smi dmon -s pu -d 10", 10.0),
        ("# $ nvidia-smi dmon --delay=5 -s p", 5.0),
        ("# nvidia-smi dmon -i 0 --delay 2 -c 100", 2.0),
        ("# nvidia-smi dmon -d3", 3.0),
        ("# nvidia-smi dmon -s p", None),  # the default: nothing named
        ("# nvidia-smi pmon -d 10", None),  # not this log's command
        ("# nvidia-smi dmon -d 0", None),
    ],
)
def test_dmon_interval_from_its_command_line(comment: str, interval: float | None) -> None:
    log = parse_dmon([comment + "\n", "# gpu pwr\n", "# Idx W\n", "    0  100\n"])
    assert log.interval_s == interval
    assert len(log.rows) == 1
