"""The recording API: :class:`Profiler`, :func:`annotate`, :func:`mark_step`.

torch.profiler users will recognise it (a context manager, ``step()``, a
``schedule``), MindSpore users too (``Profiler(start_profile=False)``, ``start()`` at
one step, ``stop()`` at another, then ``analyse()``). One profiler runs at a time per
process; :func:`active` returns it.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

from ...errors import AiprofError
from .._log import log
from ..environment import ENV_STACKS
from ..rawfile import DISK_FULL_ERRNOS
from . import anchors, collectives
from .collectors.base import Collector
from .controller import Controller, claim_default_output, profile_location, rank_from_env
from .schedule import Schedule

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, ClassVar, TypeVar

    # Finalizing (msgspec, then the store) is only needed at stop: not imported into
    # every recorded job at its start.
    from ..finalizer import RecordSummary

HOST_COLLECTORS = ("python", "system", "ops")

_active: Profiler | None = None
_lock = threading.Lock()

if TYPE_CHECKING:
    F = TypeVar("F", bound=Callable[..., Any])


def active() -> Profiler | None:
    """The profiler recording in this process, or None."""
    return _active


class Profiler:
    """Records this process: Python stacks, system and device telemetry, steps, and
    (with the ``ops`` host collector) framework operators through torch.profiler.

    Args:
        output: folder of the profiles (``OUT/rank<R>.aiprof``), or a name ending in
            ``.aiprof`` for exactly one profile; default ``aiprof-<date>-<time>``
            (``-2``, ``-3``... after it when that exists: a folder of its own, created
            here; under a launcher, the ranks share the one of their second).
        force: replace the recording already at ``output``. Without it, an output that
            holds an earlier recording (profiles aiprof wrote, or the raw folders of one
            that was killed) is refused here, with :class:`~aiprof.errors.AiprofError`,
            before anything is recorded, as ``aiprof record -o`` refuses it
            (:func:`aiprof.record.launcher.output_guard.check_earlier`); profiles aiprof
            record did not write (an import) are refused even with it. Under a launcher
            (``RANK`` set), each rank checks and replaces its own ``rank<R>.aiprof``
            only: the job's ranks record beside each other at once.
        schedule: :func:`aiprof.schedule` (torch.profiler's semantics); None records
            every step.
        host: host collectors among ``"python"``, ``"system"``, ``"ops"``; None means
            python + system, plus ops when torch is already imported.
        device: poll device telemetry (True: every backend present; a list: those
            backend names; False: none).
        start_profile: start on ``__enter__``; False leaves starting to ``start()``
            (the MindSpore style).
        on_trace_ready: called with this profiler once its profile is written.
        rate: Python sampling rate in Hz. Under ``aiprof record`` (which names its
            socket in ``AIPROF_RECORD_STACKS``) the stacks are read from its process
            instead of by a thread here, when this interpreter's layout verifies
            (collectors.python_outside); :attr:`python_sampler` says which.
        record_shapes, with_stack, profile_memory: passed to torch.profiler (ops).
        device_trace: without the ``ops`` collector, trace what the accelerator ran
            (kernels, copies, memsets, runtime launches) through torch.profiler's device
            activities alone, once the job imports torch and torch sees a device
            (collectors.device_trace); nothing happens on a machine without one.
        collectors: extra :class:`~aiprof.record.job.collectors.base.Collector` objects.
        defer: only dump raw data at stop; someone else (``aiprof record``) finalizes.
        telemetry_outside: system metrics and device telemetry are polled by another
            process (``aiprof record`` polls its job), so this one keeps only the GC
            listener of the ``system`` collector: no polling thread in the job.
        batch_size: samples per step, kept in profile.json so the energy figures give
            joules per sample (``annotate(..., samples=N)`` counts them per step instead).
    """

    _output_names: ClassVar[tuple[str, str]] = ("output", "force=True")
    """How a refused output's message names the output and force (``%%aiprof``'s
    profiler: ``-o`` and ``--force``)."""

    def __init__(
        self,
        output: str | os.PathLike[str] | None = None,
        *,
        schedule: Schedule | None = None,
        host: Iterable[str] | None = None,
        device: bool | Sequence[str] = True,
        start_profile: bool = True,
        on_trace_ready: Callable[[Profiler], Any] | None = None,
        rate: float = 100.0,
        record_shapes: bool = False,
        with_stack: bool = False,
        profile_memory: bool = False,
        device_trace: bool = True,
        collectors: Sequence[Collector] = (),
        defer: bool = False,
        telemetry_outside: bool = False,
        batch_size: int | None = None,
        force: bool = False,
        _output_checked: bool = False,
    ) -> None:
        if host is None:
            hosts = ["python", "system"] + (["ops"] if "torch" in sys.modules else [])
        else:
            hosts = list(host)
            bad = [h for h in hosts if h not in HOST_COLLECTORS]
            if bad:
                raise AiprofError(f"unknown host collector(s) {bad}; known: {', '.join(HOST_COLLECTORS)}")
        if rate <= 0:
            raise AiprofError(f"sampling rate must be > 0 Hz, got {rate}")
        self.host = hosts
        self.device = device
        self.schedule = schedule
        self.start_profile = start_profile
        self.on_trace_ready = on_trace_ready
        self.rate = rate
        self.torch_options = {
            "record_shapes": record_shapes,
            "with_stack": with_stack,
            "profile_memory": profile_memory,
        }
        self.device_trace = device_trace
        self.extra = list(collectors)
        self.defer = defer
        self.telemetry_outside = telemetry_outside
        if batch_size is not None and batch_size <= 0:
            raise AiprofError(f"batch size must be > 0, got {batch_size}")
        self.batch_size = batch_size
        self.rank, self.world_size = rank_from_env()
        # _output_checked: the profiler of aiprof record's job (record/job/bootstrap.py),
        # whose output aiprof record checked before the job, and whose processes record
        # beside each other into it.
        claimed = output is None and self.rank is None and not _output_checked
        if claimed:
            output = claim_default_output()  # a new folder: nothing earlier in it
        # str, not Path: pathlib would cost every recorded job its import (the
        # properties below give Paths to those who ask).
        self._path = profile_location(output, self.rank)
        if not (claimed or _output_checked):
            self._check_output(output, force)
        self._raw: str | None = None
        self.summary: RecordSummary | None = None
        self._controller: Controller | None = None
        self._user_steps = False
        self.python_sampler = "in the job"
        """Where the Python stacks are sampled: "outside" (by ``aiprof record``, which
        reads this process's memory) or "in the job" (a sampler thread), with why."""

    def _check_output(self, output: str | os.PathLike[str] | None, force: bool) -> None:
        """Refuse an output holding an earlier recording, unless ``force`` (which removes
        it): :func:`~aiprof.record.launcher.output_guard.check_earlier`, the rule of
        ``aiprof record -o``, on the output as given; under a launcher, on this rank's
        own profile (and raw folders), since the other ranks write beside it now."""
        from pathlib import Path

        from ..launcher.output_guard import check_earlier

        where = self._path if self.rank is not None or output is None else os.path.normpath(os.fspath(output))
        check_earlier(Path(where), force, options=self._output_names)

    # -- life cycle ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._controller is not None

    @property
    def stopped_early(self) -> str | None:
        """Why the recording stopped before :meth:`stop` (no room left for its raw data),
        else None. The job runs on either way; a job may check it to stop waiting on data
        that is no longer recorded."""
        ctl = self._controller
        return ctl.disk_full if ctl is not None else None

    def _build(self) -> list[Collector]:
        from ..rawfile import raw_location

        out: list[Collector] = []
        outside = None
        wants_telemetry = not self.telemetry_outside and ("system" in self.host or bool(self.device))
        if os.environ.get(ENV_STACKS) and ("python" in self.host or wants_telemetry):
            # Under aiprof record: it may read our stacks, and poll our telemetry.
            from .collectors.python_outside import connect

            outside, why, took = connect(self.rate, stacks="python" in self.host, telemetry=wants_telemetry)
            self.python_sampler = "outside" if outside is not None else f"in the job ({why})"
            self.telemetry_outside = self.telemetry_outside or took
        if "python" in self.host:
            if outside is not None:
                out.append(outside)
            else:
                from .collectors.python_stacks import PythonSampler

                out.append(PythonSampler(self.rate))
        if "system" in self.host:
            from .collectors.system import SystemCollector

            out.append(SystemCollector(poll=not self.telemetry_outside))
        if "ops" in self.host:
            try:
                import torch  # noqa: F401
            except ImportError:
                log.warning("the ops collector needs PyTorch, which is not importable; recording without it")
            else:
                from .collectors.torch_ops import TorchOpsCollector

                out.append(
                    TorchOpsCollector(
                        raw_location(self._path, self.rank),
                        self.schedule,
                        process_ends=self.defer,
                        record_shapes=self.torch_options["record_shapes"],
                        with_stack=self.torch_options["with_stack"],
                        profile_memory=self.torch_options["profile_memory"],
                    )
                )
        elif self.device_trace:
            from .collectors.device_trace import DeviceTraceCollector

            out.append(
                DeviceTraceCollector(raw_location(self._path, self.rank), self.schedule, process_ends=self.defer)
            )
        if self.device and not self.telemetry_outside:
            from .collectors.device import DeviceCollector

            names = None if isinstance(self.device, bool) else list(self.device)
            out.append(DeviceCollector(backends=names))
        return out + self.extra

    def start(self) -> Profiler:
        """Start recording (an error if this or another profiler is already running)."""
        global _active
        with _lock:
            if _active is not None:
                raise AiprofError("a profiler is already running in this process; stop it first")
            _active = self
        try:
            options = {
                "host": self.host,
                "device": self.device,
                "rate": self.rate,
                # Deferred profilers are the whole-process ones that `aiprof record` starts.
                "whole_process": self.defer,
                "telemetry_outside": self.telemetry_outside,
                "device_trace": self.device_trace and "ops" not in self.host,
                **self.torch_options,
            }
            collectors = self._build()
            options["telemetry_outside"] = self.telemetry_outside
            if self.batch_size is not None:
                options["batch_size"] = self.batch_size
            if "python" in self.host:
                options["python_sampler"] = self.python_sampler
            ctl = Controller(
                self._path,
                collectors,
                schedule=self.schedule,
                rank=self.rank,
                world_size=self.world_size,
                options=options,
            )
            self._user_steps = False
            ctl.start()
            self._controller = ctl
        except BaseException:
            _active = None
            raise
        anchors.connect(ctl.anchor, ctl.set_loop, ctl.anchor_clock)
        collectives.connect(ctl.collective)
        _forget_optimizer()
        if "torch.optim" in sys.modules:
            _watch_optimizer()
        else:
            watch_imports()
        return self

    def step(self) -> None:
        """Mark the end of one step (iteration) and the start of the next."""
        self._user_steps = True
        ctl = self._controller
        if ctl is not None:
            ctl.step()
            anchors.find_loop(sys._getframe(1))

    @property
    def path(self) -> Path:
        """The profile folder this profiler writes."""
        from pathlib import Path

        return Path(self._path)

    @property
    def raw_dir(self) -> Path | None:
        """Raw folder of the last recording (with ``defer``, the finalizer's input)."""
        from pathlib import Path

        return Path(self._raw) if self._raw is not None else None

    def stop(self, *, partial: bool = False, reason: str | None = None) -> Path | None:
        """Stop recording and write the profile (with ``defer``: only the raw data).

        Returns the profile folder (with ``defer``: the raw folder). Never raises for a
        collector's failure; those are warnings kept in profile.json.
        """
        done = self.finish(partial=partial, reason=reason)
        if done is None:
            return None
        from pathlib import Path

        return Path(done)

    def finish(self, *, partial: bool = False, reason: str | None = None) -> str | None:
        """:meth:`stop`, returning the folder as a str: what the bootstrap calls as the
        job exits, which should not import pathlib then."""
        global _active
        ctl = self._controller
        if ctl is None:
            return None
        self._controller = None
        anchors.connect(None)
        collectives.connect(None)
        try:
            raw = ctl.stop(partial=partial, reason=reason)
        finally:
            with _lock:
                if _active is self:
                    _active = None
        self._raw = raw
        if self.defer:
            return raw
        from ..finalizer import finalize

        try:
            self.summary = finalize(raw)
        except OSError as e:
            if e.errno not in DISK_FULL_ERRNOS:
                raise
            # The job goes on: a profile that does not fit is not its failure.
            log.warning(
                "no room left (%s): the profile could not be written; its raw data is kept in %s: "
                "free some space, then run aiprof recover %s",
                e.strerror or e,
                raw,
                os.path.dirname(raw) or ".",
            )
            return None
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)
        return self._path

    def analyse(self) -> RecordSummary:
        """Stop if still running and return the summary of the written profile."""
        if self.running:
            self.stop()
        if self.summary is None:
            if self._raw is None:
                raise AiprofError("nothing recorded yet: call start() first")
            from ..finalizer import finalize

            self.summary = finalize(self._raw)
        return self.summary

    def __enter__(self) -> Profiler:
        if self.start_profile:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.running:
            return
        ok = exc_type is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
        reason = None if ok else f"{exc_type.__name__ if exc_type else 'error'} raised in the profiled block"
        self.stop(partial=not ok, reason=reason)

    # -- for the annotations and hooks ----------------------------------------------

    def _annotate(self, start: int, dur: int, name: str, tid: int, samples: int | None = None) -> None:
        ctl = self._controller
        if ctl is not None:
            ctl.annotate(start, dur, name, tid, samples)

    def _optimizer_step(self, at: int | None = None) -> None:
        # Explicit step() calls win over the optimizer hook (they are never doubled).
        ctl = self._controller
        if not self._user_steps and ctl is not None:
            ctl.step(auto=True, at=at)


