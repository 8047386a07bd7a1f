"""The full-screen terminal view: one panel per device, current values and sparklines.

Keys are read from the terminal in cbreak mode while the loop waits for its next
tick, so ``q`` quits at once without a thread.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import tty
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ..devices.base import METRICS, Sample
from ..render.monitor import EQUIVALENT, value_of

BLOCKS = "▁▂▃▄▅▆▇█"
HISTORY = 40


def sparkline(values: Sequence[float | None], lo: float | None = None, hi: float | None = None) -> str:
    """Unicode block sparkline; gaps (None) are spaces. ``lo``/``hi`` fix the scale."""
    nums = [v for v in values if v is not None]
    if not nums:
        return " " * len(values)
    a = min(nums) if lo is None else lo
    b = max(nums) if hi is None else hi
    span = b - a
    out = []
    for v in values:
        if v is None:
            out.append(" ")
            continue
        frac = 0.0 if span <= 0 else (min(max(v, a), b) - a) / span
        out.append(BLOCKS[min(len(BLOCKS) - 1, int(frac * (len(BLOCKS) - 1) + 0.5))])
    return "".join(out)


class LiveView:
    """rich Live screen; ``wait(seconds)`` returns True when the user pressed q."""

    def __init__(self, metrics: Sequence[str], names: dict[tuple[str, int], str]) -> None:
        from rich.console import Console

        self.metrics = list(metrics)
        self.names = names
        self.console = Console()
        self.history: dict[tuple[str, int], dict[str, deque[float | None]]] = {}
        self.latest: dict[tuple[str, int], Sample] = {}
        self._live: Any = None
        self._fd: int | None = None
        self._saved: Any = None

    def __enter__(self) -> LiveView:
        from rich.live import Live

        if sys.stdin.isatty():
            self._fd = sys.stdin.fileno()
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        self._live = Live(console=self.console, screen=True, auto_refresh=False)
        self._live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)
        if self._fd is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def update(self, samples: Sequence[Sample]) -> None:
        for s in samples:
            key = (s.device_type, s.device)
            self.latest[key] = s
            h = self.history.setdefault(key, {})
            for m in self.metrics:
                h.setdefault(m, deque(maxlen=HISTORY)).append(value_of(s, m))
        self._live.update(self.render(), refresh=True)

    def render(self) -> Any:
        from rich.columns import Columns
        from rich.panel import Panel
        from rich.table import Table

        panels = []
        for key, s in self.latest.items():
            t = Table.grid(padding=(0, 1))
            t.add_column(style="bold")
            t.add_column(justify="right")
            t.add_column(style="cyan")
            for m in self.metrics:
                v = value_of(s, m)
                if v is None and all(x is None for x in self.history[key][m]):
                    continue
                unit = METRICS[m].unit
                pct = unit == "%"
                label = METRICS[m].dmon or m
                if s.values.get(m) is None and EQUIVALENT.get(m) in s.values:
                    label = EQUIVALENT[m]  # the CPU's own name for what it shows here
                t.add_row(
                    label,
                    "-" if v is None else f"{v:,.1f} {unit}",
                    sparkline(list(self.history[key][m]), 0.0 if pct else None, 100.0 if pct else None),
                )
            title = f"{key[0]}:{key[1]} {self.names.get(key, '')}".strip()
            panels.append(Panel(t, title=title, expand=False))
        return Columns(panels) if panels else "waiting for the first sample... (q quits)"

    def wait(self, seconds: float) -> bool:
        """Wait for the next tick; True when q (or Q) was pressed."""
        if self._fd is None:
            import time

            time.sleep(seconds)
            return False
        import time

        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready and b"q" in os.read(self._fd, 32).lower():
                return True
