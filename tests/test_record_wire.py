"""aiprof.record.job.wire: the job's JSON without the json package, equal to json's."""

from __future__ import annotations

import json
import math

import pytest

from aiprof.record.job import wire

VALUES = [
    {"pid": 4242, "telemetry": True, "layout": {"fr_code": 32, "code_type": 140_000_000_000_000}},
    {"host": ["python", "system"], "rate": 100.0, "schedule": None, "batch_size": 64},
    {"argv": ["train.py", "--lr", "1e-3", "é ü 中文", 'quote " and \\ backslash', "tab\tnewline\n"]},
    [1, -2, 3.5, -0.0, 1e300, 2**70, True, False, None, "", [], {}],
    "a string",
    0,
    {"nested": [[[{"deep": [1, 2, {"x": "y"}]}]]]},
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_and_loads_agree_with_json(value: object) -> None:
    assert wire.dumps(value) == json.dumps(value)
    text = json.dumps(value)
    assert wire.loads(text) == json.loads(text)
    assert wire.loads(f" \n{text}\t ") == json.loads(text)
    assert wire.loads(text.encode()) == json.loads(text)


def test_constants_round_trip_as_json_writes_them() -> None:
    text = wire.dumps({"a": math.inf, "b": -math.inf, "c": math.nan})
    assert text == json.dumps({"a": math.inf, "b": -math.inf, "c": math.nan})
    back = wire.loads(text)
    assert back["a"] == math.inf and back["b"] == -math.inf and math.isnan(back["c"])


@pytest.mark.parametrize("bad", ["", "{", "[1] 2", '{"a":}', "nul", '{"a": 1,}'])
def test_bad_json_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        json.loads(bad)
    with pytest.raises(ValueError):
        wire.loads(bad)


def test_what_json_cannot_write_is_a_type_error_and_the_encoder_recovers() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        wire.dumps({"x": object()})
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        wire.dumps(loop)
    assert wire.dumps({"after": [1, 2]}) == '{"after": [1, 2]}'
