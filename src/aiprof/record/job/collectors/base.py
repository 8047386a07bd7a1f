"""What every recording collector is: start, stop, follow the schedule, dump raw data.

A collector runs inside the user's process. It must stay cheap, never raise into the
user's code, and keep what it gathered in plain Python lists until the run stops; the
controller then dumps that raw data (marshal, no pyarrow in the user's process) and
the finalizer turns it into store tables, possibly in another process.
"""

from __future__ import annotations

import abc
import threading

from ..._log import log

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any, ClassVar

#: Code of aiprof's own callbacks that run on the job's threads -> the frame the stack
#: sampler shows instead. The GC callback is the first Python code after a collection,
#: so the samples that waited out a long pause land in it: they are the collector's
#: time, not aiprof's.
SHOWN_AS: dict[Any, Any] = {}


def _blank() -> None:
    """The code that :func:`show_as` relabels (``compile`` would cost the job 1 ms the
    first time: the compiler's start)."""


def show_as(code: Any, label: str) -> None:
    """Have the stack sampler show frames of ``code`` as ``label`` (file ``<aiprof>``)."""
    shown = _blank.__code__.replace(co_name=label, co_filename="<aiprof>")
    if hasattr(shown, "co_qualname"):  # Python >= 3.11
        qualname: dict[str, Any] = {"co_qualname": label}
        shown = shown.replace(**qualname)
    SHOWN_AS[code] = shown


class Collector(abc.ABC):
    """One source of data during a recording (Python stacks, ops, system metrics...)."""

    name: ClassVar[str] = "collector"
    """Key of this collector's raw data and of its finalizer (see finalizer.py)."""

    checkpoint: ClassVar[bool] = False
    """True when ``dump`` may run while collecting (from another thread), so the
    controller's periodic checkpoints include this collector's data."""

    def __init__(self) -> None:
        self.failed: str | None = None
        """Why this collector stopped early (it logged one warning), else None."""
        self.own_threads: set[int] = set()
        """Thread idents of aiprof itself, shared by all collectors (the sampler skips them)."""

    def start(self) -> None:  # noqa: B027 - optional hook
        """Begin collecting (called once per recording)."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Stop collecting; must be idempotent and safe after a failure."""

    def set_recording(self, on: bool) -> None:  # noqa: B027 - optional hook
        """The schedule entered (True) or left (False) an active window."""

    def on_step(self, step: int) -> None:  # noqa: B027 - optional hook
        """Step ``step`` just began (the previous one ended)."""

    @abc.abstractmethod
    def dump(self, raw_dir: str) -> dict[str, Any]:
        """This collector's raw data, builtin types only (marshal); big files may go into ``raw_dir``."""


class Clock:
    """The time a :class:`PollingThread` keeps: ``time.perf_counter`` and a wait on its
    stop event. Tests give a fake one that they advance by hand."""

    def now(self) -> float:
        import time

        return time.perf_counter()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Sleep ``seconds`` or until ``stop`` is set; whether it was set."""
        return stop.wait(seconds)


REAL_CLOCK = Clock()


class PollingThread:
    """A daemon thread calling ``tick()`` every ``interval`` s until stopped.

    A tick that raises ends the thread and reports once through ``on_error``: a
    collector that fails stops, the job runs on.
    """

    def __init__(
        self, name: str, interval: float, tick: Any, on_error: Any, own: set[int], clock: Clock = REAL_CLOCK
    ) -> None:
        self._interval = interval
        self._tick = tick
        self._on_error = on_error
        self._own = own
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        self._own.add(threading.get_ident())
        interval = self._interval
        clock = self._clock
        nxt = clock.now()
        try:
            while True:
                nxt += interval
                delay = nxt - clock.now()
                if delay < 0:
                    # Fell behind (a long GIL hold): skip the lost ticks, never burst.
                    nxt = clock.now()
                    delay = 0.0
                if clock.wait(self._stop, delay):
                    return
                self._tick()
        except Exception as e:
            self._on_error(e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def fail(collector: Collector, err: BaseException, where: str) -> None:
    """Mark ``collector`` failed and log one warning (only the first failure is told)."""
    if collector.failed is not None:
        return
    collector.failed = f"{where}: {type(err).__name__}: {err}"
    log.warning("collector %s failed (%s); it stops, the job runs on", collector.name, collector.failed)
