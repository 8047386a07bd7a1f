"""One import of inputs from two runs (wall times far apart) says so, and keeps the warning
in profile.json; inputs of one run (a folder's files, a job's ranks) say nothing."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from aiprof.importers import import_paths
from aiprof.store.runs import SEPARATE_RUNS_NS, separate_runs

DAY_US = 86_400 * 10**6


def _apart(paths: list[Path], out: Path) -> list[str]:
    profile, ctx = import_paths(paths, out)
    kept = json.loads((profile / "profile.json").read_text())["warnings"]
    said = [w for w in ctx.warnings if "were recorded" in w]
    assert [w for w in kept if "were recorded" in w] == said
    return said


def _shifted(src: Path, dst: Path, *, ts_us: float = 0, base_ns: int = 0) -> Path:
    """A copy of the Kineto trace ``src`` with every event's ts (µs) and the header's
    baseTimeNanoseconds moved on."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += ts_us
    if base_ns:
        doc["baseTimeNanoseconds"] += base_ns
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def test_torch_npu_folder_of_two_runs(shared_data: Path, tmp_path: Path) -> None:
    # trace_view.json: 2024-01-02 (a CNN); kernel_details.csv: 2025-01-09 (FlashAttention, MatMul).
    said = _apart([shared_data / "ascend/torch_npu"], tmp_path / "pt")
    assert said == [
        "trace_view.json and kernel_details.csv were recorded 373 days apart: they are two runs; import each on its own"
    ]
    # The same two files given one by one.
    src = shared_data / "ascend/torch_npu"
    assert len(_apart([src / "trace_view.json", src / "kernel_details.csv"], tmp_path / "two")) == 1


