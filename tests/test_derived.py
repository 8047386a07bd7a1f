"""The tables derived at import (store/derived.py: the overview's totals, the idle and
kernels views' rows) give the answers the events give: on real captures of several formats, for profiles opened together, and
for a profile an older aiprof wrote (no derived tables), before and after its upgrade."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aiprof.analysis import run
from aiprof.analysis.derived import DERIVE_MIN_EVENTS, load_rows, load_totals, upgrade
from aiprof.importers import import_paths
from aiprof.store import open_profile
from aiprof.store.derived import DERIVED_SCHEMAS, DERIVED_VERSION
from test_cli import cli

CAPTURES = (
    "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "kineto/A100-nccl-parser/nccl_data.json.gz",
    "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "nsys/nsys_2022.4_vecadd_streams_T4_report1.sqlite",
    "ascend/torch_npu",
    "ascend/msprof-PROF_000001",
    "ascend/mindspore-1.x",
)

#: The views that read the derived totals (overview.py), one that reads the windows, and
#: the views kept whole (idle, kernels).
VIEWS = ("overview", "steps", "phases", "idle", "kernels")


def _answers(*paths: Path) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """Each view's rows, and whether the derived tables were read (the kernels view's
    only for one profile alone: its medians do not combine)."""
    with open_profile(*paths) as p:
        used = [load_totals(p) is not None, load_rows(p, "stream_idle") is not None]
        if len(paths) == 1:
            used.append(load_rows(p, "kernel_stats") is not None)
        else:
            assert load_rows(p, "kernel_stats") is None
        assert len(set(used)) == 1, used
        return {v: run(p, v).rows for v in VIEWS}, used[0]


def _as_old(src: Path, dest: Path) -> Path:
    """A copy of ``src`` as an aiprof without derived tables wrote it."""
    shutil.copytree(src, dest)
    meta = json.loads((dest / "profile.json").read_text())
    if meta.pop("derived", None) is not None:
        for name in DERIVED_SCHEMAS:
            (dest / f"{name}.parquet").unlink()
        (dest / "profile.json").write_text(json.dumps(meta))
    return dest


def _pair(src: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """Import ``src``: (a copy with the derived tables, whatever its size; one without)."""
    out, _ = import_paths([src], tmp_path / f"{name}-import")
    old = _as_old(out, tmp_path / f"{name}-old.aiprof")
    new = shutil.copytree(old, tmp_path / f"{name}-new.aiprof")
    upgrade(new)
    return new, old


@pytest.mark.parametrize("rel", CAPTURES)
def test_derived_equals_events(shared_data: Path, tmp_path: Path, rel: str) -> None:
    new, old = _pair(shared_data / rel, tmp_path, "p")
    meta = json.loads((new / "profile.json").read_text())
    assert meta["derived"]["version"] == DERIVED_VERSION
    assert meta["derived"]["tables"]["step_totals"] >= 1
    fast, used = _answers(new)
    slow, used_old = _answers(old)
    assert used and not used_old
    assert fast == slow
    assert any(r["section"] == "breakdown" for r in fast["overview"])
    assert len(fast["steps"]) == meta["derived"]["tables"]["step_totals"]
    assert len(fast["idle"]) == meta["derived"]["tables"]["stream_idle"]
    assert len(fast["kernels"]) == meta["derived"]["tables"]["kernel_stats"]


def test_import_derives_large_profiles_only(shared_data: Path, tmp_path: Path) -> None:
    """A profile of DERIVE_MIN_EVENTS events or more gets the tables at import, the same
    as an upgrade gives it; a smaller one does not (its views read the events)."""
    big, _ = import_paths([shared_data / CAPTURES[0]], tmp_path / "big")
    meta = json.loads((big / "profile.json").read_text())
    assert meta["tables"]["events"] >= DERIVE_MIN_EVENTS
    new, _ = _pair(shared_data / CAPTURES[0], tmp_path, "again")
    assert meta["derived"] == json.loads((new / "profile.json").read_text())["derived"]
    assert _answers(big) == _answers(new)
    small, _ = import_paths([shared_data / CAPTURES[3]], tmp_path / "small")
    meta = json.loads((small / "profile.json").read_text())
    assert meta["tables"]["events"] < DERIVE_MIN_EVENTS
    assert "derived" not in meta


def test_opened_together(shared_data: Path, tmp_path: Path) -> None:
    """Two ranks of a job: the derived tables, on the shared time axis, equal the events;
    the same rank twice (its events combine) is computed from the events."""
    ranks = sorted((shared_data / "kineto/sampled-128-ranks").glob("sampled_rank-*.json.gz"))[:2]
    pairs = [_pair(f, tmp_path, f"r{i}") for i, f in enumerate(ranks)]
    fast, used = _answers(*(n for n, _ in pairs))
    slow, _ = _answers(*(o for _, o in pairs))
    assert used
    assert fast == slow
    assert {r["rank"] for r in fast["steps"]} == {0, 1}
    twice = shutil.copytree(pairs[0][0], tmp_path / "again.aiprof")
    fast2, used2 = _answers(pairs[0][0], twice)
    slow2, _ = _answers(pairs[0][1], pairs[0][1])
    assert not used2
    assert fast2 == slow2


def test_other_version_is_recomputed(shared_data: Path, tmp_path: Path) -> None:
    new, _ = _pair(shared_data / CAPTURES[1], tmp_path, "p")
    want, _ = _answers(new)
    meta = json.loads((new / "profile.json").read_text())
    meta["derived"]["version"] = DERIVED_VERSION + 1
    (new / "profile.json").write_text(json.dumps(meta))
    got, used = _answers(new)
    assert not used
    assert got == want


def test_old_profile_upgraded_in_place(shared_data: Path, tmp_path: Path) -> None:
    """``aiprof import OLD.aiprof`` adds the derived tables; the answers stay the same,
    and a second time changes nothing."""
    new, old = _pair(shared_data / CAPTURES[1], tmp_path, "p")
    before, used = _answers(old)
    assert not used
    r = cli("import", old)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("upgraded")
    after, used = _answers(old)
    assert used
    assert after == before
    assert (
        json.loads((old / "profile.json").read_text())["derived"]
        == json.loads((new / "profile.json").read_text())["derived"]
    )
    r = cli("import", old)
    assert r.returncode == 0 and r.stdout.startswith("up to date"), r.stderr
