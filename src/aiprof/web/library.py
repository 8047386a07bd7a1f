"""The profiles the server serves, by id, and the analyser results kept per profile.

:meth:`Library.scan` is the one place that lists the served folders. Safety by
construction: a profile is addressed by an id from the table built when the folders
are scanned, never by a request value joined to a path; a profile folder, or a file
in it, that resolves outside its served folder (a symlink out) is listed as broken,
and checked again when the profile is opened.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..analysis import Query, Result, run, views
from ..analysis.operators import NEST_HOST_SPANS, big_profile
from ..cluster.index import INDEX_META
from ..cluster.opened import is_job, open_job
from ..errors import AiprofError
from ..store import PROFILE_SUFFIX, Profile, open_profile
from ..store.library import discover, is_run, rank_profiles
from ..store.reader import _read_meta
from ..store.readonly_sql import ReadOnlySql
from ..store.writer import META_FILE
from .jsonio import dumps
from .timeline import Timeline

log = logging.getLogger("aiprof.serve")
T = TypeVar("T")

#: Analyser results kept per profile (the full table of a view, before the query),
#: and the largest table worth keeping.
CACHE_VIEWS = 32
CACHE_ROWS = 200_000
#: Connections of their own a profile may open for requests that find its first one
#: busy (each an ``open_profile``: its own DuckDB database, views and memo).
POOL = 4
#: Views computed in the background when the server starts, after the timeline.
WARM_VIEWS = ("overview", "steps", "kernels", "operators", "memory")
#: The niceness the warm-up's process of views runs at (0: it is stopped while
#: requests are in flight instead; niced, it came minutes late on a busy machine, and a
#: request that waits for one of its views waited on a starved process), and how long the server must have had no API request in flight before the
#: warm-up goes on (its process is stopped meanwhile; its in-process steps wait, at most
#: ``QUIET_MOST_S`` each).
WARM_NICE = 0
QUIET_S = 1.0
QUIET_MOST_S = 30.0


class ApiError(Exception):
    """An error with an HTTP status and a one-line message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Entry:
    """One profile in a served folder."""

    id: str
    path: Path
    root: Path
    error: str | None = None
    profile: Profile | None = None
    timeline: Timeline | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    cache: OrderedDict[str, Result] = field(default_factory=OrderedDict)
    """Full analyser results by (view, params): pages, sorts and filters reuse them."""
    cache_lock: threading.Lock = field(default_factory=threading.Lock)
    series_cache: dict[str, Any] = field(default_factory=dict)
    """Window-independent series answers (memory peaks), see series.SeriesQuery."""
    series_lock: threading.RLock = field(default_factory=threading.RLock)
    """Guards the fill of ``series_cache``."""
    name: str = ""
    """Readable and unique: the path below the served folder (store.library)."""
    sql: ReadOnlySql | None = None
    """The SQL page's read-only connection (made on its first query)."""
    sql_lock: threading.Lock = field(default_factory=threading.Lock)
    """Guards the making of ``sql`` (not ``lock``: the timeline's build holds that)."""
    answers: dict[str, Any] = field(default_factory=dict)
    """Answers that depend on nothing but the profile (its advice), see :meth:`once`."""
    idle: list[Profile] = field(default_factory=list)
    """Extra connections not in use (see :meth:`reading`)."""
    opened: int = 0
    pool_lock: threading.Lock = field(default_factory=threading.Lock)
    warming: dict[str, threading.Event] = field(default_factory=dict)
    """The views the warm-up's process is computing (by cache key), set when each comes."""
    activity: Activity | None = None
    stamp: tuple[int, ...] | None = None
    """What :func:`_stamp` read when the entry was made: a profile imported again in its
    place (or upgraded) reads otherwise, and the entry is then made anew."""
    _once_locks: dict[str, threading.Lock] = field(default_factory=dict)

    def once(self, key: str, compute: Callable[[Profile], T]) -> T:
        """``compute(profile)`` the first time ``key`` is asked for, then kept (profiles
        are read-only while served); requests that come meanwhile wait for that one."""
        with self.pool_lock:
            lock = self._once_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self.answers:
                with self.reading() as prof:
                    self.answers[key] = compute(prof)
            value: T = self.answers[key]
            return value

    @contextmanager
    def reading(self) -> Iterator[Profile]:
        """A profile (DuckDB connection) that this request thread alone uses.

        The served one when it is free; else an extra one (up to ``POOL``, opened on
        demand and kept), so that queries on one profile run in parallel; when all are
        busy, the served one once it is free. The timeline builds its tables on the
        served one under ``lock``, then registers them on whichever it is handed.
        """
        if self.lock.acquire(blocking=False):
            try:
                assert self.profile is not None
                yield self.profile
            finally:
                self.lock.release()
            return
        with self.pool_lock:
            prof = self.idle.pop() if self.idle else None
            new = prof is None and self.opened < POOL
            if new:
                self.opened += 1
        if prof is None and not new:
            with self.lock:
                assert self.profile is not None
                yield self.profile
            return
        if prof is None:
            try:
                # Each open is checked, as the first one was: a link made since is refused.
                reason = _outside_reason(self.path, self.root)
                if reason is not None:
                    raise ApiError(409, f"profile {self.id!r} is broken: {reason}")
                prof = _open(self.path)
            except BaseException:
                with self.pool_lock:
                    self.opened -= 1
                raise
        try:
            yield prof
        finally:
            with self.pool_lock:
                self.idle.append(prof)

    def close(self) -> None:
        with self.pool_lock:
            idle, self.idle = self.idle, []
            self.opened -= len(idle)
        for p in idle:
            p.close()

    def summary(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "name": self.name or self.path.name,
            "status": "broken" if self.error else "ok",
        }
        if self.error:
            d["error"] = self.error
        return d


