"""Many-rank jobs: parallel import on a real Dask LocalCluster, the cluster index and the
across-rank views and advice, on fleets generated from a real Kineto trace."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from aiprof.analysis import run  # noqa: E402
from aiprof.analysis.query import Query  # noqa: E402
from aiprof.cluster.index import from_index  # noqa: E402
from aiprof.cluster.opened import open_job  # noqa: E402
from aiprof.cluster.views import comm_overlap_from_index  # noqa: E402
from aiprof.importers import import_paths  # noqa: E402
from aiprof.store import open_profile  # noqa: E402
from make_fleet import SMALL_TEMPLATE, make_fleet  # noqa: E402

pytest.importorskip("distributed", reason="the cluster extra (dask, distributed) is not installed")


def cli(*args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, env=e, timeout=600
    )


def report(path: Path, view: str) -> list[dict[str, Any]]:
    r = cli("report", path, "--view", view, "--format", "json", "--limit", "100000")
    assert r.returncode == 0, r.stderr
    rows: list[dict[str, Any]] = json.loads(r.stdout)["rows"]
    return rows


@pytest.fixture(scope="module")
def job(
    tmp_path_factory: pytest.TempPathFactory, shared_data: Path
) -> tuple[Path, Any, subprocess.CompletedProcess[str]]:
    """16 generated ranks (plus one broken file), imported on a 2-worker LocalCluster."""
    base = tmp_path_factory.mktemp("fleet")
    fleet = make_fleet(base / "traces", 16, template=SMALL_TEMPLATE, seed=3)
    # A file that is a trace by its head but holds no events: that rank fails alone.
    (base / "traces" / "rank-16.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    r = cli("import", base / "traces", "-o", base / "job", "--workers", "2")
    return base / "job", fleet, r


def test_parallel_import_writes_ranks_and_index(job: tuple[Path, Any, Any]) -> None:
    out, fleet, r = job
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.glob("rank*.aiprof")) == sorted(f"rank{i}.aiprof" for i in range(16))
    assert "rank 16" in r.stderr and "failed and was skipped" in r.stderr and "holds no events" in r.stderr
    assert "client peak RSS" in r.stdout and "cluster index" in r.stdout
    meta = json.loads((out / "rank7.aiprof" / "profile.json").read_text())
    assert meta["ranks"] == [7] and meta["world_size"] == 16 and meta["rank_from"] == "distributedInfo"
    index = json.loads((out / "cluster" / "index.json").read_text())
    assert index["ranks"] == list(range(16)) and index["failed"][0]["rank"] == 16 and index["world_size"] == 16
    # The ranks view says the job's size, from the index and from one rank's own events.
    assert {r["world_size"] for r in report(out, "ranks")} == {16}
    with open_profile(out / "rank7.aiprof") as one:
        assert [r["world_size"] for r in run(one, "ranks").rows] == [16]
    steps = pq.read_table(out / "cluster" / "steps.parquet")
    assert sorted(set(steps.column("rank").to_pylist())) == list(range(16))
    coll = pq.read_table(out / "cluster" / "collectives.parquet").to_pylist()
    # Every collective kept its size, group and sequence number on every rank.
    assert coll and all(c["bytes"] and c["bytes"] > 0 and c["seq"] is not None for c in coll)
    pair = [c for c in coll if c["pg"] == fleet.slow_group]
    assert {c["rank"] for c in pair} == set(fleet.slow_pair)


def test_planted_faults_are_the_findings(job: tuple[Path, Any, Any]) -> None:
    out, fleet, _ = job
    slow = [r["rank"] for r in report(out, "stragglers") if r["persistent"]]
    assert slow == [fleet.straggler]
    links = report(out, "links")
    assert {r["pg"] for r in links if r["slow"]} == {fleet.slow_group}
    worst = min(links, key=lambda r: r["rel_bw"])
    assert worst["pg"] == fleet.slow_group and abs(worst["rel_bw"] - 0.5) < 0.05
    inst = report(out, "collectives")
    world = [i for i in inst if i["pg"] == "0"]
    assert world and all(i["ranks"] == 16 and i["matched_by"] == "seq" for i in world)
    # The straggler arrives last wherever the work before a collective is long enough
    # for its +20% to outgrow the others' jitter: most instances, the widest spreads.
    assert sum(i["last_rank"] == fleet.straggler for i in world) > len(world) / 2
    assert max(world, key=lambda i: i["arrival_spread_us"])["last_rank"] == fleet.straggler
    ranks = report(out, "ranks")
    assert len(ranks) == 16
    assert max(ranks, key=lambda r: r["last_arrivals"])["rank"] == fleet.straggler
    assert {r["rank"] for r in report(out, "exposed_comm")} == set(range(16))
    r = cli("advise", out, "--format", "json")
    assert r.returncode == 0, r.stderr
    advice = json.loads(r.stdout)["advice"]
    # The straggler's wait and the slow link's transfers are both communication time:
    # one item, the others listed under "also" (the advice never counts a µs twice).
    found = advice + [o for a in advice for o in a.get("also", [])]
    ids = [a["rule"] for a in found]
    assert "cluster.persistent_straggler" in ids and "cluster.slow_group_link" in ids
    assert advice[0]["rule"].startswith("cluster.")
    for a in found:  # nothing but the planted faults: no false positive
        ev = a["evidence"]
        about = {ev.get("rank"), ev.get("slowest_rank"), ev.get("pg")}
        assert fleet.straggler in about or fleet.slow_group in about, a
        if a["rule"] == "cluster.slow_group_link":
            assert ev["pg"] == fleet.slow_group and ev["slow_groups"] == [fleet.slow_group]
        if a["rule"] == "cluster.persistent_straggler":
            assert ev["rank"] == fleet.straggler and ev["slow_ranks"] == [fleet.straggler]


def test_comm_overlap_from_the_index_equals_the_per_rank_computation(job: tuple[Path, Any, Any]) -> None:
    """The job's comm_overlap is one SQL pass over the index; each rank's own profile
    computes it from its events: the same rows, value for value."""
    out, _, _ = job
    with open_job(out) as prof:
        indexed = run(prof, "comm_overlap", Query(limit=100000)).rows
        assert from_index(prof) and comm_overlap_from_index(prof) is not None  # the SQL pass, not the events
    per_rank: list[dict[str, Any]] = []
    for r in range(16):
        with open_profile(out / f"rank{r}.aiprof") as one:
            per_rank += run(one, "comm_overlap", Query(limit=100000)).rows
    assert len(indexed) == len(per_rank) > 16
    key = lambda row: (row["rank"], -1 if row["step"] is None else row["step"])  # noqa: E731
    for a, b in zip(sorted(indexed, key=key), sorted(per_rank, key=key), strict=True):
        assert key(a) == key(b)
        for col in ("step_us", "comm_us", "compute_us", "overlap_us", "overlap_pct", "exposed_us"):
            assert a[col] == pytest.approx(b[col], rel=1e-9, abs=1e-6), (key(a), col)
    assert any(row["overlap_us"] > 0 for row in indexed) and any(row["exposed_us"] > 0 for row in indexed)


def test_rank_steps_from_the_index_agree_with_each_ranks_own_views(job: tuple[Path, Any, Any]) -> None:
    """The distributed page's grid and bars (rank_steps) come from the index: each rank
    and step has its step time and its computation as comm_overlap counts them, and
    parts that add up to the step (computation, copies, communication alone, idle)."""
    out, fleet, _ = job
    with open_job(out) as prof:
        got = {(r["rank"], r["step"]): r for r in run(prof, "rank_steps", Query(limit=100000)).rows}
    assert {k[0] for k in got} == set(range(16))
    for r in (0, fleet.straggler):
        with open_profile(out / f"rank{r}.aiprof") as one:
            overlap = run(one, "comm_overlap", Query(limit=100000)).rows
        steps = [o for o in overlap if o["step"] is not None]
        assert steps
        for o in steps:
            g = got[(r, o["step"])]
            assert g["step_us"] == pytest.approx(o["step_us"], rel=1e-9)
            assert g["compute_us"] == pytest.approx(o["compute_us"], rel=1e-9, abs=1e-6)
            # Communication alone on the device: at most what no kernel hides (copies may).
            assert 0 <= g["exposed_comm_us"] <= o["exposed_us"] + 1e-6
            parts = g["compute_us"] + g["copy_us"] + g["exposed_comm_us"] + g["idle_us"]
            assert parts == pytest.approx(g["step_us"], rel=1e-9), (r, o["step"])
    assert any(g["exposed_comm_us"] > 0 for g in got.values()) and any(g["copy_us"] > 0 for g in got.values())


def test_serve_reads_the_cluster_index(job: tuple[Path, Any, Any]) -> None:
    """`aiprof serve OUT`: the job opens through its index; /cluster answers the
    distributed page with the CLI's rows."""
    import httpx

    from test_serve_support import running_server

    out, fleet, _ = job
    with running_server(out, extra=("--no-warm",)) as (base, _token):
        profiles = httpx.get(base + "api/v1/profiles", timeout=60).json()["profiles"]
        assert [p["status"] for p in profiles] == ["ok"]
        pid = profiles[0]["id"]
        doc = httpx.get(base + f"api/v1/profiles/{pid}/cluster", params={"limit": 5}, timeout=120).json()
        paged = httpx.get(base + f"api/v1/profiles/{pid}/views/links", params={"limit": 100}, timeout=60).json()
        bad = httpx.get(base + f"api/v1/profiles/{pid}/cluster", params={"limit": -1}, timeout=60)
    job_facts = doc["job"]
    assert job_facts["from_index"] is True and job_facts["ranks"] == list(range(16))
    assert job_facts["world_size"] == 16 and [f["rank"] for f in job_facts["failed"]] == [16]
    assert job_facts["tables"]["steps"] > 0
    assert list(doc["views"]) == ["stragglers", "collectives", "links", "exposed_comm"]
    strag = doc["views"]["stragglers"]
    assert strag["total"] == 16 and len(strag["rows"]) == 5
    assert strag["rows"][0]["rank"] == fleet.straggler and strag["rows"][0]["persistent"] is True
    cli_links = report(out, "links")
    assert doc["views"]["links"]["rows"][0]["pg"] == fleet.slow_group == min(cli_links, key=lambda r: r["rel_bw"])["pg"]
    assert paged["total"] == len(cli_links) == doc["views"]["links"]["total"]
    assert {r["rank"] for r in doc["views"]["exposed_comm"]["rows"]} <= set(range(16))
    assert bad.status_code == 422


