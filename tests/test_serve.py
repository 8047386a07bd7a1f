"""The REST API, tested as a client would: a real ``aiprof serve`` process on a real
imported Kineto profile, spoken to over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from aiprof.analysis import Query, run
from aiprof.importers import import_paths
from aiprof.store import open_profile
from test_cli import cli
from test_serve_support import running_server

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
V100_MEM = "kineto/V100/df_index_resolver.json.gz"


@pytest.fixture(scope="module")
def served(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A served folder: two real profiles, a broken one, one linking out, and clutter."""
    root = tmp_path_factory.mktemp("served")
    import_paths([shared_data / V100], root / "r0.aiprof")
    import_paths([shared_data / V100_MEM], root / "mem.aiprof")
    bad = root / "broken.aiprof"
    bad.mkdir()
    (bad / "profile.json").write_text("{not json")
    # A profile whose events table is garbage: listed, reported broken when opened.
    corrupt = root / "corrupt.aiprof"
    shutil.copytree(root / "r0.aiprof", corrupt)
    (corrupt / "events.parquet").write_bytes(b"PAR1 this is not parquet")
    (root / "notes.txt").write_text("not a profile")
    # Outside the served folder: a profile and a secret file that links point to.
    outside = tmp_path_factory.mktemp("outside")
    shutil.copytree(root / "r0.aiprof", outside / "secret.aiprof")
    (outside / "secret.txt").write_text("TOP-SECRET-CONTENT")
    os.symlink(outside / "secret.aiprof", root / "escape.aiprof")
    linked = root / "linked.aiprof"
    shutil.copytree(root / "r0.aiprof", linked)
    (linked / "events.parquet").unlink()
    os.symlink(outside / "secret.aiprof" / "events.parquet", linked / "events.parquet")
    return root


@pytest.fixture(scope="module")
def server(served: Path) -> Iterator[str]:
    with running_server(served) as (base, token):
        assert token is None
        yield base


@pytest.fixture(scope="module")
def client(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server + "api/v1", timeout=60) as c:
        yield c


def _ok(r: httpx.Response) -> Any:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    return r.json()