def _scrub(message: str, path: Path) -> str:
    """A message without the server's absolute paths (the client knows only names)."""
    return message.replace(str(path.resolve()), path.name).replace(str(path), path.name)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return True


def _outside_reason(path: Path, root: Path) -> str | None:
    if not _inside(path, root):
        return "the profile links outside the served folder"
    for f in path.iterdir():
        if not _inside(f, root):
            return f"{f.name} links outside the served folder"
    return None


class Activity:
    """How many API requests are in flight and when the last one ended: the warm-up
    waits for a quiet moment before each of its steps (see :func:`warm_up`)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.in_flight = 0
        #: Requests in flight that wait on the warm-up's result (see warm_up_may_run).
        self.waiters = 0
        #: The server's start counts as a request's end: a browser opened at once finds
        #: the warm-up still waiting.
        self.last_end = time.monotonic()

    @contextmanager
    def _counted(self, waiter: bool) -> Iterator[None]:
        with self._cond:
            self.waiters += waiter
            self.in_flight += not waiter
        try:
            yield
        finally:
            with self._cond:
                self.waiters -= waiter
                self.in_flight -= not waiter
                if not waiter:
                    self.last_end = time.monotonic()
                self._cond.notify_all()

    def request(self) -> AbstractContextManager[None]:
        """Counts an API request in flight while the context lasts."""
        return self._counted(False)

    def waiting(self) -> AbstractContextManager[None]:
        """Marks a request in flight as waiting on the warm-up (which then goes on)."""
        return self._counted(True)

    def warm_up_may_run(self, quiet_s: float = QUIET_S) -> bool:
        """True when every request in flight waits on the warm-up (and one does), or
        when none has been in flight for ``quiet_s``."""
        with self._cond:
            if self.in_flight:
                return self.waiters >= self.in_flight
            return time.monotonic() - self.last_end >= quiet_s

    def wait_quiet(self, quiet_s: float = QUIET_S, most_s: float = QUIET_MOST_S) -> bool:
        """Wait until no request has been in flight for ``quiet_s`` (at most ``most_s``
        in all); True when it was quiet, False when the wait ran out."""
        end = time.monotonic() + most_s
        with self._cond:
            while True:
                now = time.monotonic()
                idle = now - self.last_end
                if not self.in_flight and idle >= quiet_s:
                    return True
                if now >= end:
                    return False
                # A request's end wakes this up; else the quiet time left.
                self._cond.wait(end - now if self.in_flight else min(end - now, quiet_s - idle))


class Library:
    """The profiles of the served folders, by id; opened on first use."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self.activity = Activity()
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        #: How long the last :meth:`scan` took (s).
        self.scan_seconds = 0.0
        self.scan()

    def scan(self) -> list[Entry]:
        """(Re)list the profiles; profiles already open stay open."""
        t = time.perf_counter()
        try:
            return self._scan()
        finally:
            self.scan_seconds = time.perf_counter() - t

    def _scan(self) -> list[Entry]:
        with self._lock:
            found: list[tuple[Path, Path, str]] = []
            for root in self.roots:
                if (root / META_FILE).exists() or root.name.endswith(PROFILE_SUFFIX):
                    found.append((root, root, root.name))
                    continue
                found += [(f.path, root, f.name) for f in discover(root)]
                # A folder named like a profile but broken is listed, with its error (not
                # the rank profiles of a run served as the root: they are the run).
                children = sorted(root.iterdir()) if root.is_dir() and not is_run(root) else []
                listed = {f[0] for f in found}
                # The ranks of a run (the served folder itself may be one) are the run's.
                listed |= {r for f in found if is_run(f[0]) for r in rank_profiles(f[0])}
                found += [(c, root, c.name) for c in children if c.name.endswith(PROFILE_SUFFIX) and c not in listed]
            by_path = {e.path: e for e in self._entries.values()}
            entries: dict[str, Entry] = {}
            for path, root, name in found:
                old = by_path.get(path)
                if old is not None:
                    entries[old.id] = old
                    continue
                base = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name) or "profile"
                pid, n = base, 2
                while pid in entries or pid in self._entries:
                    pid, n = f"{base}-{n}", n + 1
                entries[pid] = self._entry(pid, path, root, name)
            self._entries = entries
            return list(entries.values())

    def _entry(self, pid: str, path: Path, root: Path, name: str) -> Entry:
        stamp = _stamp(path)
        return Entry(pid, path, root, error=self._check(path, root), name=name, activity=self.activity, stamp=stamp)

    @staticmethod
    def _check(path: Path, root: Path) -> str | None:
        if not _inside(path, root):
            return "the profile links outside the served folder"
        if is_run(path):
            return None if all(Library._check(r, root) is None for r in rank_profiles(path)) else "a rank is broken"
        if not (path / META_FILE).is_file():
            return f"no {META_FILE}"
        reason = _outside_reason(path, root)
        if reason:
            return reason
        try:
            _read_meta(path)
        except AiprofError as e:
            return _scrub(str(e), path)
        return None

    def current(self, pid: str) -> Entry | None:
        """The entry listed as ``pid`` now (opened or not), or None. A profile that was
        written again in its place since its entry was made (``aiprof import`` to the
        same output, an upgrade) gets a new entry under the same id: nothing computed
        from the old files (views, advice, kept answers) is served for the new ones."""
        e = self._entries.get(pid)
        if e is None or e.stamp == _stamp(e.path):
            return e
        with self._lock:
            now = self._entries.get(pid)
            if now is e:
                now = self._entries[pid] = self._entry(pid, e.path, e.root, e.name)
                e.close()  # its idle connections (one in use ends with its request)
                log.info("%s changed on disk: served anew", pid)
            return now

    def get(self, pid: str) -> Entry:
        """The opened entry ``pid``; 404 when unknown, 409 when broken."""
        e = self.current(pid)
        if e is None:
            raise ApiError(404, f"no profile {pid!r}")
        if e.error is None and e.timeline is not None:
            # Open already: no lock. The served connection's lock is held while the
            # timeline builds its tables (tens of seconds on 1,000 ranks), and requests
            # that need no timeline must not wait for it.
            return e
        with e.lock:
            if e.error is None and e.profile is None:
                # Checked again at open time: a link may have been made since the scan.
                e.error = _outside_reason(e.path, e.root)
            if e.error is None and e.profile is None:
                try:
                    # A many-rank job folder opens through its cluster index, as in the CLI.
                    e.profile = _open(e.path)
                    e.profile.con.execute("SELECT count(*) FROM events").fetchall()
                    tl = Timeline(e.profile, reading=e.reading)
                    tl.lock = e.lock
                    e.timeline = tl  # last: a set timeline means the entry is open
                except Exception as ex:
                    msg = str(ex).splitlines()[0] if str(ex) else type(ex).__name__
                    e.error = "cannot open: " + _scrub(msg, e.path)
                    if e.profile is not None:
                        e.profile.close()
                    e.profile = None
            if e.error is not None:
                raise ApiError(409, f"profile {pid!r} is broken: {e.error}")
        return e

    def close(self) -> None:
        for e in self._entries.values():
            e.close()
            with e.lock:
                if e.profile is not None:
                    e.profile.close()
                    e.profile = None
                if e.sql is not None:
                    e.sql.close()
                    e.sql = None


