"""The profile store's contract: vocabularies, table schemas and the schema version.

Every importer and recorder writes these tables; every analyser reads them. The
column meanings and units are documented in docs/store.md. Times are int64
nanoseconds counted from the profile's time origin (``profile.json`` ->
``time_origin_ns``, Unix ns where the source gives wall-clock time).
"""

from __future__ import annotations

import pyarrow as pa

#: Bumped whenever a table gains, loses or changes a column. Readers refuse newer ones.
SCHEMA_VERSION = 1

#: The one ``kind`` vocabulary, for every vendor. A vendor word with no home here is
#: stored as ``other`` with the raw category kept in the ``cat`` column and ``args``.
KINDS: tuple[str, ...] = (
    "python",
    "cpu_op",
    "user_annotation",
    "step",
    "runtime",
    "driver",
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "collective",
    "dataloader",
    "gc",
    "instant",
    "other",
)

#: ``mtia`` (Meta's accelerator, in Kineto traces) is an addition to DESIGN.md's list.
DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda", "rocm", "npu", "mlu", "hpu", "ipu", "xpu", "mtia")

#: Kinds that run on a device (a stream or queue) rather than on a host thread.
DEVICE_KINDS: frozenset[str] = frozenset({"kernel", "memcpy", "memset", "collective"})

_dict_str = pa.dictionary(pa.int32(), pa.string())

SCHEMAS: dict[str, pa.Schema] = {
    "events": pa.schema(
        [
            ("rank", pa.int32()),
            ("device_type", pa.string()),
            ("device", pa.int32()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
            ("kind", pa.string()),
            ("cat", pa.string()),
            ("name", pa.string()),
            ("ts", pa.int64()),
            ("dur", pa.int64()),
            ("correlation", pa.int64()),
            ("external_id", pa.int64()),
            ("step", pa.int32()),
            ("bytes", pa.int64()),
            ("flops", pa.int64()),
            ("grid", pa.string()),
            ("block", pa.string()),
            ("args", pa.string()),
        ]
    ),
    "counters": pa.schema(
        [
            ("rank", pa.int32()),
            ("device_type", pa.string()),
            ("device", pa.int32()),
            ("ts", pa.int64()),
            ("metric", pa.string()),
            ("value", pa.float64()),
            ("unit", pa.string()),
        ]
    ),
    "memory": pa.schema(
        [
            ("rank", pa.int32()),
            ("device_type", pa.string()),
            ("device", pa.int32()),
            ("ts", pa.int64()),
            ("bytes", pa.int64()),
            ("allocated", pa.int64()),
            ("reserved", pa.int64()),
            ("addr", pa.int64()),
            ("name", pa.string()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
        ]
    ),
    "samples": pa.schema(
        [
            ("rank", pa.int32()),
            ("ts", pa.int64()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
            ("stack_id", pa.int64()),
        ]
    ),
    "frames": pa.schema(
        [
            ("rank", pa.int32()),
            ("frame_id", pa.int64()),
            ("parent", pa.int64()),
            ("function", pa.string()),
            ("file", pa.string()),
            ("line", pa.int32()),
        ]
    ),
    "tracks": pa.schema(
        [
            ("rank", pa.int32()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
            ("device_type", pa.string()),
            ("device", pa.int32()),
            ("process_name", pa.string()),
            ("thread_name", pa.string()),
            ("sort_index", pa.int64()),
        ]
    ),
    "kernel_metrics": pa.schema(
        [
            ("rank", pa.int32()),
            ("launch_id", pa.int64()),
            ("kernel", pa.string()),
            ("section", pa.string()),
            ("metric", pa.string()),
            ("unit", pa.string()),
            ("value", pa.float64()),
            ("text", pa.string()),
        ]
    ),
}

TABLES: tuple[str, ...] = tuple(SCHEMAS)