def _err(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    return body


def test_openapi_document(client: httpx.Client) -> None:
    doc = _ok(client.get("/openapi.json"))
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for p in (
        "/profiles",
        "/profiles/{pid}",
        "/profiles/{pid}/views/{view}",
        "/profiles/{pid}/timeline",
        "/profiles/{pid}/counters/series",
        "/profiles/{pid}/memory/series",
        "/profiles/{pid}/advice",
    ):
        assert "/api/v1" + p in paths
    assert set(paths["/api/v1/profiles/{pid}/views/{view}"]) == {"get", "post"}


def test_profiles_listed_and_broken_ones_marked(client: httpx.Client) -> None:
    profs = {p["id"]: p for p in _ok(client.get("/profiles"))["profiles"]}
    assert profs["r0.aiprof"]["status"] == "ok"
    assert profs["mem.aiprof"]["status"] == "ok"
    assert profs["broken.aiprof"]["status"] == "broken"
    assert profs["escape.aiprof"]["status"] == "broken"
    assert profs["linked.aiprof"]["status"] == "broken"
    assert "notes.txt" not in profs
    body = _err(client.get("/profiles/broken.aiprof"), 409)
    assert "/" not in body["error"].split("broken:")[-1].split(":")[0]  # no server path in the message
    _err(client.get("/profiles/corrupt.aiprof"), 409)
    assert {p["id"]: p for p in _ok(client.get("/profiles"))["profiles"]}["corrupt.aiprof"]["status"] == "broken"
    # The others are unaffected.
    assert _ok(client.get("/profiles/r0.aiprof"))["name"] == "r0.aiprof"


def test_profile_metadata(client: httpx.Client) -> None:
    meta = _ok(client.get("/profiles/r0.aiprof"))
    assert meta["ranks"] == [0]
    assert any(d["name"] == "Tesla V100-SXM2-32GB" for d in meta["devices"])
    assert len(meta["steps"]) == 5
    assert meta["sources"][0]["importer"] == "kineto"
    assert "path" not in meta["sources"][0]  # no server path leaks
    assert meta["tables"]["events"] > 60000
    assert meta["span_ns"][1] > meta["span_ns"][0]


def test_view_get_matches_the_library(client: httpx.Client, served: Path) -> None:
    got = _ok(client.get("/profiles/r0.aiprof/views/kernels", params={"sort": "-total_us", "limit": 5}))
    with open_profile(served / "r0.aiprof") as p:
        want = run(p, "kernels", Query.parse([], "-total_us", 5, 0))
        assert got["total"] == want.total
        assert [r["name"] for r in got["rows"]] == [r["name"] for r in want.rows]
    totals = [r["total_us"] for r in got["rows"]]
    assert totals == sorted(totals, reverse=True)
    assert {c["name"] for c in got["columns"]} >= {"name", "total_us"}
    assert got["limit"] == 5 and got["offset"] == 0


def test_view_filter_sort_page_get_and_post_agree(client: httpx.Client) -> None:
    allk = _ok(client.get("/profiles/r0.aiprof/views/kernels", params={"limit": 0}))["total"]
    params = [("filter", "name~gemm"), ("filter", "count>=2"), ("sort", "name"), ("limit", "3"), ("offset", "1")]
    g = _ok(client.get("/profiles/r0.aiprof/views/kernels", params=params))
    assert 0 < g["total"] < allk
    assert all("gemm" in r["name"].lower() and r["count"] >= 2 for r in g["rows"])
    names = [r["name"] for r in g["rows"]]
    assert names == sorted(names)
    body = {
        "filters": [{"column": "name", "op": "contains", "values": ["gemm"]}, "count>=2"],
        "sort": ["name"],
        "limit": 3,
        "offset": 1,
    }
    p = _ok(client.post("/profiles/r0.aiprof/views/kernels", json=body))
    assert p["rows"] == g["rows"] and p["total"] == g["total"]
    # The next page starts where this one ended.
    first = _ok(client.get("/profiles/r0.aiprof/views/kernels", params=[*params[:3], ("limit", "4")]))
    assert first["rows"][1:] == g["rows"]


def test_bad_requests_are_json_4xx(client: httpx.Client) -> None:
    _err(client.get("/profiles/nope.aiprof"), 404)
    _err(client.get("/profiles/r0.aiprof/views/nope"), 404)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"filter": "nonexistent=1"}), 400)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"filter": "what"}), 400)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"sort": "nonexistent"}), 400)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"limit": "-1"}), 422)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"limit": "abc"}), 422)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"limit": "99999999"}), 422)
    _err(client.get("/profiles/r0.aiprof/views/kernels", params={"filter": "count>=abc"}), 400)
    _err(
        client.post(
            "/profiles/r0.aiprof/views/kernels", content=b"{not json", headers={"Content-Type": "application/json"}
        ),
        422,
    )
    _err(client.post("/profiles/r0.aiprof/views/kernels", json=[1, 2]), 422)
    _err(client.post("/profiles/r0.aiprof/views/kernels", json={"limit": "x"}), 422)
    _err(client.post("/profiles/r0.aiprof/views/kernels", json={"filters": [{"column": "name", "op": "zz"}]}), 400)
    _err(client.get("/profiles/r0.aiprof/timeline", params={"t0": 10, "t1": 5}), 400)
    _err(client.get("/profiles/r0.aiprof/timeline", params={"width": 0}), 422)
    _err(client.get("/profiles/r0.aiprof/timeline", params={"t0": "x"}), 422)
    _err(client.get("/profiles/r0.aiprof/timeline", params={"tracks": "a,b"}), 400)
    _err(client.get("/profiles/r0.aiprof/timeline/event", params={"track": 0}), 422)
    _err(client.get("/profiles/r0.aiprof/counters/series"), 422)
    _err(client.get("/profiles/r0.aiprof/nothing/here"), 404)
    _err(client.delete("/profiles/r0.aiprof"), 405)
    _err(client.post("/profiles/r0.aiprof/views/kernels", content=b"x" * (2 << 20)), 413)
    # A 422 names the field, in the message and in detail.
    bad = _err(client.get("/profiles/r0.aiprof/views/kernels", params={"limit": "abc"}), 422)
    assert bad["error"].startswith("limit:") and bad["detail"][0]["field"] == "limit"
    bad = _err(client.get("/profiles/r0.aiprof/timeline/event", params={"track": 0}), 422)
    assert bad["error"].startswith("ts:")
    bad = _err(client.post("/profiles/r0.aiprof/views/kernels", json={"limit": "x"}), 422)
    assert bad["detail"][0]["field"] == "limit" and bad["detail"][0]["in"] == "body"
    r = client.delete("/profiles/r0.aiprof")
    assert "GET" in r.headers.get("allow", "")
    _err(client.get("/profiles/r0.aiprof/timeline/search", params={"q": "(", "regex": "true"}), 400)


