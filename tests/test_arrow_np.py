"""store/arrow_np.from_numpy gives what pa.array(ndarray, from_pandas=True) gives, and
raises where it raises, without importing numpy.ma."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from aiprof.store.arrow_np import from_numpy

TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.uint64(), pa.float32(), pa.float64(), pa.bool_()]
ARRAYS = [
    np.array([], dtype=np.int64),
    np.array([0, 1, -5, 2**31 - 1], dtype=np.int64),
    np.array([0, 2**40, -(2**62)], dtype=np.int64),
    np.array([2**63 + 5], dtype=np.uint64),
    np.array([1, 2, 3], dtype=np.int32),
    np.array([0, 255, 7], dtype=np.uint8),
    np.array([1.0, np.nan, -3.0, 2.0**53 + 2], dtype=np.float64),
    np.array([1.5, 2.0], dtype=np.float64),
    np.array([np.nan, np.nan], dtype=np.float32),
    np.array([np.inf, 1e300], dtype=np.float64),
    np.array([True, False, True, True, False, False, True, False, True], dtype=np.bool_),
    np.arange(20, dtype=np.int64)[::3],
    np.array([2**53 + 1], dtype=np.int64),
]


def _outcome(fn: object) -> tuple[str, object]:
    try:
        arr = fn()  # type: ignore[operator]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return ("raises", None)
    values = ["nan" if isinstance(x, float) and x != x else x for x in arr.to_pylist()]
    return ("ok", (arr.type, values, arr.null_count))


@pytest.mark.parametrize("typ", TYPES, ids=str)
@pytest.mark.parametrize("i", range(len(ARRAYS)))
@pytest.mark.parametrize("masked", [False, True])
def test_same_as_pa_array(typ: pa.DataType, i: int, masked: bool) -> None:
    v = ARRAYS[i]
    mask = (np.arange(len(v)) % 2 == 1) if masked else None
    ours = _outcome(lambda: from_numpy(v, typ, mask))
    theirs = _outcome(lambda: pa.array(v, type=typ, mask=mask, from_pandas=True))
    assert ours == theirs


def test_other_input_goes_to_pa_array() -> None:
    v = np.array(["a", None], dtype=object)
    assert from_numpy(v, pa.string()).to_pylist() == ["a", None]
    two_d = np.zeros((2, 2), dtype=np.int64)
    with pytest.raises(pa.ArrowInvalid):
        from_numpy(two_d, pa.int64())


def test_does_not_import_numpy_ma() -> None:
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from aiprof.store.arrow_np import from_numpy\n"
        "from_numpy(np.array([1.0, np.nan]), pa.float64(), np.array([False, True]))\n"
        "from_numpy(np.array([True, False]), pa.bool_())\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
