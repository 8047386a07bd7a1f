"""The across-rank views of CPU-only distributed jobs agree with each other.

Two real 2-rank gloo jobs recorded in default mode, rank 1 sleeping 30 ms a step:

- DDP: its gradient all-reduces run in DDP's C++ reducer, which the recorder does not
  see. The stragglers views find rank 1 from the waits rank_waits measures (each
  rank's own work is its step less its wait), and the communication, ranks and
  exposed_comm views say the communication is not measured (null, with a note)
  instead of 0 or "a single-process job".
- explicit ``dist.all_reduce``: the recorder writes each call as a host-side
  collective. The collectives view matches them across the ranks, exposed_comm counts
  their time, the stragglers view names rank 1, and all of them agree with the ranks
  view on the same calls.

And a real Kineto trace of a CPU-only gloo rank, imported into a job index: its
gloo ranges are its communication there too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Any

import pyarrow.parquet as pq
import pytest

from aiprof.analysis import Query, run
from aiprof.cluster.views import STRAGGLER_Z
from aiprof.store import open_profile
from record_support import SPIN, TWO_RANKS, free_port, record, slow_backward

PY = sys.executable
#: What rank 1 sleeps before each step's work (s), and the steps.
SLEEP_S = 0.03
STEPS = 16

#: Both ranks compute the same (a 5 ms forward, a 10 ms backward, busy waits the
#: samples see); rank 1 sleeps 30 ms before each step's work.
DDP_JOB = (
    TWO_RANKS
    + """from torch.nn.parallel import DistributedDataParallel as DDP
"""
    + SPIN
    + slow_backward(10)
    + f"""
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 4)
    def forward(self, x):
        spin(5)
        return Spin.apply(self.lin(x))

model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range({STEPS}):
    if rank == 1:
        time.sleep({SLEEP_S})  # rank 1 loads its data slowly
    opt.zero_grad()
    model(torch.ones(2, 16)).sum().backward()
    opt.step()
dist.destroy_process_group()
"""
)

#: One parameter, so one all_reduce a step: rank 0 reaches it first and waits for rank 1.
ALL_REDUCE_JOB = (
    TWO_RANKS
    + f"""m = torch.nn.Linear(64, 64, bias=False)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range({STEPS}):
    if rank == 1:
        time.sleep({SLEEP_S})  # rank 1 loads its data slowly
    loss = m(torch.randn(8, 64)).sum()
    opt.zero_grad()
    loss.backward()
    dist.all_reduce(m.weight.grad)
    opt.step()
dist.destroy_process_group()
"""
)


def ddp_note(note: Any) -> bool:
    """The note of a DDP rank's communication: not measured, and where it is."""
    return isinstance(note, str) and note.startswith("not measured: DDP") and "rank_waits" in note


def rows(p: Any, view: str) -> dict[int, dict[str, Any]]:
    return {int(r["rank"]): r for r in run(p, view, Query(limit=100_000)).rows}


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("ddp_sleep")
    return record(folder, DDP_JOB, "--rate", "200", args=(str(free_port()),), name="ddp", out="ddp")


