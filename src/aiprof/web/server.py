"""The REST API (``/api/v1``, described by ``/api/v1/openapi.json``) and the web UI.

Everything the API returns comes from the analysers (:func:`aiprof.analysis.run`), the
timeline windows (:mod:`aiprof.web.timeline`) and, when it is installed, the advice
proposer; nothing is computed here.

Safety, by construction rather than by checks on paths:
- profiles are addressed by an id from a table built when the folders are scanned;
  no request value is ever joined to a file path, and a profile folder, or a file in
  it, that resolves outside its served folder (a symlink out) is listed as broken;
- static assets are a fixed table read from the package at start;
- bound to a loopback address, requests must name a loopback host (no DNS
  rebinding); bound to any other address, every API request needs the token (header
  ``Authorization: Bearer TOKEN``, ``X-Aiprof-Token`` or the ``aiprof_token`` cookie
  that ``/?token=TOKEN`` sets);
- errors are JSON ``{"error": ...}`` with a 4xx status; an unexpected failure is a
  500 whose body says only that, the traceback goes to the server's log.
"""

from __future__ import annotations

import dataclasses
import decimal
import importlib
import importlib.util
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .. import __version__
from ..analysis import Query, Result, run, views
from ..errors import AiprofError
from ..store import PROFILE_SUFFIX, Profile, open_profile
from ..store.library import discover, is_run, rank_profiles
from ..store.reader import _read_meta
from ..store.writer import META_FILE
from .timeline import SeriesQuery, Timeline, Window

log = logging.getLogger("aiprof.serve")

API = "/api/v1"
#: Analyser results kept per profile (the full table of a view, before the query),
#: and the largest table worth keeping.
CACHE_VIEWS = 32
CACHE_ROWS = 200_000
#: Views computed in the background when the server starts, after the timeline.
WARM_VIEWS = ("overview", "steps", "kernels", "operators", "memory")
#: Rows a view returns when the request gives no limit, and the most it may ask for.
DEFAULT_LIMIT = 100
MAX_LIMIT = 10000
MAX_BODY = 1 << 20
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
TOKEN_COOKIE = "aiprof_token"


class ApiError(Exception):
    """An error with an HTTP status and a one-line message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- the served profiles -----------------------------------------------------------------


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
    name: str = ""
    """Readable and unique: the path below the served folder (store.library)."""

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


class Library:
    """The profiles of the served folders, by id; opened on first use."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self.scan()

    def scan(self) -> list[Entry]:
        """(Re)list the profiles; profiles already open stay open."""
        with self._lock:
            found: list[tuple[Path, Path, str]] = []
            for root in self.roots:
                if (root / META_FILE).exists() or root.name.endswith(PROFILE_SUFFIX):
                    found.append((root, root, root.name))
                    continue
                found += [(f.path, root, f.name) for f in discover(root)]
                # A folder named like a profile but broken is listed, with its error.
                children = sorted(root.iterdir()) if root.is_dir() else []
                listed = {f[0] for f in found}
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
                entries[pid] = Entry(pid, path, root, error=self._check(path, root), name=name)
            self._entries = entries
            return list(entries.values())

    @staticmethod
    def _check(path: Path, root: Path) -> str | None:
        if not _inside(path, root):
            return "the profile links outside the served folder"
        if is_run(path):
            return None if all(Library._check(r, root) is None for r in rank_profiles(path)) else "a rank is broken"
        if not (path / META_FILE).is_file():
            return f"no {META_FILE}"
        for f in path.iterdir():
            if not _inside(f, root):
                return f"{f.name} links outside the served folder"
        try:
            _read_meta(path)
        except AiprofError as e:
            return _scrub(str(e), path)
        return None

    def get(self, pid: str) -> Entry:
        """The opened entry ``pid``; 404 when unknown, 409 when broken."""
        e = self._entries.get(pid)
        if e is None:
            raise ApiError(404, f"no profile {pid!r}")
        with e.lock:
            if e.error is None and e.profile is None:
                try:
                    e.profile = open_profile(e.path)
                    e.profile.con.execute("SELECT count(*) FROM events").fetchall()
                    e.timeline = Timeline(e.profile)
                    e.timeline.lock = e.lock
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
            with e.lock:
                if e.profile is not None:
                    e.profile.close()
                    e.profile = None