def test_job_metadata_comes_from_the_index_with_the_events_values(job: tuple[Path, Any, Any], tmp_path: Path) -> None:
    """The API's profile metadata of a job folder (span, steps, devices used) is read from
    the cluster index, and equals what the timeline, the steps view and devices_used
    compute from every rank's events; an index written before it kept them falls back to
    the events, and `aiprof import JOB` upgrades it to the same table."""
    import shutil

    import httpx

    from aiprof.analysis.device_use import devices_used
    from aiprof.cluster.index import job_meta
    from aiprof.web.timeline import Timeline
    from test_serve_support import running_server

    out, _, _ = job
    with open_job(out) as prof:
        meta = job_meta(prof)
        assert meta is not None
        tl = Timeline(prof)
        tl.build()
        assert meta["span_ns"] == list(tl.span) and tl.span[1] > tl.span[0]
        keys = ("rank", "step", "start_us", "duration_us")
        steps = [{k: r[k] for k in keys} for r in run(prof, "steps", Query()).rows]
        assert meta["steps"] == steps and len(steps) >= 16
        assert meta["devices_used"] == devices_used(prof) and {d["rank"] for d in meta["devices_used"]} == set(
            range(16)
        )
    with running_server(out, extra=("--no-warm",)) as (base, _token):
        doc = httpx.get(base + "api/v1/profiles/job", timeout=120).json()
    assert doc["from_index"] is True and doc["span_ns"] == meta["span_ns"] and doc["steps"] == meta["steps"]
    assert doc["devices_used"] == meta["devices_used"] and doc["ranks"] == list(range(16))
    # An index without the columns (an older aiprof's): the metadata is computed from the
    # events, and `aiprof import JOB` gives the index the same ranks table.
    old = tmp_path / "old"
    shutil.copytree(out, old)
    ranks = pq.read_table(out / "cluster" / "ranks.parquet")
    pq.write_table(ranks.drop_columns(["first_ns", "last_ns", "devices_used"]), old / "cluster" / "ranks.parquet")
    with open_job(old) as prof:
        assert job_meta(prof) is None
    r = cli("import", old)
    assert r.returncode == 0 and r.stdout.startswith("upgraded: "), r.stderr
    assert pq.read_table(old / "cluster" / "ranks.parquet").equals(ranks)
    assert cli("import", old).stdout.startswith("up to date: ")