def mark_step() -> None:
    """``step()`` on the running profiler, if any (a no-op otherwise)."""
    prof = _active
    if prof is not None:
        prof.step()


# -- optimizer hook -------------------------------------------------------------------

_hooked = False
_first_optimizer: int | None = None


def _forget_optimizer() -> None:
    """A new recording counts the steps of the first optimizer that steps in it (an
    earlier recording's optimizer may be gone, and its id reused)."""
    global _first_optimizer
    _first_optimizer = None


def _watch_optimizer() -> None:
    """Steps of an unmodified script come from optimizer.step(), once torch.optim is
    imported. Only the first optimizer that steps counts (a GAN's two do not double)."""
    global _hooked
    if _hooked or "torch.optim" not in sys.modules:
        return
    anchors.install()
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:
        return
    _hooked = True

    def hook(opt: Any, args: Any, kwargs: Any) -> None:
        global _first_optimizer
        prof = _active
        if prof is None:
            return
        if _first_optimizer is None:
            _first_optimizer = id(opt)
        if id(opt) == _first_optimizer:
            prof._optimizer_step(anchors.optimizer_step())

    register_optimizer_step_post_hook(hook)


_watching = False


def watch_imports() -> None:
    """Install the optimizer hook as soon as the script imports torch.optim."""
    global _watching
    if _watching or _hooked:
        return
    _watching = True
    import importlib.machinery

    class _Finder:  # a meta path finder (importlib.abc costs the job's start ms)
        def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
            if name == "torch.optim":
                sys.meta_path.remove(self)
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                if spec is not None and spec.loader is not None:
                    _wrap_loader(spec)
                return spec
            return None

    sys.meta_path.insert(0, _Finder())


