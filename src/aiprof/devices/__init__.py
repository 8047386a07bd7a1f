"""Device telemetry backends behind one interface (see base.py)."""

from .base import METRICS, DeviceBackend, DeviceInfo, Metric, Sample

__all__ = ["METRICS", "DeviceBackend", "DeviceInfo", "Metric", "Sample"]
