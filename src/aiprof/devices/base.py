"""The one device-collector interface: live telemetry from any accelerator (or the CPU).

``aiprof monitor`` and ``aiprof record`` both use it. A backend wraps one vendor's
library or CLI (NVML, amdsmi, npu-smi, cnmon, hl-smi, psutil) and turns its readings
into :class:`Sample` rows with the metric names of :data:`METRICS`, so every vendor
fills the same counters table columns.

Conventions shared by every vendor: ``gpu_temp`` is the accelerator chip's temperature
and ``sm_util`` its main compute utilization (NVIDIA SM, Ascend AI Core, MLU, Gaudi
AIP); ``fb_used``/``mem_total`` are device memory used/size; memory is in MiB labelled
``MB`` as dmon prints it; ``None`` is a value the device cannot give (dmon's ``-``).
``energy`` is a cumulative counter (J, from an arbitrary zero: NVML's total energy,
RAPL's package energy), read by differences. Names ``base.detail`` (``cpu_util.core3``) take the unit of ``base`` (:func:`metric_unit`).

Backends must be cheap to sample at 10 Hz; anything slow (process lists, PCIe
throughput, a CLI call) is read at most once a second and cached.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Metric:
    """One telemetry metric: its counters-table name, unit, and dmon column."""

    name: str
    unit: str
    dmon: str | None = None
    """Column name in nvidia-smi dmon output, when dmon has it."""
    group: str | None = None
    """dmon -s group letter (p, u, c, v, m, e, t)."""


#: Canonical metric names (the ``metric`` column of the counters table), in dmon order.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("power", "W", "pwr", "p"),
        Metric("gpu_temp", "C", "gtemp", "p"),
        Metric("mem_temp", "C", "mtemp", "p"),
        Metric("sm_util", "%", "sm", "u"),
        Metric("mem_util", "%", "mem", "u"),
        Metric("enc_util", "%", "enc", "u"),
        Metric("dec_util", "%", "dec", "u"),
        Metric("mem_clock", "MHz", "mclk", "c"),
        Metric("sm_clock", "MHz", "pclk", "c"),
        Metric("power_violation", "%", "pviol", "v"),
        Metric("thermal_violation", "bool", "tviol", "v"),
        Metric("fb_used", "MB", "fb", "m"),
        Metric("bar1_used", "MB", "bar1", "m"),
        Metric("sbecc", "errors", "sbecc", "e"),
        Metric("dbecc", "errors", "dbecc", "e"),
        Metric("pci_replays", "errors", "pci", "e"),
        Metric("pcie_rx", "MB/s", "rxpci", "t"),
        Metric("pcie_tx", "MB/s", "txpci", "t"),
        Metric("mem_used", "MB"),
        Metric("mem_total", "MB"),
        Metric("cpu_util", "%"),
        Metric("cpu_freq", "MHz"),
        Metric("throttle_reasons", "bitmask"),
        Metric("cpu_temp", "C"),
        Metric("power_limit", "W"),
        Metric("energy", "J"),
        Metric("fan_speed", "%"),
        Metric("ecc_errors", "errors"),
        Metric("processes", "count"),
    ]
}


def metric_unit(name: str) -> str | None:
    """Unit of a metric name; ``base.detail`` names (``cpu_util.core3``) take the base's unit."""
    m = METRICS.get(name) or METRICS.get(name.partition(".")[0])
    return m.unit if m else None


@dataclass(frozen=True)
class DeviceInfo:
    """A device a backend can read."""

    device_type: str
    """One of the store's DEVICE_TYPES (cuda, rocm, npu, mlu, hpu, ipu, xpu, cpu)."""
    index: int
    name: str
    vendor: str
    memory_bytes: int | None = None


@dataclass
class Sample:
    """One reading of one device at one instant."""

    device_type: str
    device: int
    ts_ns: int
    """time.time_ns() when the reading was taken."""
    values: dict[str, float | None] = field(default_factory=dict)
    """Metric name (a key of METRICS or a vendor-specific extra) -> value; None = N/A."""


class DeviceBackend(abc.ABC):
    """A source of device telemetry. Subclasses: one per vendor library or CLI."""

    name: str = "base"
    device_type: str = "cpu"

    @classmethod
    @abc.abstractmethod
    def available(cls) -> bool:
        """True when this machine has the library/CLI and at least one device."""

    @abc.abstractmethod
    def devices(self) -> list[DeviceInfo]:
        """The devices this backend reads."""

    @abc.abstractmethod
    def sample(self) -> list[Sample]:
        """One reading per device. Raises on a broken backend (the caller drops it)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release handles (NVML shutdown, child processes)."""
