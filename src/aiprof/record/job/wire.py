"""JSON in and out of a recorded job, by CPython's C scanner and encoder (``_json``).

The job reads its options as JSON, offers itself to ``aiprof record`` in JSON and
writes its manifest in JSON. The ``json`` package would cost every recorded job its
import and that of ``re`` and ``enum`` (about 4 ms of a 10 ms interpreter start);
``_json`` is the C half that ``json`` itself uses, already built into the
interpreter. Same text and values as ``json.dumps(obj)`` / ``json.loads(text)``
(tests/test_record_wire.py); where ``_json`` is missing or differs (another
interpreter), ``json`` itself is used.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_WHITESPACE = " \t\n\r"


class _Context:
    """What the C scanner reads of a ``json.JSONDecoder``: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_CONSTANTS.__getitem__)


def _default(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _encoder() -> Callable[[Any, int], Any]:
    """A C encoder with json.dumps's defaults (check_circular with markers of its own,
    ", " and ": ", ensure_ascii, allow_nan)."""
    import _json

    return _json.make_encoder({}, _default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)


def _build() -> tuple[Callable[[str, int], tuple[Any, int]], Callable[[], Callable[[Any, int], Any]]] | None:
    try:
        import _json

        scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # duck-typed as the C code reads it
        _encoder()
    except (ImportError, AttributeError, TypeError):
        return None
    return scan, _encoder


_C = _build()


def dumps(obj: Any) -> str:
    """``json.dumps(obj)``."""
    if _C is None:
        import json

        return json.dumps(obj)
    return "".join(_C[1]()(obj, 0))


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; ValueError on bad JSON."""
    if _C is None:
        import json

        return json.loads(text)
    s = text.decode("utf-8") if isinstance(text, bytes) else text
    start = len(s) - len(s.lstrip(_WHITESPACE))
    try:
        obj, end = _C[0](s, start)
    except StopIteration as e:
        raise ValueError(f"invalid JSON at character {e.value}") from None
    if s[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data after the JSON value at character {end}")
    return obj
