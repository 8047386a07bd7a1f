"""Python stacks of ``aiprof record``'s job, sampled from ``aiprof record``'s process
(and the telemetry of its launcher ranks, polled from there).

Every recorded process of the job (the job itself, or each rank a launcher starts)
measures its interpreter's layout when it starts recording and offers it on the Unix
socket named by :data:`~aiprof.record.environment.ENV_STACKS`
(collectors.python_outside). :class:`StackServer` takes each offer: it checks that the
peer is who it says (same user, same pid, by ``SO_PEERCRED``) and that it can read
that process's memory with the layout, answers "ok" (or why not, and the process
samples itself), and starts a :class:`StackPoller` for it: a thread of ``aiprof
record`` reading that process's stacks (aiprof.record.launcher.pystate) ``rate_hz`` times a
second, so the recorded process runs no sampler thread and never hands its GIL over.
A process that is not ``aiprof record``'s direct child (a rank of a launcher) may
also leave its system and device telemetry to the server, which then polls it with an
:class:`~aiprof.record.launcher.outside.ChildPoller` as it does the direct child's.

After the job, :meth:`StackServer.merge` fills each recorded process's raw ``python``
data (which holds what only the process knows: the schedule's windows, its own
threads, thread names) with the samples taken while it recorded, in the in-process
sampler's format: the finalizer cannot tell them apart.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from ..environment import read_line
from ..job.collectors.base import REAL_CLOCK, Clock, PollingThread
from ..rawfile import MANIFEST, RAW_SUFFIX, encode_raw, load_raw, load_raw_cut, write_atomic
from ..rawstream import RawStream
from .pystate import MemReader, StackReader, line_of

log = logging.getLogger("aiprof.record")

#: Walks retried when a stack changed while it was read, before the sample is lost.
RETRIES = 2
#: Distinct stacks remembered by the fast path (as in the in-process sampler).
STACK_CACHE_SIZE = 20_000
#: Seconds a connected process has to send its offer.
OFFER_TIMEOUT_S = 10.0
#: The samples taken from outside, appended every second to the raw folder of the
#: process they are of, so that ``aiprof recover`` has them when aiprof record was killed.
SPILL = "python.outside" + ".marshal"
SPILL_S = 1.0
#: A sample whose process used no CPU since the last one repeats it without reading
#: memory; at least every this many samples the stacks are read anyway (a process that
#: exited keeps its CPU time: the read finds it gone).
REPEAT_AT_MOST = 10
#: The frame a sample gets in place of its inner frames when only its outer ones lasted
#: through the walk (they changed while read: StackReader.lasting), file CUT_FILE, line 0.
CUT_FRAME, CUT_FILE = "(inner frames changed while read)", "<aiprof>"
#: Key suffix of such a sample's stack in the stack cache (no code is at address 0).
CUT = 0
#: The recorder's own files (the bootstrap that runs the job's code is among them).
_RECORDER = str(Path(__file__).resolve().parents[1])


def cpu_clock(pid: int) -> int:
    """The clock id of process ``pid``'s CPU time (Linux: ``clock_getcpuclockid``, which
    Python does not expose). The kernel brings a running thread's time up to date when
    it is read, so an unchanged value means that no thread of the process ran."""
    return ((~pid) << 3) | 2  # CPUCLOCK_SCHED of a process (include/linux/posix-timers.h)


class StackPoller:
    """Samples the Python stacks of one process by reading its memory.

    Stacks are interned as the in-process sampler does: a flat (code address,
    instruction) key per stack, and new ones walked into a tree of frames (parent,
    function, file, line).
    """

    def __init__(self, pid: int, rate_hz: float, clock: Clock = REAL_CLOCK) -> None:
        self.pid = pid
        self.rate_hz = rate_hz
        self.clock = clock
        self.reader: Any = None
        self._poller: PollingThread | None = None
        self.ts: list[int] = []
        self.idents: list[int] = []
        self.tids: list[int] = []
        self.stacks: list[int] = []
        self.torn = 0
        """Walks dropped because the stack changed while it was read (after retries)."""
        self.torn_ts: list[int] = []
        self.torn_idents: list[int] = []
        self.torn_tids: list[int] = []
        """When, and of which thread, each dropped walk was (to count those of the
        recorded threads in the recorded windows, as the samples are, and those in the
        steps)."""
        self.cut = 0
        """Samples that kept only the frames that lasted through the walk (the inner ones
        changed while read): :meth:`StackReader.lasting`."""
        self.failed: str | None = None
        self._known: dict[tuple[int, ...], int] = {}
        self._nodes: dict[tuple[int, int, int], int] = {}
        self._reused = 0
        self._frame_ids: dict[tuple[int, str, str, int], int] = {}
        self.frames: list[tuple[int, int, str, str, int]] = []
        self.repeated = 0
        """Samples taken as the previous one again: the process had used no CPU since
        it (every thread blocked, or waiting for a CPU on a loaded machine), so none
        of its stacks could have changed."""
        self._clock_id = cpu_clock(pid)
        self._cpu = -1
        self._last: list[tuple[int, int, int]] = []
        """(ident, native id, stack) of each thread in the last sample that was read."""
        self._since_read = 0

    def attach(self, layout: dict[str, int]) -> str:
        """Open the process's memory with ``layout``: "ok", or why it cannot be read."""
        try:
            reader = StackReader(MemReader(self.pid), layout)
        except OSError as e:
            return f"cannot read the process's memory: {e.strerror or e}"
        except (KeyError, TypeError, ValueError) as e:
            return f"bad layout: {type(e).__name__}: {e}"
        if not reader.threads():
            reader.mem.close()
            return "cannot find the process's threads in its memory"
        self.reader = reader
        return "ok"

    def start(self) -> None:
        def tick() -> None:
            if not self.sample() and self._poller is not None:
                self._poller.stop()  # the process is gone

        def failed(e: BaseException) -> None:
            self.failed = f"sampling: {type(e).__name__}: {e}"
            log.warning("collector python failed (%s); it stops, the job runs on", self.failed)

        self._poller = PollingThread(f"aiprof-stacks-{self.pid}", 1.0 / self.rate_hz, tick, failed, set(), self.clock)
        self._poller.start()

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.stop()
        if self.reader is not None:
            self.reader.mem.close()

    def sample(self) -> bool:
        """Take one sample of every thread; False once the process cannot be read."""
        reader = self.reader
        now = time.monotonic_ns()
        cpu = self._cpu_time()
        if cpu >= 0 and cpu == self._cpu and self._last and self._since_read < REPEAT_AT_MOST:
            self._since_read += 1
            self.repeated += 1
            for ident, native, stack in self._last:
                self.ts.append(now)
                self.idents.append(ident)
                self.tids.append(native)
                self.stacks.append(stack)
            return True
        # Read before the walk: a process that runs during it has used CPU by the next.
        self._cpu, self._since_read = cpu, 0
        taken: list[tuple[int, int, int]] = []
        self._last = taken
        threads = reader.threads()
        if not threads:
            return self._alive()
        for ident, native, frame, tstate in threads:
            addrs: list[int] = []
            unsettled: list[list[int]] = []
            walk = reader.settled_walk(frame, tstate, addrs, unsettled)
            for _ in range(RETRIES):
                if walk is not None:
                    break
                # Read while it changed: once more, from the thread's frame now.
                frame = reader.current_frame(tstate)
                addrs, unsettled = [], []
                walk = reader.settled_walk(frame, tstate, addrs, unsettled) if frame else None
            cut = False
            if walk is None:
                # The inner frames kept changing (a tight loop of calls, a generator
                # yielding each item): keep the frames that lasted, rather than lose the
                # sample, which would under-count exactly such loops.
                walk = unsettled[0] if unsettled else None
                at = reader.lasting(walk, addrs, tstate) if walk else -1
                if walk is not None and at > 0 and not self._holds_job_code(walk[2 * at :: 2]):
                    # Only the recorder's own frames lasted (the job's code moved on to
                    # another call): which of the two the sample was is not known.
                    at = -1
                if walk is None or at < 0:
                    self._torn(now, ident, native)
                    continue
                walk, cut = walk[2 * at :], at > 0
            if reader.reused != self._reused:
                # A code address now holds another code object: stacks remembered by
                # address would name the freed one.
                self._reused = reader.reused
                self._known.clear()
                self._nodes.clear()
            key = (*walk, CUT) if cut else tuple(walk)
            leaf = self._known.get(key)
            if leaf is None:
                try:
                    leaf = self._intern(walk, cut)
                except (IndexError, ValueError, UnicodeDecodeError):
                    leaf = -1  # code read half-freed: this sample is torn, sampling goes on
                if leaf < 0:
                    self._torn(now, ident, native)
                    continue
                if len(self._known) >= STACK_CACHE_SIZE:
                    self._known.clear()
                self._known[key] = leaf
            self.cut += cut
            self.ts.append(now)
            self.idents.append(ident)
            self.tids.append(native)
            self.stacks.append(leaf)
            taken.append((ident, native, leaf))
        return True

    def _holds_job_code(self, codes: list[int]) -> bool:
        """Whether any of these (just walked) code objects is the job's: not the
        recorder's bootstrap around it, not a frozen module (runpy, importlib)."""
        for code in codes:
            file = self.reader.file_of(code)
            if file is not None and not file.startswith((_RECORDER, "<frozen ")):
                return True
        return False

    def _torn(self, now: int, ident: int, native: int) -> None:
        self.torn += 1
        self.torn_ts.append(now)
        self.torn_idents.append(ident)
        self.torn_tids.append(native)

    def _cpu_time(self) -> int:
        """The process's CPU time in ns, -1 where it cannot be read."""
        try:
            return time.clock_gettime_ns(self._clock_id)
        except (OSError, AttributeError, OverflowError):
            return -1

    def _alive(self) -> bool:
        stat = _stat(self.pid)
        return bool(stat) and stat[0] != b"Z"

    def _intern(self, walk: list[int], cut: bool = False) -> int:
        """The frame id of the walk's leaf (new frames added); with ``cut``, of a frame
        :data:`CUT_FRAME` under it, standing for the inner frames that changed while read."""
        reader = self.reader
        parent = -1
        if cut:
            parent = self._intern(walk)
            if parent < 0:
                return parent
            fkey = (parent, CUT_FRAME, CUT_FILE, 0)
            node = self._frame_ids.get(fkey)
            if node is None:
                node = self._frame_ids[fkey] = len(self.frames)
                self.frames.append((node, *fkey))
            return node
        for i in range(len(walk) - 2, -1, -2):
            code, index = walk[i], walk[i + 1]
            key = (parent, code, index)
            node = self._nodes.get(key)
            if node is None:
                info = reader.code(code)
                if info is None:
                    return -1
                fkey = (parent, info.name, info.file, line_of(info, index))
                node = self._frame_ids.get(fkey)
                if node is None:
                    node = self._frame_ids[fkey] = len(self.frames)
                    self.frames.append((node, *fkey))
                self._nodes[key] = node
            parent = node
        return parent

    def state(self) -> dict[str, Any]:
        """What was sampled so far (whole rows only: sampling goes on), for the spill."""
        n = min(len(self.ts), len(self.idents), len(self.tids), len(self.stacks))
        return {
            "ts": self.ts[:n],
            "idents": self.idents[:n],
            "tids": self.tids[:n],
            "stacks": self.stacks[:n],
            "frames": list(self.frames),
            "torn": self.torn,
            "torn_ts": list(self.torn_ts),
            "torn_idents": list(self.torn_idents),
            "torn_tids": list(self.torn_tids),
            "cut": self.cut,
        }

    @classmethod
    def from_state(cls, pid: int, state: dict[str, Any]) -> StackPoller:
        """A stopped poller holding a spilled :meth:`state` (for :meth:`merge_into`)."""
        p = cls(pid, 0.0)
        p.ts, p.idents, p.tids, p.stacks = state["ts"], state["idents"], state["tids"], state["stacks"]
        p.frames = [tuple(f) for f in state["frames"]]
        p.torn = int(state.get("torn", 0))
        p.torn_ts, p.torn_idents = list(state.get("torn_ts", [])), list(state.get("torn_idents", []))
        p.torn_tids = list(state.get("torn_tids", []))
        p.cut = int(state.get("cut", 0))
        return p

    def merge_into(self, data: dict[str, Any], lo: int, hi: int) -> None:
        """Fill a process's ``python`` raw data (:class:`OutsideSampler`'s) with the
        samples taken while it recorded, in the in-process sampler's format."""
        side = data.pop("outside", None) or {}
        windows = [(int(t), bool(on)) for t, on in side.get("windows", [])]
        own = set(side.get("own", []))
        shown = {(q, f): label for q, f, label in side.get("shown_as", [])}
        ts, tids, stacks = [], [], []
        w = 0
        on = False
        n = min(len(self.ts), len(self.idents), len(self.tids), len(self.stacks))
        for i in range(n):
            t = self.ts[i]
            while w < len(windows) and windows[w][0] <= t:
                on = windows[w][1]
                w += 1
            if on and lo <= t <= hi and self.idents[i] not in own:
                ts.append(t)
                tids.append(self.tids[i])
                stacks.append(self.stacks[i])
        # Only the frames of kept stacks (aiprof's own threads are sampled too).
        used: set[int] = set()
        for leaf in set(stacks):
            while leaf >= 0 and leaf not in used:
                used.add(leaf)
                leaf = self.frames[leaf][1]
        frames = []
        for fid, up, name, file, line in self.frames:
            if fid not in used:
                continue
            label = shown.get((name, file))
            frames.append((fid, up, label, "<aiprof>", 0) if label is not None else (fid, up, name, file, line))
        data.update({"ts": ts, "tid": tids, "stack": stacks, "frames": frames, "sampled_from": "outside"})
        data["torn_walks"] = self.torn
        if len(self.torn_ts) == len(self.torn_tids) == self.torn:
            # Those of the recorded threads in the recorded windows, as the samples kept.
            w, on = 0, False
            torn_ts, torn_tids = [], []
            for t, ident, tid in sorted(zip(self.torn_ts, self.torn_idents, self.torn_tids)):
                while w < len(windows) and windows[w][0] <= t:
                    on = windows[w][1]
                    w += 1
                if on and lo <= t <= hi and ident not in own:
                    torn_ts.append(t)
                    torn_tids.append(tid)
            data.update({"torn_walks": len(torn_ts), "torn_ts": torn_ts, "torn_tid": torn_tids})
        data["cut_walks"] = sum(1 for s in stacks if self.frames[s][2] == CUT_FRAME) if self.cut else 0


