"""Telemetry and Python stacks of ``aiprof record``'s job, taken from ``aiprof
record``'s own process.

System metrics (``/proc/<pid>`` of the job through psutil), device telemetry and the
Python stacks (read from the job's memory, :class:`StackPoller`) cost the job nothing
when another process takes them: no thread of the job takes its GIL, and the work
runs on another core. ``aiprof record`` polls its direct child; that child, told so
by :data:`ENV_POLLER` (the poller's pid, which is its parent's), records only its GC
pauses, steps and the schedule's windows (and samples its own stacks if they cannot
be read from outside). Any other recorded process of the job (the ranks of a
launcher) is not the poller's child and does all of it in-process, as a script using
:class:`~aiprof.record.Profiler` directly does.

After the job exits, :meth:`ChildPoller.merge` writes the readings into the child's
raw folder in the format its in-process collectors would have written (the same
``system``, ``device`` and ``python`` raw files), keeping those taken while it
recorded: the finalizer cannot tell them apart. Clocks: system readings and stack
samples are ``time.monotonic_ns()`` (CLOCK_MONOTONIC, the same in every process of the
machine), device readings Unix ns as always; both are aligned through the child's own
clock pairs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from .bootstrap import ENV_POLLER
from .collectors.base import Collector, PollingThread, fail
from .collectors.device import DeviceCollector
from .collectors.system import SystemCollector
from .controller import MANIFEST, RAW_DATA_SUFFIX, encode_raw, load_raw, write_atomic

log = logging.getLogger("aiprof.record")

#: Walks retried when a stack changed while it was read, before the sample is lost.
RETRIES = 2


class StackPoller:
    """Samples the Python stacks of one process by reading its memory (pystate).

    The job sends its interpreter's layout through a pipe (collectors.python_outside);
    this side checks it can read the job with it, answers "ok" (or why not, and the
    job samples itself), then samples every thread ``rate_hz`` times a second on a
    thread of ``aiprof record``. Stacks are interned as the in-process sampler does:
    a flat (code address, instruction) key per stack, and new ones walked into a tree
    of frames (parent, function, file, line).
    """

    def __init__(self, pid: int, rate_hz: float, read_fd: int, write_fd: int) -> None:
        self.pid = pid
        self.rate_hz = rate_hz
        self._rfd, self._wfd = read_fd, write_fd
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="aiprof-stacks", daemon=True)
        self.reader: Any = None
        self._poller: PollingThread | None = None
        self.refused: str | None = None
        self.ts: list[int] = []
        self.idents: list[int] = []
        self.tids: list[int] = []
        self.stacks: list[int] = []
        self.torn = 0
        """Walks dropped because the stack changed while it was read."""
        self.failed: str | None = None
        self._known: dict[tuple[int, ...], int] = {}
        self._nodes: dict[tuple[int, int, int], int] = {}
        self._frame_ids: dict[tuple[int, str, str, int], int] = {}
        self.frames: list[tuple[int, int, str, str, int]] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._poller is not None:
            self._poller.stop()
        if self.reader is not None:
            self.reader.mem.close()

    def _close(self) -> None:
        for attr in ("_rfd", "_wfd"):
            fd = getattr(self, attr)
            if fd >= 0:
                setattr(self, attr, -1)
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _serve(self) -> None:
        try:
            ok = self._handshake()
        finally:
            self._close()
        if ok and not self._stop.is_set():
            self._start_sampling()

    def _handshake(self) -> bool:
        import select

        from .pystate import MemReader, StackReader

        line = b""
        while not line.endswith(b"\n"):
            try:
                if not select.select([self._rfd], [], [], 0.2)[0]:
                    if self._stop.is_set():
                        return False
                    continue
                chunk = os.read(self._rfd, 65536)
            except (OSError, ValueError):
                return False
            if not chunk:
                return False  # the job never offered (not recorded, or gone)
            line += chunk
        try:
            msg = json.loads(line)
        except ValueError:
            return False
        if "layout" not in msg:
            self.refused = str(msg.get("error", "no layout"))
            return False
        answer = "ok"
        try:
            reader = StackReader(MemReader(self.pid), msg["layout"])
            if not reader.threads():
                answer = "cannot find the job's threads in its memory"
        except OSError as e:
            answer = f"cannot read the job's memory: {e.strerror or e}"
        except (KeyError, TypeError, ValueError) as e:
            answer = f"bad layout: {e}"
        try:
            os.write(self._wfd, answer.encode() + b"\n")
        except OSError:
            return False
        if answer != "ok":
            self.refused = answer
            return False
        self.reader = reader
        return True

    def _start_sampling(self) -> None:
        def tick() -> None:
            if not self.sample() and self._poller is not None:
                self._poller.stop()  # the job is gone

        def failed(e: BaseException) -> None:
            self.failed = f"sampling: {type(e).__name__}: {e}"
            log.warning("collector python failed (%s); it stops, the job runs on", self.failed)

        self._poller = PollingThread("aiprof-stacks-sampler", 1.0 / self.rate_hz, tick, failed, set())
        self._poller.start()

    def sample(self) -> bool:
        """Take one sample of every thread; False once the process cannot be read."""
        reader = self.reader
        now = time.monotonic_ns()
        threads = reader.threads()
        if not threads:
            return os.path.exists(f"/proc/{self.pid}/mem") and self._alive()
        for ident, native, frame, tstate in threads:
            walk = reader.walk(frame)
            for _ in range(RETRIES):
                if walk is not None:
                    break
                # Read while it changed: once more, from the thread's frame now.
                frame = reader.current_frame(tstate)
                walk = reader.walk(frame) if frame else None
            if walk is None:
                self.torn += 1
                continue
            key = tuple(walk)
            leaf = self._known.get(key)
            if leaf is None:
                leaf = self._intern(walk)
                if leaf < 0:
                    self.torn += 1
                    continue
                if len(self._known) >= 20_000:
                    self._known.clear()
                self._known[key] = leaf
            self.ts.append(now)
            self.idents.append(ident)
            self.tids.append(native)
            self.stacks.append(leaf)
        return True

    def _alive(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except OSError:
            return False

    def _intern(self, walk: list[int]) -> int:
        from .pystate import line_of

        reader = self.reader
        parent = -1
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

    def merge_into(self, data: dict[str, Any], lo: int, hi: int) -> None:
        """Fill the job's ``python`` raw data (:class:`OutsideSampler`'s) with the
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


