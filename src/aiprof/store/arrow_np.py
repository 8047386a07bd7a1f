"""NumPy columns to Arrow without pyarrow's ndarray conversion.

``pa.array(ndarray)`` looks for ``numpy.ma.MaskedArray``, and NumPy 2 imports
``numpy.ma`` at that first look: 25-60 ms here, the largest fixed cost of importing a
small trace (its events are a few ms). :func:`from_numpy` builds the same array from
the ndarray's buffers instead, for the 1-D numeric and bool arrays the importers make;
anything else goes to ``pa.array`` as before (tests/test_arrow_np.py holds the two
equal, errors included).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _numeric(typ: pa.DataType) -> bool:
    return bool(pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ))


def from_numpy(v: np.ndarray, typ: pa.DataType, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(v, type=typ, mask=mask, from_pandas=True)``: the rows where ``mask`` is
    true are null, or without a mask the NaNs. Raises what that call raises for a value ``typ`` cannot
    hold (a cast that would overflow or truncate)."""
    kind = v.dtype.kind
    if (
        v.ndim != 1
        or kind not in "iufb"
        or not v.dtype.isnative
        or (kind == "f" and v.dtype.itemsize < 4)
        or not _numeric(typ)
        or (mask is not None and (mask.dtype != np.bool_ or mask.shape != v.shape))
    ):
        return pa.array(v, type=typ, mask=mask, from_pandas=True)
    # As pa.array: a mask given replaces NaN's test (a masked float keeps its NaNs).
    null = mask if mask is not None else (np.isnan(v) if kind == "f" else None)
    validity = None
    if null is not None and null.any():
        validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
    if kind == "b":
        src = pa.bool_()
        data = pa.py_buffer(np.packbits(v, bitorder="little"))
    else:
        src = pa.from_numpy_dtype(v.dtype)
        data = pa.py_buffer(np.ascontiguousarray(v))
    arr = pa.Array.from_buffers(src, len(v), [validity, data])
    return arr if src == typ else arr.cast(typ)
