"""Framework operators through ``torch.profiler``, with every device activity present.

The CPU activity is always on; CUDA (and ROCm, which torch reports as CUDA), XPU, HPU
and PrivateUse1 devices (Ascend NPU via torch_npu, Cambricon MLU via torch_mlu) are
added when torch says they are available. The schedule is torch's own, driven by the
profiler's steps. Each active window is exported as a Chrome trace into the raw
folder and later imported with the Kineto importer into the same profile.

Clock alignment: torch stamps events with its own (approximately wall) clock. At the
edges of each active window this collector emits a ``record_function`` whose name
carries ``time.monotonic_ns()`` taken just before it; the finalizer reads those
markers back from the trace to map torch's clock onto the recording's origin.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .base import Collector

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

#: Prefix of the clock-sync markers (dropped from the profile on import).
SYNC_PREFIX = "aiprof::clock_sync::"


def available_activities() -> list[Any]:
    """torch.profiler activities for the CPU and every device torch can use here."""
    import torch
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and _true(xpu.is_available):
        acts.append(ProfilerActivity.XPU)
    hpu = getattr(torch, "hpu", None)
    if hpu is not None and _true(hpu.is_available):
        acts.append(ProfilerActivity.HPU)
    pu1 = torch._C._get_privateuse1_backend_name()
    mod = getattr(torch, pu1, None) if pu1 != "privateuseone" else None
    if mod is not None and _true(getattr(mod, "is_available", lambda: False)):
        acts.append(ProfilerActivity.PrivateUse1)
    return acts


def device_activities() -> list[Any]:
    """The device activities alone (kernels, copies, the runtime calls that launched
    them): what a default recording traces, without torch's CPU operator recording."""
    from torch.profiler import ProfilerActivity

    return [a for a in available_activities() if a != ProfilerActivity.CPU]


def _true(fn: Callable[[], Any]) -> bool:
    try:
        return bool(fn())
    except Exception:
        return False


class TorchOpsCollector(Collector):
    """Runs ``torch.profiler.profile`` for the recording and exports its traces."""

    name = "ops"

    def __init__(
        self,
        raw_dir: str,
        schedule: Callable[[int], Any] | None = None,
        *,
        record_shapes: bool = False,
        with_stack: bool = False,
        profile_memory: bool = False,
        process_ends: bool = False,
        activities: list[Any] | None = None,
    ) -> None:
        super().__init__()
        self.raw_dir = raw_dir
        self.wanted = activities
        """torch.profiler activities to record; None: the CPU and every device
        (:func:`available_activities`). Without the CPU activity torch records no
        ``record_function``, so no clock-sync marker either: the finalizer aligns
        such traces through the wall clock."""
        self.process_ends = process_ends
        """The recording stops only when the process ends (``aiprof record``'s): the
        stopped profiler is then left to the OS instead of freed (see stop)."""
        self.schedule = schedule
        self.options = {"record_shapes": record_shapes, "with_stack": with_stack, "profile_memory": profile_memory}
        self.traces: list[str] = []
        self.activities: list[str] = []
        self.markers = True
        """Whether clock-sync markers are recorded (only with the CPU activity)."""
        self._prof: Any = None

    def start(self) -> None:
        import inspect  # here, not at import: the default recorder imports this module into every job

        import torch.profiler as tp

        acts = available_activities() if self.wanted is None else list(self.wanted)
        self.activities = [a.name for a in acts]
        self.markers = "CPU" in self.activities
        sched = None
        if self.schedule is not None:
            ours = self.schedule

            def sched(step: int) -> tp.ProfilerAction:
                return tp.ProfilerAction[ours(step).name]

        o = self.options
        extra: dict[str, Any] = {}
        if getattr(self.schedule, "repeats", False) and "acc_events" in inspect.signature(tp.profile).parameters:
            extra["acc_events"] = True  # a repeating schedule: every window's events
        self._prof = tp.profile(
            activities=acts,
            schedule=sched,
            on_trace_ready=self._export,
            record_shapes=o["record_shapes"],
            with_stack=o["with_stack"],
            profile_memory=o["profile_memory"],
            **extra,
        )
        self._prof.start()
        self._sync()

    def _recording(self) -> bool:
        import torch.profiler as tp

        return self._prof is not None and self._prof.current_action in (
            tp.ProfilerAction.RECORD,
            tp.ProfilerAction.RECORD_AND_SAVE,
        )

    def _sync(self) -> None:
        if self.markers and self._recording():
            from torch.profiler import record_function

            with record_function(f"{SYNC_PREFIX}{time.monotonic_ns()}"):
                pass

    def _export(self, prof: Any) -> None:
        import os

        os.makedirs(self.raw_dir, exist_ok=True)
        name = f"torch_trace_{len(self.traces)}.json"
        prof.export_chrome_trace(os.path.join(self.raw_dir, name))
        self.traces.append(name)

    def on_step(self, step: int) -> None:
        if self._prof is None:
            return
        self._sync()  # the last step of a window: a marker at its end edge
        self._prof.step()
        self._sync()

    def stop(self) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        self._prof = prof
        self._sync()
        self._prof = None
        prof.stop()
        if self.process_ends:
            # Freeing the profiler's record of every op (a C++ vector of results)
            # costs the job ~0.15 s at exit on a 177k-op trace (glibc consolidating
            # its heap), a cost torch.profiler used alone does not show. The trace
            # is exported and the process is ending: one extra reference leaves the
            # memory to the OS.
            import ctypes

            ctypes.pythonapi.Py_IncRef(ctypes.py_object(prof))

    def dump(self, raw_dir: str) -> dict[str, Any]:
        return {
            "traces": list(self.traces),
            "activities": self.activities,
            "options": self.options,
            "clock_markers": self.markers,
        }
