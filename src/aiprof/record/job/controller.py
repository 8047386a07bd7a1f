"""The controller: owns the collectors of one recording, its clock, and its raw data.

One time origin per recording: ``time.monotonic_ns()`` at start, with ``time.time_ns()``
read beside it (profile.json ``time_origin_ns`` is that Unix time). The pair is read
again at stop, so clocks of other collectors (device telemetry in Unix ns, torch's
own clock through sync markers) are mapped at both edges.

While the job runs, collectors keep plain Python lists. Every second (a checkpoint)
and at stop the controller appends what they gathered since the last time to their
raw data files (record.rawstream: marshal, built in, nothing to import into the job;
the torch traces are already files) in a raw folder beside the profile,
``.rankN.aiprof.raw``. :func:`aiprof.record.finalizer.finalize` turns that
folder into the profile: in the recording process, or in ``aiprof record``'s own
process after the job exits (so the job does not pay for it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence

from .._log import log
from ..rawfile import (
    DISK_FULL,
    DISK_FULL_ERRNOS,
    MANIFEST,
    MARKS,
    RAW_DATA_SUFFIX,
    encode_raw,
    hostname,
    raw_location,
    write_atomic,
)
from ..rawstream import RawStream
from . import wire
from .anchors import BACKWARD, OPTIMIZER
from .collectors.base import Collector, PollingThread, fail
from .sched import ThreadClock
from .schedule import ProfilerAction, Schedule

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

#: Environment variable overriding the checkpoint interval (seconds; 0 disables).
CHECKPOINT_ENV = "AIPROF_RECORD_CHECKPOINT_S"
DEFAULT_CHECKPOINT_S = 1.0
#: Checkpoints are spaced so that writing one takes at most this share of the time (a
#: long run with a big in-job sample list is checkpointed less often than every second).
CHECKPOINT_SHARE = 0.02
KILLED_REASON = "the job ended before the profiler stopped (killed?); data up to the last checkpoint"
DISK_FULL_REASON = DISK_FULL + " ({why}) {at:.1f} s into the recording: it stopped there, the job ran on"


def _holds_nothing(c: Collector) -> bool:
    """Whether a checkpoint leaves ``c`` out without a loss to tell: the default device
    trace before it armed (the job has not imported torch, or torch sees no accelerator
    to trace) holds nothing, so a job killed then loses nothing of it, and its profile
    neither lists it nor says it stopped early (it wrote its status at stop otherwise)."""
    if c.name != "device_trace":
        return False
    from .collectors.device_trace import DeviceTraceCollector

    return isinstance(c, DeviceTraceCollector) and c.inner is None


def rank_from_env(env: dict[str, str] | os._Environ[str] | None = None) -> tuple[int | None, int | None]:
    """(rank, world size) from the launcher's environment (torchrun, MPI, PMI), else None."""
    e = os.environ if env is None else env
    rank = world = None
    for key in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if e.get(key, "").isdigit():
            rank = int(e[key])
            break
    for key in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if e.get(key, "").isdigit():
            world = int(e[key])
            break
    return rank, world


def default_output() -> str:
    """``aiprof-YYYYmmdd-HHMMSS`` in the working directory."""
    return time.strftime("aiprof-%Y%m%d-%H%M%S")


def claim_default_output() -> str:
    """:func:`default_output`, ``-2``, ``-3``... after it when that exists, claimed by
    creating it: a recording without an output never lands in an earlier one's folder
    (two in one second included). ``aiprof record`` without -o and ``Profiler()`` of a
    process without a rank use it."""
    base = default_output()
    out, n = base, 2
    while True:
        try:
            os.mkdir(out)
        except FileExistsError:
            out, n = f"{base}-{n}", n + 1
            continue
        except OSError:
            pass  # unwritable here: recording into it says so
        return out