@pytest.fixture(scope="module")
def manual(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("all_reduce_sleep")
    return record(folder, ALL_REDUCE_JOB, args=(str(free_port()),), name="manual", out="manual")


def test_ddp_stragglers_name_the_rank_the_others_wait_for(ddp: Path) -> None:
    """Every rank's step lasts as long (step_z near 0): the straggler is found from
    each rank's own work, its step less the wait rank_waits measures, and compute_us,
    which a CPU rank does not measure, is null, not 0."""
    with open_profile(ddp) as p:
        waits = rows(p, "rank_waits")
        strag = rows(p, "stragglers")
        steps = run(p, "straggler_steps", Query(limit=100_000)).rows
        top = run(p, "stragglers").rows[0]  # the view's own order: the slowest first
    # rank_waits: rank 0 waits for rank 1 in backward, about its 30 ms a step.
    assert waits[1]["wait_us"] == 0.0 and waits[0]["wait_us"] > 0.3 * SLEEP_S * 1e6 * STEPS, waits
    assert top["rank"] == 1
    one, zero = strag[1], strag[0]
    assert one["compute_us"] is None and zero["compute_us"] is None
    assert abs(one["step_z"]) < 1 and abs(zero["step_z"]) < 1, "synchronous steps: step time cannot tell"
    # Rank 1's own work holds its sleep; rank 0's is its step less its wait (an
    # estimate from the samples: on a loaded machine it finds a part of the 30 ms).
    assert SLEEP_S * 1e6 < one["work_us"] <= one["step_us"] * 1.05, one
    assert zero["work_us"] < one["work_us"] - 0.3 * SLEEP_S * 1e6, (zero, one)
    assert one["persistent"] and one["slow_steps"] >= 0.6 * one["steps"] and one["work_z"] > STRAGGLER_Z, one
    assert not zero["persistent"] and zero["slow_steps"] <= 0.2 * zero["steps"], zero
    # Balanced, each rank would do the mean of the two: rank 1's step would shrink by
    # half the difference, up to half its step (what cluster.backward_wait gains).
    assert 10.0 < one["lost_pct"] < 55.0 and zero["lost_pct"] < 3.0, (one, zero)
    assert all(s["compute_us"] is None and s["compute_z"] is None for s in steps)
    assert all(s["work_us"] is not None for s in steps)


def test_the_reports_python_table_names_each_rows_rank(ddp: Path) -> None:
    """The report's top Python functions of a 2-rank job listed ``spin`` twice, without
    saying whose each row was."""
    from aiprof.cli.overview import compute_items

    with open_profile(ddp) as p:
        items = compute_items(p)
        py = run(p, "python", Query.parse([], "-self_samples", 5)).rows
    table = next(it for it in items if it.get("title") == "top Python functions by sampled self time")
    assert [c[0] for c in table["cols"]] == ["rank", "function", "self_pct", "self_us", "total_pct"]
    assert [(r[0], r[1]) for r in table["rows"]] == [(str(r["rank"]), r["function"]) for r in py]
    # The notebook's summary too.
    import re

    from aiprof.notebook.handle import ProfileHandle
    from aiprof.notebook.inline import summary_html

    h = ProfileHandle([ddp])
    try:
        html = summary_html(h)
    finally:
        h.close()
    top = html[html.index('<div class="aiprof-top-python">') :]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", top[: top.index("</thead>")])
    assert head == ["rank", "function", "file", "self_pct", "self_us", "total_pct"]


def test_ddp_communication_is_not_measured_rather_than_zero(ddp: Path) -> None:
    """DDP's all-reduces ran unseen: the communication, ranks and exposed_comm views
    give null and say why, instead of 0 and "a single-process job"."""
    with open_profile(ddp) as p:
        comm = run(p, "communication").rows
        ranks = rows(p, "ranks")
        exposed = rows(p, "exposed_comm")
    assert [(r["rank"], r["op"], r["calls"], r["total_us"], r["bytes"]) for r in comm] == [
        (0, "all_reduce", None, None, None),
        (1, "all_reduce", None, None, None),
    ]
    assert all(ddp_note(r["note"]) for r in comm)
    for r in (0, 1):
        assert ranks[r]["steps"] == STEPS
        assert ranks[r]["comm_us"] is None and ranks[r]["collectives"] is None and ranks[r]["last_arrivals"] is None
        assert ddp_note(ranks[r]["note"])
        e = exposed[r]
        assert (e["comm_us"], e["overlap_us"], e["exposed_us"], e["exposed_pct"]) == (None, None, None, None)
        assert ddp_note(e["note"]) and e["step_us"] > STEPS * SLEEP_S * 1e6


def test_all_reduce_views_agree_on_the_recorded_collectives(manual: Path) -> None:
    """The recorder's all_reduce calls: matched across ranks by their sequence number
    (the collectives view), counted as rank 0's exposed communication, and rank 1 named
    the straggler, as the ranks view says."""
    with open_profile(manual) as p:
        ranks = rows(p, "ranks")
        inst = run(p, "collectives", Query(limit=100_000)).rows
        exposed = rows(p, "exposed_comm")
        strag = rows(p, "stragglers")
        comm = run(p, "communication").rows
    # One all_reduce a step, on both ranks, matched by its seq.
    assert len(inst) == STEPS
    assert {(i["pg"], i["op"], i["matched_by"], i["ranks"], i["pg_size"]) for i in inst} == {
        ("default", "allreduce", "seq", 2, 2)
    }
    assert sorted(i["key"] for i in inst) == list(range(STEPS))
    assert {i["bytes"] for i in inst} == {64 * 64 * 4}
    # Rank 0 reaches each all_reduce about the 30 ms of rank 1's sleep before it.
    late = [i for i in inst if i["last_rank"] == 1]
    assert len(late) >= STEPS - 2, inst
    assert 0.7 * SLEEP_S * 1e6 < median(i["arrival_spread_us"] for i in late) < 10 * SLEEP_S * 1e6
    # The ranks view counts the same calls and the same last arrivals.
    for r in (0, 1):
        assert ranks[r]["collectives"] == STEPS
        assert ranks[r]["last_arrivals"] == sum(1 for i in inst if i["last_rank"] == r and i["arrival_spread_us"] > 0)
    assert sum(c["calls"] for c in comm) == 2 * STEPS
    # exposed_comm: the calls' time, all of it exposed (a call blocks its thread); rank 0
    # waits there for rank 1 every step.
    for r in (0, 1):
        e = exposed[r]
        assert e["comm_us"] is not None and e["overlap_us"] == 0.0 and e["exposed_us"] == e["comm_us"]
        assert e["note"].startswith("host-side collectives") and "all of it exposed" in e["note"], e
    # Past the first step (where rank 0 may wait for rank 1's start-up), about 30 ms a
    # step, all inside rank 0's steps; rank 1 waits for no one.
    later = {r: sum(c["total_us"] for c in comm if c["rank"] == r and (c["step"] or 0) >= 1) for r in (0, 1)}
    assert 0.7 * (STEPS - 1) * SLEEP_S * 1e6 < later[0] < 5 * (STEPS - 1) * SLEEP_S * 1e6, later
    assert later[0] > 3 * later[1], later
    assert later[0] <= exposed[0]["comm_us"] + 1e-6 <= ranks[0]["comm_us"] + 2e-6, (later, exposed[0], ranks[0])
    # The stragglers: rank 1's own work (step less its calls) holds its sleep.
    one, zero = strag[1], strag[0]
    assert one["compute_us"] is None and 0.9 * SLEEP_S * 1e6 < one["work_us"] < 10 * SLEEP_S * 1e6, one
    assert zero["work_us"] < 0.5 * one["work_us"], (zero, one)
    assert one["persistent"] and one["work_z"] > STRAGGLER_Z and not zero["persistent"], (one, zero)
    assert 10.0 < one["lost_pct"] < 55.0, one


CPU_ONLY = "kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
SAMPLED = "kineto/sampled-128-ranks/sampled_rank-0.json.gz"


def cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "aiprof", *map(str, args)], capture_output=True, text=True, timeout=600, check=False
    )


