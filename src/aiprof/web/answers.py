"""Answers kept: the bytes of the read endpoints' 200 answers, by path and query.

A served profile does not change while it is served (the views' tables, its advice
and its metadata are already kept on that ground, :mod:`.library`), so the answer to
``GET /api/v1/profiles/{pid}/views/kernels?limit=50`` is the same bytes each time.
:class:`AnswerCache` is plain ASGI, inside the guard (host, token and body checks
run first, for every request): a request whose answer is kept is sent those bytes
from the event loop, with no thread, no route, no parameter parsing, no DuckDB and
no JSON encoding; the first request for it runs the route as ever, and its answer is
kept when it is a 200 of at most ``MAX_ANSWER`` bytes. Requests for the same answer
that arrive while it is being computed wait for it instead of computing it again.

Kept answers belong to the profile's entry (:class:`.library.Entry`): an answer is
sent only while the library still serves that very entry under that id (a profile
that left the folder, or a new one under the same name, is never answered from
another's bytes), and the oldest-used are dropped past ``MAX_BYTES`` in all.
Only the GET read routes of :data:`READ` are kept, and of those not an answer sent
with ``Cache-Control: no-store`` (a big profile's advice before it is computed); the
profile list, ``/compare``, SQL queries and downloads are computed each time.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from .library import Entry, Library

#: The most bytes of answers kept in all, and the largest one answer kept.
MAX_BYTES = 64 << 20
MAX_ANSWER = 4 << 20
#: The GET routes (below /api/v1/profiles/{pid}) whose answers are kept.
READ = re.compile(
    r"/api/v1/profiles/(?P<pid>[^/]+)"
    r"(?:|/views/[^/]+|/tracks|/timeline|/timeline/summary|/timeline/event|/timeline/search"
    r"|/counters|/counters/series|/memory/series|/samples|/samples/window|/advice|/cluster|/sql/schema)"
)
#: A header on answers sent from the kept bytes.
KEPT_HEADER = (b"x-aiprof-answer", b"kept")


@dataclass(frozen=True)
class Answer:
    entry: Entry
    headers: list[tuple[bytes, bytes]]
    body: bytes


class AnswerCache:
    """ASGI middleware: GET answers of :data:`READ` kept per served entry (see module)."""

    def __init__(self, app: ASGIApp, library: Library, max_bytes: int = MAX_BYTES) -> None:
        self.app = app
        self.library = library
        self.max_bytes = max_bytes
        self._answers: OrderedDict[bytes, Answer] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        #: Keys being computed, and the event their waiters wait on (event loop only).
        self._pending: dict[bytes, asyncio.Event] = {}

    def __len__(self) -> int:
        return len(self._answers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        m = READ.fullmatch(scope["path"])
        if m is None:
            await self.app(scope, receive, send)
            return
        pid = m.group("pid")
        key = scope["path"].encode("utf-8", "surrogateescape") + b"?" + scope.get("query_string", b"")
        if await self._send_kept(key, pid, send):
            return
        waiting = self._pending.get(key)
        if waiting is not None:
            # The first request for it is computing it, or waiting on the warm-up's
            # process for it: this one waits too, and is counted as waiting, or the
            # warm-up (paused while a request in flight does not wait) would stay
            # paused with every request waiting on it.
            with self.library.activity.waiting():
                await waiting.wait()
            if not await self._send_kept(key, pid, send):
                # Not kept (an error, too large): computed by each request, none waits.
                await self._run_and_keep(key, pid, scope, receive, send)
            return
        done = self._pending[key] = asyncio.Event()
        try:
            await self._run_and_keep(key, pid, scope, receive, send)
        finally:
            del self._pending[key]
            done.set()

    async def _send_kept(self, key: bytes, pid: str, send: Send) -> bool:
        with self._lock:
            ans = self._answers.get(key)
            if ans is None:
                return False
            if self.library.current(pid) is not ans.entry:
                self._drop(key)
                return False
            self._answers.move_to_end(key)
        await send({"type": "http.response.start", "status": 200, "headers": [*ans.headers, KEPT_HEADER]})
        await send({"type": "http.response.body", "body": ans.body, "more_body": False})
        return True

    async def _run_and_keep(self, key: bytes, pid: str, scope: Scope, receive: Receive, send: Send) -> None:
        status = 0
        headers: list[tuple[bytes, bytes]] = []
        parts: list[bytes] = []
        size = 0

        async def watch(msg: Message) -> None:
            nonlocal status, headers, size
            if msg["type"] == "http.response.start":
                status = msg["status"]
                headers = list(msg.get("headers", []))
            elif msg["type"] == "http.response.body" and status == 200 and size <= MAX_ANSWER:
                body = msg.get("body", b"")
                size += len(body)
                parts.append(body)
                if not msg.get("more_body", False) and size <= MAX_ANSWER:
                    self._keep(key, pid, headers, b"".join(parts))
            await send(msg)

        await self.app(scope, receive, watch)

    def _keep(self, key: bytes, pid: str, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        entry = self.library.current(pid)
        if entry is None or entry.error is not None:
            return
        for k, v in headers:
            if k.lower() == b"set-cookie" or (k.lower() == b"cache-control" and b"no-store" in v.lower()):
                return  # a cookie, or an answer that will change (a big profile's advice before it is computed)
        with self._lock:
            self._drop(key)
            self._answers[key] = Answer(entry, headers, body)
            self._bytes += len(body)
            while self._bytes > self.max_bytes and self._answers:
                self._drop(next(iter(self._answers)))

    def _drop(self, key: bytes) -> None:
        old = self._answers.pop(key, None)
        if old is not None:
            self._bytes -= len(old.body)