def profile_location(output: str | os.PathLike[str] | None, rank: int | None) -> str:
    """Where this process's profile goes.

    ``OUT/rank<R>.aiprof`` (R = 0 without a launcher), so one output folder holds every
    rank and ``aiprof report OUT`` reads them all. A single process given a name
    ending in ``.aiprof`` writes exactly there.
    """
    # os.path, not pathlib: the job computes it, and pathlib would cost it its import.
    out = os.path.normpath(os.fspath(output)) if output is not None else default_output()
    if rank is None and os.path.basename(out).endswith(".aiprof"):
        return out
    return os.path.join(out, f"rank{rank or 0}.aiprof")


def _remove_tree(path: str) -> None:
    """``shutil.rmtree(path, ignore_errors=True)`` without importing shutil (and bz2,
    lzma, fnmatch with it) into the job."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            sub = os.path.join(root, name)
            try:
                if os.path.islink(sub):
                    os.unlink(sub)
                else:
                    os.rmdir(sub)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


class Marks:
    """Step spans and annotations: the controller's own, always-on, data."""

    __slots__ = ("anchors", "annotations", "clock", "collectives", "loop", "steps")

    def __init__(self, steps: list[tuple[int, int, int, int]], annotations: list[tuple[Any, ...]]) -> None:
        self.steps = steps
        """(start, end, step number, tid) in monotonic ns."""
        self.annotations = annotations
        """(start, dur, name, tid)."""
        self.anchors: list[tuple[str, int, int, int]] = []
        """(kind, start, end, tid) of the calls a training loop makes once per
        iteration (record.anchors): the finalizer finds unmarked steps from them."""
        self.collectives: list[tuple[Any, ...]] = []
        """torch.distributed calls (record.collectives): start, end, op, bytes, group,
        group size, sequence number in the group, tid."""
        self.loop: dict[str, Any] | None = None
        """The loop that ran the first training iteration (record.anchors.loop_of)."""
        self.clock: list[tuple[int, int, int, int]] = []
        """(monotonic ns, tid, cpu ns, run-queue ns): the thread's clock (record.job.sched)
        read at each point where a step may begin or end (the recording's start, a step
        mark, an anchor: a DataLoader ``__next__``'s start, the optimizer's step, the end
        of ``backward()`` until an optimizer steps). The finalizer gives a step the
        difference of the readings at its two ends, whichever rule found it; points no
        step ends at are matched by nothing."""