def report(path: Path, view: str) -> dict[int, dict[str, Any]]:
    r = cli("report", path, "--view", view, "--format", "json", "--limit", "1000")
    assert r.returncode == 0, r.stderr
    return {int(x["rank"]): x for x in json.loads(r.stdout)["rows"]}


def test_a_cpu_ranks_gloo_ranges_are_its_communication_in_the_job_index(shared_data: Path, tmp_path: Path) -> None:
    """A CPU-only gloo rank (Kineto, rank 34) beside a GPU rank, imported with the job
    index: the index's ranks view counts rank 34's gloo ranges as the ranks view of its
    events does (it gave 0), exposed_comm their time in its step with the overlap not
    measured, and an index written before wait_ns still answers."""
    pytest.importorskip("distributed", reason="the cluster extra (dask, distributed) is not installed")
    job = tmp_path / "job"
    r = cli("import", shared_data / CPU_ONLY, shared_data / SAMPLED, "-o", job, "--workers", "1", "--allow-mixed")
    assert r.returncode == 0, r.stderr
    with open_profile(job / "rank34.aiprof") as p:
        own = rows(p, "ranks")[34]
    ranks = report(job, "ranks")
    assert ranks[34]["comm_us"] == pytest.approx(own["comm_us"]) == pytest.approx(2135455.918)
    # Their sizes: each range's "Input Dims" x "Input type", in both.
    assert ranks[34]["comm_bytes"] == own["comm_bytes"] == 48073640 and ranks[34]["note"] is None
    exposed = report(job, "exposed_comm")
    # The union of the gloo ranges of its two threads inside its one step (210 ms).
    assert exposed[34]["comm_us"] == pytest.approx(178777.427)
    assert exposed[34]["overlap_us"] is None and exposed[34]["exposed_us"] is None
    assert "gloo/nccl ranges" in exposed[34]["note"] and "overlap" in exposed[34]["note"]
    assert exposed[0]["note"] is None
    strag = report(job, "stragglers")
    assert strag[34]["compute_us"] is None and strag[34]["work_us"] is None and strag[34]["lost_pct"] is None
    assert strag[0]["compute_us"] is not None
    # An index from before wait_ns reads the same.
    steps = job / "cluster" / "steps.parquet"
    pq.write_table(pq.read_table(steps).drop_columns(["wait_ns"]), steps)
    assert report(job, "stragglers") == strag and report(job, "exposed_comm") == exposed


