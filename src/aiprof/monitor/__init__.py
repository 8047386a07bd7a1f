"""``aiprof monitor``: the sampling loop, its renderers, recording, Prometheus export."""

from .loop import Monitor, Selector, parse_selectors

__all__ = ["Monitor", "Selector", "parse_selectors"]
