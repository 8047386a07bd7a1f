"""Stream the events of a Chrome-trace JSON file in bounded memory.

A trace is either ``{"traceEvents": [...], ...other keys}`` or a bare ``[...]``, maybe
gzipped. Loading it whole costs 5-10x its size in Python objects, so the file is read
in chunks and cut between events; each run of whole events is handed on as bytes for
a fast decoder (msgspec). The cut points are found with numpy over the structural
characters only (quotes, brackets, braces), tracking strings and escapes exactly, so
no heuristic about line layout is needed.

A file that ends early (a job killed mid-write, a truncated .gz) yields every complete
event before the damage; ``TraceStream.lost`` says how many bytes could not be used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from ..errors import ImportFormatError
from . import gunzip as _gz
from .jsondoc import prune

CHUNK = 8 << 20
#: Bytes kept back from the end of a copied file to find where its event list closes.
_TAIL = 4 << 20
#: Bytes before a part's size in which :class:`ArrayParts` looks for a cut between events.
_CUT_WINDOW = 1 << 20

_QUOTE, _BSLASH, _LBRACE, _RBRACE, _LBRACK, _RBRACK = 34, 92, 123, 125, 91, 93
_STRUCT = np.zeros(256, dtype=bool)
_STRUCT[[_QUOTE, _LBRACE, _RBRACE, _LBRACK, _RBRACK]] = True
_DELTA = np.zeros(256, dtype=np.int8)
_DELTA[[_LBRACE, _LBRACK]] = 1
_DELTA[[_RBRACE, _RBRACK]] = -1
_WS = b" \t\r\n"


def open_bytes(path: Path) -> tuple[Iterator[bytes], list[str]]:
    """Chunks of the file's content, gunzipped when it is gzip; and a list that
    receives a warning if the compressed stream is cut short or corrupt."""
    problems: list[str] = []

    def raw_chunks(f: IO[bytes]) -> Iterator[bytes]:
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            yield b

    def gunzip(f: IO[bytes]) -> Iterator[bytes]:
        # Every member of a multi-member gzip (``cat a.gz b.gz``) is read; at most
        # CHUNK bytes come out per call, whatever a member inflates to. Bytes after
        # the last member that do not start another one are padding or junk: a warning.
        d = _gz.decompressobj()
        fed = False  # has the current member been given any input?
        for data in raw_chunks(f):
            while data:
                if not fed and not data.strip(b"\0"):
                    data = b""  # zero padding after a member (tape and block writers)
                    break
                if not fed and data[:2] != b"\x1f\x8b" and members[0]:
                    problems.append("bytes after the end of the gzip data (not another gzip member) were ignored")
                    return
                fed = True
                try:
                    out = d.decompress(data, CHUNK)
                except _gz.ERRORS as e:
                    problems.append(f"gzip data is corrupt ({e}); read up to the damage")
                    return
                if out:
                    yield out
                if d.eof:
                    members[0] += 1
                    data = d.unused_data
                    d = _gz.decompressobj()
                    fed = False
                else:
                    data = d.unconsumed_tail
        if fed:
            try:
                tail = d.flush()
            except _gz.ERRORS as e:
                problems.append(f"gzip data is corrupt ({e}); read up to the damage")
                return
            if tail:
                yield tail
            if not d.eof:
                problems.append("gzip stream ends before its end marker (file cut short)")

    members = [0]
    _started = [False]

    def gen() -> Iterator[bytes]:
        with path.open("rb") as f:
            magic = f.read(2)
            f.seek(0)
            if magic == b"\x1f\x8b":
                for c in gunzip(f):
                    _started[0] = True
                    yield c
                if not _started[0]:
                    problems.append("gzip stream holds no data")
            else:
                yield from raw_chunks(f)

    return gen(), problems


def _structure(buf: bytes, start: int, depth0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions (from ``start``) of brackets and braces outside strings, the depth
    after each, and the positions of string-opening quotes.

    Assumes ``buf[start]`` is outside any string.
    """
    arr = np.frombuffer(buf, dtype=np.uint8, offset=start)
    pos = np.flatnonzero(_STRUCT[arr])
    ch = arr[pos]
    is_q = ch == _QUOTE
    qpos = pos[is_q]
    if len(qpos) and (qpos > 0).any():
        # A quote is escaped when an odd run of backslashes precedes it (rare).
        prev = arr[np.clip(qpos - 1, 0, None)] == _BSLASH
        prev &= qpos > 0
        if prev.any():
            keep = np.ones(len(qpos), dtype=bool)
            for i in np.flatnonzero(prev):
                j = int(qpos[i]) - 1
                run = 0
                while j >= 0 and arr[j] == _BSLASH:
                    run += 1
                    j -= 1
                if run % 2:
                    keep[i] = False
            if not keep.all():
                drop = qpos[~keep]
                m = np.isin(pos, drop, invert=True)
                pos, ch = pos[m], ch[m]
                is_q = ch == _QUOTE
    # Inside a string: an odd number of real quotes before the character.
    qcount = np.cumsum(is_q)
    outside = (~is_q) & ((qcount & 1) == 0)
    opening = is_q & ((qcount & 1) == 1)
    bpos = pos[outside]
    depth = depth0 + np.cumsum(_DELTA[ch[outside]].astype(np.int64))
    return bpos, depth, pos[opening]


