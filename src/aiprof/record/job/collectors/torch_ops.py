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

A job that starts its own ``torch.profiler`` (or ``torch.autograd.profiler.profile``)
while this one runs: torch runs one profiler per process, and the job's start ends this
one's session (its stop then found none, and exporting it crashed the job: SIGSEGV). The
collector sees the job's start (``torch.autograd.profiler``'s ``_prepare_profiler`` and
``_enable_profiler``, which every start calls), stops and exports its own window first, and records no more: the
job's profiler runs as it would alone, and the collector says where its operators end.
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
        self._own = False
        """Set while this collector's own profiler starts or steps."""
        self._hooks: list[tuple[Any, str, Any]] = []
        """(torch.autograd.profiler, name, its own function) of each call watched."""
        self._ended: Any = None
        """This collector's profiler once the job's own took over (kept, never freed)."""

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
        self._own = True
        try:
            self._prof.start()
        finally:
            self._own = False
        self._watch()
        self._sync()

    def _watch(self) -> None:
        """Notice the job starting a profiler of its own (module doc): every start,
        torch.profiler's and the autograd profiler's, prepares the session (which ends
        any other) and then enables it, both through these functions of
        torch.autograd.profiler."""
        try:
            import torch.autograd.profiler as ap
        except ImportError:
            return
        for name in ("_prepare_profiler", "_enable_profiler"):
            plain = getattr(ap, name, None)
            if plain is None:
                continue  # a torch without it: the job's profiler is not seen there

            def watched(*args: Any, _plain: Any = plain, **kwargs: Any) -> Any:
                if not self._own and self._prof is not None:
                    self._taken_over()
                return _plain(*args, **kwargs)

            setattr(ap, name, watched)
            self._hooks.append((ap, name, plain))

    def _unwatch(self) -> None:
        for ap, name, plain in self._hooks:
            setattr(ap, name, plain)
        self._hooks.clear()

    def _taken_over(self) -> None:
        """The job starts its own profiler: export this one's window, record no more."""
        import logging

        prof, self._ended = self._prof, self._prof
        if self._recording():
            self._sync()
            self._own = True
            try:
                prof.stop()
            except Exception as e:  # the job's profiler must start whatever happens here
                logging.getLogger("aiprof.record").debug("stopping the ops profiler: %s", e)
            finally:
                self._own = False
        self._prof = None
        self.failed = (
            "the job started its own torch.profiler, and torch runs one per process: aiprof's "
            "operators end there (import the job's own trace with aiprof import for the rest)"
        )
        logging.getLogger("aiprof.record").warning("collector ops stops: %s", self.failed)

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
        self._own = True
        try:
            self._prof.step()
        finally:
            self._own = False
        self._sync()

    def stop(self) -> None:
        self._unwatch()
        prof, self._prof = self._prof, None
        if prof is None:
            return
        self._prof = prof
        self._sync()
        self._prof = None
        self._own = True
        try:
            prof.stop()
        finally:
            self._own = False
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
