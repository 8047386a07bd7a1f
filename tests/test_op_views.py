"""MindInsight's op-type and op-detail analysers as the ``op-types`` and ``op-detail``
views: on MindSpore's own timeline (checked against MindSpore's aicore_intermediate
type table), the raw HWTS job, a CUDA Kineto trace (typed by the launching operator),
through the common query, the CLI and the REST API."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from aiprof.analysis import Filter, Query, run
from aiprof.importers import import_paths
from aiprof.store import open_profile
from test_serve_support import running_server

MS = "ascend/mindspore-1.x"
V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(scope="module")
def legacy(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, _ = import_paths([shared_data / MS], tmp_path_factory.mktemp("ms") / "ms")
    return out


@pytest.fixture(scope="module")
def cuda(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, _ = import_paths([shared_data / V100], tmp_path_factory.mktemp("k") / "k")
    return out


def test_op_types_match_mindspore_type_table(shared_data: Path, legacy: Path) -> None:
    with open(shared_data / MS / "aicore_intermediate_1_type.csv", newline="") as f:
        want = {r["op_type"]: r for r in csv.DictReader(f)}
    with open_profile(legacy) as p:
        got = {r["op_type"]: r for r in run(p, "op-types", Query(limit=None)).rows}
    # MindSpore's table counts one launch fewer of AssignAdd and TransData (the timeline
    # holds one more of each, outside the step it covers); every other type agrees.
    for t, w in want.items():
        if t in ("AssignAdd", "TransData"):
            assert got[t]["count"] == int(w["execution_frequency"]) + 1
            continue
        assert got[t]["count"] == int(w["execution_frequency"]), t
        assert got[t]["total_us"] / 1000 == pytest.approx(float(w["execution_time"]), abs=1e-6), t
    # The AI CPU ops are typed by their names.
    assert got["GetNext"]["count"] == 2 and got["GetNext"]["ops"] == 1
    assert sum(r["pct"] for r in got.values()) == pytest.approx(100.0)
    mm = got["MatMul"]
    assert mm["avg_us"] == pytest.approx(20657.74 / 9)


def test_op_detail_with_shapes_and_formats(legacy: Path) -> None:
    with open_profile(legacy) as p:
        q = Query([Filter("op_type", "in", ["AssignAdd"])], [("avg_us", True)])
        res = run(p, "op-detail", q)
    rows = res.rows
    assert res.total == 3
    top = rows[0]
    assert top["full_name"].startswith("Default/") and top["full_name"].endswith(top["name"])
    assert top["op_type"] == "AssignAdd"
    assert [r["avg_us"] for r in rows] == sorted((r["avg_us"] for r in rows), reverse=True)


def test_raw_job_op_detail(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths([shared_data / "ascend/mindspore-raw-job"], tmp_path / "j")
    with open_profile(out) as p:
        q = Query([Filter("op_type", "in", ["GatherV2"])], [("total_us", True)], limit=1)
        r = run(p, "op-detail", q).rows[0]
        assert (r["name"], r["count"], round(r["avg_us"], 3)) == ("GatherV2-op55", 14, 42220.212)
        assert (r["input_shapes"], r["input_formats"], r["output_shapes"]) == (
            "184696,8;128000,39",
            "DefaultFormat;DefaultFormat",
            "128000,39,8",
        )
        types = {t["op_type"]: t for t in run(p, "op-types", Query(limit=None)).rows}
        # The HWTS tasks the framework files do not name carry no type and are left out.
        assert "task 60002" not in types and types["GatherV2"]["ops"] == 2
        assert types["AtomicAddrClean"]["count"] == 113


def test_cuda_kernels_typed_by_their_operator(cuda: Path) -> None:
    with open_profile(cuda) as p:
        types = {r["op_type"]: r for r in run(p, "op-types", Query(limit=None)).rows}
        n = p.sql(
            "select count(*) n from events k join events o on o.rank = k.rank and o.external_id = k.external_id "
            "and o.kind = 'cpu_op' where k.kind in ('kernel', 'memset') and k.device_type <> 'cpu' "
            "and o.name = 'aten::cudnn_convolution'"
        ).to_pylist()[0]["n"]
        detail = run(p, "op-detail", Query([Filter("op_type", "in", ["aten::cudnn_convolution"])], limit=1)).rows[0]
    assert types["aten::cudnn_convolution"]["count"] == n == 620  # 610 kernels and 10 memsets
    assert detail["input_shapes"] is None  # this trace was recorded without record_shapes


def test_launched_kernels_take_their_operators_shapes(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths(
        [shared_data / "kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz"], tmp_path / "r"
    )
    with open_profile(out) as p:
        rows = [r for r in run(p, "op-detail", Query(limit=None)).rows if r["input_shapes"] is not None]
        assert rows
        r = rows[0]
        want = p.sql(
            "select o.args from events k join events o on o.rank = k.rank and o.external_id = k.external_id "
            "and o.kind = 'cpu_op' where k.name = ? and o.name = ? limit 1",
            [r["name"], r["op_type"]],
        ).to_pylist()[0]["args"]
    assert json.loads(r["input_shapes"]) == json.loads(want)["Input Dims"]


def test_sources_without_types_give_no_rows(shared_data: Path, tmp_path: Path) -> None:
    # msprof's timeline names tasks (AI_CORE, AI_CPU) but not op types.
    out, _ = import_paths([shared_data / "ascend/msprof-PROF_000001"], tmp_path / "m")
    with open_profile(out) as p:
        assert run(p, "op-types").total == 0


def test_cli_and_api(legacy: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "aiprof", "report", str(legacy), "--view", "op-types", "--format", "json",
         "--filter", "op_type~Conv", "--sort", "-total_us", "--limit", "2"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["total"] == 3 and [row["op_type"] for row in doc["rows"]] == ["Conv2D", "Conv2DBackpropFilter"]
    with running_server(legacy.parent) as (base, _token), httpx.Client(base_url=base + "api/v1", timeout=60) as c:
        names = {v["name"] for v in c.get("/views").json()}
        assert {"op-types", "op-detail", "stages"} <= names
        got = c.get(f"/profiles/{legacy.name}/views/op-detail", params={"filter": "op_type=MatMul", "limit": 3})
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        assert body["total"] == 9 and len(body["rows"]) == 3