@dataclass
class TraceStream:
    """The events of one Chrome-trace file, as JSON array texts of whole events."""

    path: Path
    header: dict[str, Any] = field(default_factory=dict)
    """Top-level keys other than traceEvents (deviceProperties, distributedInfo...)."""
    bare_array: bool = False
    lost: int = 0
    """Bytes after the last complete event that could not be used (0 when intact)."""
    complete: bool = False
    """True when the event list and the document closed properly."""
    problems: list[str] = field(default_factory=list)
    bytes_in: int = 0
    """Decompressed bytes consumed so far (for progress)."""

    def batches(
        self,
        fast: Callable[[bytes], list[Any] | None],
        slow: Callable[[bytes], list[Any]],
    ) -> Iterator[list[Any]]:
        """Yield decoded runs of complete events.

        ``fast`` decodes a ``b"[ev, ...]"`` text or returns None when it cannot;
        ``slow`` must always return what it could read. Each buffer is first cut at
        the last ``}, {`` (cheap, right for every common layout); when ``fast`` rejects
        that, the cut is redone exactly and the text goes to ``slow``.
        """
        chunks, self.problems = open_bytes(self.path)
        buf = b""
        it = iter(chunks)
        # 1. The opening: a bare array, or an object whose traceEvents array we find.
        while True:
            nxt = next(it, None)
            if nxt is None:
                break
            buf += nxt
            self.bytes_in += len(nxt)
            first = buf.lstrip(_WS)[:1]
            if first == b"[":
                self.bare_array = True
                break
            if first == b"{":
                if self._find_events_key(buf) is not None:
                    break
                continue
            if first:
                raise ImportFormatError(f"{self.path}: not JSON (starts with {first!r})")
        stripped = buf.lstrip(_WS)
        if not stripped:
            raise ImportFormatError(f"{self.path}: empty file")
        if self.bare_array:
            pos = len(buf) - len(stripped) + 1
        else:
            found = self._find_events_key(buf)
            if found is None:
                self._parse_header_only(buf)
                raise ImportFormatError(f"{self.path}: a JSON object without a traceEvents list: not a trace")
            key_pos, pos = found
            self._read_header(buf[:key_pos])
        buf = buf[pos:]
        # 2. The events: cut each buffer after its last complete event.
        ended = False
        exhausted = False
        while not ended:
            if not exhausted:
                nxt = next(it, None)
                if nxt is None:
                    exhausted = True
                else:
                    self.bytes_in += len(nxt)
                    buf += nxt
            if not buf:
                break
            if not exhausted:
                guess = _guess_cut(buf)
                if guess > 0:
                    got = fast(b"[" + buf[:guess].strip(_WS + b",") + b"]")
                    if got is not None:
                        yield got
                        buf = buf[guess:]
                        continue
            cut, closed = _last_event_end(buf)
            if cut > 0:
                body = buf[:cut].strip(_WS + b",")
                if body:
                    yield slow(b"[" + body + b"]")
            if closed is not None:
                ended = True
                buf = buf[closed + 1 :]
            else:
                buf = buf[cut:]
                if exhausted:
                    break
        # 3. What follows the list: more top-level keys, or nothing.
        if ended:
            for nxt in it:
                self.bytes_in += len(nxt)
                buf += nxt
            tail = buf.strip(_WS)
            if self.bare_array:
                self.complete = not tail
            elif tail.startswith(b","):
                try:
                    more = orjson.loads(b"{" + tail[1:])
                    if isinstance(more, dict):
                        self.header.update(prune(more)[0])
                    self.complete = True
                except orjson.JSONDecodeError:
                    self.problems.append("the keys after traceEvents are cut short or malformed")
            else:
                self.complete = tail == b"}"
        else:
            body = buf.strip(_WS + b",")
            self.lost = len(body)
            if self.lost and self._list_end(buf[-_TAIL:]) is not None:
                # The document ends as it should: the damage is inside, not at the end.
                at = self.bytes_in - len(buf) + (len(buf) - len(buf.lstrip(_WS + b",")))
                events = body.count(b'"ph"')
                self.problems.append(
                    f"malformed JSON at byte {at:,} of the trace (an unterminated string or a broken event): "
                    f"the {self.lost:,} bytes from there to the end of the event list, about "
                    f"{events:,} events, could not be read"
                )
            elif self.lost:
                self.problems.append(f"trace cut short: the last {self.lost} bytes hold an incomplete event")
            else:
                self.problems.append("trace cut short: the event list never closes")

    def copy_events(self, dest: IO[bytes] | ArrayParts, progress: Callable[[int], None] = lambda _n: None) -> bool:
        """Copy the event list of an intact file to ``dest`` as one JSON array, without
        decoding it into events: the fast lane of the columnar import (an
        :class:`ArrayParts` cuts it into several arrays on the way).

        Returns False (``dest`` then holds garbage) when the file is damaged or its end
        cannot be told apart cheaply; the caller then uses :meth:`batches`, which cuts
        exactly and keeps every complete event. The end of the list is the leftmost
        ``]`` near the end of the file after which the rest reads as the object's
        remaining keys; whoever parses ``dest`` checks the events themselves.
        """
        with self.path.open("rb") as f:
            plain = f.read(2) != b"\x1f\x8b"
        if plain:
            return self._copy_plain(dest, progress)
        chunks, self.problems = open_bytes(self.path)
        it = iter(chunks)
        opened = self._open_list(it, progress)
        if opened is None:
            return False
        buf, pos = opened
        dest.write(b"[")
        tail = buf[pos:]
        for nxt in it:
            progress(len(nxt))
            if len(tail) > _TAIL:
                dest.write(tail[:-_TAIL])
                tail = tail[-_TAIL:]
            tail += nxt
        if self.problems:
            return False
        return self._close_list(dest, tail)

    def _copy_plain(self, dest: IO[bytes] | ArrayParts, progress: Callable[[int], None]) -> bool:
        """:meth:`copy_events` for an uncompressed file: the list's bounds are read from
        its first and last bytes, and the bulk between them is copied by the kernel
        (:func:`copy_range`), into one file or into :class:`ArrayParts`' parts."""
        size = self.path.stat().st_size
        with self.path.open("rb") as f:
            opened = self._open_list(iter(lambda: f.read(CHUNK), b""), lambda _n: None)
            if opened is None:
                return False
            _, pos = opened
            tail_at = max(pos, size - _TAIL)
            f.seek(tail_at)
            end = self._list_end(f.read())
            if end is None:
                return False
            stop = tail_at + end  # the list's ']'
            if isinstance(dest, ArrayParts):
                if not dest.copy_array(f.fileno(), pos, stop, progress):
                    return False
            else:
                dest.write(b"[")
                dest.flush()
                if not copy_range(f.fileno(), dest.fileno(), pos, stop - pos, progress):
                    return False
                dest.write(b"]")
        progress(size - (stop - pos))
        self.complete = True
        return True

    def _close_list(self, dest: IO[bytes] | ArrayParts, tail: bytes) -> bool:
        end = self._list_end(tail)
        if end is None:
            return False
        dest.write(tail[:end])
        dest.write(b"]")
        self.complete = True
        return True

    def _open_list(self, it: Iterator[bytes], progress: Callable[[int], None]) -> tuple[bytes, int] | None:
        """Read up to the event list's '[' (the header on the way): (bytes read, index
        after the '['), or None when the text is not a trace."""
        buf = b""
        for nxt in it:
            buf += nxt
            progress(len(nxt))
            first = buf.lstrip(_WS)[:1]
            if first == b"[" or (first == b"{" and self._find_events_key(buf) is not None):
                break
            if first and first not in b"[{":
                return None
        stripped = buf.lstrip(_WS)
        if stripped[:1] == b"[":
            self.bare_array = True
            pos = len(buf) - len(stripped) + 1
        else:
            found = self._find_events_key(buf) if stripped[:1] == b"{" else None
            if found is None:
                return None
            key_pos, pos = found
            self._read_header(buf[:key_pos])
        return buf, pos

    def _list_end(self, tail: bytes) -> int | None:
        """Index of the event list's closing ']' in the file's last bytes, or None."""
        if self.bare_array:
            t = tail.rstrip(_WS)
            return len(t) - 1 if t.endswith(b"]") else None
        # The keys after the list are short: look near the end first.
        for window in (1 << 16, len(tail)):
            end = self._list_end_in(tail[-window:])
            if end is not None:
                return len(tail) - min(window, len(tail)) + end
        return None

    def _list_end_in(self, tail: bytes) -> int | None:
        candidates: list[int] = []
        i = tail.rfind(b"]")
        while i != -1 and len(candidates) < 4096:
            candidates.append(i)
            i = tail.rfind(b"]", 0, i)
        n = len(tail)
        for i in reversed(candidates):
            j = i + 1
            while j < n and tail[j] in _WS:
                j += 1
            if j < n and tail[j] == 125 and not tail[j + 1 :].strip(_WS):  # '}'
                return i
            if j >= n or tail[j] != 44:  # ','
                continue
            try:
                more = orjson.loads(b"{" + tail[j + 1 :])
            except orjson.JSONDecodeError:
                continue
            if isinstance(more, dict):
                self.header.update(prune(more)[0])
                return i
        return None

    def _find_events_key(self, buf: bytes) -> tuple[int, int] | None:
        """(position of the "traceEvents" key, position after its '[') at depth 1."""
        start = len(buf) - len(buf.lstrip(_WS))
        key = b'"traceEvents"'
        i = buf.find(key, start)
        if i == -1:
            return None
        # Only the text up to the last candidate key matters; scanning the events
        # after it would cost a pass over the whole first chunk.
        last = buf.rfind(key, start, i + (1 << 20))
        bpos, depth, qopen = _structure(buf[: last + len(key)], start, 0)
        qset = set(qopen.tolist())
        while i != -1 and i <= last:
            if i - start in qset:
                k = int(np.searchsorted(bpos, i - start))
                d = int(depth[k - 1]) if k > 0 else 0
                if d == 1:
                    j = i + len(key)
                    rest = buf[j:].lstrip(_WS)
                    if rest[:1] == b":":
                        rest2 = rest[1:].lstrip(_WS)
                        if rest2[:1] == b"[":
                            return i, len(buf) - len(rest2) + 1
                        if rest2:
                            raise ImportFormatError(f"{self.path}: traceEvents is not a list")
                    if not rest or (rest[:1] == b":" and not rest[1:].strip(_WS)):
                        return None  # need more bytes
            i = buf.find(key, i + 1)
        return None

    def _read_header(self, text: bytes) -> None:
        body = text.rstrip(_WS)
        body = body.rstrip(b",")
        try:
            obj = orjson.loads(body + b"}")
        except orjson.JSONDecodeError:
            self.problems.append("the keys before traceEvents could not be read")
            return
        if isinstance(obj, dict):
            self.header.update(prune(obj)[0])

    def _parse_header_only(self, buf: bytes) -> None:
        try:
            obj = orjson.loads(buf)
        except orjson.JSONDecodeError:
            return
        if isinstance(obj, dict):
            self.header.update(prune(obj)[0])


