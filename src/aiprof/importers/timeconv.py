"""Exact conversion of trace timestamps (µs, as float, int or string) to int64 ns.

Chrome-trace JSON writes µs. A float like 4458676522690.655 holds the ns digits only
approximately, and absolute epoch µs (1.7e15) cannot hold them at all in a float64,
which is why some writers (Ascend) use strings. Floats below 2**43 µs are converted
by splitting off the integer part (exact to the ns); larger non-integral floats go
through their shortest repr, which gives back the digits the writer printed; strings
are split at the decimal point. No path rounds through a binary fraction of a µs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

_EXACT_LIMIT = float(1 << 43)
#: µs values at or past this do not fit int64 ns.
_NS_LIMIT_US = float(2**63) / 1000 - 1024


def us_to_ns(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Convert µs values to int64 ns. Returns (ns, valid mask); invalid entries are 0."""
    types = set(map(type, values))
    if str in types:
        if types == {str}:
            got = _strings(values)
            if got is not None:
                return got, np.ones(len(values), dtype=bool)
        return _slow(values)
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return _slow(values)
    # None became NaN: those rows are invalid, and so are infinities and times whose ns
    # do not fit int64 (a damaged or absurd value: 2**63 ns is 292 years).
    valid = np.isfinite(arr) & (np.abs(arr) < _NS_LIMIT_US)
    if not valid.all():
        arr = np.where(valid, arr, 0.0)
    big = np.abs(arr) >= _EXACT_LIMIT
    if big.any():
        frac_big = big & (arr != np.floor(arr))
        if frac_big.any():
            out = _fast(np.where(frac_big, 0.0, arr))
            for i in np.flatnonzero(frac_big):
                out[i] = _str_ns(repr(float(values[int(i)])))
            return out, valid
    return _fast(arr), valid


def _strings(values: Sequence[Any]) -> np.ndarray | None:
    """All-string µs values through Arrow's exact decimal cast (rounding half up at the
    ns, like :func:`_str_ns`); None when a value is not a plain decimal number."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        a = pc.utf8_trim_whitespace(pa.array(values, pa.string()))
        d = pc.round(pc.cast(a, pa.decimal128(28, 6)), ndigits=3, round_mode="half_up")
        d = pc.cast(d, pa.decimal128(25, 3))
        ns = pc.cast(pc.multiply(d, pa.scalar(1000, pa.decimal128(4, 0))), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if ns.null_count:
        return None
    out: np.ndarray = ns.to_numpy(zero_copy_only=False)
    return out


def _fast(arr: np.ndarray) -> np.ndarray:
    hi = np.floor(arr)
    frac = arr - hi
    out: np.ndarray = hi.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)
    return out


def _slow(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros(len(values), dtype=np.int64)
    valid = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        try:
            if isinstance(v, str):
                out[i] = _str_ns(v)
            elif isinstance(v, bool) or v is None:
                valid[i] = False
            elif isinstance(v, int):
                out[i] = v * 1000
            elif isinstance(v, float):
                if v != v or v in (float("inf"), float("-inf")):
                    valid[i] = False
                elif abs(v) < _EXACT_LIMIT:
                    out[i] = _fast(np.array([v]))[0]
                else:
                    out[i] = _str_ns(repr(v))
            else:
                valid[i] = False
        except (ValueError, OverflowError):
            valid[i] = False
    return out, valid


def _str_ns(s: str) -> int:
    """'1704161511420306.491' -> 1704161511420306491 (exact)."""
    s = s.strip()
    if "e" in s or "E" in s:
        from decimal import Decimal, InvalidOperation

        try:
            return int((Decimal(s) * 1000).to_integral_value())
        except (InvalidOperation, ValueError) as e:  # "false", "1e", "nan"...
            raise ValueError(f"not a number: {s!r}") from e
    neg = s.startswith("-")
    if neg or s.startswith("+"):
        s = s[1:]
    whole, _, frac = s.partition(".")
    if not whole and not frac:
        raise ValueError("empty number")
    ns = int(whole or "0") * 1000
    if frac:
        digits = (frac + "000")[:3]
        ns += int(digits)
        if len(frac) > 3 and frac[3] >= "5":
            ns += 1  # round half up on the sub-ns digit
    return -ns if neg else ns


def ms_to_ns(v: Any) -> int:
    """A duration in ms (a number) as integer ns; 0 for what is not a finite number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return 0
    ns = v * 1_000_000
    return round(ns) if math.isfinite(ns) and abs(ns) < 2**63 else 0
