"""Mangled traces never fail with anything but aiprof's own error."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiprof.errors import AiprofError
from aiprof.importers import import_paths
from kineto_builders import two_step_trace

BASE = json.dumps({"traceEvents": two_step_trace()}).encode()

scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=8)
)
value = st.recursive(
    scalar,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=5), c, max_size=3)),
    max_leaves=6,
)
field = st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "s"])


def _run(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        p.write_bytes(data)
        try:
            import_paths([p], Path(d) / "out", forced="kineto")
        except AiprofError:
            pass


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(BASE)), st.binary(max_size=20), st.integers(0, len(BASE)))
def test_cut_and_spliced_bytes(cut: int, junk: bytes, at: int) -> None:
    data = BASE[:cut]
    _run(data[:at] + junk + data[at:])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 14), field, value), max_size=6))
def test_fields_with_wrong_types(changes: list[tuple[int, str, object]]) -> None:
    events = two_step_trace()
    for i, key, v in changes:
        events[i % len(events)][key] = v
    _run(json.dumps({"traceEvents": events}, allow_nan=True).encode())