class ArrayParts:
    """A file-like sink for the text of one JSON array of events that writes it as
    several array files (``part-00000.json``, ...) of about ``piece`` bytes each, cut
    between two events, so that a reader that parses each file on its own core (DuckDB's
    JSON reader parses one array file on one thread) reads them all at once, in order.

    A cut is made at the last ``}, {`` of the text held (:func:`_guess_cut`, right for
    every common layout). A cut that falls inside an event leaves two files that are not
    valid JSON (the first ends inside an object or a string), so the parser refuses
    them and a wrong cut is never read as events: the caller then reads the list as one
    file (:attr:`paths` has one entry when ``piece`` is 0 or the text is short).

    Text comes by :meth:`write` (an inflated gzip) or, from an uncompressed file, by
    :meth:`copy_array`, which reads only the bytes around each cut.
    """

    def __init__(self, folder: Path, piece: int) -> None:
        self.folder = folder
        self.piece = piece
        self.paths: list[Path] = []
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._out: IO[bytes] | None = None

    def _open(self) -> IO[bytes]:
        path = self.folder / f"part-{len(self.paths):05d}.json"
        self.paths.append(path)
        self._out = path.open("wb")
        return self._out

    def write(self, data: bytes) -> int:
        out = self._out or self._open()
        if not self.piece:
            out.write(data)
            return len(data)
        for i in range(0, len(data), self.piece):
            piece = data[i : i + self.piece] if len(data) > self.piece else data
            self._held.append(piece)
            self._held_bytes += len(piece)
            if self._held_bytes >= self.piece:
                out = self._cut(out)
        return len(data)

    def _cut(self, out: IO[bytes]) -> IO[bytes]:
        """End the current file after the last event of the held text (searched from the
        newest chunk back) and start the next with what follows it; the file now written."""
        held = self._held
        for i in range(len(held) - 1, -1, -1):
            cut = _guess_cut(held[i])
            if cut <= 0:
                continue
            for b in held[:i]:
                out.write(b)
            out.write(held[i][:cut])
            out.write(b"]")
            out.close()
            out = self._open()
            out.write(b"[")
            rest = held[i][cut:].lstrip(_WS)[1:]  # past the ',' between the two events
            self._held = [rest, *held[i + 1 :]]
            self._held_bytes = sum(len(b) for b in self._held)
            return out
        return out

    def copy_array(self, fd: int, start: int, stop: int, progress: Callable[[int], None]) -> bool:
        """Write bytes ``start`` to ``stop`` of the file ``fd``, the inside of an event
        list, as the parts (instead of :meth:`write`): each cut is found by
        :func:`_guess_cut` in the last bytes before the part's size, read alone, and the
        bulk of each part is copied by the kernel. False when the file ends early."""
        while True:
            cut = next_start = None
            target = start + self.piece if self.piece else stop
            while target < stop:
                lo = max(start, target - _CUT_WINDOW)
                window = os.pread(fd, target - lo, lo)
                at = _guess_cut(window)
                if at > 0:
                    cut, next_start = lo + at, lo + window.index(b",", at) + 1
                    break
                target += self.piece  # no cut found near this size: a longer part
            if not self._copy_part(fd, start, stop if cut is None else cut, progress):
                return False
            if cut is None or next_start is None:
                return True
            start = next_start

    def _copy_part(self, fd: int, start: int, stop: int, progress: Callable[[int], None]) -> bool:
        if self._out is not None:
            self._out.close()
        out = self._open()
        out.write(b"[")
        out.flush()
        copied = copy_range(fd, out.fileno(), start, stop - start, progress)
        out.write(b"]")
        out.close()
        return copied

    def flush(self) -> None:
        """Nothing to do (the held text is written at :meth:`close`)."""

    def close(self) -> None:
        out = self._out or self._open()
        for b in self._held:
            out.write(b)
        self._held.clear()
        out.close()


