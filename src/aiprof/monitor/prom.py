"""``--serve HOST:PORT``: the latest values in Prometheus text format at /metrics.

Names follow OpenTelemetry's hardware conventions where one exists (``hw.gpu.*``,
``hw.power``, ``hw.temperature``, ``system.cpu.*``) translated the Prometheus way
(dots to underscores, unit suffix); others are ``aiprof_<metric>_<unit>``. Every
series carries ``device_type``, ``device`` and ``name`` labels.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ..devices.base import DeviceInfo, Sample, metric_unit
from ..errors import AiprofError

_MIB = float(1 << 20)

#: metric -> (Prometheus name, scale, extra labels, help)
OTEL: dict[str, tuple[str, float, dict[str, str], str]] = {
    "sm_util": ("hw_gpu_utilization_ratio", 0.01, {"hw_gpu_task": "general"}, "Compute utilization (0..1)."),
    "enc_util": ("hw_gpu_utilization_ratio", 0.01, {"hw_gpu_task": "encoder"}, ""),
    "dec_util": ("hw_gpu_utilization_ratio", 0.01, {"hw_gpu_task": "decoder"}, ""),
    "mem_util": ("hw_gpu_memory_utilization_ratio", 0.01, {}, "Memory controller utilization (0..1)."),
    "fb_used": ("hw_gpu_memory_usage_bytes", _MIB, {}, "Device memory in use."),
    "mem_total": ("hw_gpu_memory_limit_bytes", _MIB, {}, "Device memory size."),
    "power": ("hw_power_watts", 1.0, {}, "Power draw."),
    "gpu_temp": ("hw_temperature_celsius", 1.0, {"sensor": "gpu"}, "Temperature."),
    "mem_temp": ("hw_temperature_celsius", 1.0, {"sensor": "memory"}, ""),
    "cpu_temp": ("hw_temperature_celsius", 1.0, {"sensor": "cpu"}, ""),
    "pcie_rx": ("hw_gpu_io_rate_bytes_per_second", 1e6, {"direction": "receive"}, "PCIe throughput."),
    "pcie_tx": ("hw_gpu_io_rate_bytes_per_second", 1e6, {"direction": "transmit"}, ""),
    "cpu_util": ("system_cpu_utilization_ratio", 0.01, {}, "CPU utilization (0..1)."),
    "cpu_freq": ("system_cpu_frequency_hertz", 1e6, {}, "CPU frequency."),
    "mem_used": ("system_memory_usage_bytes", _MIB, {}, "Host memory in use."),
}
_UNIT_SUFFIX = {"%": "percent", "MHz": "mhz", "W": "watts", "C": "celsius", "MB": "mebibytes", "MB/s": "mb_per_second"}


def _number(x: float) -> str:
    """Shortest text of ``x`` after dropping float noise from scaling (97 * 0.01)."""
    x = float(f"{x:.12g}")
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_name(metric: str) -> tuple[str, float, dict[str, str]]:
    """(series name, scale, extra labels) of a metric; ``cpu_util.core3`` -> cpu label 3."""
    base, _, detail = metric.partition(".")
    extra: dict[str, str] = {}
    if detail.startswith("core") and detail[4:].isdigit():
        extra["cpu"] = detail[4:]
    elif detail:
        base = metric
    if base in OTEL:
        name, scale, labels, _ = OTEL[base]
        return name, scale, {**labels, **extra}
    unit = metric_unit(base) or ""
    suffix = _UNIT_SUFFIX.get(unit, re.sub(r"[^a-z0-9]+", "_", unit.lower()).strip("_"))
    name = "aiprof_" + re.sub(r"[^a-zA-Z0-9_]", "_", base) + (f"_{suffix}" if suffix else "")
    return name, 1.0, extra


def exposition(samples: Sequence[Sample], names: dict[tuple[str, int], str] | None = None) -> str:
    """Prometheus text exposition (format 0.0.4) of the latest samples."""
    series: dict[str, list[str]] = {}
    for s in samples:
        for metric, v in s.values.items():
            if v is None:
                continue
            name, scale, extra = prometheus_name(metric)
            if s.device_type == "cpu" and name.startswith("hw_gpu_memory_"):
                name = name.replace("hw_gpu_memory_", "system_memory_")  # host RAM is not GPU memory
            labels = {"device_type": s.device_type, "device": str(s.device)}
            dname = (names or {}).get((s.device_type, s.device))
            if dname:
                labels["name"] = dname
            labels.update(extra)
            lab = ",".join(f'{k}="{_escape(val)}"' for k, val in labels.items())
            series.setdefault(name, []).append(f"{name}{{{lab}}} {_number(v * scale)}")
    lines: list[str] = []
    for name, rows in series.items():
        helps = [h for n, _, _, h in OTEL.values() if n == name and h]
        if helps:
            lines.append(f"# HELP {name} {helps[0]}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(rows)
    return "\n".join(lines) + "\n"


class MetricsServer:
    """An HTTP server thread answering GET /metrics with the latest samples."""

    def __init__(self, host: str, port: int, devices: Sequence[DeviceInfo] = ()) -> None:
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, int], Sample] = {}
        self._names = {(d.device_type, d.index): d.name for d in devices}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/metrics/"):
                    self.send_error(404, "only /metrics is served")
                    return
                body = server.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        try:
            self.httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise AiprofError(f"--serve {host}:{port}: cannot listen ({e.strerror})") from None
        self.httpd.daemon_threads = True
        self.host: str = host
        self.port: int = int(self.httpd.server_address[1])
        """The bound port (the one asked for, or the one chosen for port 0)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="aiprof-metrics", daemon=True)
        self._thread.start()

    def update(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            for s in samples:
                self._latest[(s.device_type, s.device)] = s

    def render(self) -> str:
        with self._lock:
            samples = list(self._latest.values())
        return exposition(samples, self._names)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (host 127.0.0.1) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise AiprofError(f"--serve {text!r}: expected HOST:PORT with a port number")
    return host, int(port)
