"""The app: the REST API (``/api/v1``, typed routes in :mod:`aiprof.web.routes`, its
OpenAPI document generated at ``/api/v1/openapi.json``) and the web UI's files.

Safety, by construction rather than by checks on paths:
- profiles are addressed by ids from :class:`aiprof.web.library.Library`; no request
  value is ever joined to a file path;
- static assets are a fixed table read from the package at start (:mod:`.assets`);
- bound to a loopback address, requests must name a loopback host (no DNS
  rebinding); bound to any other address, every API request needs the token (header
  ``Authorization: Bearer TOKEN``, ``X-Aiprof-Token`` or the ``aiprof_token`` cookie
  that ``/?token=TOKEN`` sets);
- request bodies over ``MAX_BODY`` bytes are refused (413) before they are read whole;
- errors are JSON ``{"error": ..., "status": N}``; a 422 names the field; an unexpected
  failure is a 500 whose body says only that, the traceback goes to the server's log.
"""

from __future__ import annotations

import logging
import secrets
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..errors import AiprofError
from .answers import MAX_BYTES as KEEP_BYTES
from .answers import AnswerCache
from .assets import TYPES, load_assets
from .jsonio import dumps, error_response
from .library import Activity, ApiError, Library, warm_up
from .routes import advice_for, build_router, describe

log = logging.getLogger("aiprof.serve")

API = "/api/v1"
MAX_BODY = 1 << 20
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
TOKEN_COOKIE = "aiprof_token"
#: A token given by the user must be at least this long (``new_token`` makes 32).
MIN_TOKEN = 16

DESCRIPTION = (
    "Profiles, analysers (one common query: filters, sort, limit, offset), timeline windows, "
    "search, counter series and advice. Times are int64 ns from the profile's time origin unless a "
    "column's unit says otherwise. Errors are {error, status}; a 422 also has detail (the fields)."
)


def _field_errors(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    detail = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "body", "path")]
        detail.append(
            {"field": ".".join(loc) or "body", "in": str((err.get("loc") or ("",))[0]), "message": err.get("msg", "")}
        )
    first = detail[0] if detail else {"field": "request", "message": "invalid"}
    more = f" (and {len(detail) - 1} more)" if len(detail) > 1 else ""
    return f"{first['field']}: {first['message']}{more}", detail


def create_app(
    paths: list[Path],
    *,
    token: str | None = None,
    host: str = "127.0.0.1",
    warm: bool = False,
    keep_bytes: int = KEEP_BYTES,
) -> FastAPI:
    """The app serving ``paths`` (profiles or folders of profiles).

    ``token``: when set, every API request must carry it. ``host``: the bound address;
    on a loopback address, requests naming another host are refused. ``warm``: build
    the timelines and common views in a background thread at once. ``keep_bytes``: the
    most bytes of read answers kept (:mod:`.answers`; 0: every answer is computed).
    """
    if token is not None and len(token) < MIN_TOKEN:
        raise AiprofError(f"the token must be at least {MIN_TOKEN} characters")
    lib = Library(paths)
    assets = load_assets()
    app = FastAPI(
        title="aiprof",
        version=__version__,
        description=DESCRIPTION,
        openapi_url=API + "/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(build_router(lib), prefix=API)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.message)

    @app.exception_handler(AiprofError)
    async def aiprof_error(request: Request, exc: AiprofError) -> Response:
        return error_response(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        msg, detail = _field_errors(exc)
        return error_response(422, msg, detail=detail)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        r = error_response(exc.status_code, str(exc.detail))
        for k, v in (exc.headers or {}).items():
            r.headers[k] = v
        return r

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal error (see the server log)")

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> Response:
        t = request.query_params.get("token")
        if t is not None and token is not None:
            if not _same(t, token):
                return error_response(401, "wrong token")
            r = RedirectResponse("/", status_code=303)
            r.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
            return r
        return Response(assets.get("index.html", b""), media_type=TYPES[".html"], headers={"Cache-Control": "no-cache"})

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        data = assets.get(name)
        if data is None:
            return error_response(404, "no such asset")
        return Response(data, media_type=TYPES[Path(name).suffix], headers={"Cache-Control": "no-cache"})

    _add_security(app)
    app.state.library = lib
    if warm:
        threading.Thread(target=warm_up, args=(lib,), name="aiprof-warm-up", daemon=True).start()
    # Inside the guard (the last added runs first): every request is checked before
    # a kept answer is sent.
    if keep_bytes > 0:
        app.add_middleware(AnswerCache, library=lib, max_bytes=keep_bytes)
    app.add_middleware(Guard, token=token, loopback=host in LOOPBACK, activity=lib.activity)
    return app


def _add_security(app: FastAPI) -> None:
    base = app.openapi

    def openapi() -> dict[str, Any]:
        doc = base()
        doc.setdefault("components", {})["securitySchemes"] = {
            "token": {"type": "http", "scheme": "bearer"},
            "cookie": {"type": "apiKey", "in": "cookie", "name": TOKEN_COOKIE},
        }
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


def openapi_document(app: FastAPI | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 description of every route under /api/v1 (generated from the routes)."""
    return (app or create_app([])).openapi()


def _same(given: str, token: str) -> bool:
    # compare_digest refuses non-ASCII str; bytes compare whatever was sent.
    return secrets.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("utf-8"))


class Guard:
    """Host, token and body-size checks before any route runs (plain ASGI)."""

    def __init__(self, app: ASGIApp, token: str | None, loopback: bool, activity: Activity | None = None) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback
        #: API requests in flight, which the warm-up waits out (library.warm_up).
        self.activity = activity or Activity()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        req = Request(scope)
        refusal = self.refuse(req)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        size = 0

        async def counted() -> Message:
            nonlocal size
            msg = await receive()
            if msg["type"] == "http.request":
                size += len(msg.get("body", b""))
                if size > MAX_BODY:
                    raise _TooLarge()
            return msg

        if not req.url.path.startswith("/api/"):
            await self.app(scope, counted, send)
            return
        with self.activity.request():
            await self.app(scope, counted, send)

    def refuse(self, req: Request) -> Response | None:
        if self.loopback and self.token is None:
            if _hostname(req.headers.get("host") or "") not in LOOPBACK:
                return error_response(403, "this server answers only on a loopback host name")
        if self.token is not None and req.url.path.startswith("/api/"):
            given = req.headers.get("x-aiprof-token") or req.cookies.get(TOKEN_COOKIE) or ""
            auth = req.headers.get("authorization") or ""
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
            if not given or not _same(given, self.token):
                return error_response(
                    401,
                    "a token is required (Authorization: Bearer TOKEN, X-Aiprof-Token or the "
                    "cookie set by /?token=TOKEN)",
                )
        length = req.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return _too_large()
        return None


class _TooLarge(HTTPException):
    """Raised while a body is read: FastAPI passes HTTP exceptions through to the handler."""

    def __init__(self) -> None:
        super().__init__(413, f"request body larger than {MAX_BODY} bytes")


def _too_large() -> Response:
    return error_response(413, f"request body larger than {MAX_BODY} bytes")


def _hostname(host: str) -> str:
    """'127.0.0.1:8080' -> '127.0.0.1'; '[::1]:80' -> '[::1]'."""
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if ":" in host else host


def new_token() -> str:
    return secrets.token_urlsafe(24)


__all__ = ["API", "Library", "advice_for", "create_app", "describe", "dumps", "new_token", "openapi_document"]