def copy_range(src: int, dst: int, offset: int, count: int, progress: Callable[[int], None]) -> bool:
    """Copy ``count`` bytes of the file ``src`` from ``offset`` to where ``dst`` stands:
    by the kernel (``copy_file_range``) where it can, else through memory. False when
    ``src`` ends first."""
    kernel = hasattr(os, "copy_file_range")
    while count > 0:
        n = 0
        if kernel:
            try:
                n = os.copy_file_range(src, dst, count, offset)
            except OSError:  # across file systems, say
                kernel = False
        if not kernel:
            data = os.pread(src, min(count, CHUNK), offset)
            n = len(data)
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]
        if n <= 0:
            return False
        offset += n
        count -= n
        progress(n)
    return True


def balanced_array(text: bytes) -> bool:
    """Is ``text`` a '[' whose brackets and braces (outside strings) first close at its
    last byte, a ']'? (Whole values from one end to the other, whatever they hold.)"""
    start = len(text) - len(text.lstrip(_WS))
    if text[start : start + 1] != b"[" or not text.endswith(b"]"):
        return False
    bpos, depth, _ = _structure(text, start + 1, 0)
    closed = np.flatnonzero(depth < 0)
    return len(closed) > 0 and start + 1 + int(bpos[closed[0]]) == len(text) - 1