class Controller:
    """Starts, steps and stops the collectors of one recording; dumps their raw data."""

    def __init__(
        self,
        profile: str,
        collectors: Sequence[Collector],
        *,
        schedule: Schedule | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.profile = profile
        """Final location of the profile folder."""
        self.raw_dir = raw_location(profile, rank)
        self.collectors = list(collectors)
        self.schedule = schedule
        self.rank = rank
        self.world_size = world_size
        self.options = dict(options or {})
        self.marks = Marks([], [])
        self.own_threads: set[int] = set()
        self.step_num = 0
        self.action = ProfilerAction.RECORD
        self._step_start = 0
        self._thread_clock = ThreadClock()
        self._optimizer_seen = False
        self._auto_steps = 0
        self._told = 0
        """The last step number the collectors were told (torch.profiler's own step
        count): a step they already saw is not told again after a retraction."""
        self.clock: dict[str, int] = {}
        self.running = False
        self._pid = os.getpid()
        self.checkpoint_s = float(os.environ.get(CHECKPOINT_ENV) or DEFAULT_CHECKPOINT_S)
        """Seconds between checkpoints of the raw data (0: only at the end)."""
        self._checkpointer: PollingThread | None = None
        self._dump_lock = threading.Lock()
        self._next_checkpoint = 0.0
        self._streams: dict[str, RawStream] = {}
        self._entries: dict[str, Any] = {}
        self.disk_full: str | None = None
        """Why the recording stopped early on a full disk (the manifest's reason), else None."""

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Fix the time origin, clear the raw folder, start every collector."""
        if os.path.exists(self.raw_dir):
            _remove_tree(self.raw_dir)
        os.makedirs(self.raw_dir, exist_ok=True)
        self.clock = {"mono0": time.monotonic_ns(), "unix0": time.time_ns()}
        self._step_start = self.clock["mono0"]
        self.action = self.schedule(0) if self.schedule is not None else ProfilerAction.RECORD
        self.running = True
        self.read_clock(self._step_start)
        for c in self.collectors:
            c.own_threads = self.own_threads
            self._call(c, "start")
            self._call(c, "set_recording", self.action.recording)
        # A manifest from the first moment: a job killed before its first checkpoint
        # still leaves a raw folder that aiprof record (or aiprof recover) finalises
        # with what was collected outside the job (stacks, telemetry).
        self.dump(partial=True, reason=KILLED_REASON, checkpoint=True)
        if self.checkpoint_s > 0 and self.disk_full is None:
            # What was collected so far reaches the raw folder every second, so a job
            # killed without warning (SIGKILL, the OOM killer) loses at most that.
            self._checkpointer = PollingThread(
                "aiprof-checkpoint",
                self.checkpoint_s,
                self.checkpoint,
                lambda e: log.warning(
                    "checkpoints stopped (%s: %s); the profile is still written at the end", type(e).__name__, e
                ),
                self.own_threads,
            )
            self._checkpointer.start()

    def checkpoint(self) -> None:
        """Write the data so far as a partial profile's raw folder (from a thread)."""
        if not self.running:
            return
        now = time.monotonic()
        if now < self._next_checkpoint:
            return
        # The cost is this thread's CPU time: the wall time also counts the waits for
        # the GIL a busy job holds, which would space the checkpoints out (seconds
        # apart on a loaded machine) while costing the job nothing more.
        cpu = time.thread_time()
        self.dump(partial=True, reason=KILLED_REASON, checkpoint=True)
        took = time.thread_time() - cpu
        self._next_checkpoint = now + max(0.0, took / CHECKPOINT_SHARE - self.checkpoint_s)

    def _call(self, c: Collector, method: str, *args: Any) -> None:
        if c.failed is not None:
            return
        try:
            getattr(c, method)(*args)
        except Exception as e:
            fail(c, e, method)
            try:
                c.stop()
            except Exception as e2:
                log.debug("stopping failed collector %s: %s", c.name, e2)

    def step(self, *, auto: bool = False, at: int | None = None) -> None:
        """End the current step, begin the next one, move the schedule on.

        ``auto`` steps come from a hook (optimizer.step, whose anchor read the clock at
        ``at``); the first explicit step retracts them, so a script that marks its own
        steps never gets them doubled.
        """
        if not self.running or os.getpid() != self._pid:
            return
        now = time.monotonic_ns() if at is None else at
        tid = threading.get_native_id()
        if not auto:
            # An explicit mark is the user's own step boundary: the exact CPU time is read
            # here (an optimizer's step is read by its anchor, at the same time).
            self.read_clock(now)
        if auto:
            self._auto_steps += 1
        elif self._auto_steps:
            self._retract_auto()
        self.marks.steps.append((self._step_start, now, self.step_num, tid))
        self._step_start = now
        self.step_num += 1
        if self.schedule is not None:
            new = self.schedule(self.step_num)
            if new.recording != self.action.recording:
                for c in self.collectors:
                    self._call(c, "set_recording", new.recording)
            self.action = new
        if self.step_num <= self._told:
            # The optimizer's step of this iteration already moved torch's schedule on:
            # moving it again would record one step early (torch counts prof.step() calls).
            return
        self._told = self.step_num
        for c in self.collectors:
            self._call(c, "on_step", self.step_num)

    def read_clock(self, ts: int, exact: bool = True) -> None:
        """Keep the calling thread's CPU time and run-queue wait at ``ts`` (monotonic ns,
        read just before), a point where a step may begin or end (see Marks.clock).
        ``exact=False`` where the exact CPU clock would move the job's time
        (record.job.sched): anywhere inside the job's own calls."""
        if not self.running or os.getpid() != self._pid:
            return
        got = self._thread_clock.read(exact)
        if got is not None:
            self.marks.clock.append((ts, threading.get_native_id(), got[0], got[1]))

    def anchor_clock(self, kind: str, ts: int) -> None:
        """:meth:`read_clock` at an anchor (record.anchors: a DataLoader ``__next__``'s
        start, the optimizer's step, the end of ``backward()``), the CPU time within a
        tick: the anchors are inside the job's own calls, where the exact clock would
        put the machine's load (record.job.sched). Not at ``backward()`` once an
        optimizer stepped (its steps are the optimizer's, which ``backward()`` never
        bounds)."""
        if kind == OPTIMIZER:
            self._optimizer_seen = True
        elif kind == BACKWARD and self._optimizer_seen:
            return
        self.read_clock(ts, exact=False)

    def _retract_auto(self) -> None:
        n, self._auto_steps = self._auto_steps, 0
        n = min(n, len(self.marks.steps))
        if n:
            self._step_start = self.marks.steps[-n][0]
            del self.marks.steps[-n:]
            self.step_num -= n

    def anchor(self, kind: str, start: int, end: int, tid: int) -> None:
        """Keep one per-iteration call (record.anchors) while recording."""
        if self.running:
            self.marks.anchors.append((kind, start, end, tid))

    def collective(self, rec: tuple[Any, ...]) -> None:
        """Keep one torch.distributed call (record.collectives) while recording."""
        if self.running:
            self.marks.collectives.append(rec)

    def set_loop(self, info: dict[str, Any]) -> None:
        self.marks.loop = info

    def annotate(self, start: int, dur: int, name: str, tid: int, samples: int | None = None) -> None:
        """Keep one user annotation (monotonic ns), with its sample count when given."""
        if samples is None:
            self.marks.annotations.append((start, dur, name, tid))
        else:
            self.marks.annotations.append((start, dur, name, tid, samples))

    def stop(self, *, partial: bool = False, reason: str | None = None) -> str:
        """Stop every collector and dump the raw folder; returns the raw folder."""
        self.running = False
        self._thread_clock.close()
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        for c in self.collectors:
            self._call(c, "stop")
        if self.disk_full is not None:
            # Stopped at the full disk: the raw folder holds what fitted, and says so.
            self._close_streams()
            return self.raw_dir
        self.clock["mono1"] = time.monotonic_ns()
        self.clock["unix1"] = time.time_ns()
        try:
            return self.dump(partial=partial, reason=reason)
        finally:
            self._close_streams()

    def _close_streams(self) -> None:
        for s in self._streams.values():
            s.close()
        self._streams.clear()

    def dump(self, *, partial: bool, reason: str | None, checkpoint: bool = False) -> str:
        """Write every collector's raw data and the manifest into the raw folder.

        ``checkpoint``: a periodic write while collecting; collectors that cannot dump
        mid-run (torch.profiler) are left out of it until the final write.
        """
        with self._dump_lock:
            if self.disk_full is not None:
                return self.raw_dir
            try:
                return self._dump(partial, reason, checkpoint)
            except OSError as e:
                if e.errno not in DISK_FULL_ERRNOS:
                    raise
                self._stop_on_full_disk(e)
                return self.raw_dir

    def _dump(self, partial: bool, reason: str | None, checkpoint: bool) -> str:
        entries: dict[str, Any] = {}
        for c in self.collectors:
            entry: dict[str, Any] = {"failed": c.failed}
            if checkpoint and not c.checkpoint:
                if c.failed is None and _holds_nothing(c):
                    continue
                entry["failed"] = c.failed or "not in the last checkpoint (the job was killed)"
                entries[c.name] = entry
                continue
            fname = c.name + RAW_DATA_SUFFIX
            try:
                data = c.dump(self.raw_dir)
                if c.checkpoint:
                    stream = self._streams.get(c.name)
                    if stream is None:
                        stream = self._streams[c.name] = RawStream(os.path.join(self.raw_dir, fname))
                    stream.write(data)
                else:
                    write_atomic(os.path.join(self.raw_dir, fname), encode_raw(data))
                entry["file"] = fname
            except OSError as e:
                if e.errno in DISK_FULL_ERRNOS:
                    raise
                fail(c, e, "dump")
                entry["failed"] = c.failed
            except Exception as e:
                fail(c, e, "dump")
                entry["failed"] = c.failed
            entries[c.name] = entry
        self._entries = entries
        if checkpoint:
            # The span a checkpoint covers: its profile reports this, not 0 s.
            self.clock["mono_last"] = time.monotonic_ns()
            self.clock["unix_last"] = time.time_ns()
        marks = {
            "steps": list(self.marks.steps),
            "annotations": list(self.marks.annotations),
            "anchors": list(self.marks.anchors),
            "loop": self.marks.loop,
            "collectives": list(self.marks.collectives),
            "clock": list(self.marks.clock),
            # Steps that all came from the optimizer hook: the finalizer may re-find them.
            "auto": bool(self.marks.steps) and self._auto_steps == len(self.marks.steps),
        }
        # The marks are rewritten whole: steps retracted by the first explicit step()
        # make them more than a growing list, and they are small.
        write_atomic(os.path.join(self.raw_dir, MARKS), encode_raw(marks))
        self._write_manifest(partial, reason, entries)
        return self.raw_dir

    def _write_manifest(
        self, partial: bool, reason: str | None, entries: dict[str, Any], *, in_place: bool = False
    ) -> None:
        manifest = {
            "version": 1,
            "profile": str(self.profile),
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": self._pid,
            "host": hostname(),
            "argv": list(sys.argv),
            "clock": dict(self.clock),
            "partial": partial,
            "partial_reason": reason,
            "options": self.options,
            "collectors": entries,
        }
        data = wire.dumps(manifest).encode()
        if in_place:
            # No room for a second copy: overwrite the pages the manifest already has.
            with open(os.path.join(self.raw_dir, MANIFEST), "r+b") as f:
                f.write(data)
                f.truncate()
            return
        # The manifest goes last, and by rename: a raw folder without one was cut
        # short, and a reader never sees half a manifest.
        write_atomic(os.path.join(self.raw_dir, MANIFEST), data)

    def _stop_on_full_disk(self, err: OSError) -> None:
        """The disk is full: stop every collector (their data would only pile up in the
        job's memory), mark the raw folder partial with the reason, warn once."""
        at = (time.monotonic_ns() - self.clock.get("mono0", time.monotonic_ns())) / 1e9
        kept = (self.clock.get("mono_last", self.clock.get("mono0", 0)) - self.clock.get("mono0", 0)) / 1e9
        self.disk_full = DISK_FULL_REASON.format(why=err.strerror or err, at=at)
        self.running = False
        if self._checkpointer is not None and threading.current_thread().name != "aiprof-checkpoint":
            self._checkpointer.stop()
            self._checkpointer = None
        for c in self.collectors:
            self._call(c, "stop")
        entries = self._entries
        for entry in entries.values():
            entry["failed"] = (
                "stopped: " + DISK_FULL if not entry.get("failed") or "killed" in entry["failed"] else entry["failed"]
            )
        for name, stream in self._streams.items():
            entries.setdefault(name, {"failed": None})["file"] = os.path.basename(stream.path)
        for in_place in (False, True):
            try:
                self._write_manifest(True, self.disk_full, entries, in_place=in_place)
                break
            except OSError:
                continue
        log.warning(
            "no room left (%s): recording stopped %.1f s in; the raw data of the first %.1f s is kept "
            "in %s; the job runs on",
            err.strerror or err,
            at,
            kept,
            self.raw_dir,
        )

    def forget_in_child(self) -> None:
        """After fork: this process is not the one being recorded."""
        self.running = False
        for c in self.collectors:
            forget = getattr(c, "forget_in_child", None)
            if forget is not None:
                forget()