def _wrap_loader(spec: Any) -> None:
    loader = spec.loader
    orig = loader.exec_module

    def exec_module(module: Any) -> None:
        orig(module)
        try:
            _watch_optimizer()
        except Exception as e:
            log.warning("could not hook optimizer steps: %s", e)

    loader.exec_module = exec_module


# -- annotations ------------------------------------------------------------------------

_nvtx: Any = None


def _nvtx_module() -> Any:
    global _nvtx
    if _nvtx is None:
        _nvtx = False
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                if torch.cuda.is_available():
                    _nvtx = torch.cuda.nvtx
            except Exception:
                _nvtx = False
    return _nvtx


class annotate:
    """Mark a range, as a context manager or a decorator: ``with annotate("forward"):``.

    The range becomes a ``user_annotation`` event in aiprof, and also a
    ``torch.profiler.record_function`` (when torch is imported) and an NVTX range
    (when CUDA is available), so torch.profiler, Nsight and vendor tools see it too.
    ``samples``: how many samples (batch items) the range processed; their sum per step
    gives the energy view's joules per sample.
    """

    def __init__(self, name: str, samples: int | None = None) -> None:
        self.name = name
        self.samples = samples
        self._open: list[tuple[int, Any, bool]] = []

    def __enter__(self) -> annotate:
        rf = None
        if "torch" in sys.modules:
            from torch.profiler import record_function

            rf = record_function(self.name)
            rf.__enter__()  # type: ignore[no-untyped-call]
        nvtx: Any = _nvtx_module() if "torch" in sys.modules else False
        if nvtx:
            nvtx.range_push(self.name)
        self._open.append((time.monotonic_ns(), rf, bool(nvtx)))
        return self

    def __exit__(self, *exc: object) -> None:
        end = time.monotonic_ns()
        start, rf, pushed = self._open.pop()
        if pushed:
            _nvtx_module().range_pop()
        if rf is not None:
            rf.__exit__(None, None, None)
        prof = _active
        if prof is not None:
            prof._annotate(start, end - start, self.name, threading.get_native_id(), self.samples)

    def __call__(self, fn: F) -> F:
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with annotate(name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def _after_fork_in_child() -> None:
    # A forked worker (DataLoader) is not the recorded process: never write from it.
    global _active
    prof = _active
    _active = None
    if prof is not None and prof._controller is not None:
        prof._controller.forget_in_child()
        prof._controller = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