def split_events(array_text: bytes) -> list[bytes]:
    """The texts of the top-level values of ``b"[v, v, ...]"``, cut by structure alone,
    so that one malformed event (an unquoted word, a stray comma) costs only itself.
    Text the structure cannot cut (after an unterminated string, the brackets seem to
    close the array early) is the last piece, whole: its reader counts it as lost."""
    body_start = array_text.find(b"[") + 1
    bpos, depth, _ = _structure(array_text, body_start, 0)
    out: list[bytes] = []
    start = body_start
    for p, d in zip(bpos.tolist(), depth.tolist()):
        if d == 0 and array_text[body_start + p] in (_RBRACE, _RBRACK):
            end = body_start + p + 1
            piece = array_text[start:end].strip(_WS + b",")
            if piece:
                out.append(piece)
            start = end
        elif d < 0:
            break
    rest = array_text[start:].strip(_WS + b",")
    rest = rest[:-1].strip(_WS + b",") if rest.endswith(b"]") else rest
    if rest:
        out.append(rest)
    return out


def _guess_cut(buf: bytes) -> int:
    """Index just past the '}' of the last '}, {' in ``buf`` (0 if none): where the
    last complete event ends in every common layout. Verified by the decoder."""
    i = len(buf)
    while True:
        i = buf.rfind(b"}", 0, i)
        if i <= 0:
            return 0
        j = i + 1
        n = len(buf)
        while j < n and buf[j] in _WS:
            j += 1
        if j < n and buf[j] == 44:  # ','
            j += 1
            while j < n and buf[j] in _WS:
                j += 1
            if j < n and buf[j] == 123:  # '{'
                return i + 1
        if len(buf) - i > (1 << 20):
            return 0


def _last_event_end(buf: bytes) -> tuple[int, int | None]:
    """(index just past the last complete event, index of the list's closing ']' or None).

    ``buf`` starts between events inside the list (depth 0 = in the list).
    """
    bpos, depth, _ = _structure(buf, 0, 0)
    if len(bpos) == 0:
        return 0, None
    closed_at = np.flatnonzero(depth < 0)
    if len(closed_at):
        k = int(closed_at[0])
        end = int(bpos[k])
        return end, end
    ends = np.flatnonzero(depth == 0)
    if len(ends) == 0:
        return 0, None
    return int(bpos[ends[-1]]) + 1, None
