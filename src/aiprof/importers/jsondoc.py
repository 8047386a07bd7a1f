"""Whole JSON documents of the small vendor files, read so that damage stays ours.

A vendor file may be cut, mangled or nested absurdly deep; decoding it must end in
aiprof's error (one line) or in the document, never in a ``RecursionError`` later
when the document is printed, copied into ``args`` or into profile.json. So:

- :func:`load` parses with orjson (which stops at 1024 levels with an error) and
  replaces what is nested deeper than :data:`MAX_DEPTH` with a short marker text;
- :func:`text` writes any decoded value back as JSON text, integers past 64 bits and
  all (orjson refuses those; the standard library writes them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from ..errors import ImportFormatError

#: Levels of nesting kept; deeper values become :data:`TOO_DEEP`. Real profiler files
#: nest a handful of levels; Python's own recursion limit is about 1000 frames.
MAX_DEPTH = 64
TOO_DEEP = f"<nested deeper than {MAX_DEPTH} levels: not kept>"


def load(path: Path) -> Any:
    """The document in ``path``; :class:`ImportFormatError` when it is not JSON."""
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise ImportFormatError(f"{path}: not valid JSON ({e})") from None
    return prune(doc)[0]


def prune(doc: Any, limit: int = MAX_DEPTH) -> tuple[Any, int]:
    """``doc`` with every value nested deeper than ``limit`` replaced by
    :data:`TOO_DEEP` (in place), and how many were replaced. Iterative: no recursion."""
    cut = 0
    todo: list[tuple[Any, int]] = [(doc, 0)] if isinstance(doc, (dict, list)) else []
    while todo:
        node, depth = todo.pop()
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for k in keys:
            v = node[k]
            if isinstance(v, (dict, list)) and v:
                if depth + 1 >= limit:
                    node[k] = TOO_DEEP
                    cut += 1
                else:
                    todo.append((v, depth + 1))
    return doc, cut


def raw(value: Any) -> bytes:
    """:func:`text` as UTF-8 bytes: orjson's when it can write ``value``."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, too deep
        return text(value).encode()


def text(value: Any) -> str:
    """``value`` (decoded JSON, or builtin types) as JSON text; an integer past 64 bits
    (which orjson cannot write) is written by json, a document too deep as a marker."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits, too deep
        pass
    try:
        return json.dumps(value, default=repr)
    except (ValueError, RecursionError):
        return json.dumps(TOO_DEEP)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is an object, else an empty one: a damaged file whose key holds
    the wrong kind of value reads as one without that key."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one (see :func:`as_dict`)."""
    return value if isinstance(value, list) else []
