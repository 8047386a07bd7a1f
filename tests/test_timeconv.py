from __future__ import annotations

from aiprof.importers.timeconv import us_to_ns


def test_float_microseconds_keep_their_nanoseconds() -> None:
    ns, ok = us_to_ns([4458676522690.655, 0.001, 12.5, 7])
    assert ns.tolist() == [4458676522690655, 1, 12500, 7000]
    assert ok.all()


def test_epoch_microseconds_beyond_float_precision_use_the_written_digits() -> None:
    # 1712195495519695.8 is stored as ...695.75 in a double; the writer printed .8.
    ns, _ = us_to_ns([1712195495519695.8])
    assert ns.tolist() == [1712195495519695800]


def test_string_timestamps_are_exact() -> None:
    ns, ok = us_to_ns(["1704161511420306.491", "-3.5", " 10 ", "1e3"])
    assert ns.tolist() == [1704161511420306491, -3500, 10000, 1000000]
    assert ok.all()


def test_missing_and_bad_values_are_flagged() -> None:
    ns, ok = us_to_ns([1.0, None, "x", float("nan")])
    assert ok.tolist() == [True, False, False, False]
    assert ns[0] == 1000