class StackServer:
    """Takes the layout offers of the job's recorded processes; one poller each."""

    def __init__(self, options: dict[str, Any], clock: Clock = REAL_CLOCK) -> None:
        self.options = options
        self.clock = clock
        """The pollers' clock (a fake one in tests)."""
        """``aiprof record``'s recording options (rate, host, device)."""
        self.rate_hz = float(options.get("rate", 100.0))
        self.name = f"aiprof-record-{os.getpid()}-{os.urandom(6).hex()}"
        """The socket's name in the abstract namespace (the value of ENV_STACKS)."""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind("\0" + self.name)
        self._sock.listen(64)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="aiprof-stacks-server", daemon=True)
        self.answered: dict[int, threading.Event] = {}
        """pid -> set once that process's offer is answered (see :meth:`wait_answered`)."""
        self._answered_lock = threading.Lock()
        self.pollers: dict[int, StackPoller] = {}
        self.refused: dict[int, str] = {}
        """pid -> why its stacks are not read from here (it samples itself)."""
        self._started: dict[int, int | None] = {}
        """pid -> its process's start time (to tell a pid used again)."""
        self.telemetry: dict[int, Any] = {}
        """pid -> the :class:`~aiprof.record.launcher.outside.ChildPoller` polling its telemetry
        (processes that are not ``aiprof record``'s direct child: launcher ranks)."""
        self._spills: dict[int, RawStream] = {}
        self._spiller: PollingThread | None = None
        self.output: Path | None = None
        """The output folder whose raw folders get the spilled samples (see :meth:`spill`)."""

    def spill_into(self, output: Path) -> None:
        """Append each poller's samples to its process's raw folder in ``output`` every
        second, from now on."""
        self.output = output
        self._spiller = PollingThread(
            "aiprof-stacks-spill",
            SPILL_S,
            self.spill,
            lambda e: log.warning("the samples taken from outside are no longer saved as they come (%s)", e),
            set(),
        )
        self._spiller.start()

    def spill(self) -> None:
        """One spill: the new samples of each poller, appended (record.rawstream)."""
        if self.output is None:
            return
        for pid, poller in list(self.pollers.items()):
            stream = self._spills.get(pid)
            if stream is not None and not os.path.exists(stream.path):
                # The raw folder became a profile or was made again (a new recording).
                stream.close()
                del self._spills[pid]
                stream = None
            if stream is None:
                raw = _raw_of(self.output, pid)
                if raw is None:
                    continue  # its raw folder is not there yet
                stream = self._spills[pid] = RawStream(raw / SPILL)
            stream.write(poller.state())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._spiller is not None:
            self._spiller.stop()
            self._spiller = None
        for stream in self._spills.values():
            stream.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._sock.close()
        for p in list(self.pollers.values()):
            p.stop()
        for t in list(self.telemetry.values()):
            t.stop()

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                self._take(conn)
            except Exception as e:  # one bad offer must not stop the others
                log.debug("stack offer: %s: %s", type(e).__name__, e)
            finally:
                conn.close()

    def _take(self, conn: socket.socket) -> None:
        conn.settimeout(OFFER_TIMEOUT_S)
        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        line = read_line(conn)
        if not line.endswith(b"\n"):
            return  # gone before it offered
        msg = json.loads(line)
        if uid != os.getuid() or msg.get("pid") != pid:
            conn.sendall(b"refused: not a process of this job\n")
            return
        # A process that records again (start, stop, start) offers again: it keeps
        # its pollers, whose samples and readings every one of its recordings takes
        # its own window of. A pid taken by a new process gets new ones.
        started = _start_time(pid)
        if self._started.get(pid) != started:
            self._forget(pid)
            self._started[pid] = started
        stacks: str | None = None
        poller = None
        if pid in self.pollers:
            stacks = "ok"
        elif "layout" in msg:
            poller = StackPoller(pid, self.rate_hz, self.clock)
            stacks = poller.attach(msg["layout"])
            if stacks == "ok":
                self.pollers[pid] = poller
            else:
                self.refused[pid] = stacks
        elif "error" in msg:
            self.refused[pid] = str(msg["error"])
        telemetry = bool(msg.get("telemetry")) and not self._stop.is_set()
        tele = None
        if telemetry and pid not in self.telemetry:
            from .outside import ChildPoller

            tele = self.telemetry[pid] = ChildPoller(pid, self.options)
        conn.sendall(json.dumps({"stacks": stacks, "telemetry": telemetry}).encode() + b"\n")
        self._event(pid).set()
        # Started after the answer: the process waits for it, not for them.
        if poller is not None and pid in self.pollers:
            poller.start()
        if tele is not None:
            tele.start()

    def _event(self, pid: int) -> threading.Event:
        with self._answered_lock:
            return self.answered.setdefault(pid, threading.Event())

    def wait_answered(self, pid: int, timeout: float) -> bool:
        """Wait until the offer of process ``pid`` is answered (``timeout`` seconds at
        most); whether it was. ``aiprof record`` starts polling its job's telemetry only
        then: the job waits for that answer, and the first readings (loading the device
        libraries) would hold this process's GIL while it is given."""
        return self._event(pid).wait(timeout)

    def _forget(self, pid: int) -> None:
        poller, tele = self.pollers.pop(pid, None), self.telemetry.pop(pid, None)
        if poller is not None:
            poller.stop()
        if tele is not None:
            tele.stop()

    def merge(self, raw_dir: Path) -> bool:
        """Put the samples (and telemetry) taken from the process that recorded
        ``raw_dir`` into its raw data, if it left them to us; True if it did."""
        try:
            manifest = json.loads((raw_dir / MANIFEST).read_text())
        except (OSError, ValueError):
            return False
        tele = self.telemetry.get(manifest.get("pid"))
        if tele is not None:
            tele.merge(raw_dir)
            manifest = json.loads((raw_dir / MANIFEST).read_text())
        poller = self.pollers.get(manifest.get("pid"))
        entry = (manifest.get("collectors") or {}).get("python") or {}
        if poller is None or not entry.get("file"):
            return False
        data = load_raw(raw_dir / entry["file"])
        if "outside" not in data:
            return False
        clock = manifest["clock"]
        poller.merge_into(data, int(clock["mono0"]), int(clock.get("mono1", 1 << 63)))
        write_atomic(raw_dir / entry["file"], encode_raw(data))
        (raw_dir / SPILL).unlink(missing_ok=True)  # merged whole: the spill is not needed
        if poller.failed and not entry.get("failed"):
            entry["failed"] = poller.failed
            write_atomic(raw_dir / MANIFEST, json.dumps(manifest, indent=1).encode())
        return True


