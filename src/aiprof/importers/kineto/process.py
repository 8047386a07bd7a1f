"""Which process a Kineto trace is of, read from its head: host, pid, the rank its
``distributedInfo`` states, the profiler's base time.

``torch.profiler`` with a schedule that repeats (``schedule(..., repeat=2)``) and
``tensorboard_trace_handler`` writes one file per active window, all from one process
(``worker0.<ts>.pt.trace.json``): windows of one rank in time, not ranks of a job.
:func:`group` tells them apart from the traces of a job's ranks (other pids, or other
distributedInfo ranks); ``store/runs.py:process_key`` is the rule.

Only the head is read (64 KiB, up to 1 MiB when the events that name the process come
late): a job import asks this of every rank file before it starts.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...store.runs import process_key
from .. import gunzip
from ..base import log
from .rules import DEVICE_CATS, kind_for

#: Bytes of a trace's head read first, and at most.
HEAD_FIRST = 1 << 16
HEAD_MAX = 1 << 20
#: Events of the head looked at for the process.
HEAD_EVENTS = 2000
_KEY = b'"traceEvents"'
_HOST_RE = re.compile(rb'"host_name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_BASE_RE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
#: Kinds of the spans the traced process itself runs (the rest run on a device).
_HOST_KINDS = frozenset({"cpu_op", "user_annotation", "step", "runtime", "driver", "python", "dataloader"})


@dataclass(frozen=True)
class TraceProcess:
    """What a trace's head says of the process it traced (None: it does not say)."""

    path: Path
    pid: int | None
    host: str | None
    rank: int | None
    """``distributedInfo.rank``."""
    base_time_ns: int | None
    head: str = ""
    """A digest of the trace's first bytes: two windows differ there (their times), one
    trace given twice does not."""

    def as_source(self) -> dict[str, Any]:
        """The source entry's ``process`` (profile.json): the keys the head told."""
        got = {"pid": self.pid, "host": self.host, "distributed_rank": self.rank, "base_time_ns": self.base_time_ns}
        return {k: v for k, v in got.items() if v is not None}

    @property
    def key(self) -> tuple[Any, ...] | None:
        return process_key(self.as_source())


def _head(path: Path, limit: int) -> bytes:
    with path.open("rb") as f:
        raw = f.read(limit)
    if raw[:2] == b"\x1f\x8b":
        try:
            return gunzip.head(raw, limit)
        except gunzip.ERRORS:
            return b""
    return raw


def _events(text: bytes) -> Iterator[dict[str, Any]]:
    """The whole events at the start of ``text`` (the bytes after ``traceEvents: [``, or
    a bare array's after ``[``), at most ``HEAD_EVENTS``, decoded one by one."""
    body = text.decode("utf-8", "replace")
    dec = json.JSONDecoder()
    i, n = 0, len(body)
    for _ in range(HEAD_EVENTS):
        while i < n and body[i] in " \t\r\n,":
            i += 1
        if i >= n or body[i] != "{":
            return
        try:
            ev, i = dec.raw_decode(body, i)
        except (ValueError, RecursionError):
            return  # cut by the head's end (or nested past what json reads)
        if isinstance(ev, dict):
            yield ev


def _host_pid(events: Iterator[dict[str, Any]]) -> int | None:
    """The traced process: the pid Kineto labels ``CPU`` (its process metadata, which
    may follow a few spans), else that of the first host span (a device's spans carry
    its index as pid)."""
    first_host: int | None = None
    for e in events:
        ph, pid = e.get("ph"), _int(e.get("pid"))
        if pid is None:
            continue
        if ph == "M":
            args = e.get("args")
            if e.get("name") == "process_labels" and isinstance(args, dict) and args.get("labels") == "CPU":
                return pid
            continue
        if ph == "X" and first_host is None:
            cat = e.get("cat") if isinstance(e.get("cat"), str) else None
            kind = kind_for(cat, str(e.get("name", "")))
            if kind in _HOST_KINDS and (cat or "").lower() not in DEVICE_CATS:
                first_host = pid
    return first_host


def _int(v: object) -> int | None:
    """``v`` when it is an integer (JSON true is not one), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _text(raw: bytes) -> str | None:
    """A JSON string's body, unescaped."""
    try:
        got = json.loads(b'"' + raw + b'"')
    except ValueError:
        return None
    return got if isinstance(got, str) and got else None


def trace_process(path: Path) -> TraceProcess:
    """The process ``path`` traced, as far as its head tells (nothing, rather than an
    error, from a head it cannot read: it is a hint, an import stands without it)."""
    try:
        return _trace_process(path)
    except Exception as e:
        log.debug("%s: the process of the trace is not known (%s: %s)", path, type(e).__name__, e)
        return TraceProcess(path, None, None, None, None)


def _trace_process(path: Path) -> TraceProcess:
    limit = HEAD_FIRST
    while True:
        try:
            head = _head(path, limit)
        except OSError:
            return TraceProcess(path, None, None, None, None)
        if not head:
            return TraceProcess(path, None, None, None, None)
        at = head.find(_KEY)
        start = head.find(b"[", at + len(_KEY)) if at >= 0 else (head.find(b"[") if head.lstrip()[:1] == b"[" else -1)
        header = head[:at] if at >= 0 else b""
        pid = _host_pid(_events(head[start + 1 :])) if start >= 0 else None
        if pid is not None or len(head) < limit or limit >= HEAD_MAX:
            break
        limit = HEAD_MAX
    host = _HOST_RE.search(header)
    base = _BASE_RE.search(header)
    return TraceProcess(
        path,
        pid,
        _text(host.group(1)) if host else None,
        _dist_rank(header),
        int(base.group(1)) if base else None,
        hashlib.sha256(head[:HEAD_FIRST]).hexdigest()[:16],
    )


def _dist_rank(header: bytes) -> int | None:
    i = header.find(b'"distributedInfo"')
    j = header.find(b"{", i) if i >= 0 else -1
    if j < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(header[j:].decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return _int(obj.get("rank")) if isinstance(obj, dict) else None


def group(procs: list[TraceProcess]) -> list[list[TraceProcess]]:
    """The traces by process, in the order first met: a trace whose head does not tell
    its process (:attr:`TraceProcess.key` None) is a group of its own."""
    by_key: dict[tuple[Any, ...], list[TraceProcess]] = {}
    out: list[list[TraceProcess]] = []
    for p in procs:
        k = p.key
        if k is None:
            out.append([p])
        elif k in by_key:
            by_key[k].append(p)
        else:
            by_key[k] = [p]
            out.append(by_key[k])
    return out


def windows_note(n: int, pid: object, host: object) -> str:
    """The import summary's line for ``n`` traces of one process."""
    where = f" on {host}" if host else ""
    return f"{n} traces of one process (pid {pid}{where}): one rank, {n} windows"