class _Index:
    """A job's cluster index alone, as an opened profile holds it (cluster/index.py):
    the views read nothing else."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        import duckdb
        import pyarrow as pa

        from aiprof.cluster.index import VIEWS
        from aiprof.cluster.summary import SCHEMAS

        self.con = duckdb.connect()
        self._memo: dict[str, Any] = {"cluster.index": True}
        tables = {"steps": pa.Table.from_pylist(steps, schema=SCHEMAS["steps"])}
        for name, view in VIEWS.items():
            self.con.register(f"_{view}", tables.get(name, SCHEMAS[name].empty_table()))
            self.con.execute(f"CREATE VIEW {view} AS SELECT * FROM _{view}")


def cpu_steps(work_ms: dict[int, float], steps: int = 6) -> list[dict[str, Any]]:
    """CPU ranks in lockstep: each step lasts as long as the slowest rank's work, and
    every rank waits the rest of it (DDP's wait, as the samples give it)."""
    out: list[dict[str, Any]] = []
    for s in range(steps):
        dur = int(max(work_ms.values()) * 1e6) + 1_000_000
        for r, w in work_ms.items():
            out.append(
                {"rank": r, "step": s, "start_ns": s * 10**9, "dur_ns": dur, "busy_ns": 0, "compute_ns": 0,
                 "comm_ns": None, "overlap_ns": None, "exposed_ns": None, "kernel_ns": 0,
                 "device_measured": False, "wait_ns": dur - int(w * 1e6)}
            )  # fmt: skip
    return out


def test_stragglers_of_three_cpu_ranks_score_each_ranks_own_work() -> None:
    """Three or more ranks: the robust z-score of each rank's own work against the
    ranks' median (as compute on a device); two ranks within 5% of each other: neither
    is slow; a rank without its waits measured has no work (null), not 0."""
    p: Any = _Index(cpu_steps({0: 20.0, 1: 20.4, 2: 30.0}))
    got = rows(p, "stragglers")
    assert got[2]["persistent"] and got[2]["slow_steps"] == 6 and got[2]["work_us"] == pytest.approx(30_000)
    assert not got[0]["persistent"] and not got[1]["persistent"]
    # Balanced, each rank runs the median work: rank 2's 10 ms extra of a 31 ms step.
    assert got[2]["lost_pct"] == pytest.approx(100 * (30.0 - 20.4) / 31.0)
    assert run(p, "stragglers").rows[0]["rank"] == 2
    tie = rows(_Index(cpu_steps({0: 20.0, 1: 20.8})), "stragglers")
    assert tie[0]["slow_steps"] == tie[1]["slow_steps"] == 0  # 4% apart
    apart = rows(_Index(cpu_steps({0: 20.0, 1: 21.4})), "stragglers")
    assert apart[1]["persistent"] and apart[0]["slow_steps"] == 0  # 7% apart
    unmeasured = cpu_steps({0: 20.0, 1: 30.0})
    for x in unmeasured:
        x["wait_ns"] = None
    none = rows(_Index(unmeasured), "stragglers")
    assert none[1]["work_us"] is None and none[1]["work_z"] is None and none[1]["lost_pct"] is None