# -- JSON --------------------------------------------------------------------------------


def _default(o: Any) -> Any:
    if isinstance(o, decimal.Decimal):
        return int(o) if o == o.to_integral_value() else float(o)
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return str(o)


def dumps(obj: Any) -> bytes:
    """JSON bytes; numpy values, Decimals and dates are converted, NaN becomes null."""
    return orjson.dumps(obj, default=_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(dumps(obj), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return json_response({"error": message, "status": status}, status)


# -- request helpers -----------------------------------------------------------------


async def _body(request: Request) -> dict[str, Any]:
    if request.method != "POST":
        return {}
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiError(413, f"request body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "the body is not valid JSON") from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object")
    return obj


def _int_param(value: Any, name: str, *, lo: int | None = None, hi: int | None = None) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ApiError(400, f"{name} must be an integer")
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ApiError(400, f"{name} must be an integer") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ApiError(400, f"{name} must be between {lo} and {hi}")
    return v


def _query_from_request(request: Request, body: dict[str, Any]) -> tuple[Query, dict[str, Any]]:
    """The common query from GET parameters (filter=, sort=, limit=, offset=, param.X=)
    or from a POST body ({filters, sort, limit, offset, params})."""
    if request.method == "POST":
        q = Query.from_json({k: v for k, v in body.items() if k != "params"})
        params = body.get("params") or {}
        if not isinstance(params, dict):
            raise ApiError(400, "params must be a JSON object")
    else:
        qp = request.query_params
        limit = _int_param(qp.get("limit"), "limit", lo=0, hi=MAX_LIMIT)
        offset = _int_param(qp.get("offset"), "offset", lo=0) or 0
        q = Query.parse(qp.getlist("filter"), qp.getlist("sort"), limit, offset)
        params = {}
        for k, v in qp.multi_items():
            if k.startswith("param."):
                name = k[len("param.") :]
                vals = qp.getlist(k)
                params[name] = vals if len(vals) > 1 or name in ("kinds",) else v
    if q.limit is None:
        q.limit = DEFAULT_LIMIT
    if q.limit > MAX_LIMIT:
        raise ApiError(400, f"limit must be at most {MAX_LIMIT}")
    return q, params


def _window(request: Request, body: dict[str, Any], timeline: Timeline) -> Window:
    src: dict[str, Any] = dict(request.query_params) if request.method == "GET" else body
    timeline.build()
    t0 = src.get("t0", timeline.span[0])
    t1 = src.get("t1", timeline.span[1])
    return Window.parse(t0, t1, src.get("width", 1000), src.get("tracks"), src.get("max_items"))


def describe(profile: Profile, pid: str, name: str, timeline: Timeline) -> dict[str, Any]:
    """One profile's metadata for the API: devices, ranks, steps (the steps view),
    sources, table sizes, warnings and the time span (ns) the timeline covers."""
    meta = profile.metas[0]
    timeline.build()
    steps: list[dict[str, Any]] = []
    steps_error = None
    try:
        steps = run(profile, "steps").rows
    except AiprofError as ex:
        steps_error = str(ex)
    out = {
        "id": pid,
        "name": name,
        "aiprof_version": meta.get("aiprof_version"),
        "schema_version": meta.get("schema_version"),
        "time_origin_ns": profile.time_origin_ns,
        "span_ns": list(timeline.span),
        "ranks": sorted({r for m in profile.metas for r in m.get("ranks", [])}),
        "world_size": meta.get("world_size"),
        "hosts": meta.get("hosts", []),
        "devices": profile.devices,
        "sources": [
            {k: v for k, v in src.items() if k != "path"} | {"file": Path(str(src.get("path", ""))).name}
            for m in profile.metas
            for src in m.get("sources", [])
        ],
        "tables": profile.tables,
        "warnings": profile.warnings,
        "steps": steps,
    }
    if steps_error:
        out["steps_error"] = steps_error
    return out


# -- advice ------------------------------------------------------------------------------


def advice_for(profile: Profile) -> dict[str, Any]:
    """Advice from ``aiprof.advise`` when that module exists: {available, advice}."""
    if importlib.util.find_spec("aiprof.advise") is None:
        return {"available": False, "advice": [], "reason": "the advice proposer is not installed"}
    mod = importlib.import_module("aiprof.advise")
    for name in ("advise_json", "advice_json", "to_json", "advise"):
        fn = getattr(mod, name, None)
        if callable(fn):
            out = fn(profile)
            break
    else:
        return {"available": False, "advice": [], "reason": "aiprof.advise has no advise function"}
    if hasattr(out, "to_json"):
        out = out.to_json()
    if isinstance(out, dict) and "advice" in out:
        items = out["advice"]
    else:
        items = out
    if not isinstance(items, list):
        items = [items]
    norm: list[Any] = []
    for a in items:
        if hasattr(a, "to_json"):
            a = a.to_json()
        elif dataclasses.is_dataclass(a) and not isinstance(a, type):
            a = dataclasses.asdict(a)
        norm.append(a)
    return {"available": True, "advice": norm}


# -- endpoints -----------------------------------------------------------------------------

Handler = Callable[[Request], Awaitable[Response]]


class Api:
    """The handlers; one instance per app."""

    def __init__(self, library: Library) -> None:
        self.lib = library

    async def openapi(self, request: Request) -> Response:
        return json_response(openapi_document())

    async def list_views(self, request: Request) -> Response:
        return json_response(
            [
                {
                    "name": a.name,
                    "title": a.title,
                    "description": a.description,
                    "default_sort": list(a.default_sort),
                    "units": a.units,
                }
                for a in views().values()
            ]
        )

    async def list_profiles(self, request: Request) -> Response:
        return json_response({"profiles": [e.summary() for e in self.lib.scan()]})

    def _entry(self, request: Request) -> Entry:
        return self.lib.get(str(request.path_params["pid"]))

    def _timeline(self, request: Request) -> Timeline:
        e = self._entry(request)
        assert e.timeline is not None
        return e.timeline

    async def profile_meta(self, request: Request) -> Response:
        e = self._entry(request)
        return json_response(await _threaded(lambda: self._meta(e)))

    def _meta(self, e: Entry) -> dict[str, Any]:
        assert e.profile is not None and e.timeline is not None
        with e.lock:
            return describe(e.profile, e.id, e.path.name, e.timeline)

    async def view(self, request: Request) -> Response:
        e = self._entry(request)
        body = await _body(request)
        name = str(request.path_params["view"])
        if name not in views():
            raise ApiError(404, f"unknown view {name!r}; views: {', '.join(sorted(views()))}")
        q, params = _query_from_request(request, body)

        def work() -> dict[str, Any]:
            with e.lock:
                res = query_view(e, name, q, params)
            out = res.to_json()
            out["query"] = res.query.to_json()
            out["profile"] = e.id
            return out

        return json_response(await _threaded(work))

    async def tracks(self, request: Request) -> Response:
        tl = self._timeline(request)

        def work() -> dict[str, Any]:
            tr = tl.tracks()
            return {"span_ns": list(tl.span), "tracks": tr}

        return json_response(await _threaded(work))

    async def timeline(self, request: Request) -> Response:
        tl = self._timeline(request)
        body = await _body(request)
        return json_response(await _threaded(lambda: tl.window(_window(request, body, tl))))

    async def timeline_summary(self, request: Request) -> Response:
        tl = self._timeline(request)
        body = await _body(request)
        return json_response(await _threaded(lambda: tl.summary(_window(request, body, tl))))

    async def timeline_event(self, request: Request) -> Response:
        tl = self._timeline(request)
        qp = request.query_params
        track = _int_param(qp.get("track"), "track", lo=0)
        ts = _int_param(qp.get("ts"), "ts")
        if track is None or ts is None:
            raise ApiError(400, "track and ts are required")
        rows = await _threaded(lambda: tl.events_at(track, ts))
        if not rows:
            raise ApiError(404, f"no event on track {track} at ts {ts}")
        return json_response({"events": rows})

    async def counter_metrics(self, request: Request) -> Response:
        e = self._entry(request)
        assert e.profile is not None
        sq = SeriesQuery(e.profile, e.lock)
        return json_response({"metrics": await _threaded(sq.metrics)})

    async def counter_series(self, request: Request) -> Response:
        e = self._entry(request)
        assert e.profile is not None and e.timeline is not None
        tl = e.timeline
        body = await _body(request)
        src: dict[str, Any] = dict(request.query_params) if request.method == "GET" else body
        metric = src.get("metric")
        if not metric:
            raise ApiError(400, "metric is required")
        sq = SeriesQuery(e.profile, e.lock)
        rank = _int_param(src.get("rank"), "rank")
        device = _int_param(src.get("device"), "device")
        return json_response(await _threaded(lambda: sq.counter(_window(request, body, tl), str(metric), rank, device)))

    async def memory_series(self, request: Request) -> Response:
        e = self._entry(request)
        assert e.profile is not None and e.timeline is not None
        tl = e.timeline
        body = await _body(request)
        src: dict[str, Any] = dict(request.query_params) if request.method == "GET" else body
        sq = SeriesQuery(e.profile, e.lock)
        rank = _int_param(src.get("rank"), "rank")
        device = _int_param(src.get("device"), "device")
        return json_response(await _threaded(lambda: sq.memory(_window(request, body, tl), rank, device)))

    async def compare(self, request: Request) -> Response:
        """B against A by kernel or operator name (aiprof.analysis.compare), with the common query."""
        qp = request.query_params
        a, b = self.lib.get(str(qp.get("a", ""))), self.lib.get(str(qp.get("b", "")))
        view = str(qp.get("view", "kernels"))
        if view not in ("kernels", "operators"):
            raise ApiError(400, "view must be kernels or operators")
        q, _ = _query_from_request(request, {})
        if not q.sort:
            q.sort = [("delta_us", True)]

        def work() -> dict[str, Any]:
            from ..analysis.compare import compare_tables, step_summary

            halves = []
            for e in (a, b):
                # One profile at a time, each under its own lock; the full views come
                # from the same cache that paging through a view uses.
                with e.lock:
                    assert e.profile is not None
                    halves.append((query_view(e, view, Query(), {}).table, step_summary(e.profile)))
            table = compare_tables(halves[0][0], halves[1][0], view)
            steps = {"a": halves[0][1], "b": halves[1][1]}
            page, total = q.apply(table)
            return {
                "view": view,
                "a": a.id,
                "b": b.id,
                "steps": steps,
                "rows": page.to_pylist(),
                "total": total,
                "query": q.to_json(),
            }

        return json_response(await _threaded(work))

    async def advice(self, request: Request) -> Response:
        e = self._entry(request)

        def work() -> dict[str, Any]:
            assert e.profile is not None
            with e.lock:
                return advice_for(e.profile)

        return json_response(await _threaded(work))


def query_view(e: Entry, view: str, q: Query, params: dict[str, Any], profile: Profile | None = None) -> Result:
    """``run(view)`` once per (view, params) for all rows, then the query on that table.

    The analyser runs through :func:`run` exactly as the CLI runs it; the page, sort and
    filters of later requests are applied by the same :meth:`Query.apply` to the kept
    table, so paging through a view does not recompute it. ``profile``: the profile
    (connection) to use, ``e.profile`` by default, which needs ``e.lock`` held.
    """
    prof = profile or e.profile
    assert prof is not None
    key = view + "\x00" + dumps(params).decode()
    with e.cache_lock:
        full = e.cache.get(key)
        if full is not None:
            e.cache.move_to_end(key)
    if full is None:
        full = run(prof, view, Query(), params)
        if full.table.num_rows <= CACHE_ROWS:
            with e.cache_lock:
                e.cache[key] = full
                while len(e.cache) > CACHE_VIEWS:
                    e.cache.popitem(last=False)
    eff = q if q.sort else Query(q.filters, list(full.query.sort), q.limit, q.offset)
    page, total = eff.apply(full.table)
    return Result(view, page, total, eff, full.units)


def warm_up(lib: Library) -> None:
    """Build each profile's timeline tables, then compute its common views on a
    connection of its own (so requests are not held up), so that the first pages a
    user opens are fast. Runs in a daemon thread; failures only log."""
    for e in lib.scan():
        if e.error is not None:
            continue
        try:
            entry = lib.get(e.id)
            assert entry.timeline is not None and entry.profile is not None
            entry.timeline.build()
            with entry.lock:
                own = dataclasses.replace(entry.profile, con=entry.profile.con.cursor())
            try:
                for view in WARM_VIEWS:
                    if view in views():
                        query_view(entry, view, Query(limit=0), {}, profile=own)
            finally:
                own.con.close()
        except Exception:
            log.debug("warm-up of %s failed", e.id, exc_info=True)


async def _threaded(fn: Callable[[], Any]) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn)


# -- OpenAPI -------------------------------------------------------------------------------

_PID = {"name": "pid", "in": "path", "required": True, "schema": {"type": "string"}, "description": "profile id"}


def _qp(name: str, desc: str, typ: str = "string", required: bool = False, array: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": typ}
    if array:
        schema = {"type": "array", "items": schema}
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": desc}


_WINDOW_PARAMS = [
    _qp("t0", "window start, ns on the profile's time axis (default: the start)", "integer"),
    _qp("t1", "window end, ns (default: the end)", "integer"),
    _qp("width", "pixels the window is drawn on; events narrower than one pixel are merged", "integer"),
    _qp("tracks", "track ids, comma separated (default: all)"),
    _qp("max_items", f"upper bound on returned items (default {5000})", "integer"),
]
_QUERY_PARAMS = [
    _qp("filter", "COL=V[,V], COL!=V, COL~TEXT, COL!~TEXT, COL>=N, COL>N, COL<=N, COL<N, COL=A..B", array=True),
    _qp("sort", "columns, '-' for descending: -total_us,name", array=True),
    _qp("limit", f"rows per page (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})", "integer"),
    _qp("offset", "rows to skip", "integer"),
    _qp("param.NAME", "a view parameter (e.g. param.kinds=kernel)"),
]
_QUERY_BODY = {
    "required": False,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "filters": {
                        "type": "array",
                        "items": {
                            "oneOf": [
                                {"type": "string"},
                                {
                                    "type": "object",
                                    "properties": {
                                        "column": {"type": "string"},
                                        "op": {
                                            "type": "string",
                                            "enum": [
                                                "in",
                                                "not_in",
                                                "contains",
                                                "not_contains",
                                                "range",
                                                "ge",
                                                "gt",
                                                "le",
                                                "lt",
                                            ],
                                        },
                                        "values": {"type": "array", "items": {}},
                                    },
                                    "required": ["column"],
                                },
                            ]
                        },
                    },
                    "sort": {"type": "array", "items": {"type": "string"}},
                    "limit": {"type": "integer"},
                    "offset": {"type": "integer"},
                    "params": {"type": "object"},
                },
            }
        }
    },
}
_WINDOW_BODY = {
    "required": False,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "t0": {"type": "integer"},
                    "t1": {"type": "integer"},
                    "width": {"type": "integer"},
                    "tracks": {"type": "array", "items": {"type": "integer"}},
                    "max_items": {"type": "integer"},
                    "metric": {"type": "string"},
                },
            }
        }
    },
}
_ERR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of every route under /api/v1."""
    paths: dict[str, Any] = {}

    def op(
        path: str,
        method: str,
        summary: str,
        params: list[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
        schema: str | None = None,
    ) -> None:
        o: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method}_{path.strip('/').replace('/', '_').replace('{', '').replace('}', '')}",
            "parameters": params or [],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {
                        "application/json": {
                            "schema": {"$ref": f"#/components/schemas/{schema}"} if schema else {"type": "object"}
                        }
                    },
                },
                "400": _ERR,
                "401": _ERR,
                "404": _ERR,
                "409": _ERR,
            },
        }
        if body is not None:
            o["requestBody"] = body
        paths.setdefault(API + path, {})[method] = o

    op("/profiles", "get", "The profiles in the served folders (broken ones marked)")
    op("/views", "get", "The analysers: name, title, description (the columns), default sort")
    op("/profiles/{pid}", "get", "One profile's metadata: devices, ranks, steps, sources, tables, span", [_PID])
    vp = [_PID, {"name": "view", "in": "path", "required": True, "schema": {"type": "string"}}]
    op(
        "/profiles/{pid}/views/{view}",
        "get",
        "Run an analyser with the common query",
        vp + _QUERY_PARAMS,
        schema="Result",
    )
    op(
        "/profiles/{pid}/views/{view}",
        "post",
        "Run an analyser with the common query as JSON",
        vp,
        _QUERY_BODY,
        schema="Result",
    )
    op("/profiles/{pid}/tracks", "get", "Timeline tracks: host threads first, then device streams", [_PID])
    op(
        "/profiles/{pid}/timeline",
        "get",
        "Events of [t0, t1] on tracks, merged to the pixel width",
        [_PID, *_WINDOW_PARAMS],
        schema="Window",
    )
    op("/profiles/{pid}/timeline", "post", "Same, with a JSON body", [_PID], _WINDOW_BODY, schema="Window")
    op(
        "/profiles/{pid}/timeline/summary",
        "get",
        "Totals per kind and top names of what [t0, t1] covers",
        [_PID, *_WINDOW_PARAMS],
    )
    op(
        "/profiles/{pid}/timeline/event",
        "get",
        "The events on a track starting at ts, with linked events",
        [_PID, _qp("track", "track id", "integer", True), _qp("ts", "start, ns", "integer", True)],
    )
    op("/profiles/{pid}/counters", "get", "Counter metrics available", [_PID])
    op(
        "/profiles/{pid}/counters/series",
        "get",
        "One counter over [t0, t1], merged per pixel",
        [
            _PID,
            _qp("metric", "metric name", required=True),
            _qp("rank", "rank", "integer"),
            _qp("device", "device", "integer"),
            *_WINDOW_PARAMS,
        ],
    )
    op(
        "/profiles/{pid}/memory/series",
        "get",
        "Allocated and reserved bytes over [t0, t1] per device, and peaks",
        [_PID, _qp("rank", "rank", "integer"), _qp("device", "device", "integer"), *_WINDOW_PARAMS],
    )
    op("/profiles/{pid}/advice", "get", "Optimization advice (when the proposer is installed)", [_PID])
    op(
        "/compare",
        "get",
        "Profile B against A: step time, and per kernel or operator name a_us, b_us, delta_us, delta_pct, status",
        [
            _qp("a", "profile id of A", required=True),
            _qp("b", "profile id of B", required=True),
            _qp("view", "kernels (default) or operators"),
            *_QUERY_PARAMS,
        ],
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "aiprof",
            "version": __version__,
            "description": "Profiles, analysers (one common query: filters, sort, limit, offset), timeline windows, "
            "counter series and advice. Times are int64 ns from the profile's time origin unless a "
            "column's unit says otherwise. Errors are {error, status}.",
        },
        "paths": paths,
        "components": {
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "string"}, "status": {"type": "integer"}}},
                "Result": {
                    "type": "object",
                    "properties": {
                        "view": {"type": "string"},
                        "columns": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string"},
                                    "type": {"type": "string"},
                                    "unit": {"type": ["string", "null"]},
                                },
                            },
                        },
                        "rows": {"type": "array", "items": {"type": "object"}},
                        "total": {"type": "integer"},
                        "offset": {"type": "integer"},
                        "limit": {"type": ["integer", "null"]},
                    },
                },
                "Window": {
                    "type": "object",
                    "description": "items: columnar track, depth, ts, dur, name (index into names), kind, n (events "
                    "merged; 1 = a single event); flows: launch -> device arrows",
                    "properties": {
                        "t0": {"type": "integer"},
                        "t1": {"type": "integer"},
                        "bucket_ns": {"type": "integer"},
                        "items": {"type": "object"},
                        "names": {"type": "array", "items": {"type": "string"}},
                        "flows": {"type": "object"},
                        "flows_truncated": {"type": "boolean"},
                    },
                },
            },
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": TOKEN_COOKIE},
            },
        },
    }


# -- static assets -------------------------------------------------------------------------

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def load_assets() -> dict[str, bytes]:
    """The UI files shipped in the package (aiprof/web/static), by file name."""
    out: dict[str, bytes] = {}
    for f in resources.files("aiprof.web").joinpath("static").iterdir():
        if f.is_file() and Path(f.name).suffix in _TYPES:
            out[f.name] = f.read_bytes()
    return out


# -- the app -------------------------------------------------------------------------------


def create_app(
    paths: list[Path], *, token: str | None = None, host: str = "127.0.0.1", warm: bool = False
) -> Starlette:
    """The Starlette app serving ``paths`` (profiles or folders of profiles).

    ``token``: when set, every API request must carry it. ``host``: the bound address;
    on a loopback address, requests naming another host are refused. ``warm``: build
    the timelines and common views in a background thread at once.
    """
    lib = Library(paths)
    api = Api(lib)
    assets = load_assets()

    def wrap(fn: Handler) -> Handler:
        async def h(request: Request) -> Response:
            try:
                return await fn(request)
            except ApiError as e:
                return _error(e.status, e.message)
            except AiprofError as e:
                return _error(400, str(e))

        return h

    async def index(request: Request) -> Response:
        t = request.query_params.get("token")
        if t is not None and token is not None:
            if not secrets.compare_digest(t, token):
                return _error(401, "wrong token")
            r = RedirectResponse("/", status_code=303)
            r.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
            return r
        return Response(
            assets.get("index.html", b""), media_type=_TYPES[".html"], headers={"Cache-Control": "no-cache"}
        )

    async def static(request: Request) -> Response:
        name = str(request.path_params["name"])
        data = assets.get(name)
        if data is None:
            return _error(404, "no such asset")
        return Response(data, media_type=_TYPES[Path(name).suffix], headers={"Cache-Control": "no-cache"})

    r = [
        Route("/", index),
        Route("/static/{name}", static),
        Route(API + "/openapi.json", wrap(api.openapi)),
        Route(API + "/views", wrap(api.list_views)),
        Route(API + "/profiles", wrap(api.list_profiles)),
        Route(API + "/profiles/{pid}", wrap(api.profile_meta)),
        Route(API + "/profiles/{pid}/views/{view}", wrap(api.view), methods=["GET", "POST"]),
        Route(API + "/profiles/{pid}/tracks", wrap(api.tracks)),
        Route(API + "/profiles/{pid}/timeline", wrap(api.timeline), methods=["GET", "POST"]),
        Route(API + "/profiles/{pid}/timeline/summary", wrap(api.timeline_summary), methods=["GET", "POST"]),
        Route(API + "/profiles/{pid}/timeline/event", wrap(api.timeline_event)),
        Route(API + "/profiles/{pid}/counters", wrap(api.counter_metrics)),
        Route(API + "/profiles/{pid}/counters/series", wrap(api.counter_series), methods=["GET", "POST"]),
        Route(API + "/profiles/{pid}/memory/series", wrap(api.memory_series), methods=["GET", "POST"]),
        Route(API + "/profiles/{pid}/advice", wrap(api.advice)),
        Route(API + "/compare", wrap(api.compare)),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        return _error(status, str(detail))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal error (see the server log)")

    app = Starlette(
        routes=r,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )

    loopback = host in LOOPBACK

    class Guard:
        """Token and Host checks before any route runs."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                req = Request(scope)
                refusal = self.refuse(req)
                if refusal is not None:
                    await refusal(scope, receive, send)
                    return
            await self.inner(scope, receive, send)

        def refuse(self, req: Request) -> Response | None:
            if loopback and token is None:
                if _hostname(req.headers.get("host") or "") not in LOOPBACK:
                    return _error(403, "this server answers only on a loopback host name")
            if token is not None and req.url.path.startswith("/api/"):
                given = req.headers.get("x-aiprof-token") or req.cookies.get(TOKEN_COOKIE) or ""
                auth = req.headers.get("authorization") or ""
                if auth.lower().startswith("bearer "):
                    given = auth[7:].strip()
                if not given or not secrets.compare_digest(given, token):
                    return _error(
                        401,
                        "a token is required (Authorization: Bearer TOKEN, X-Aiprof-Token or the "
                        "cookie set by /?token=TOKEN)",
                    )
            return None

    app.state.library = lib
    if warm:
        threading.Thread(target=warm_up, args=(lib,), name="aiprof-warm-up", daemon=True).start()
    app.add_middleware(_GuardMiddleware, guard=Guard)
    return app


class _GuardMiddleware:
    def __init__(self, app: Any, guard: Any) -> None:
        self._g = guard(app)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._g(scope, receive, send)


def _hostname(host: str) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1'; '[::1]:80' -> '[::1]'."""
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if ":" in host else host


def new_token() -> str:
    return secrets.token_urlsafe(24)


__all__ = ["API", "Library", "advice_for", "create_app", "dumps", "new_token", "openapi_document"]
