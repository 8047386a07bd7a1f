"""The monitor's sampling loop: fixed-rate ticks over several backends.

A backend that raises is dropped with one warning and the loop goes on with the
others (profiling, and monitoring, must never stop for one broken vendor tool). Time
and waiting are injectable so tests drive the loop without sleeping.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..devices.base import DeviceBackend, DeviceInfo, Sample
from ..errors import AiprofError

log = logging.getLogger("aiprof.monitor")


@dataclass(frozen=True)
class Selector:
    """One ``-i`` item: a device type, an index, or both (``cuda:1``)."""

    device_type: str | None
    index: int | None

    def matches(self, device_type: str, index: int) -> bool:
        return (self.device_type in (None, device_type)) and (self.index in (None, index))


def parse_selectors(text: str | None) -> list[Selector]:
    """``-i`` value: comma-separated ``0``, ``cuda``, ``cuda:0`` items (dmon takes indices)."""
    if not text:
        return []
    # Imported here: the store package pulls in DuckDB, which a plain monitor never needs.
    from ..store.schema import DEVICE_TYPES

    out = []
    for item in text.split(","):
        item = item.strip().lower()
        dtype, _, idx = item.partition(":") if ":" in item else (("", "", item) if item.isdigit() else (item, "", ""))
        if dtype and dtype not in DEVICE_TYPES:
            raise AiprofError(f"-i {text}: unknown device type {dtype!r} (known: {', '.join(DEVICE_TYPES)})")
        if idx and not idx.isdigit():
            raise AiprofError(f"-i {text}: {idx!r} is not a device index")
        if not dtype and not idx:
            raise AiprofError(f"-i {text}: empty item")
        out.append(Selector(dtype or None, int(idx) if idx else None))
    return out


class Monitor:
    """Samples every backend once per tick and yields the (selected) samples."""

    def __init__(
        self,
        backends: list[DeviceBackend],
        *,
        interval_s: float,
        selectors: list[Selector] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        if interval_s <= 0:
            raise AiprofError(f"interval must be above 0 s, got {interval_s:g}")
        self.backends = list(backends)
        self.interval_s = interval_s
        self.selectors = selectors or []
        self._clock = clock
        self._wait = wait or _sleep
        self._warn = warn
        self.dropped: list[tuple[str, str]] = []
        """(backend name, why) of each backend dropped on the way."""

    def devices(self) -> list[DeviceInfo]:
        """Devices of the remaining backends that the selectors keep."""
        out: list[DeviceInfo] = []
        for b in self.backends:
            try:
                out.extend(d for d in b.devices() if self._keep(d.device_type, d.index))
            except Exception as e:
                self._drop(b, e)
        return out

    def _keep(self, device_type: str, index: int) -> bool:
        return not self.selectors or any(s.matches(device_type, index) for s in self.selectors)

    def _drop(self, b: DeviceBackend, e: BaseException) -> None:
        if b not in self.backends:
            return
        self.backends.remove(b)
        why = str(e) or type(e).__name__
        self.dropped.append((b.name, why))
        self._warn(f"device backend {b.name} stopped ({why}); going on without it")
        try:
            b.close()
        except Exception:
            pass

    def tick(self) -> list[Sample]:
        """One reading of every backend; broken backends are dropped."""
        out: list[Sample] = []
        for b in list(self.backends):
            try:
                samples = b.sample()
            except Exception as e:
                self._drop(b, e)
                continue
            out.extend(s for s in samples if self._keep(s.device_type, s.device))
        return out

    def run(self, count: int | None = None) -> Iterator[list[Sample]]:
        """Ticks at a fixed rate (no drift), ``count`` times or until stopped.

        Stops early when every backend is gone, or when ``wait`` returns True (the
        live view's ``q``).
        """
        start = self._clock()
        k = 0
        while count is None or k < count:
            if not self.backends:
                raise AiprofError("no device backend left to read")
            yield self.tick()
            k += 1
            if count is not None and k >= count:
                break
            delay = start + k * self.interval_s - self._clock()
            if delay < 0:
                # Fell behind (a slow backend): skip the missed ticks instead of bursting.
                k += int(-delay // self.interval_s)
                delay = start + k * self.interval_s - self._clock()
            if self._wait(max(0.0, delay)):
                break

    def close(self) -> None:
        for b in self.backends:
            try:
                b.close()
            except Exception:
                pass


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False