def _stamp(path: Path) -> tuple[int, ...] | None:
    """(inode, mtime ns, size) of what a profile is rewritten through: its profile.json,
    a job folder's index.json, else (a run of rank profiles) the folder itself, whose
    entries change when a rank is written again; None when it cannot be read."""
    for f in (path / META_FILE, path / INDEX_META, path):
        try:
            st = f.stat()
        except OSError:
            continue
        return (st.st_ino, st.st_mtime_ns, st.st_size)
    return None


def query_view(e: Entry, view: str, q: Query, params: dict[str, Any], profile: Profile | None = None) -> Result:
    """``run(view)`` once per (view, params) for all rows, then the query on that table.

    The analyser runs through :func:`run` exactly as the CLI runs it; the page, sort and
    filters of later requests are applied by the same :meth:`Query.apply` to the kept
    table, so paging through a view does not recompute it. ``profile``: the profile
    (connection) to use; by default one from :meth:`Entry.reading`, taken only when
    the table is not kept yet (a kept one is paged without any connection).
    """
    key = _cache_key(view, params)
    with e.cache_lock:
        full = e.cache.get(key)
        if full is not None:
            e.cache.move_to_end(key)
    if full is None and profile is None:
        # The warm-up's process computes it: wait for that (it goes on while every
        # request in flight waits on it) rather than compute it twice.
        pending = e.warming.get(key)
        if pending is not None and not pending.is_set():
            if e.activity is not None:
                with e.activity.waiting():
                    pending.wait()
            else:
                pending.wait()
            with e.cache_lock:
                full = e.cache.get(key)
    if full is None:
        if profile is not None:
            full = run(profile, view, Query(), params)
        else:
            with e.reading() as prof:
                full = run(prof, view, Query(), params)
        _keep(e, key, full)
    eff = q if q.sort else Query(q.filters, list(full.query.sort), q.limit, q.offset)
    page, total = eff.apply(full.table)
    return Result(view, page, total, eff, full.units)


