"""The REST API's routes (FastAPI, typed): paths, parameters and answer models.

Everything returned comes from the analysers (:func:`aiprof.analysis.run`), the
timeline windows (:mod:`aiprof.web.timeline`) and the advice proposer; nothing is
computed here (the SQL page and the trace export: :mod:`aiprof.web.routes_sql`).
Handlers are plain functions, so FastAPI runs them in its thread pool (the profile
list runs on the event loop while its scan is quick); their GET answers are kept and sent again without
running them (:mod:`.answers`). Queries take a
connection of their own from the profile's entry (:meth:`Entry.reading`), so several
run at once, timeline answers included (windows need no connection at all).
Bad parameters are refused by the models with a 422 that names the field.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ..analysis import Query as ViewQuery
from ..analysis import run, views
from ..analysis.device_use import devices_used
from ..cluster.index import job_meta
from ..errors import AiprofError
from ..store import Profile
from . import models as m
from .jsonio import json_response
from .library import ApiError, Entry, Library, is_kept, query_view
from .routes_sql import add_sql_routes
from .series import SeriesQuery
from .timeline import MAX_ITEMS, SEARCH_LIMIT, Timeline, Window

#: The profile list scans the served folders on the event loop while a scan takes at
#: most this long (else in the thread pool).
INLINE_SCAN_S = 0.005
#: Rows a view returns when the request gives no limit, and the most it may ask for.
DEFAULT_LIMIT = 100
MAX_LIMIT = 10000

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": m.ErrorResponse, "description": d}
    for s, d in (
        (400, "a value the analysers refuse (unknown column, bad filter)"),
        (401, "a token is required"),
        (404, "no such profile, view or event"),
        (409, "the profile is broken"),
        (422, "a parameter of the wrong type or range (the field is named)"),
    )
}

Pid = Annotated[str, Path(description="profile id (from /profiles)")]
T0 = Annotated[int | None, Query(description="window start, ns (default: shown_ns[0] of /tracks, the first drawn)")]
T1 = Annotated[int | None, Query(description="window end, ns (default: shown_ns[1] of /tracks, the last drawn end)")]
Width = Annotated[int, Query(ge=1, le=20000, description="pixels the window is drawn on")]
Tracks = Annotated[str | None, Query(description="track ids 'a,b,c' (default: all)")]
MaxItems = Annotated[int, Query(ge=1, le=100000, description="most merged items returned")]
Rank = Annotated[int | None, Query(description="rank")]
Device = Annotated[int | None, Query(description="device index")]


def _span(profile: Profile, timeline: Timeline) -> list[int]:
    """The span the timeline covers: its own once built (or kept at import), else by the
    same rule in one query (store/spans.py), without indexing every event (a 47M-event
    profile's index takes 7.4 GiB: describing it must not)."""
    from ..store.spans import spans_by_rank
    from .timeline_store import load

    if timeline.built or load(profile) is not None:  # kept: read back, not indexed
        timeline.build()
        return list(timeline.span)
    spans = spans_by_rank(profile).values()
    return [min(lo for lo, _ in spans), max(hi for _, hi in spans)] if spans else [0, 0]


def describe(profile: Profile, pid: str, name: str, timeline: Timeline) -> dict[str, Any]:
    """One profile's metadata for the API: devices (those the trace lists, and those
    used: devices_used), ranks, steps (the steps view),
    sources, table sizes, warnings and the time span (ns) the timeline covers.

    A many-rank job folder answers span, steps and devices used from its cluster index
    (:func:`..cluster.index.job_meta`: seconds to build from 1,000 ranks' events, a few
    ms from the index); its steps then hold rank, step, start_us and duration_us."""
    meta = profile.metas[0]
    job = job_meta(profile)
    steps: list[dict[str, Any]] = []
    steps_error = None
    if job is not None:
        steps, span, used = job["steps"], job["span_ns"], job["devices_used"]
    else:
        span, used = _span(profile, timeline), devices_used(profile)
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
        "span_ns": span,
        "ranks": sorted({r for m in profile.metas for r in m.get("ranks", [])}),
        "world_size": meta.get("world_size"),
        "hosts": meta.get("hosts", []),
        "devices": profile.devices,
        "devices_used": used,
        "sources": [
            {k: v for k, v in src.items() if k != "path"} | {"file": FsPath(str(src.get("path", ""))).name}
            for m in profile.metas
            for src in m.get("sources", [])
        ],
        "tables": profile.tables,
        "warnings": profile.warnings,
        "steps": steps,
        "from_index": job is not None,
    }
    if steps_error:
        out["steps_error"] = steps_error
    return out


