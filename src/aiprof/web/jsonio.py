"""JSON out: orjson with numpy, Decimal and bytes converted (NaN becomes null)."""

from __future__ import annotations

import decimal
from typing import Any

import orjson
from starlette.responses import Response


def _default(o: Any) -> Any:
    if isinstance(o, decimal.Decimal):
        return int(o) if o == o.to_integral_value() else float(o)
    if isinstance(o, bytes):
        return o.decode("utf-8", "replace")
    return str(o)


def dumps(obj: Any) -> bytes:
    """JSON bytes; numpy values, Decimals and dates are converted, NaN becomes null."""
    return orjson.dumps(obj, default=_default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(obj), status_code=status, media_type="application/json", headers=headers)


def error_response(status: int, message: str, **extra: Any) -> Response:
    """The API's error body: {"error": one line, "status": N, ...}."""
    return json_response({"error": message, "status": status, **extra}, status)
