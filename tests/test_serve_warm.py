"""The server's warm-up (web/library.py warm_up): its process of views is stopped while
requests are in flight, goes on for a request that waits on it, and its tables are what
the views compute."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from aiprof.analysis import Query, run
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.web import library
from aiprof.web.library import WARM_VIEWS, Library, _cache_key, query_view, warm_up


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _until(cond: object, most_s: float) -> bool:
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_the_views_process_pauses_for_requests_and_goes_on_for_one_that_waits(
    shared_data: Path, tmp_path: Path
) -> None:
    out, _ = import_paths([shared_data / "kineto" / "A100-nccl-parser" / "nccl_data.json.gz"], tmp_path / "a.aiprof")
    lib = Library([tmp_path])
    try:
        with lib.activity.request():  # a request in flight from before the warm-up starts
            t = threading.Thread(target=warm_up, args=(lib, 0.2), daemon=True)
            t.start()
            assert _until(lambda: library._CHILDREN, 120)
            proc = next(iter(library._CHILDREN))
            assert _until(lambda: _state(proc.pid) == "T", 60)  # stopped while the request runs
            e = lib.get(lib.scan()[0].id)
            assert _cache_key("operators", {}) in e.warming
        # A request for a view the warm-up computes waits for it, and the process goes on
        # meanwhile (as it does while every request in flight waits on it).
        got: list[object] = []

        def ask() -> None:
            with lib.activity.request():
                got.append(query_view(e, "operators", Query(limit=0), {}))

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        asker.join(300)
        assert got and not asker.is_alive()
        assert _cache_key("operators", {}) not in e.warming
        t.join(300)
        assert not t.is_alive() and not library._CHILDREN
        with open_profile(out) as prof:
            for view in WARM_VIEWS:
                assert e.cache[_cache_key(view, {})].table.equals(run(prof, view, Query()).table), view
    finally:
        lib.close()
