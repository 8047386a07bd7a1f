"""Fuzz every format of ../shared/data in-process: mangled copies import or fail cleanly.

Two harnesses over the same mutations (tests/fuzzing.py): a mutation run with a time
budget (``AIPROF_FUZZ_BUDGET_S``, 35 s by default; ``AIPROF_FUZZ_SEED`` picks other
inputs), and a property-based one where hypothesis picks the seed file and the
mutation's random stream, and shrinks what fails. No crash outside aiprof's error
type, no hang. The long run is ``bench/fuzz.py --inputs N``.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzing
from conftest import SHARED

BUDGET_S = float(os.environ.get("AIPROF_FUZZ_BUDGET_S") or 35)
RNG_SEED = int(os.environ.get("AIPROF_FUZZ_SEED") or 19)
#: One import of a cut-down seed takes milliseconds; this is a hang.
LIMIT_S = 20.0

SEEDS = fuzzing.discover(SHARED) if SHARED.is_dir() else []
needs_data = pytest.mark.skipif(not SEEDS, reason="../shared/data is absent (present in CI and for the developers)")


def _report(bad: list[tuple[str, str, fuzzing.Outcome]]) -> str:
    return "\n".join(f"{seed} / {mutation}: {o.kind}: {o.cause}\n{o.detail[-1500:]}" for seed, mutation, o in bad[:5])


@needs_data
def test_seeds_cover_every_format() -> None:
    importers = {s.importer for s in SEEDS}
    assert {"kineto", "nsys", "ncu", "cnperf", "ascend-trace", "ascend-msprof", "hl-smi", "nvidia-dmon"} <= importers
    assert len(importers) >= 15


@needs_data
def test_mutations_within_a_time_budget() -> None:
    counts: dict[str, int] = {}
    bad: list[tuple[str, str, fuzzing.Outcome]] = []
    end = time.monotonic() + BUDGET_S
    for seed, mutation, data in fuzzing.inputs(SEEDS, 1 << 30, RNG_SEED):
        with tempfile.TemporaryDirectory(prefix="aiprof-fuzz-") as d:
            o = fuzzing.run_one(seed, data, Path(d), LIMIT_S)
        counts[o.kind] = counts.get(o.kind, 0) + 1
        if o.kind in ("crash", "hang"):
            bad.append((seed.name, mutation, o))
        if time.monotonic() > end:
            break
    total = sum(counts.values())
    assert total >= len(SEEDS), counts  # every seed file was mangled at least once
    assert counts.get("imported", 0) and counts.get("clean", 0), counts
    assert not bad, f"{len(bad)} of {total} inputs crashed or hung:\n{_report(bad)}"


@needs_data
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(st.integers(0, max(len(SEEDS) - 1, 0)), st.integers(0, 2**32 - 1))
def test_property_any_mutation_of_any_seed(which: int, rng_seed: int) -> None:
    seed = SEEDS[which]
    mutation, data = fuzzing.mutate(random.Random(rng_seed), seed)
    with tempfile.TemporaryDirectory(prefix="aiprof-fuzz-") as d:
        o = fuzzing.run_one(seed, data, Path(d), LIMIT_S)
    assert o.kind in ("imported", "clean"), f"{seed.name} / {mutation}: {o.kind}: {o.cause}\n{o.detail[-1500:]}"


#: Inputs of ``bench/fuzz.py`` that crashed before their cause was fixed (issue 19: the
#: run of 45,589 inputs with ``--seed 19``, and later runs), remade from (seed, number): a
#: corpus that stays fixed.
FOUND = {
    (23, 244): "mindspore-framework: a task id of 131,074 digits (ValueError from int())",
}
FOUND_19 = {
    18384: "ascend-cluster: an infinite elapse time (OverflowError in ms_to_ns)",
    20428: "ascend-pt: a stream id of 1e999 (OverflowError)",
    20017: "ascend-cluster: a step number of inf (OverflowError)",
    27841: "ascend-cluster: an index of inf (OverflowError)",
    1798: "ascend-msprof: a rank_id past int32 (OverflowError in numpy)",
    2877: "nsys: a malformed database page (sqlite3.DatabaseError)",
    50972: "nsys: a malformed database page, in the process table (sqlite3.DatabaseError)",
    9884: "nsys: bytes where a time belongs (ValueError)",
    25101: "nsys: a name that is not UTF-8 (UnicodeDecodeError)",
    39452: "nsys: a schema that is not UTF-8 (UnicodeDecodeError)",
    5843: "mindspore-text detector: only characters blank as text (IndexError)",
    8909: "ascend-trace: a time string past int64 ns (OverflowError)",
    9583: "cnperf: a device id that is not a number (ValueError)",
    35887: "cnperf: programInformation that is not an object (AttributeError)",
    23418: "kineto: a deviceProperties id that is an object (TypeError)",
    32364: "mindspore-aicpu text: a serial number past 64 bits (orjson TypeError)",
    # The 100,000-input run of 2026-12-03:
    2873: "mindspore-text hwts: a field past 64 bits (orjson TypeError)",
    51859: "mindspore-framework detector: only separators str.splitlines takes (IndexError)",
    85558: "ascend-trace: a flow id past 64 bits (orjson TypeError)",
    90382: "mindspore-step-trace detail CSV: a field past 64 bits (orjson TypeError)",
}
FOUND.update({(19, i): why for i, why in FOUND_19.items()})


@needs_data
@pytest.mark.parametrize("key", sorted(FOUND), ids=[FOUND[k].split(":")[0] + f"-{k[0]}-{k[1]}" for k in sorted(FOUND)])
def test_inputs_the_long_run_found(key: tuple[int, int]) -> None:
    rng_seed, index = key
    seed, _mutation, data = fuzzing.input_at(SEEDS, index, rng_seed)
    with tempfile.TemporaryDirectory(prefix="aiprof-fuzz-") as d:
        o = fuzzing.run_one(seed, data, Path(d), LIMIT_S)
    assert o.kind in ("imported", "clean"), f"{FOUND[key]}: {o.cause}\n{o.detail[-1500:]}"
