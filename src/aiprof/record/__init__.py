"""Recording: the Profiler API, the controller, and the collectors it runs.

See api.py for :class:`Profiler`, :func:`annotate` and :func:`mark_step`;
schedule.py for :func:`schedule`; bootstrap.py for recording unmodified scripts.
"""

from .api import Profiler, active, annotate, mark_step
from .finalize import RecordSummary, finalize
from .schedule import ProfilerAction, schedule

__all__ = ["Profiler", "ProfilerAction", "RecordSummary", "active", "annotate", "finalize", "mark_step", "schedule"]