def test_kineto_pair_a_day_apart(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "kineto/cuda-event-sync/event_sync_trace.json.gz"  # absolute µs
    a = tmp_path / "a.json.gz"
    shutil.copy(src, a)
    b = _shifted(src, tmp_path / "b.json.gz", ts_us=DAY_US)
    (said,) = _apart([a, b], tmp_path / "ab")
    assert said.startswith("a.json.gz and b.json.gz were recorded 24.0 hours apart")
    # Half an hour apart: one run, as far as anyone can tell.
    c = _shifted(src, tmp_path / "c.json.gz", ts_us=DAY_US / 48)
    assert _apart([a, c], tmp_path / "ac") == []


def test_kineto_pair_a_day_apart_by_base_time(shared_data: Path, tmp_path: Path) -> None:
    # ts relative to the header's baseTimeNanoseconds: the day is in the header only.
    src = shared_data / "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    a = tmp_path / "a.json.gz"
    shutil.copy(src, a)
    b = _shifted(src, tmp_path / "b.json.gz", base_ns=3 * DAY_US * 1000)
    assert _apart([a, b], tmp_path / "ab") == [
        "a.json.gz and b.json.gz were recorded 3 days apart: they are two runs; import each on its own"
    ]


@pytest.mark.parametrize(
    "folder", ["ascend/cluster", "ascend/msprof-PROF_000001", "ascend/mindspore-1.x", "ascend/mindspore-raw-job"]
)
def test_one_run_folders_say_nothing(shared_data: Path, tmp_path: Path, folder: str) -> None:
    assert _apart([shared_data / folder], tmp_path / "p") == []


def test_two_ranks_of_one_job_say_nothing(shared_data: Path, tmp_path: Path) -> None:
    ranks = shared_data / "kineto/sampled-128-ranks"
    paths = [ranks / "sampled_rank-0.json.gz", ranks / "sampled_rank-1.json.gz"]
    assert _apart(paths, tmp_path / "r") == []


def test_rule() -> None:
    h = SEPARATE_RUNS_NS
    t0 = 1_700_000_000 * 10**9
    assert separate_runs([(t0, t0 + 10, "/x/a")]) is None
    # Overlapping, or near: one run.
    assert separate_runs([(t0, t0 + 3 * h, "/x/a"), (t0 + 2 * h, t0 + 5 * h, "/x/b")]) is None
    assert separate_runs([(t0, t0 + 10, "/x/a"), (t0 + 10 + h, t0 + 2 * h, "/x/b")]) is None
    # A long span bridges a short one inside it; what follows it far later is another run.
    said = separate_runs(
        [(t0, t0 + 5 * h, "/x/long"), (t0 + h, t0 + h + 1, "/x/inside"), (t0 + 7 * h, t0 + 8 * h, "/x/late")]
    )
    assert said is not None and said.startswith("long and late were recorded 2.0 hours apart")
    # Three runs: the widest gap is named, and how many runs there are.
    said = separate_runs(
        [(t0, t0 + 1, "/a/r.json"), (t0 + 3 * h, t0 + 3 * h, "/b/r.json"), (t0 + 99 * h, t0 + 99 * h, "/c/r.json")]
    )
    assert said == (
        "/b/r.json and /c/r.json were recorded 4 days apart: they are two runs; "
        "import each on its own (the 3 inputs fall into 3 runs)"
    )


def test_profiles_of_two_runs_opened_together_are_said(shared_data: Path, tmp_path: Path) -> None:
    from aiprof.store import open_profile

    v100 = shared_data / "kineto/V100"
    a, _ = import_paths([v100 / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"], tmp_path / "a.aiprof")
    b, _ = import_paths([v100 / "df_index_resolver.json.gz"], tmp_path / "b.aiprof")
    with open_profile(a, b) as p:
        said = [w for w in p.warnings if "apart" in w]
    assert said == [
        "b.aiprof and a.aiprof were recorded 491 days apart: they are two runs; "
        "open each on its own, or compare them with aiprof diff"
    ]
    with open_profile(a) as p:
        assert not [w for w in p.warnings if "apart" in w]
    ranks = shared_data / "kineto/sampled-128-ranks"
    r0, _ = import_paths([ranks / "sampled_rank-0.json.gz"], tmp_path / "r0.aiprof")
    r1, _ = import_paths([ranks / "sampled_rank-1.json.gz"], tmp_path / "r1.aiprof")
    with open_profile(r0, r1) as p:
        assert not [w for w in p.warnings if "apart" in w]


def test_profiles_holding_the_same_rank_from_one_kind_of_source_are_said(shared_data: Path, tmp_path: Path) -> None:
    # Two traces of rank 0 recorded an hour apart or less would be summed as one rank
    # without a word: the same rank from the same kind of source is two runs.
    from aiprof.store import open_profile

    v100 = shared_data / "kineto/V100"
    trace = v100 / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    a, _ = import_paths([trace], tmp_path / "a.aiprof")
    b, _ = import_paths([trace], tmp_path / "b.aiprof")
    with open_profile(a, b) as p:
        said = [w for w in p.warnings if "rank" in w]
        # Both read as rank 0, every event twice: what the warning is for.
        assert p.sql("SELECT DISTINCT rank FROM events").column("rank").to_pylist() == [0]
    assert said == [
        "a.aiprof and b.aiprof both hold rank 0 (kineto): two runs, read as one rank's events; "
        "open each on its own, or compare them with aiprof diff"
    ]
    # A job's ranks, and one rank from two kinds of source (a recording and a vendor
    # trace of it, here an nvidia-smi log beside the trace), are read together unsaid.
    ranks = shared_data / "kineto/sampled-128-ranks"
    r0, _ = import_paths([ranks / "sampled_rank-0.json.gz"], tmp_path / "r0.aiprof")
    r1, _ = import_paths([ranks / "sampled_rank-1.json.gz"], tmp_path / "r1.aiprof")
    with open_profile(r0, r1) as p:
        assert not [w for w in p.warnings if "rank" in w or "apart" in w]
    smi = sorted((shared_data / "nvidia-smi").glob("*dmon*"))[0]
    s, _ = import_paths([smi], tmp_path / "smi.aiprof")
    with open_profile(a, s) as p:
        assert not [w for w in p.warnings if "both hold" in w]


def test_same_rank_names_the_kinds_of_source() -> None:
    from aiprof.store.runs import same_rank, source_kind

    rec = {"record": {"pid": 1}, "ranks": [0], "sources": [{"importer": "aiprof.record.torch"}]}
    kin = {"ranks": [0, 1], "sources": [{"importer": "kineto"}, {"importer": "kineto"}]}
    assert source_kind(rec) == "aiprof record" and source_kind(kin) == "kineto"
    assert same_rank([rec, kin], [Path("r/rank0.aiprof"), Path("k.aiprof")]) is None
    said = same_rank([rec, kin, rec], [Path("r/rank0.aiprof"), Path("k.aiprof"), Path("s/rank0.aiprof")])
    assert said is not None and said.startswith("r/rank0.aiprof and s/rank0.aiprof both hold rank 0 (aiprof record)")