def test_timeline_search(client: httpx.Client, served: Path) -> None:
    """Substring, exact and regex search over event names, counted by DuckDB directly."""
    with open_profile(served / "r0.aiprof") as p:
        (want,) = p.con.execute(
            "SELECT count(*) FROM events WHERE contains(lower(name), 'gemm') AND NOT (kind = 'other' AND dur = 0 "
            "AND starts_with(coalesce(args, ''), '{\"ph\":'))"
        ).fetchone()
        (longest,) = p.con.execute("SELECT max(dur) FROM events WHERE contains(lower(name), 'gemm')").fetchone()
    assert want > 10
    s = _ok(client.get("/profiles/r0.aiprof/timeline/search", params={"q": "GEMM", "limit": 5}))
    assert s["total"] == want and len(s["matches"]) == 5 and s["truncated"]
    assert all("gemm" in m["name"].lower() for m in s["matches"])
    ts = [m["ts"] for m in s["matches"]]
    assert ts == sorted(ts)
    top = _ok(client.get("/profiles/r0.aiprof/timeline/search", params={"q": "gemm", "order": "-dur", "limit": 1}))
    assert top["matches"][0]["dur"] == longest
    name = top["matches"][0]["name"]
    ex = _ok(client.get("/profiles/r0.aiprof/timeline/search", params={"q": name, "exact": "true"}))
    assert ex["names"] == 1 and all(m["name"] == name for m in ex["matches"])
    rx = _ok(client.get("/profiles/r0.aiprof/timeline/search", params={"q": "^volta_.*gemm", "regex": "true"}))
    assert rx["total"] > 0 and all(m["name"].startswith("volta_") for m in rx["matches"])
    # The match is a real event: its details come back from /timeline/event.
    m0 = top["matches"][0]
    ev = _ok(client.get("/profiles/r0.aiprof/timeline/event", params={"track": m0["track"], "ts": m0["ts"]}))
    assert any(e["name"] == name and e["dur"] == m0["dur"] for e in ev["events"])
    _err(client.get("/profiles/r0.aiprof/timeline/search"), 422)


def test_timeline_window_merges_but_keeps_every_event(client: httpx.Client, served: Path) -> None:
    tr = _ok(client.get("/profiles/r0.aiprof/tracks"))
    tracks = tr["tracks"]
    host = [t for t in tracks if not t["is_device"]]
    dev = [t for t in tracks if t["is_device"]]
    assert host and dev and max(t["track"] for t in host) < min(t["track"] for t in dev)  # host first
    assert any("stream 7" in t["name"] for t in dev)
    t0, t1 = tr["span_ns"]
    w = _ok(client.get("/profiles/r0.aiprof/timeline", params={"t0": t0, "t1": t1, "width": 1000}))
    items = w["items"]
    assert 0 < len(items["ts"]) <= 5000
    with open_profile(served / "r0.aiprof") as p:
        n_events = (
            p.sql(
                "SELECT count(*) AS n FROM events WHERE NOT (kind = 'other' AND dur = 0 AND starts_with(args, '{\"ph\":'))"
            )
            .column("n")[0]
            .as_py()
        )
    assert sum(items["n"]) == n_events  # merged, none lost
    # A narrow window: single events, each overlapping it, with launch -> kernel arrows.
    k = next(i for i, kind in enumerate(items["kind"]) if kind == "kernel" and items["n"][i] == 1)
    a, b = items["ts"][k] - 200_000, items["ts"][k] + 200_000
    z = _ok(client.post("/profiles/r0.aiprof/timeline", json={"t0": a, "t1": b, "width": 1200}))
    zi = z["items"]
    assert zi["ts"] and all(ts <= b and ts + d >= a for ts, d in zip(zi["ts"], zi["dur"]))
    assert max(zi["n"]) >= 1 and z["flows"]["to_ts"]
    assert all(a <= ts <= b for ts in z["flows"]["to_ts"])
    assert all(name for name in z["names"])
    # Only the chosen tracks.
    only = _ok(client.get("/profiles/r0.aiprof/timeline", params={"t0": a, "t1": b, "tracks": str(dev[0]["track"])}))
    assert set(only["items"]["track"]) == {dev[0]["track"]}