def is_kept(e: Entry, view: str, params: dict[str, Any]) -> bool:
    """Whether ``view`` (with ``params``) is computed and kept for ``e``."""
    with e.cache_lock:
        return _cache_key(view, params) in e.cache


def _cache_key(view: str, params: dict[str, Any]) -> str:
    return view + "\x00" + dumps(params).decode()


def _keep(e: Entry, key: str, full: Result) -> None:
    """Keep a view's full table (unless it is too big to)."""
    if full.table.num_rows <= CACHE_ROWS:
        with e.cache_lock:
            e.cache[key] = full
            e.cache.move_to_end(key)
            while len(e.cache) > CACHE_VIEWS:
                e.cache.popitem(last=False)


def warm_up(lib: Library, quiet_s: float = QUIET_S) -> None:
    """Prepare each profile so that the first pages a user opens are fast, without
    slowing the requests that come meanwhile. Runs in a daemon thread; failures only log.

    First the timeline's tables (in this process: windows are answered from them), each
    step once no API request has been in flight for ``quiet_s``; then the common views
    (:data:`WARM_VIEWS`), in a process of their own at the lowest priority: computing
    the operators view takes seconds of Python on millions of events, and in a thread
    here it held the interpreter lock and a core while the timeline's windows waited.
    Its results come back as the tables :func:`query_view` keeps; a view a request asks
    for before they come is computed for that request as without a warm-up.
    """
    for e in lib.scan():
        if e.error is not None:
            continue
        try:
            entry = lib.get(e.id)
            assert entry.timeline is not None and entry.profile is not None
            # A many-rank job's timeline is built from every rank's events (minutes on
            # 1,000 ranks, while its views read summaries): its views first.
            job = is_job(entry.path)
            if not job:
                entry.timeline.build()
            # A big profile's operators and allocations take minutes and GiBs: computed
            # when asked (routes.view_deferred), never ahead.
            later = NEST_HOST_SPANS if big_profile(entry.profile.metas) is not None else ()
            names = [v for v in WARM_VIEWS if v in views() and v not in later]
            views_done = _warm_views(entry, names, quiet_s)
            if job:
                views_done.join()
                entry.timeline.build()
            lib.activity.wait_quiet(quiet_s)
            entry.timeline.build_events()
            views_done.join()
        except Exception:
            log.debug("warm-up of %s failed", e.id, exc_info=True)


