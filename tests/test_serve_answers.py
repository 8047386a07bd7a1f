"""Kept answers (issue 19's load goal, :mod:`aiprof.web.answers`): many clients at once
get exactly what one client gets from a server that computes every answer; a kept
answer is never sent past the guard, for a profile that left the folder, or once the
byte bound dropped it; errors are never kept. Real profiles, real ``aiprof serve``."""

from __future__ import annotations

import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from aiprof.analysis import Query, run
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.web.answers import KEPT_HEADER
from test_serve_support import running_server

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
KEPT = KEPT_HEADER[0].decode()


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("served")
    import_paths([shared_data / V100], root / "r0.aiprof")
    return root


def _close(a: Any, b: Any) -> bool:
    """Equal, floats but for their last digits (DuckDB sums in parallel, in any order)."""
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            return False
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (a != a and b != b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _read_paths(c: httpx.Client) -> list[str]:
    """The read requests of bench/load.py's mix (views, windows at three zooms, their
    summaries, tracks, search, series, samples, advice, metadata)."""
    p = "/profiles/r0.aiprof"
    a, b = c.get(p).json()["span_ns"]
    span = b - a
    wins = [f"&t0={a + span // 3}&t1={a + span // 3 + span // d}" for d in (10, 100, 1000)]
    mid = a + span // 2
    items = c.get(p + f"/timeline?t0={mid}&t1={mid + span // 100}&width=900").json()["items"]
    k = items["n"].index(1)
    return [
        p,
        p + "/views/kernels?limit=50",
        p + "/views/overview",
        p + "/views/kernels?limit=40&offset=40&sort=-count",
        p + "/views/steps",
        p + "/views/operators?limit=30&sort=name&filter=calls>=2",
        p + "/views/memory?limit=10",
        p + "/tracks",
        *(p + "/timeline?width=1200" + w for w in ["", *wins]),
        p + "/timeline?width=800&tracks=0,1,2" + wins[0],
        p + "/timeline/summary?width=800",
        p + "/timeline/summary?width=800" + wins[1],
        p + f"/timeline/event?track={items['track'][k]}&ts={items['ts'][k]}",
        p + "/timeline/search?q=gemm&order=-dur&limit=50",
        p + "/memory/series?width=800",
        p + "/counters",
        p + "/samples/window?width=800",
        p + "/advice",
    ]


def test_many_clients_at_once_get_what_one_client_gets_computed(served: Path) -> None:
    # B computes every answer (nothing kept), asked one request at a time.
    with (
        running_server(served, extra=("--keep-answers", "0")) as (base_b, _),
        httpx.Client(base_url=base_b + "api/v1", timeout=120) as b,
    ):
        paths = _read_paths(b)
        alone = {}
        for path in paths:
            r = b.get(path)
            assert r.status_code == 200, (path, r.text)
            assert KEPT not in r.headers
            alone[path] = r.json()
    # A keeps answers: 24 clients at once, each path four times, from a cold start (the
    # first requests race to compute them, the next ones wait or are sent kept bytes).
    with running_server(served) as (base_a, _):

        def fetch(path: str) -> tuple[str, int, bool, Any]:
            with httpx.Client(base_url=base_a + "api/v1", timeout=120) as own:
                r = own.get(path)
                return path, r.status_code, r.headers.get(KEPT) == "kept", r.json()

        with ThreadPoolExecutor(24) as pool:
            together = list(pool.map(fetch, paths * 4))
        with httpx.Client(base_url=base_a + "api/v1", timeout=120) as a:
            again = {path: a.get(path) for path in paths}
    assert [(q, s) for q, s, _, _ in together if s != 200] == []
    for path, _, _, body in together:
        assert _close(body, alone[path]), path
    # Every answer is kept by now, and it is the computed one.
    for path, r in again.items():
        assert r.headers.get(KEPT) == "kept", path
        assert _close(r.json(), alone[path]), path
    assert sum(kept for _, _, kept, _ in together) >= len(paths)
    # And the values are the library's own.
    with open_profile(served / "r0.aiprof") as prof:
        kernels = run(prof, "kernels", Query(limit=50), {})
    got = again["/profiles/r0.aiprof/views/kernels?limit=50"].json()
    assert got["total"] == kernels.total > 50
    assert [r["name"] for r in got["rows"]] == [r["name"] for r in kernels.rows]
    assert again["/profiles/r0.aiprof/timeline/summary?width=800"].json()["events"] > 0
    assert again["/profiles/r0.aiprof/advice"].json()["available"] is True


def test_a_kept_answer_is_not_sent_for_a_profile_that_left(served: Path, tmp_path: Path) -> None:
    root = tmp_path / "served"
    root.mkdir()
    shutil.copytree(served / "r0.aiprof", root / "r1.aiprof")
    shutil.copytree(served / "r0.aiprof", root / "r2.aiprof")
    path = "/profiles/r2.aiprof/views/kernels?limit=5"
    with running_server(root) as (base, _), httpx.Client(base_url=base + "api/v1", timeout=120) as c:
        first, second = c.get(path), c.get(path)
        assert first.status_code == second.status_code == 200
        assert KEPT not in first.headers and second.headers[KEPT] == "kept"
        assert second.content == first.content
        shutil.move(root / "r2.aiprof", tmp_path / "r2.aiprof")
        assert [p["id"] for p in c.get("/profiles").json()["profiles"]] == ["r1.aiprof"]
        gone = c.get(path)
        assert gone.status_code == 404 and KEPT not in gone.headers
        assert gone.json()["error"] == "no profile 'r2.aiprof'"
        # Back under the same id: a new entry, its answer computed again.
        shutil.move(tmp_path / "r2.aiprof", root / "r2.aiprof")
        assert [p["id"] for p in c.get("/profiles").json()["profiles"]] == ["r1.aiprof", "r2.aiprof"]
        back = c.get(path)
        assert back.status_code == 200 and KEPT not in back.headers
        assert back.json()["rows"] == first.json()["rows"]


def test_a_profile_imported_again_in_its_place_is_served_anew(shared_data: Path, tmp_path: Path) -> None:
    """`aiprof import OTHER -o SAME` while the server runs: every answer after it is the
    new profile's, the kept ones, views never asked before and the metadata alike (the
    server served the old data until it restarted)."""
    root = tmp_path / "served"
    import_paths([shared_data / V100], root / "p.aiprof")
    other = shared_data / "kineto" / "A100-nccl-parser" / "nccl_data.json.gz"
    p = "/profiles/p.aiprof"
    with running_server(root) as (base, _), httpx.Client(base_url=base + "api/v1", timeout=120) as c:
        old = c.get(p + "/views/kernels?limit=3")
        assert c.get(p + "/views/kernels?limit=3").headers[KEPT] == "kept"
        old_meta = c.get(p).json()
        import_paths([other], root / "p.aiprof")  # written anew and moved into place
        with open_profile(root / "p.aiprof") as prof:
            want = run(prof, "kernels", Query(limit=3), {}).rows
            want_steps = run(prof, "steps", Query(limit=100), {}).rows
        new = c.get(p + "/views/kernels?limit=3")
        assert new.status_code == 200 and KEPT not in new.headers
        assert new.json()["rows"] != old.json()["rows"]
        assert [r["name"] for r in new.json()["rows"]] == [r["name"] for r in want]
        assert [(r["rank"], r["step"]) for r in c.get(p + "/views/steps?limit=100").json()["rows"]] == [
            (r["rank"], r["step"]) for r in want_steps
        ]
        meta = c.get(p).json()
        assert meta["sources"] != old_meta["sources"] and "nccl_data" in str(meta["sources"])
        assert c.get(p + "/views/kernels?limit=3").headers[KEPT] == "kept"  # kept again, for the new one


def test_a_kept_answer_still_needs_the_token(served: Path) -> None:
    with running_server(served, host="0.0.0.0") as (base, token):
        assert token
        path = base + "api/v1/profiles/r0.aiprof/views/steps"
        ok = {"Authorization": f"Bearer {token}"}
        assert httpx.get(path, headers=ok, timeout=120).status_code == 200
        kept = httpx.get(path, headers=ok, timeout=120)
        assert kept.status_code == 200 and kept.headers[KEPT] == "kept"
        for headers in ({}, {"Authorization": "Bearer " + "x" * len(token)}):
            r = httpx.get(path, headers=headers, timeout=120)
            assert r.status_code == 401 and KEPT not in r.headers and "rows" not in r.json()


def test_errors_are_not_kept_and_the_byte_bound_holds(served: Path) -> None:
    with (
        running_server(served, extra=("--keep-answers", "1")) as (base, _),
        httpx.Client(base_url=base + "api/v1", timeout=120) as c,
    ):
        p = "/profiles/r0.aiprof"
        for bad, status in (
            (p + "/timeline/event?track=0&ts=-5", 404),
            (p + "/views/nope", 404),
            (p + "/views/kernels?sort=nope", 400),
        ):
            for _ in range(2):
                r = c.get(bad)
                assert r.status_code == status and KEPT not in r.headers, bad
        a, b = c.get(p).json()["span_ns"]
        first = p + "/timeline?width=20000"
        want = c.get(first).content
        assert c.get(first).headers[KEPT] == "kept"
        # Other windows past 1 MiB in all: the least recently used, the first, is dropped.
        size, k = 0, 0
        while size < 3 << 20:
            k += 1
            r = c.get(p + f"/timeline?width=20000&t0={a + k}&t1={b}")
            assert r.status_code == 200
            size += len(r.content)
        again = c.get(first)
        assert again.status_code == 200 and KEPT not in again.headers
        assert again.content == want
