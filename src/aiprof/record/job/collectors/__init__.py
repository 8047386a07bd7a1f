"""Recording collectors: host (Python stacks, framework ops, system metrics) and device."""

from .base import Collector

__all__ = ["Collector"]