def _warm_views(entry: Entry, names: list[str], quiet_s: float = QUIET_S) -> threading.Thread:
    """Compute ``names`` on ``entry``'s profile in a child process (spawned: this one
    runs threads) at niceness :data:`WARM_NICE`, keeping each table as it comes. The
    child is stopped (SIGSTOP) while any API request is in flight that does not wait
    for one of these views, and goes on (SIGCONT) once the server has been quiet for
    ``quiet_s``. Returns the thread that does this; it ends with the child."""
    todo = [v for v in names if _cache_key(v, {}) not in entry.cache]
    thread = threading.Thread(target=lambda: None)
    if not todo:
        thread.start()
        return thread
    for v in todo:
        entry.warming.setdefault(_cache_key(v, {}), threading.Event())
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    # Daemonic: ended when the server exits, whatever it is computing.
    proc = ctx.Process(target=_views_child, args=(str(entry.path), todo, send), name="aiprof-warm-views", daemon=True)
    proc.start()
    send.close()
    if not _CHILDREN:
        # Registered after multiprocessing's own exit handler (which Process.start
        # registers), so that it runs first: exit handlers run last-registered first.
        atexit.unregister(_end_children)
        atexit.register(_end_children)
    _CHILDREN.add(proc)
    activity = entry.activity or Activity()

    def govern() -> None:
        stopped = False
        try:
            while True:
                if recv.poll(0.05):
                    try:
                        view, full = recv.recv()
                    except EOFError:
                        break
                    key = _cache_key(view, {})
                    if isinstance(full, Result):
                        _keep(entry, key, full)
                    else:
                        log.debug("warm-up of view %s of %s failed: %s", view, entry.id, full)
                    entry.warming.pop(key, threading.Event()).set()
                    continue
                if not proc.is_alive():
                    break
                if activity.warm_up_may_run(quiet_s) == stopped:
                    stopped = not stopped
                    _signal(proc, signal.SIGSTOP if stopped else signal.SIGCONT)
        except OSError:
            log.debug("warm-up of %s: its process failed", entry.id, exc_info=True)
        finally:
            if stopped:
                _signal(proc, signal.SIGCONT)
            for v in todo:  # no request waits for a view that will not come
                entry.warming.pop(_cache_key(v, {}), threading.Event()).set()
            recv.close()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
            _CHILDREN.discard(proc)

    thread = threading.Thread(target=govern, name="aiprof-warm-views", daemon=True)
    thread.start()
    return thread


#: The warm-up's processes alive: continued and ended when the server exits (a stopped
#: process would not end on the SIGTERM that multiprocessing sends its daemonic children).
_CHILDREN: set[Any] = set()


def _signal(proc: Any, sig: int) -> None:
    try:
        if proc.pid is not None and proc.is_alive():
            os.kill(proc.pid, sig)
    except (OSError, ValueError):
        pass


def _end_children() -> None:
    for proc in list(_CHILDREN):
        _signal(proc, signal.SIGCONT)
        _signal(proc, signal.SIGTERM)


def _views_child(path: str, names: list[str], send: Any) -> None:
    """The warm-up's process: each view's full table, sent as it is computed, on a
    profile of its own (its own connection and memo: a cursor of the served one does
    not see the objects registered on it, and a shared memo then kept intermediates
    computed without them, so later advice lost rules)."""
    try:
        os.nice(WARM_NICE)
    except OSError:
        pass
    prof = _open(Path(path))
    try:
        for view in names:
            try:
                full: Result | str = run(prof, view, Query(), {})
            except Exception as ex:
                full = f"{type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}"
            send.send((view, full))
    except (BrokenPipeError, EOFError):
        pass  # the server is gone
    finally:
        prof.close()
        send.close()


def _open(path: Path) -> Profile:
    """A served profile: a many-rank job folder through its cluster index, as in the CLI."""
    return open_job(path) if is_job(path) else open_profile(path)
