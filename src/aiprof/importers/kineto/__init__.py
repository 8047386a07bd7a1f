"""PyTorch profiler (Kineto) Chrome-trace JSON: ``.json`` / ``.json.gz``.

The package: :mod:`.decode` (events as written), :mod:`.rules` (kind, device placement,
bytes, vendor, time origin: stated once, called by both paths), :mod:`.events` (the
event path's converter), :mod:`.columnar` (the columnar path) and :mod:`.loader`.

Covers every Kineto generation seen in the wild: 2021 categories ("Operator",
"Kernel", "Runtime", "Memcpy"), today's ("cpu_op", "kernel", "cuda_runtime",
"gpu_memcpy", "ac2g" flows, "cuda_sync"), AMD ROCm (HIP names), MTIA/PrivateUse1
runtimes, CPU-only traces, and writers that put timestamps in strings (Ascend's
trace_view.json). Other Chrome-trace producers reuse :class:`ChromeTraceConverter`
and override its classification.

Mapping:
- ``ph: X`` spans and ``B``/``E`` pairs -> events, ``kind`` from the category (table
  below); a category with no home is ``other`` with the category kept in ``cat``;
- ``s``/``f``/``t`` flows -> events of kind ``other`` (their id in ``correlation`` for
  launch flows), so a round trip keeps them;
- ``i``/``I`` instants -> ``instant`` events, except ``[memory]`` -> the memory table;
- ``C`` counters -> counters; ``M`` metadata -> the tracks table;
- ``deviceProperties`` -> devices, ``distributedInfo`` -> rank and world size.
"""

from .decode import Args, Ev, decode_events, try_decode
from .events import NAME, ChromeTraceConverter
from .loader import IMPORTER, load_chrome_trace
from .rules import AIPROF_BASE_KEY, CATEGORY_KINDS, DEVICE_SIDE, device_record, kind_for

__all__ = [
    "AIPROF_BASE_KEY",
    "CATEGORY_KINDS",
    "DEVICE_SIDE",
    "IMPORTER",
    "NAME",
    "Args",
    "ChromeTraceConverter",
    "Ev",
    "decode_events",
    "device_record",
    "kind_for",
    "load_chrome_trace",
    "try_decode",
]
