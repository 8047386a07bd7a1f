"""Backends that read a vendor CLI (npu-smi, cnmon, hl-smi) instead of a library.

A CLI call takes tens to hundreds of milliseconds, so it never runs in the caller's
sampling loop: a background thread runs the tool at most once a second and
:meth:`CliBackend.sample` returns the latest parsed reading at once. The tool runs
with a timeout; when it hangs, exits with an error or stops printing devices, the
backend is broken from then on and ``sample()`` raises :class:`BackendError`, so the
monitor or recorder drops it (with one warning) and goes on with the others.
"""

from __future__ import annotations

import abc
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import AiprofError
from .base import DeviceBackend, DeviceInfo, Sample

PERIOD_S = 1.0
TIMEOUT_S = 5.0


class BackendError(AiprofError):
    """A device backend stopped working (its tool vanished, hung or failed)."""


class CliBackend(DeviceBackend):
    """A backend that runs ``tool args...`` and parses what it prints."""

    tool: str = ""
    """Executable name looked up on PATH."""
    args: Sequence[str] = ()

    def __init__(
        self,
        *,
        executable: str | None = None,
        timeout_s: float = TIMEOUT_S,
        period_s: float = PERIOD_S,
        background: bool = True,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        exe = executable or shutil.which(self.tool)
        if exe is None:
            raise BackendError(f"{self.tool} not found on PATH")
        self.executable = exe
        self.timeout_s = timeout_s
        self.period_s = period_s
        self._background = background
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BackendError | None = None
        self._readings: list[tuple[DeviceInfo, dict[str, float | None]]] = []
        self._read_at = 0
        self.refresh()  # fail at start-up, in the caller, when the tool does not work at all

    @classmethod
    def available(cls) -> bool:
        return shutil.which(cls.tool) is not None

    @abc.abstractmethod
    def parse(self, text: str) -> list[tuple[DeviceInfo, dict[str, float | None]]]:
        """Devices and their metric values from one run of the tool's output."""

    def run_tool(self) -> str:
        """Run the tool once (with the timeout) and return its stdout."""
        try:
            done = subprocess.run(
                [self.executable, *self.args],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env={**os.environ, "LC_ALL": "C"},
            )
        except subprocess.TimeoutExpired:
            raise BackendError(f"{self.tool} did not answer within {self.timeout_s:g} s") from None
        except OSError as e:
            raise BackendError(f"{self.tool} cannot run: {e.strerror}") from None
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [""])[0][:200]
            raise BackendError(f"{self.tool} exited with status {done.returncode}" + (f": {why}" if why else ""))
        return done.stdout

    def refresh(self) -> None:
        """Read the tool now (blocking). Raises BackendError, and stays broken, on failure."""
        try:
            readings = self.parse(self.run_tool())
            if not readings:
                raise BackendError(f"{self.tool} printed no device")
        except BackendError as e:
            with self._lock:
                self._error = e
            raise
        with self._lock:
            self._readings, self._read_at = readings, self._clock()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.refresh()
            except BackendError:
                return

    def devices(self) -> list[DeviceInfo]:
        with self._lock:
            return [d for d, _ in self._readings]

    def sample(self) -> list[Sample]:
        """The latest reading of each device, timed when the tool printed it."""
        if self._background and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"aiprof-{self.tool}", daemon=True)
            self._thread.start()
        elif not self._background and self._clock() - self._read_at >= self.period_s * 1e9:
            self.refresh()
        with self._lock:
            if self._error is not None:
                raise self._error
            return [Sample(d.device_type, d.index, self._read_at, dict(v)) for d, v in self._readings]

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