def test_timeline_event_details_and_selection(client: httpx.Client) -> None:
    tr = _ok(client.get("/profiles/r0.aiprof/tracks"))
    t0, t1 = tr["span_ns"]
    mid = (t0 + t1) // 2
    z = _ok(client.get("/profiles/r0.aiprof/timeline", params={"t0": mid, "t1": mid + 5_000_000, "width": 2000}))
    it = z["items"]
    k = next(i for i, kind in enumerate(it["kind"]) if kind == "kernel" and it["n"][i] == 1)
    ev = _ok(client.get("/profiles/r0.aiprof/timeline/event", params={"track": it["track"][k], "ts": it["ts"][k]}))
    e = ev["events"][0]
    assert e["kind"] == "kernel" and e["name"] == z["names"][it["name"][k]] and e["ts"] == it["ts"][k]
    assert any(linked["kind"] == "runtime" for linked in e["linked"])
    _err(client.get("/profiles/r0.aiprof/timeline/event", params={"track": it["track"][k], "ts": -5}), 404)
    s = _ok(client.get("/profiles/r0.aiprof/timeline/summary", params={"t0": mid, "t1": mid + 5_000_000}))
    assert s["events"] == sum(k["events"] for k in s["by_kind"]) > 0
    assert all(0 < k["time_ns"] <= 5_000_000 * 50 for k in s["by_kind"] if k["kind"] == "kernel")


def test_memory_and_counter_series(client: httpx.Client, served: Path) -> None:
    m = _ok(client.get("/profiles/mem.aiprof/memory/series", params={"width": 500}))
    with open_profile(served / "mem.aiprof") as p:
        peak = p.sql("SELECT max(allocated) AS m FROM memory WHERE device_type = 'cuda'").column("m")[0].as_py()
    cuda = [pk for pk in m["peaks"] if pk["device_type"] == "cuda"]
    assert cuda and cuda[0]["peak_bytes"] == peak
    s = next(s for s in m["series"] if s["device_type"] == "cuda")
    assert 0 < len(s["ts"]) <= 500 and max(s["allocated"]) == peak
    assert _ok(client.get("/profiles/r0.aiprof/counters"))["metrics"] == []
    c = _ok(client.get("/profiles/r0.aiprof/counters/series", params={"metric": "none"}))
    assert c["ts"] == []


def test_advice(client: httpx.Client) -> None:
    a = _ok(client.get("/profiles/mem.aiprof/advice"))
    assert isinstance(a["available"], bool) and isinstance(a["advice"], list)
    if a["available"]:
        assert a["advice"], "the proposer gave no advice on a profile with 70% idle device time"


def _raw_get(base: str, target: str, host: str | None = None) -> tuple[int, bytes]:
    """An HTTP/1.1 GET with the request target sent exactly as given (no client normalisation)."""
    u = urlsplit(base)
    assert u.hostname and u.port
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host or u.netloc}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "target",
    [
        "/static/../server.py",
        "/static/..%2fserver.py",
        "/static/%2e%2e%2fserver.py",
        "/static/%252e%252e%252fserver.py",
        "/static/..%252fserver.py",
        "/static/%2fetc%2fpasswd",
        "/static//etc/passwd",
        "/static/..\\..\\server.py",
        "/../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/api/v1/profiles/..%2f..%2f..%2fetc%2fpasswd",
        "/api/v1/profiles/%2e%2e%2f%2e%2e%2fetc",
        "/api/v1/profiles/%252e%252e%252fetc/views/events",
        "/api/v1/profiles/%2Fetc%2Fpasswd",
        "/api/v1/profiles//etc/passwd",
        "/api/v1/profiles/../../secret.aiprof/views/events",
        "/api/v1/profiles/escape.aiprof/views/events",
        "/api/v1/profiles/linked.aiprof/views/events?limit=1",
        "/api/v1/profiles/escape.aiprof/../secret.aiprof",
    ],
)
def test_no_file_outside_the_served_folders(server: str, target: str) -> None:
    status, body = _raw_get(server, target)
    assert 400 <= status < 500, (target, status)
    assert b"root:" not in body and b"TOP-SECRET" not in body and b"import " not in body
    assert b"Traceback" not in body


def test_dns_rebinding_host_refused(server: str) -> None:
    status, body = _raw_get(server, "/api/v1/profiles", host="evil.example:80")
    assert status == 403 and b"loopback" in body
    status, _ = _raw_get(server, "/api/v1/profiles", host="localhost")
    assert status == 200