def advice_for(profile: Profile, include_info: bool = False) -> dict[str, Any]:
    """The advice exactly as ``aiprof advise --format json`` prints it (``advise_json``:
    same items, order and gains; ``include_info``: as ``--all``, the items under 1% of
    step time too), with ``available`` for the page."""
    from ..advise import advise_json

    return {"available": True, **advise_json(profile, include_info=include_info)}


#: Where a big profile's advice is computed, as the web UI's answer says it.
ON_REQUEST = "the Advice page computes it when asked (or aiprof advise PROFILE)"


def advice_deferred(profile: Profile, on_request: str = ON_REQUEST) -> dict[str, Any] | None:
    """On a big profile (analysis.operators.big_profile), the answer that says the
    advice is left to be asked for (it takes minutes and GiBs there), and where:
    ``on_request``; None otherwise."""
    from ..analysis.operators import big_profile, left_out

    spans = big_profile(profile.metas)
    if spans is None:
        return None
    return {
        "available": False,
        "deferred": on_request == ON_REQUEST,
        "advice": [],
        "reason": left_out("the advice", spans, on_request),
    }


def view_deferred(profile: Profile, view: str) -> dict[str, Any] | None:
    """On a big profile, the answer of a view that nests every host span
    (analysis.operators.NEST_HOST_SPANS) before it is asked for with ``compute=true``:
    no rows, ``deferred`` and the reason. None for any other view or profile."""
    from ..analysis.operators import NEST_HOST_SPANS, big_profile, not_computed

    spans = big_profile(profile.metas) if view in NEST_HOST_SPANS else None
    if spans is None:
        return None
    return not_computed(view, spans, f"the page computes it when asked (or aiprof report PROFILE --view {view})")


def _param_values(request: Request) -> dict[str, Any]:
    """``param.NAME=V`` query parameters (an analyser's own parameters)."""
    qp = request.query_params
    params: dict[str, Any] = {}
    for k, v in qp.multi_items():
        if k.startswith("param."):
            name = k[len("param.") :]
            vals = qp.getlist(k)
            params[name] = vals if len(vals) > 1 or name in ("kinds",) else v
    return params


def _limited(q: ViewQuery) -> ViewQuery:
    if q.limit is None:
        q.limit = DEFAULT_LIMIT
    if q.limit > MAX_LIMIT:
        raise ApiError(422, f"limit must be at most {MAX_LIMIT}")
    return q


@contextlib.contextmanager
def _locked(*entries: Entry) -> Iterator[None]:
    """Hold the entries' locks, taken in id order (two requests never wait on each other)."""
    with contextlib.ExitStack() as stack:
        for e in sorted(entries, key=lambda e: e.id):
            stack.enter_context(e.lock)
        yield


