"""The gzip inflater: Intel ISA-L's igzip when the ``isal`` package is installed, else zlib.

igzip inflates a Kineto trace 2-3x faster than zlib (bench/import_floor.py prints
both on the same file). Both give the same bytes and the same streaming interface
(``decompress(data, max_length)``, ``unconsumed_tail``, ``unused_data``, ``eof``,
``flush``), so callers use :func:`decompressobj` and catch :data:`ERRORS`.
``AIPROF_GUNZIP=zlib`` forces zlib (the tests run both where isal is installed).
"""

from __future__ import annotations

import os
import zlib
from typing import Any, cast

ENV = "AIPROF_GUNZIP"

try:
    from isal import isal_zlib as _isal
except ImportError:  # the optional extra "fast" is not installed
    _isal = None  # type: ignore[assignment,unused-ignore]

#: The exceptions a corrupt gzip stream raises, whichever inflater is used.
ERRORS: tuple[type[BaseException], ...] = (zlib.error,) if _isal is None else (zlib.error, cast(Any, _isal).error)


def engine() -> str:
    """The inflater in use: "isal" or "zlib"."""
    return "isal" if _isal is not None and os.environ.get(ENV, "").lower() != "zlib" else "zlib"


def decompressobj() -> Any:
    """A streaming inflater for one gzip member."""
    if engine() == "isal":
        return _isal.decompressobj(wbits=31)
    return zlib.decompressobj(wbits=31)


def head(raw: bytes, limit: int) -> bytes:
    """At most ``limit`` inflated bytes from the start of gzip data; raises :data:`ERRORS`."""
    out: bytes = decompressobj().decompress(raw, limit)
    return out