def test_job_advice_is_bounded_by_the_job_step_time_from_the_index(job: tuple[Path, Any, Any]) -> None:
    """`aiprof advise OUT --format json` on a job: total_us is the job's step time from the
    index (what the gains are shares of), with nothing attributed from the events."""
    out, _, _ = job
    r = cli("advise", out, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    job_us = sum(float(x["step_us"] or 0) * int(x["steps"] or 0) for x in report(out, "stragglers"))
    assert doc["total_us"] == round(job_us, 3) and doc["total_us"] > 0
    assert doc["causes"] == {} and doc["warnings"] == [] and doc["advice"]


def test_each_rank_keeps_derived_tables_and_the_job_reads_them(job: tuple[Path, Any, Any]) -> None:
    """A parallel import derives every rank's tables (whatever its size), and the job's
    overview totals read from them equal those computed from every rank's events."""
    import numpy as np

    from aiprof.analysis.derived import load_totals
    from aiprof.analysis.overview import compute_totals
    from aiprof.store.derived import has_derived

    out, _, _ = job
    for f in out.glob("rank*.aiprof"):
        meta = json.loads((f / "profile.json").read_text())
        assert meta["tables"]["events"] < 50_000 and has_derived(f, meta), f.name
    with open_job(out) as prof:
        kept, computed = load_totals(prof), compute_totals(prof)
    assert kept is not None
    for a, b in zip(kept, computed, strict=True):
        assert sorted(a) == sorted(b)
        for k in a:
            assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k
    assert len(kept[0]["rank"]) >= 16


def test_the_overview_of_a_job_is_one_table_over_its_ranks(job: tuple[Path, Any, Any]) -> None:
    """`aiprof report OUT` on 16 ranks: the inputs and ranks in a line each, and one
    breakdown table over the ranks (not 16 of each) whose sums and largest ranks are the
    ranks' own rows; the planted straggler has the most kernel time."""
    out, fleet, _ = job
    r = cli("report", out)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "ranks: 0-15 (16 ranks)" in text and "... and 13 more" in text
    assert "over 16 ranks" in text and "rank 3: step time breakdown" not in text
    rows = [x for x in report(out, "overview") if x["section"] == "breakdown" and x["step"] is None]
    kernel = {x["rank"]: x["time_us"] for x in rows if x["category"] == "kernel"}
    assert len(kernel) == 16 and max(kernel, key=lambda k: kernel[k]) == fleet.straggler
    table = text[text.index("over 16 ranks") :]
    line = next(ln for ln in table.splitlines() if ln.startswith("│ kernel"))
    cells = [c.strip() for c in line.strip("│").split("│")]
    assert cells[-1] == str(fleet.straggler)
    from aiprof.render.terminal import format_cell

    assert cells[1] == format_cell(sum(kernel.values()) / 1e6)
    assert cells[4] == format_cell(max(kernel.values()))


def test_ranks_are_written_as_runs() -> None:
    from aiprof.cli.overview import ranks_text

    assert ranks_text([]) == "-" and ranks_text([0]) == "[0]" and ranks_text([0, 1, 2]) == "[0, 1, 2]"
    assert ranks_text(list(range(12))) == "0-11 (12 ranks)"
    assert ranks_text([*range(10), 12, *range(14, 1024)]) == "0-9, 12, 14-1023 (1,021 ranks)"


def test_device_figures_over_ranks_name_the_device_where_a_rank_has_several() -> None:
    # 9 ranks of 2 devices each: device 1 of rank 4 is the least busy, device 0 of
    # rank 7 the busiest; the step split sums over the ranks.
    from aiprof.cli.overview import _across_ranks

    by_rank: dict[int, list[dict[str, Any]]] = {}
    for rank in range(9):
        rows = [
            {
                "section": "breakdown",
                "rank": rank,
                "device": None,
                "step": None,
                "category": "kernel",
                "time_us": 100.0 * (rank + 1),
                "percent": 50.0,
            },
            {
                "section": "breakdown",
                "rank": rank,
                "device": None,
                "step": None,
                "category": "other",
                "time_us": 100.0,
                "percent": 50.0,
            },
        ]
        for dev in (0, 1):
            busy = 90.0 if (rank, dev) == (7, 0) else 10.0 if (rank, dev) == (4, 1) else 50.0
            rows.append(
                {
                    "section": "device",
                    "rank": rank,
                    "device": dev,
                    "step": None,
                    "category": "device_busy",
                    "time_us": busy,
                    "percent": busy,
                }
            )
        by_rank[rank] = rows
    items = _across_ranks(by_rank)
    split = next(i for i in items if i["t"] == "table" and i["title"].startswith("step time breakdown"))
    kernel = next(r for r in split["rows"] if r[0] == "kernel")
    from aiprof.render.terminal import format_cell

    assert kernel[1] == format_cell(4500 / 1e6) and kernel[4] == format_cell(900.0) and kernel[5] == "8"
    assert kernel[2] == format_cell(100.0 * 4500 / 5400)
    device = next(i for i in items if i["t"] == "table" and i["title"].startswith("device time"))
    assert device["rows"] == [["busy (of step time)", "50", "10", "4 dev 1", "90", "7 dev 0"]]


def test_a_job_without_samples_reads_no_step_windows_for_rank_waits(job: tuple[Path, Any, Any]) -> None:
    """rank_waits (cluster.backward_wait's view) comes from Python samples: a job of
    Kineto ranks holds none, so its empty answer reads no rank's derived tables (the
    step windows of 1,000 ranks took 1.4 s of `aiprof advise`'s 2.8 s)."""
    out, _, _ = job
    with open_job(out) as prof:
        assert not prof.tables.get("samples")
        assert run(prof, "rank_waits", Query()).rows == []
        assert "derived_tables" not in prof._memo


def _rows(prof: Any, view: str) -> list[dict[str, Any]]:
    from aiprof.analysis import Query

    return sorted(run(prof, view, Query()).rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def test_job_folder_on_fsspec_memory_with_a_threads_cluster(job: tuple[Path, Any, Any]) -> None:
    """An fsspec URL as OUT (memory://, real fsspec): the workers, threads of this process,
    import into scratch folders and upload; the job opens from the URL with the CLI's rows."""
    import fsspec
    from distributed import LocalCluster

    from aiprof.cluster.engine import Where
    from aiprof.cluster.job import expand, plan
    from aiprof.cluster.opened import is_job, open_job
    from aiprof.cluster.parallel import run_import

    out, _fleet, _ = job
    url = f"memory://aiprof-test-{os.getpid()}/job"
    traces = expand([out.parent / "traces"])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        rep = run_import(plan(traces), url, Where("existing", cluster.scheduler_address, 0))
    try:
        assert sorted(rep.imported) == list(range(16)) and [f[0] for f in rep.failed] == [16]
        fs = fsspec.filesystem("memory")
        root = url.removeprefix("memory://")
        assert fs.isfile(f"{root}/rank3.aiprof/profile.json") and fs.isfile(f"{root}/cluster/index.json")
        assert is_job(url) and not is_job(url + "-missing")
        with open_job(url) as remote, open_job(out) as local:
            for view in ("stragglers", "links", "exposed_comm", "ranks"):
                got, want = _rows(remote, view), _rows(local, view)
                if view == "ranks":  # the source column names the same trace files
                    assert [r["rank"] for r in got] == [r["rank"] for r in want]
                else:  # sums of floats differ in the last digits with the order rows are read in
                    assert got == [pytest.approx(r) for r in want], view
            # The events themselves read through fsspec too, shifted onto the job's clock.
            q = "SELECT rank, count(*), min(ts) FROM events GROUP BY rank ORDER BY rank"
            assert remote.sql(q).to_pylist() == local.sql(q).to_pylist()
    finally:
        fsspec.filesystem("memory").rm(url.removeprefix("memory://").split("/")[0], recursive=True)
    r = cli("import", out.parent / "traces", "-o", url, "--workers", "1")
    assert r.returncode == 2 and "lives in one process" in r.stderr and "Traceback" not in r.stderr


def test_job_folder_as_a_file_url(tmp_path: Path) -> None:
    """`-o file:///...`: written in place; report and advise read the same URL."""
    make_fleet(tmp_path / "traces", 4, template=SMALL_TEMPLATE, seed=5)
    url = (tmp_path / "job").as_uri()
    r = cli("import", tmp_path / "traces", "-o", url, "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "job").glob("rank*.aiprof")) == [f"rank{i}.aiprof" for i in range(4)]
    assert report(url, "stragglers") == report(tmp_path / "job", "stragglers")
    assert len(report(url, "stragglers")) == 4
    r = cli("import", tmp_path / "traces", "-o", "nosuchscheme://x/job", "--workers", "1")
    assert r.returncode == 2 and "nosuchscheme://x/job" in r.stderr and "Traceback" not in r.stderr


def _retag(src: Path, dst: Path, **dist: Any) -> Path:
    d = json.loads(gzip.decompress(src.read_bytes()))
    d["distributedInfo"].update(dist)
    dst.write_bytes(gzip.compress(json.dumps(d).encode(), compresslevel=1))
    return dst


def test_mixed_jobs_and_duplicate_ranks_are_refused(tmp_path: Path, shared_data: Path) -> None:
    a = shared_data / "kineto" / "sampled-128-ranks" / "sampled_rank-0.json.gz"
    b = _retag(
        shared_data / "kineto" / "sampled-128-ranks" / "sampled_rank-1.json.gz", tmp_path / "b.json.gz", world_size=64
    )
    r = cli("import", a, b, "-o", tmp_path / "job")
    assert r.returncode == 2 and "not one job" in r.stderr and "world_size" in r.stderr and "--allow-mixed" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "job").exists()
    dup = _retag(b, tmp_path / "dup.json.gz", rank=0, world_size=128)
    r = cli("import", a, dup, "-o", tmp_path / "job")
    assert r.returncode == 2 and "rank 0 twice" in r.stderr


def test_a_scheduler_that_cannot_be_reached_is_one_line_and_leaves_no_folder(tmp_path: Path, shared_data: Path) -> None:
    # The cluster is reached while the rank files are planned (engine.Starting): its
    # failure still comes out as the one-line error, before anything is written.
    ranks = shared_data / "kineto" / "sampled-128-ranks"
    r = cli(
        "import",
        ranks / "sampled_rank-0.json.gz",
        ranks / "sampled_rank-1.json.gz",
        "-o",
        tmp_path / "job",
        "--scheduler",
        "bogus://nowhere:1",
    )
    assert r.returncode == 2, r.stderr
    assert "cannot reach the Dask scheduler bogus://nowhere:1" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "job").exists()


def test_allow_mixed_on_an_existing_cluster(tmp_path: Path, shared_data: Path) -> None:
    from distributed import LocalCluster

    a = shared_data / "kineto" / "sampled-128-ranks" / "sampled_rank-0.json.gz"
    b = _retag(
        shared_data / "kineto" / "sampled-128-ranks" / "sampled_rank-1.json.gz", tmp_path / "b.json.gz", backend="gloo"
    )
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        r = cli(
            "import",
            a,
            b,
            "-o",
            tmp_path / "job",
            "--allow-mixed",
            env={"AIPROF_DASK_SCHEDULER": cluster.scheduler_address},
        )
    assert r.returncode == 0, r.stderr
    assert "existing Dask cluster" in r.stdout and "not one job" in r.stderr and "backend" in r.stderr
    for rank in (0, 1):
        meta = json.loads((tmp_path / "job" / f"rank{rank}.aiprof" / "profile.json").read_text())
        assert any("not one job" in w and "--allow-mixed" in w for w in meta["warnings"])
    # The two real ranks of one 128-rank job: their collectives match, by order (no seq).
    inst = report(tmp_path / "job", "collectives")
    assert len(inst) == 10 and all(i["ranks"] == 2 and i["matched_by"] == "order" for i in inst)
    assert all(i["arrival_spread_us"] > 0 and i["last_rank"] in (0, 1) for i in inst)


def test_collective_bytes_survive_a_rank_that_starts_earlier(tmp_path: Path, shared_data: Path) -> None:
    """Two rank files imported together: the second counts from the first one's origin,
    so a rank whose clock starts earlier has negative times; its sizes used to vanish."""
    src = shared_data / "kineto" / "A100-nccl-parser" / "nccl_data.json.gz"
    d = json.loads(gzip.decompress(src.read_bytes()))
    d["distributedInfo"]["rank"] = 1
    for e in d["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] -= 2e6
    early = tmp_path / "rank1.json.gz"
    early.write_bytes(gzip.compress(json.dumps(d).encode(), compresslevel=1))
    out, _ = import_paths([src, early], tmp_path / "two.aiprof")
    with open_profile(out) as p:
        rows = run(p, "communication").rows
    by_rank = {r: sum(x["bytes"] or 0 for x in rows if x["rank"] == r) for r in (0, 1)}
    assert by_rank[0] == by_rank[1] == 307_323_096


def test_ranks_from_distributed_info_file_name_or_order(tmp_path: Path) -> None:
    from aiprof.cluster.job import expand, plan

    def trace(path: Path, dist: dict[str, Any] | None) -> Path:
        doc: dict[str, Any] = {"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1}]}
        if dist is not None:
            doc = {"distributedInfo": dist, **doc}
        path.write_text(json.dumps(doc))
        return path

    d = tmp_path / "a"
    d.mkdir()
    trace(d / "worker_rank-7.json", None)
    trace(d / "worker_rank-3.json", None)
    trace(d / "notes.txt", None)  # not a trace file: left out of the folder
    job = plan(expand([d]))
    assert [(f.rank, f.how, f.path.name) for f in job.files] == [
        (3, "file name", "worker_rank-3.json"),
        (7, "file name", "worker_rank-7.json"),
    ]
    e = tmp_path / "b"
    e.mkdir()
    files = [trace(e / "x.json", None), trace(e / "y.json", {"rank": 5, "world_size": 8}), trace(e / "z.json", None)]
    job = plan(files)
    assert [(f.rank, f.how) for f in job.files] == [(0, "order"), (2, "order"), (5, "distributedInfo")]
    assert job.mixed == []