def build_router(lib: Library) -> APIRouter:
    """The /api/v1 routes over the profiles of ``lib``."""
    r = APIRouter(responses=ERRORS)

    def entry(pid: str) -> Entry:
        return lib.get(pid)

    def timeline_of(pid: str) -> Timeline:
        e = lib.get(pid)
        assert e.timeline is not None
        return e.timeline

    def series(e: Entry) -> SeriesQuery:
        assert e.profile is not None
        return SeriesQuery(e.profile, e.series_lock, e.series_cache, e.reading)

    def window(tl: Timeline, t0: int | None, t1: int | None, width: int, tracks: Any, max_items: int) -> Window:
        # The default window is the page's first view (shown_ns), asked for before the
        # track list comes: what the shown tracks draw, not Kineto's hidden placeholders.
        a, b = tl.shown_span() if t0 is None or t1 is None else (t0, t1)
        return Window.parse(a if t0 is None else t0, b if t1 is None else t1, width, tracks, max_items)

    @r.get("/views", response_model=list[m.ViewInfo], summary="The analysers: name, title, columns, default sort")
    def list_views() -> Response:
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

    @r.get("/profiles", response_model=m.ProfilesResponse, summary="The profiles in the served folders")
    async def list_profiles() -> Response:
        # A quick scan (a few stats: one profile, a small folder) runs on the event loop:
        # under load a request in the thread pool waits long for the GIL, and this answer
        # is never kept. A slow one (a job folder of 1,000 ranks: 0.2 s) must not stall
        # every other request: it runs in the pool.
        if lib.scan_seconds <= INLINE_SCAN_S:
            found = lib.scan()
        else:
            found = await run_in_threadpool(lib.scan)
        return json_response({"profiles": [e.summary() for e in found]})

    @r.get("/profiles/{pid}", response_model=m.ProfileMeta, summary="One profile's metadata")
    def profile_meta(pid: Pid) -> Response:
        e = entry(pid)
        tl = e.timeline
        assert tl is not None
        # Computed once per profile (it does not change while served).
        return json_response(e.once("meta", lambda prof: describe(prof, e.id, e.path.name, tl)))

    def view_answer(e: Entry, name: str, q: ViewQuery, params: dict[str, Any], compute: bool) -> Response:
        if name not in views():
            raise ApiError(404, f"unknown view {name!r}; views: {', '.join(sorted(views()))}")
        assert e.profile is not None
        later = None if compute or is_kept(e, name, params) else view_deferred(e.profile, name)
        if later is not None:  # not kept (answers.py): once computed, its rows are the answer
            return json_response({**later, "profile": e.id}, headers={"Cache-Control": "no-store"})
        res = query_view(e, name, _limited(q), params)
        out = res.to_json()
        out["query"] = res.query.to_json()
        out["profile"] = e.id
        return json_response(out)

    @r.get(
        "/profiles/{pid}/views/{view}",
        response_model=m.ViewResult,
        summary="Run an analyser with the common query",
        description="filter= (repeatable, the CLI's syntax: name~gemm, count>=2), sort= ('-col' descending), "
        "limit=, offset=; an analyser's own parameters as param.NAME=VALUE.",
    )
    def view_get(
        request: Request,
        pid: Pid,
        view: Annotated[str, Path(description="analyser name (from /views)")],
        filters: Annotated[list[str] | None, Query(alias="filter", description="a filter, repeatable")] = None,
        sort: Annotated[list[str] | None, Query(description="sort columns, '-col' descending")] = None,
        limit: Annotated[int | None, Query(ge=0, le=MAX_LIMIT)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        compute: Annotated[
            bool, Query(description="compute a view a big profile leaves to be asked for (operators, allocations)")
        ] = False,
    ) -> Response:
        q = ViewQuery.parse(filters or [], sort or [], limit, offset)
        return view_answer(entry(pid), view, q, _param_values(request), compute)

    @r.post("/profiles/{pid}/views/{view}", response_model=m.ViewResult, summary="Same, the query as JSON")
    def view_post(pid: Pid, view: str, body: Annotated[m.QueryBody | None, Body()] = None) -> Response:
        b = body or m.QueryBody.model_validate({})
        q = ViewQuery.from_json(b.model_dump(exclude={"params", "compute"}))
        return view_answer(entry(pid), view, q, b.params, b.compute)

    @r.get("/profiles/{pid}/tracks", response_model=m.TracksResponse, summary="Timeline tracks")
    def tracks(pid: Pid) -> Response:
        tl = timeline_of(pid)
        rows = tl.tracks()
        return json_response({"span_ns": list(tl.span), "shown_ns": list(tl.shown_span()), "tracks": rows})

    def window_routes(path: str, name: str, answer: Any, model: Any, summary: str) -> None:
        """GET (query parameters) and POST (a JSON body) of one window answer."""

        def get(
            pid: Pid,
            t0: T0 = None,
            t1: T1 = None,
            width: Width = 1000,
            tracks: Tracks = None,
            max_items: MaxItems = MAX_ITEMS,
        ) -> Response:
            tl = timeline_of(pid)
            return json_response(answer(tl, window(tl, t0, t1, width, tracks, max_items)))

        def post(pid: Pid, body: Annotated[m.WindowBody | None, Body()] = None) -> Response:
            b = body or m.WindowBody.model_validate({})
            tl = timeline_of(pid)
            return json_response(answer(tl, window(tl, b.t0, b.t1, b.width, b.tracks, b.max_items)))

        r.get(path, response_model=model, summary=summary, name=name)(get)
        r.post(path, response_model=model, summary="Same, with a JSON body", name=name + "_post")(post)

    window_routes(
        "/profiles/{pid}/timeline",
        "timeline",
        Timeline.window,
        m.WindowResponse,
        "Events of [t0, t1] on tracks, merged to the pixel width",
    )
    window_routes(
        "/profiles/{pid}/timeline/summary",
        "timeline_summary",
        Timeline.summary,
        m.SummaryResponse,
        "Totals per kind and top names of what [t0, t1] covers",
    )

    @r.get(
        "/profiles/{pid}/timeline/event",
        response_model=m.EventsResponse,
        summary="The events on a track starting at ts, with linked events",
    )
    def timeline_event(
        pid: Pid,
        track: Annotated[int, Query(ge=0, description="track id")],
        ts: Annotated[int, Query(description="start, ns")],
    ) -> Response:
        rows = timeline_of(pid).events_at(track, ts)
        if not rows:
            raise ApiError(404, f"no event on track {track} at ts {ts}")
        return json_response({"events": rows})

    @r.get(
        "/profiles/{pid}/timeline/search",
        response_model=m.SearchResponse,
        summary="Events whose name matches (substring, case-insensitive, or a regular expression)",
    )
    def timeline_search(
        pid: Pid,
        q: Annotated[str, Query(min_length=1, max_length=1000, description="text to find in event names")],
        regex: Annotated[bool, Query(description="q is a regular expression (RE2 syntax)")] = False,
        exact: Annotated[bool, Query(description="the whole name equals q")] = False,
        kind: Annotated[str | None, Query(description="only events of this kind")] = None,
        t0: T0 = None,
        t1: T1 = None,
        order: Annotated[Literal["ts", "-dur"], Query(description="ts: in time order; -dur: longest first")] = "ts",
        limit: Annotated[int, Query(ge=1, le=SEARCH_LIMIT)] = 500,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> Response:
        tl = timeline_of(pid)
        return json_response(
            tl.search(q, regex=regex, exact=exact, kind=kind, t0=t0, t1=t1, order=order, limit=limit, offset=offset)
        )

    @r.get("/profiles/{pid}/counters", response_model=m.CounterMetrics, summary="Counter metrics available")
    def counter_metrics(pid: Pid) -> Response:
        e = entry(pid)
        assert e.profile is not None
        return json_response({"metrics": series(e).metrics()})

    def counter_answer(pid: str, metric: str, rank: int | None, device: int | None, w: tuple[Any, ...]) -> Response:
        e = entry(pid)
        assert e.profile is not None and e.timeline is not None
        sq = series(e)
        return json_response(sq.counter(window(e.timeline, *w), metric, rank, device))

    @r.get(
        "/profiles/{pid}/counters/series",
        response_model=m.CounterSeries,
        summary="One counter over [t0, t1], merged per pixel",
    )
    def counter_series(
        pid: Pid,
        metric: Annotated[str, Query(min_length=1, description="metric name")],
        rank: Rank = None,
        device: Device = None,
        t0: T0 = None,
        t1: T1 = None,
        width: Width = 1000,
    ) -> Response:
        return counter_answer(pid, metric, rank, device, (t0, t1, width, None, MAX_ITEMS))

    @r.post("/profiles/{pid}/counters/series", response_model=m.CounterSeries, summary="Same, with a JSON body")
    def counter_series_post(pid: Pid, body: Annotated[m.WindowBody, Body()]) -> Response:
        if not body.metric:
            raise ApiError(422, "metric is required")
        return counter_answer(pid, body.metric, body.rank, body.device, (body.t0, body.t1, body.width, None, MAX_ITEMS))

    def memory_answer(pid: str, rank: int | None, device: int | None, w: tuple[Any, ...]) -> Response:
        e = entry(pid)
        assert e.profile is not None and e.timeline is not None
        return json_response(series(e).memory(window(e.timeline, *w), rank, device))

    @r.get(
        "/profiles/{pid}/memory/series",
        response_model=m.MemorySeries,
        summary="Allocated and reserved bytes over [t0, t1] per device, and peaks",
    )
    def memory_series(
        pid: Pid, rank: Rank = None, device: Device = None, t0: T0 = None, t1: T1 = None, width: Width = 1000
    ) -> Response:
        return memory_answer(pid, rank, device, (t0, t1, width, None, MAX_ITEMS))

    @r.post("/profiles/{pid}/memory/series", response_model=m.MemorySeries, summary="Same, with a JSON body")
    def memory_series_post(pid: Pid, body: Annotated[m.WindowBody | None, Body()] = None) -> Response:
        b = body or m.WindowBody.model_validate({})
        return memory_answer(pid, b.rank, b.device, (b.t0, b.t1, b.width, None, MAX_ITEMS))

    @r.get(
        "/profiles/{pid}/samples",
        response_model=m.SamplesResponse,
        summary="Python stack samples of [t0, t1], interned, per thread and stack (for flame graphs)",
    )
    def samples(pid: Pid, rank: Rank = None, t0: T0 = None, t1: T1 = None) -> Response:
        from ..export.samples import sample_stacks

        e = entry(pid)
        with e.reading() as prof:
            return json_response(sample_stacks(prof, rank=rank, t0=t0, t1=t1))

    @r.get(
        "/profiles/{pid}/samples/window",
        response_model=m.SampleWindowResponse,
        summary="Python stack samples of [t0, t1] merged per pixel and thread (a flame chart track)",
    )
    def samples_window(pid: Pid, t0: T0 = None, t1: T1 = None, width: Width = 1000) -> Response:
        from ..export.samples import sample_window

        e = entry(pid)
        assert e.profile is not None and e.timeline is not None
        w = window(e.timeline, t0, t1, width, None, MAX_ITEMS)
        with e.reading() as prof:
            return json_response(sample_window(prof, w.t0, w.t1, w.width))

    @r.get(
        "/profiles/{pid}/cluster",
        response_model=m.ClusterResponse,
        summary="A many-rank job: its facts and the first rows of the stragglers, collectives, links and "
        "exposed_comm views, from the cluster index",
    )
    def cluster(pid: Pid, limit: Annotated[int, Query(ge=0, le=MAX_LIMIT)] = DEFAULT_LIMIT) -> Response:
        from ..cluster.index import PAGE_VIEWS, job_facts

        e = entry(pid)
        assert e.profile is not None
        out: dict[str, Any] = {"profile": e.id, "views": {}}
        with e.reading() as prof:
            out["job"] = job_facts(prof)
            for name in PAGE_VIEWS:
                res = query_view(e, name, ViewQuery(limit=limit), {}, profile=prof)
                out["views"][name] = {**res.to_json(), "query": res.query.to_json(), "profile": e.id}
        return json_response(out)

    @r.get(
        "/profiles/{pid}/advice",
        response_model=m.AdviceResponse,
        summary="Optimization advice (on a big profile, computed when asked with compute=true)",
    )
    def advice(
        pid: Pid,
        compute: Annotated[bool, Query()] = False,
        every: Annotated[
            bool, Query(alias="all", description="the items under 1% of step time too, as aiprof advise --all")
        ] = False,
    ) -> Response:
        e = entry(pid)
        key = "advice_all" if every else "advice"
        if not compute and key not in e.answers:
            assert e.profile is not None
            later = advice_deferred(e.profile)
            if later is not None:  # not kept (answers.py): once computed, the advice is the answer
                return json_response(later, headers={"Cache-Control": "no-store"})
        return json_response(e.once(key, lambda p: advice_for(p, include_info=every)))

    @r.get(
        "/compare",
        response_model=m.CompareResponse,
        summary="Profile B against A, the compare page's one call: per-step verdicts and gate (as aiprof diff "
        "--format json), how the jobs differ, and per kernel or operator name a_us, b_us, delta_us, delta_pct, status",
    )
    def compare(
        a: Annotated[str, Query(description="profile id of A")],
        b: Annotated[str, Query(description="profile id of B")],
        view: Literal["kernels", "operators"] = "kernels",
        filters: Annotated[list[str] | None, Query(alias="filter")] = None,
        sort: Annotated[list[str] | None, Query()] = None,
        limit: Annotated[int | None, Query(ge=0, le=MAX_LIMIT)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        fail_if: Annotated[
            list[str] | None, Query(description="gate rules FIG>+N% / FIG<-N%, as aiprof diff --fail-if")
        ] = None,
    ) -> Response:
        from ..analysis.compare import compare_tables, step_summary
        from ..analysis.gate import judge, parse_rule
        from ..analysis.job_match import job_differences
        from ..analysis.regression import parse_pattern, side, step_series

        rules = [parse_rule(t) for t in fail_if or []]
        patterns = [r.figure for r in rules if parse_pattern(r.figure)]

        ea, eb = lib.get(a), lib.get(b)
        q = _limited(ViewQuery.parse(filters or [], sort or [], limit, offset))
        if not q.sort:
            q.sort = [("delta_us", True)]
        halves, series = [], []
        for e in (ea, eb):
            # The full views come from the same cache that paging through a view uses.
            with e.reading() as prof:
                halves.append((query_view(e, view, ViewQuery(), {}, profile=prof).table, step_summary(prof)))
                series.append(step_series([prof], patterns))
        with _locked(ea, eb):
            assert ea.profile is not None and eb.profile is not None
            differences = job_differences(ea.profile, eb.profile)
        table = compare_tables(halves[0][0], halves[1][0], view)
        page, total = q.apply(table)
        judged = judge(series[0], series[1], rules)
        return json_response(
            {
                "view": view,
                "a": ea.id,
                "b": eb.id,
                "steps": {"a": halves[0][1], "b": halves[1][1]},
                "rows": page.to_pylist(),
                "total": total,
                "query": q.to_json(),
                **judged,
                "differences": differences,
                "sides": {"a": side(ea.id, series[0]), "b": side(eb.id, series[1])},
            }
        )

    @r.get(
        "/compare/related",
        response_model=m.RelatedResponse,
        summary="The other profiles and how each one's job differs from A's (empty: the same job)",
    )
    def compare_related(a: Annotated[str, Query(description="profile id of A")]) -> Response:
        from ..analysis.job_match import job_differences

        ea = lib.get(a)
        out = []
        for other in lib.scan():
            if other.id == ea.id or other.error is not None:
                continue
            try:
                eb = lib.get(other.id)
            except ApiError:
                continue
            with _locked(ea, eb):
                assert ea.profile is not None and eb.profile is not None
                ranks = len({r for meta in eb.profile.metas for r in meta.get("ranks", [])})
                out.append({"id": eb.id, "ranks": ranks, "differences": job_differences(ea.profile, eb.profile)})
        assert ea.profile is not None
        ranks_a = len({r for meta in ea.profile.metas for r in meta.get("ranks", [])})
        return json_response({"a": ea.id, "ranks": ranks_a, "profiles": out})

    add_sql_routes(r, lib)
    return r
