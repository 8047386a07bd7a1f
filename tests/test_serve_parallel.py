"""Queries on one profile run in parallel (issue 19): each request takes a connection of
its own (:meth:`Entry.reading`), the views' cache is shared, and parallel answers are
the answers one client gets. A real profile (the V100 Kineto trace), a real server."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from aiprof.analysis import Query, run
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.web.library import POOL, ApiError, Library, query_view
from test_serve_support import running_server

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    import_paths([shared_data / V100], root / "r0.aiprof")
    return root


@pytest.fixture
def lib(served: Path) -> Iterator[Library]:
    lib = Library([served])
    yield lib
    lib.close()


def _busy(lock: Any) -> tuple[threading.Event, threading.Event]:
    """Hold ``lock`` from another thread until the returned ``release`` is set."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(60)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(60)
    return held, release


def test_a_view_is_answered_while_the_served_connection_is_busy(lib: Library, served: Path) -> None:
    e = lib.get("r0.aiprof")
    _, release = _busy(e.lock)  # a long timeline build, say
    try:
        got = query_view(e, "kernels", Query(limit=5), {})
        assert e.opened == 1 and len(e.idle) == 1  # answered on a connection of its own, kept
        # Paging the kept table needs no connection at all.
        again = query_view(e, "kernels", Query(limit=5, offset=5), {})
        assert e.opened == 1
    finally:
        release.set()
    with open_profile(served / "r0.aiprof") as p:
        want = run(p, "kernels", Query(limit=10), {}).table.to_pylist()
    # Equal but for the last digits of float sums (DuckDB adds in parallel, in any order).
    assert got.table.to_pylist() + again.table.to_pylist() == [pytest.approx(r) for r in want]
    assert got.total == again.total > 10


def test_an_open_profile_is_handed_out_while_its_timeline_builds(lib: Library) -> None:
    # The timeline builds under the served connection's lock (tens of seconds on 1,000
    # ranks): a request for a view must get the entry and an extra connection meanwhile.
    e = lib.get("r0.aiprof")
    assert e.timeline is not None and e.timeline.lock is e.lock
    _, release = _busy(e.lock)
    got: list[Any] = []
    try:
        t = threading.Thread(target=lambda: got.append(query_view(lib.get("r0.aiprof"), "ranks", Query(), {})))
        t.daemon = True
        t.start()
        t.join(30)  # the lock is held for 60 s: waiting for it would leave got empty
        assert got and got[0].total == 1 and e.opened == 1
    finally:
        release.set()


def test_the_pool_is_bounded_and_then_waits_for_the_served_connection(lib: Library) -> None:
    e = lib.get("r0.aiprof")
    started = threading.Barrier(POOL + 1)
    done = threading.Event()

    def hold_one() -> None:
        with e.reading():
            started.wait(60)
            done.wait(60)

    _, release = _busy(e.lock)
    threads = [threading.Thread(target=hold_one, daemon=True) for _ in range(POOL)]
    for t in threads:
        t.start()
    started.wait(60)  # every extra connection is in use
    assert e.opened == POOL
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(query_view(e, "steps", Query(), {})))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not got  # no fifth extra connection: it waits
    release.set()  # the served connection is free again
    waiter.join(60)
    done.set()
    for t in threads:
        t.join(60)
    assert got and got[0].total > 0 and e.opened == POOL