class ChildPoller:
    """Polls one process's system metrics and the devices from outside it."""

    def __init__(self, pid: int, options: dict[str, Any], stack_fds: tuple[int, int] | None = None) -> None:
        self.pid = pid
        self.stacks: StackPoller | None = None
        """Samples the job's Python stacks, if the job offers its layout through
        ``stack_fds`` (our ends of the pipes: read, write)."""
        if stack_fds is not None:
            self.stacks = StackPoller(pid, float(options.get("rate", 100.0)), *stack_fds)
        host = options.get("host")
        self.system: SystemCollector | None = None
        if host is None or "system" in host:
            self.system = SystemCollector(pid=pid, listen_gc=False)
        self.device: DeviceCollector | None = None
        device = options.get("device", True)
        if device:
            self.device = DeviceCollector(backends=None if isinstance(device, bool) else list(device))

    @property
    def collectors(self) -> list[Collector]:
        return [c for c in (self.system, self.device) if c is not None]

    def start(self) -> None:
        if self.stacks is not None:
            self.stacks.start()
        for c in self.collectors:
            try:
                c.start()
            except Exception as e:
                if type(e).__name__ not in ("NoSuchProcess", "ZombieProcess"):
                    fail(c, e, "starting")

    def stop(self) -> None:
        if self.stacks is not None:
            self.stacks.stop()
        for c in self.collectors:
            try:
                c.stop()
            except Exception as e:
                log.debug("stopping %s: %s", c.name, e)

    def merge(self, raw_dir: Path) -> bool:
        """Add the readings (and the stack samples) to ``raw_dir`` if it is the polled
        process's recording and that recording left its telemetry to this poller;
        True if it did."""
        mpath = raw_dir / MANIFEST
        try:
            manifest = json.loads(mpath.read_text())
        except (OSError, ValueError):
            return False
        if manifest.get("pid") != self.pid or not (manifest.get("options") or {}).get("telemetry_outside"):
            return False
        clock = manifest["clock"]
        entries: dict[str, Any] = manifest["collectors"]
        py = entries.get("python") or {}
        if self.stacks is not None and self.stacks.reader is not None and py.get("file"):
            pydata = load_raw(raw_dir / py["file"])
            if "outside" in pydata:
                self.stacks.merge_into(pydata, int(clock["mono0"]), int(clock.get("mono1", 1 << 63)))
                write_atomic(raw_dir / py["file"], encode_raw(pydata))
                py["failed"] = py.get("failed") or self.stacks.failed
        if self.system is not None:
            lo, hi = int(clock["mono0"]), int(clock.get("mono1", 1 << 63))
            ours = self.system.dump(raw_dir)
            entry = entries.setdefault("system", {"failed": None})
            data: dict[str, Any] = {"series": {}, "units": ours["units"], "gc": []}
            if entry.get("file"):
                data = load_raw(raw_dir / entry["file"])
            for metric, (ts, vals) in ours["series"].items():
                keep = [i for i, t in enumerate(ts) if lo <= t <= hi]
                if keep:
                    data["series"][metric] = [[ts[i] for i in keep], [vals[i] for i in keep]]
            entry["file"] = "system" + RAW_DATA_SUFFIX
            write_atomic(raw_dir / entry["file"], encode_raw(data))
            entry["failed"] = entry.get("failed") or self.system.failed
        if self.device is not None:
            lo, hi = int(clock["unix0"]), int(clock.get("unix1", 1 << 63))
            dev = self.device.dump(raw_dir)
            dev["samples"] = [s for s in dev["samples"] if lo <= s[2] <= hi]
            entries["device"] = {"failed": self.device.failed, "file": "device" + RAW_DATA_SUFFIX}
            write_atomic(raw_dir / entries["device"]["file"], encode_raw(dev))
        write_atomic(mpath, json.dumps(manifest, indent=1).encode())
        return True


__all__ = ["ENV_POLLER", "ChildPoller", "StackPoller"]