def test_ui_assets_ship_in_the_package(server: str) -> None:
    r = httpx.get(server)
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "/static/app.js" in r.text
    for name in ("app.js", "style.css"):
        a = httpx.get(server + "static/" + name)
        assert a.status_code == 200 and len(a.content) > 1000
    # Nothing is fetched from the internet.
    js = httpx.get(server + "static/app.js").text + r.text + httpx.get(server + "static/style.css").text
    assert "http://" not in js and "https://" not in js


def test_token_required_off_loopback(served: Path) -> None:
    with running_server(served, host="0.0.0.0") as (base, token):
        assert token and len(token) >= 16
        api = base + "api/v1/profiles"
        assert _err(httpx.get(api), 401)
        _err(httpx.get(api, headers={"Authorization": "Bearer wrong"}), 401)
        # A token that is not ASCII is refused like any wrong one (not a 500).
        _err(httpx.get(api, headers={"Authorization": "Bearer žeton".encode()}), 401)
        _err(httpx.get(api, headers={"X-Aiprof-Token": "é".encode()}), 401)
        assert httpx.get(api, headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(api, headers={"X-Aiprof-Token": token}).status_code == 200
        with httpx.Client(follow_redirects=True) as c:
            r = c.get(base + "?token=" + token)  # the printed URL sets a cookie
            assert r.status_code == 200 and c.cookies.get("aiprof_token") == token
            assert c.get(api).status_code == 200
        _err(httpx.get(base + "?token=nope"), 401)
        assert httpx.get(base + "api/v1/openapi.json").status_code == 401


def test_server_errors_are_json_without_traceback(server: str) -> None:
    # A view parameter of the wrong type reaches the analyser unchecked; whatever it
    # raises, the client gets one JSON line and no traceback (the server log has it).
    client = httpx.Client(base_url=server + "api/v1", timeout=60)
    r = client.post("/profiles/r0.aiprof/views/events", json={"params": {"kinds": 5}, "limit": 1})
    assert r.status_code in (400, 500)
    body = r.json()
    assert set(body) == {"error", "status"} and body["status"] == r.status_code
    assert "Traceback" not in r.text and ".py" not in r.text
    # The server keeps serving.
    assert client.get("/profiles").status_code == 200
    client.close()


def test_compare_two_profiles(client: httpx.Client, served: Path) -> None:
    ids = {p["name"]: p["id"] for p in _ok(client.get("/profiles"))["profiles"]}
    a, b = ids["r0.aiprof"], ids["mem.aiprof"]
    doc = _ok(client.get("/compare", params={"a": a, "b": b, "view": "kernels", "limit": 5, "filter": "status=added"}))
    assert doc["total"] > 0 and len(doc["rows"]) <= 5
    assert all(r["status"] == "added" and r["a_us"] == 0 for r in doc["rows"])
    # Same rows as the library computes for the same two profiles.
    from aiprof.analysis.compare import compare

    with open_profile(served / "r0.aiprof") as pa_, open_profile(served / "mem.aiprof") as pb:
        expected = {r["name"]: r["b_us"] for r in compare(pa_, pb, "kernels").to_pylist() if r["status"] == "added"}
    assert doc["total"] == len(expected)
    assert all(expected[r["name"]] == r["b_us"] for r in doc["rows"])
    assert doc["steps"]["a"]["steps"] == 5
    # The verdicts and the gate are aiprof diff's, key for key and value for value.
    rules = ["step_time_us>+5%", "kernel:nccl*>+1%"]
    doc = _ok(client.get("/compare", params={"a": a, "b": b, "limit": 1, "fail_if": rules}))
    cli_doc = json.loads(
        cli(
            "diff", served / "r0.aiprof", served / "mem.aiprof", "--format", "json", *(f"--fail-if={x}" for x in rules)
        ).stdout
    )
    assert doc["verdicts"] == cli_doc["verdicts"] and doc["verdicts"]
    assert doc["gate"] == cli_doc["gate"] and [g["rule"] for g in doc["gate"]] == rules
    assert doc["failed"] == cli_doc["failed"] and doc["note"] == cli_doc["note"]
    assert doc["sides"]["a"] == {**cli_doc["a"], "path": a} and doc["sides"]["b"]["steps"] == cli_doc["b"]["steps"]
    assert doc["gate"][1]["failed"] is True  # only B has NCCL kernels (rank 1 of 2)
    # The compare page's one call also says how the jobs differ (the former /compare/verdicts).
    from aiprof.analysis.job_match import job_differences

    with open_profile(served / "r0.aiprof") as pa_, open_profile(served / "mem.aiprof") as pb:
        assert doc["differences"] == job_differences(pa_, pb)
    few = {r["figure"] for r in doc["verdicts"] if r["verdict"] == "too few steps"}
    assert doc["too_few_steps"] is bool(few - {"steady_step_us"}) and doc["too_few_steps"] == cli_doc["too_few_steps"]
    assert client.get("/compare/verdicts", params={"a": a, "b": b}).status_code == 404
    _err(client.get("/compare", params={"a": a, "b": b, "fail_if": "nonsense"}), 400)
    _err(client.get("/compare", params={"a": a, "b": b, "fail_if": "no_such_us>+5%"}), 400)
    _err(client.get("/compare", params={"a": a, "b": b, "view": "memory"}), 422)
    _err(client.get("/compare", params={"a": a, "b": "nope"}), 404)


def test_answers_match_their_documented_models(client: httpx.Client) -> None:
    """Every route's real answer validates against the model its OpenAPI entry names,
    so the generated document (and the UI's generated types) cannot drift."""
    from pydantic import TypeAdapter

    from aiprof.web import models as m

    span = _ok(client.get("/profiles/r0.aiprof/tracks"))["span_ns"]
    mid = (span[0] + span[1]) // 2
    win = {"t0": mid, "t1": mid + 5_000_000, "width": 800}
    cases: list[tuple[str, dict[str, Any], Any]] = [
        ("/profiles", {}, m.ProfilesResponse),
        ("/views", {}, list[m.ViewInfo]),
        ("/profiles/mem.aiprof", {}, m.ProfileMeta),
        ("/profiles/r0.aiprof/views/kernels", {"limit": 3}, m.ViewResult),
        ("/profiles/r0.aiprof/tracks", {}, m.TracksResponse),
        ("/profiles/r0.aiprof/timeline", win, m.WindowResponse),
        ("/profiles/r0.aiprof/timeline/summary", win, m.SummaryResponse),
        ("/profiles/r0.aiprof/timeline/search", {"q": "gemm"}, m.SearchResponse),
        ("/profiles/mem.aiprof/counters", {}, m.CounterMetrics),
        ("/profiles/mem.aiprof/memory/series", {"width": 50}, m.MemorySeries),
        ("/profiles/r0.aiprof/advice", {}, m.AdviceResponse),
        ("/profiles/r0.aiprof/samples", {}, m.SamplesResponse),
        ("/profiles/r0.aiprof/samples/window", {"width": 100}, m.SampleWindowResponse),
        ("/compare", {"a": "r0.aiprof", "b": "mem.aiprof", "limit": 3}, m.CompareResponse),
    ]
    doc = _ok(client.get("/openapi.json"))
    for path, params, model in cases:
        body = _ok(client.get(path, params=params))
        TypeAdapter(model).validate_python(body, strict=False)
        op = doc["paths"][
            "/api/v1" + path.replace("r0.aiprof", "{pid}").replace("mem.aiprof", "{pid}").replace("/kernels", "/{view}")
        ]["get"]
        assert "200" in op["responses"] and "422" in op["responses"], path


def test_a_short_token_is_refused(served: Path) -> None:
    from aiprof.errors import AiprofError
    from aiprof.web.server import MIN_TOKEN, create_app

    with pytest.raises(AiprofError, match=f"at least {MIN_TOKEN}"):
        create_app([served], token="short", host="0.0.0.0")


def test_a_link_out_made_after_the_scan_is_refused_at_open(served: Path, tmp_path: Path) -> None:
    from aiprof.web.library import ApiError, Library

    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(served / "r0.aiprof", root / "late.aiprof")
    lib = Library([root])
    assert [e.error for e in lib.scan()] == [None]
    secret = tmp_path / "secret.parquet"
    secret.write_bytes((root / "late.aiprof" / "events.parquet").read_bytes())
    (root / "late.aiprof" / "events.parquet").unlink()
    os.symlink(secret, root / "late.aiprof" / "events.parquet")
    with pytest.raises(ApiError) as err:
        lib.get("late.aiprof")
    assert err.value.status == 409 and "outside the served folder" in err.value.message
    lib.close()
