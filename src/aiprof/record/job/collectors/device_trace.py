"""What the device ran, by default: kernels, copies, memsets and the runtime launches.

Nsight Systems traces CUDA by default; a default ``aiprof record`` does the same
through torch.profiler with the device activities only (no CPU operator recording,
no shapes, stacks or memory: that is ``--ops``). Nothing starts on a machine where
torch sees no accelerator, and nothing is imported into the job that the job does not
import itself: when the recording starts before the script imports torch (the usual
case under ``aiprof record``), a one-shot import hook arms the collector right after
``import torch`` has finished.

The schedule is honoured: the steps seen before torch was imported are replayed into
torch.profiler's step count, so its windows fall on the same steps as every other
collector's. The raw data has the ``ops`` collector's shape (the finalizer imports it
the same way) plus ``device_trace``, which says what was captured and why not. It is
kept under this collector's own name, ``device_trace``: ``ops`` (the CPU operators) is
listed in a recording only when ``--ops`` asked for it.
"""

from __future__ import annotations

import sys
import threading

from .base import Collector, fail

TYPE_CHECKING = False  # typing's own constant would import typing into every job
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable, Sequence
    from types import ModuleType
    from typing import Any

    from .torch_ops import TorchOpsCollector


class _AfterImport:
    """Calls ``callback`` once, right after module ``name`` has been executed.

    A meta path finder by its ``find_spec`` alone: subclassing importlib.abc's would
    import importlib.resources, tempfile and shutil into every recorded job, and
    importlib.util's find_spec contextlib and more; the other finders are asked in turn.
    """

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        self.remove()
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        callback = self.callback

        def exec_module(module: ModuleType) -> None:
            original(module)
            callback()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class DeviceTraceCollector(Collector):
    """torch.profiler with the device activities only, armed once torch is imported."""

    name = "device_trace"

    def __init__(
        self, raw_dir: str, schedule: Callable[[int], Any] | None = None, *, process_ends: bool = False
    ) -> None:
        super().__init__()
        self.raw_dir = raw_dir
        self.schedule = schedule
        self.process_ends = process_ends
        self.inner: TorchOpsCollector | None = None
        self.status = "torch was never imported"
        """What was captured, or why nothing was (in the raw data, then profile.json)."""
        self._hook: _AfterImport | None = None
        self._steps_seen = 0
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> None:
        if "torch" in sys.modules:
            self._arm()
            return
        self._hook = _AfterImport("torch", self._arm)
        sys.meta_path.insert(0, self._hook)

    def _arm(self) -> None:
        # Runs in the thread that imported torch; never raises into the job.
        with self._lock:
            if self._stopped or self.inner is not None:
                return
            try:
                from .torch_ops import TorchOpsCollector, device_activities

                acts = device_activities()
                if not acts:
                    self.status = "no accelerator that torch can trace"
                    return
                inner = TorchOpsCollector(self.raw_dir, self.schedule, process_ends=self.process_ends, activities=acts)
                inner.own_threads = self.own_threads
                inner.start()
                for _ in range(self._steps_seen):
                    inner.on_step(0)
                self.inner = inner
                self.status = "captured: " + ", ".join(inner.activities)
            except Exception as e:
                fail(self, e, "start")
                self.status = f"failed: {type(e).__name__}: {e}"

    def on_step(self, step: int) -> None:
        inner = self.inner
        if inner is not None:
            inner.on_step(step)
        else:
            self._steps_seen += 1

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            inner = self.inner
        if inner is not None:
            try:
                inner.stop()
            except Exception as e:
                fail(self, e, "stop")
            if inner.failed and self.failed is None:
                # The job's own torch.profiler took the device trace over (torch_ops).
                self.failed = inner.failed

    def dump(self, raw_dir: str) -> dict[str, Any]:
        data: dict[str, Any] = (
            self.inner.dump(raw_dir) if self.inner is not None else {"traces": [], "activities": [], "options": {}}
        )
        data["device_trace"] = self.status
        return data