def _raw_of(output: Path, pid: int) -> Path | None:
    """The raw folder in ``output`` that process ``pid`` records into, if there is one."""
    try:
        folders = [p for p in output.iterdir() if p.name.endswith(RAW_SUFFIX) and p.is_dir()]
    except OSError:
        return None
    for raw in folders:
        try:
            if json.loads((raw / MANIFEST).read_text()).get("pid") == pid:
                return raw
        except (OSError, ValueError):
            continue
    return None


def merge_spilled(raw_dir: Path, data: dict[str, Any], clock: dict[str, Any], pid: int) -> str | None:
    """Fill ``data`` (a process's ``python`` raw data, sampled from outside and not
    merged: aiprof record was killed) from the samples spilled into ``raw_dir``; returns
    a warning when the spill's last record was cut, else None."""
    path = raw_dir / SPILL
    if "outside" not in data or not path.is_file():
        return None
    state, cut = load_raw_cut(path)
    if not isinstance(state, dict):
        return None
    StackPoller.from_state(pid, state).merge_into(data, int(clock["mono0"]), int(clock.get("mono1", 1 << 63)))
    return f"{SPILL} ends in a cut record ({cut} bytes); the samples before it are kept" if cut else None


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or []
    if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), None if unknown."""
    stat = _stat(pid)
    return int(stat[19]) if len(stat) > 19 else None


__all__ = ["StackPoller", "StackServer"]
