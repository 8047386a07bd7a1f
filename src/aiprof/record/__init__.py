"""Recording: the Profiler API, the controller, and the collectors it runs.

See api.py for :class:`Profiler`, :func:`annotate` and :func:`mark_step`;
schedule.py for :func:`schedule`; bootstrap.py for recording unmodified scripts;
finalizer.py for :func:`finalize`.
"""

from .job.api import Profiler, active, annotate, mark_step
from .job.schedule import ProfilerAction, schedule

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job

if TYPE_CHECKING:
    from .finalizer import RecordSummary, finalize
else:

    def __getattr__(name: str) -> object:
        # Finalizing (msgspec, dataclasses) is not imported into every recorded job.
        if name in ("RecordSummary", "finalize"):
            from . import finalizer

            return getattr(finalizer, name)
        raise AttributeError(f"module 'aiprof.record' has no attribute {name!r}")


__all__ = ["Profiler", "ProfilerAction", "RecordSummary", "active", "annotate", "finalize", "mark_step", "schedule"]