def test_an_extra_connection_refuses_a_link_made_after_the_first_open(
    shared_data: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path / "served"
    root.mkdir()
    import_paths([shared_data / V100], root / "p.aiprof")
    lib = Library([root])
    try:
        e = lib.get("p.aiprof")
        outside = tmp_path_factory.mktemp("outside")
        shutil.copy(root / "p.aiprof" / "events.parquet", outside / "events.parquet")
        (root / "p.aiprof" / "events.parquet").unlink()
        os.symlink(outside / "events.parquet", root / "p.aiprof" / "events.parquet")
        _, release = _busy(e.lock)
        try:
            with pytest.raises(ApiError) as err, e.reading():
                pass
        finally:
            release.set()
        assert err.value.status == 409 and "links outside the served folder" in err.value.message
        assert e.opened == 0
    finally:
        lib.close()


def test_parallel_clients_get_the_answers_of_one_client(served: Path) -> None:
    with running_server(served) as (base, _), httpx.Client(base_url=base + "api/v1", timeout=120) as c:
        p = "/profiles/r0.aiprof"
        paths = [
            "/profiles",
            p + "/views/overview",
            p + "/views/steps?limit=20",
            p + "/views/kernels?limit=20&sort=-count",
            p + "/views/operators?limit=20&offset=20&sort=name",
            p + "/views/memory?limit=10",
            p + "/samples/window?width=400",
            p + "/timeline/summary?width=400",
            p + "/advice",
        ]

        # Many at once first (nothing computed yet: the advice and the views race to
        # be computed), then one client alone.
        alone = _same_together_as_alone(base, c, paths, 12)
    assert alone[p + "/advice"]["available"] is True and alone[p + "/advice"]["advice"]


def _timeline_calls(e: Any) -> list[tuple[str, Any]]:
    """Timeline answers of many kinds over one profile: windows, summaries, search,
    events, tracks, counter list and memory series."""
    from aiprof.web.series import SeriesQuery
    from aiprof.web.timeline import Window

    tl = e.timeline
    tl.build()
    a, b = tl.span
    cuts = [(a, b), (a + (b - a) // 3, a + (b - a) // 2), (a + (b - a) // 2, a + (b - a) // 2 + (b - a) // 200)]
    first = tl.window(Window(*cuts[1], 1200))["items"]
    one = next(i for i, n in enumerate(first["n"]) if n == 1)
    sq = SeriesQuery(e.profile, e.series_lock, e.series_cache, e.reading)
    calls: list[tuple[str, Any]] = [("tracks", tl.tracks)]
    for k, (t0, t1) in enumerate(cuts):
        calls += [
            (f"window {k}", lambda t0=t0, t1=t1: tl.window(Window(t0, t1, 1000))),
            (f"window {k} tracks", lambda t0=t0, t1=t1: tl.window(Window(t0, t1, 700, (0, 1)))),
            (f"summary {k}", lambda t0=t0, t1=t1: tl.summary(Window(t0, t1, 800))),
            (f"memory {k}", lambda t0=t0, t1=t1: sq.memory(Window(t0, t1, 500))),
        ]
    calls += [
        ("search", lambda: tl.search("gemm")),
        ("search -dur", lambda: tl.search("memcpy|sgemm", regex=True, order="-dur", limit=50)),
        ("event", lambda: tl.events_at(first["track"][one], first["ts"][one])),
        ("counters", sq.metrics),
    ]
    return calls


def test_timeline_answers_run_on_extra_connections_and_equal_serial_ones(lib: Library, served: Path) -> None:
    e = lib.get("r0.aiprof")
    calls = _timeline_calls(e)
    _, release = _busy(e.lock)  # the served connection held: before, every timeline answer waited
    try:
        with ThreadPoolExecutor(1) as one:
            got = {name: one.submit(fn).result(timeout=60) for name, fn in calls}
        assert 1 <= e.opened <= POOL
    finally:
        release.set()
    # The same questions to a timeline of a profile opened alone, one at a time.
    lone = Library([served])
    try:
        want = {name: fn() for name, fn in _timeline_calls(lone.get("r0.aiprof"))}
    finally:
        lone.close()
    assert got == want
    assert got["search"]["total"] > 0 and got["event"] and got["summary 0"]["events"] > 0


def test_parallel_timeline_answers_keep_to_the_pool(lib: Library) -> None:
    e = lib.get("r0.aiprof")
    calls = _timeline_calls(e)
    serial = {name: fn() for name, fn in calls}
    most, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            most[0] = max(most[0], e.opened)
            stop.wait(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda c: (c[0], c[1]()), calls * 4))
    finally:
        stop.set()
        watcher.join()
    assert len(together) == 4 * len(calls)
    for name, body in together:
        assert body == serial[name], name
    assert most[0] <= POOL and e.opened <= POOL and len(e.idle) == e.opened


def test_parallel_clients_get_the_timeline_answers_of_one_client(served: Path) -> None:
    with running_server(served) as (base, _), httpx.Client(base_url=base + "api/v1", timeout=120) as c:
        p = "/profiles/r0.aiprof"
        a, b = c.get(p).json()["span_ns"]
        mid = a + (b - a) // 2
        win = c.get(p + f"/timeline?t0={mid}&t1={mid + (b - a) // 100}&width=900").json()["items"]
        k = win["n"].index(1)
        paths = [p + "/tracks", p + f"/timeline/event?track={win['track'][k]}&ts={win['ts'][k]}"]
        for t0, t1 in ((a, b), (a + (b - a) // 4, mid), (mid, mid + (b - a) // 100)):
            paths += [
                p + f"/timeline?t0={t0}&t1={t1}&width=1000",
                p + f"/timeline?t0={t0}&t1={t1}&width=600&tracks=0,1,2",
                p + f"/timeline/summary?t0={t0}&t1={t1}&width=800",
                p + f"/memory/series?t0={t0}&t1={t1}&width=500",
            ]
        paths += [p + "/timeline/search?q=gemm&order=-dur&limit=40", p + "/timeline/search?q=Memcpy", p + "/counters"]

        alone = _same_together_as_alone(base, c, paths, 16)
    assert alone[paths[1]]["events"] and alone[paths[-2]]["total"] > 0


def _same_together_as_alone(base: str, c: httpx.Client, paths: list[str], threads: int) -> dict[str, Any]:
    """Each path asked three times by ``threads`` clients at once, then once by ``c``
    alone: every answer is 200 and equals the lone one. Returns the lone answers."""

    def fetch(path: str) -> tuple[str, int, Any]:
        with httpx.Client(base_url=base + "api/v1", timeout=120) as own:
            r = own.get(path)
            return path, r.status_code, r.json()

    with ThreadPoolExecutor(threads) as pool:
        together = list(pool.map(fetch, paths * 3))
    alone = {path: c.get(path).json() for path in paths}
    assert all(status == 200 for _, status, _ in together), [(q, s) for q, s, _ in together if s != 200]
    for path, _, body in together:
        assert body == alone[path], path
    return alone
