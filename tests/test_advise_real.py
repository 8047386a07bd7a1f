"""Rules on the real Kineto traces: which fire, which do not, with evidence checked
against figures worked out from the events with SQL here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from aiprof.advise import CLOCK_SKEW_TOLERANCE_US, advise, advise_json, evaluate
from aiprof.advise.communication import COLLECTIVES_ALONE
from aiprof.analysis import run
from aiprof.cli import cli
from aiprof.importers import import_paths
from aiprof.store import Profile, open_profile


def _open(shared: Path, rel: str, tmp_path: Path) -> Profile:
    out, _ = import_paths([shared / "kineto" / rel], tmp_path / "p.aiprof")
    return open_profile(out)


def _one(prof: Profile, sql: str) -> Any:
    return prof.sql(sql).to_pylist()[0]


def _v(prof: Profile) -> dict[str, Any]:
    return {v.rule: v for v in evaluate(prof)}


def test_v100_single_rank(shared_data: Path, tmp_path: Path) -> None:
    with _open(shared_data, "V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", tmp_path) as prof:
        v = _v(prof)
        # FP32 sgemm / scudnn kernels on a compute capability 7.0 GPU, no HMMA kernel at all.
        a = v["precision.amp"].advice
        assert a is not None and a.evidence["compute_capability"] == 7.0
        assert a.evidence["tensor_core_kernel_us"] == 0.0
        # No bfloat16 below compute capability 8.0: float16 with a GradScaler, and no
        # Ascend snippet for a CUDA trace.
        assert set(a.snippets) == {"pytorch"}
        assert "torch.autocast('cuda', dtype=torch.float16)" in a.snippets["pytorch"]
        assert "torch.amp.GradScaler('cuda')" in a.snippets["pytorch"]
        assert "bfloat16" not in a.snippets["pytorch"]
        assert "in float16 with a GradScaler (compute capability 7.0 has no bfloat16, which needs 8.0)" in a.fix
        k = _one(prof, "SELECT sum(dur) / 1000.0 AS us FROM events WHERE kind = 'kernel'")
        assert a.evidence["kernel_us"] == pytest.approx(k["us"], abs=0.01)
        assert _one(prof, "SELECT count(*) AS n FROM events WHERE kind = 'kernel' AND name ILIKE '%884%'")["n"] == 0
        # The only cudaDeviceSynchronize (89 ms) starts after the host's last step, inside
        # the device work that step launched (the step window extends to it, tb-profiler's
        # rule); it waits while the device computes, so it costs no step time: info.
        s = _one(
            prof,
            """SELECT count(*) AS n FROM events e WHERE e.name = 'cudaDeviceSynchronize' AND EXISTS
                          (SELECT 1 FROM events s WHERE s.kind = 'step' AND e.ts >= s.ts AND e.ts < s.ts + s.dur)""",
        )
        assert s["n"] == 0
        sa = v["sync.sync_api"].advice
        assert sa is not None and sa.gain == 0.0 and sa.severity == "info"
        # The device is busy 97% of the steps.
        assert v["kernels.low_utilization"].status == "silent"
        for rid in ("comm.share", "comm.low_overlap", "comm.small_packets"):
            assert v[rid].status == "no_data"
        assert v["memory.peak_high"].status == "no_data"  # profiled without profile_memory
        assert v["input.dataloader_share"].status == "no_data"


def test_v100_ddp_rank1(shared_data: Path, tmp_path: Path) -> None:
    with _open(shared_data, "V100/df_index_resolver.json.gz", tmp_path) as prof:
        v = _v(prof)
        # The model runs compiled (CompiledFunction): not told to compile it, but CUDA graphs.
        assert prof.sql("SELECT count(*) AS n FROM events WHERE name = 'CompiledFunction'").to_pylist()[0]["n"] == 5
        h = v["kernels.host_wait"].advice
        assert h is not None and "already compiled" in h.snippets["pytorch"]
        assert "mode='reduce-overhead'" in h.snippets["pytorch"]
        # Compute capability 7.0: the gradient compression hook in float16, not bfloat16.
        s = v["comm.share"].advice
        assert s is not None and "fp16_compress_hook" in s.snippets["pytorch"] and "bf16" not in s.snippets["pytorch"]
        # NCCL kernels (stream 14) never overlap a compute kernel (stream 7).
        ov = _one(
            prof,
            """SELECT count(*) AS n FROM events c JOIN events k ON k.kind = 'kernel'
                           AND k.ts < c.ts + c.dur AND c.ts < k.ts + k.dur WHERE c.kind = 'collective'""",
        )
        assert ov["n"] == 0
        o = v["comm.low_overlap"].advice
        assert o is not None and o.evidence["overlap_pct"] == 0.0
        c = _one(prof, "SELECT sum(dur) / 1000.0 AS us FROM events WHERE kind = 'collective'")
        assert o.evidence["comm_us"] == pytest.approx(c["us"])
        assert v["comm.share"].status == "fired"
        # Peak allocated 6.63 GB of a 34.09 GB V100: memory mostly unused.
        m = _one(prof, "SELECT max(allocated) AS a, max(reserved) AS r FROM memory WHERE device_type = 'cuda'")
        u = v["memory.underused"].advice
        assert u is not None and u.evidence["peak_allocated_bytes"] == m["a"] == 6629508096
        assert u.evidence["memory_bytes"] == 34089730048
        assert v["memory.peak_high"].status == "silent"
        f = v["memory.fragmentation"].advice
        assert f is not None and f.evidence["ratio"] == pytest.approx(m["r"] / m["a"], abs=1e-3)
        # No record_param_comms sizes in this old trace: no guess about packet sizes.
        assert v["comm.small_packets"].status == "no_data"
        assert v["comm.backend"].status == "silent"


def test_a100_mixed_precision_is_bfloat16(shared_data: Path, tmp_path: Path) -> None:
    with _open(shared_data, "A100-nccl-parser/nccl_data.json.gz", tmp_path) as prof:
        assert {d["compute_capability"] for d in prof.devices} == {"8.0"}
        a = _v(prof)["precision.fp32_eligible"].advice
    # Compute capability 8.0 has bfloat16: no GradScaler, and no Ascend snippet.
    assert a is not None and set(a.snippets) == {"pytorch"}
    assert "torch.autocast('cuda', dtype=torch.bfloat16)" in a.snippets["pytorch"]
    assert "GradScaler" not in a.snippets["pytorch"].replace("no GradScaler needed", "")
    assert "float16)" not in a.snippets["pytorch"].replace("bfloat16)", "")


#: Kineto traces and the torch_npu one, with the launches whose first device operation
#: starts more than CLOCK_SKEW_TOLERANCE_US before the launch call starts, counted by SQL
#: below: the only launches the clock warning may speak of.
# The launch call of a correlation is its last host call (torch_npu: the AscendCL call
# after the Enqueue that carries the same correlation; analysis/common.launch_calls_sql).
_SKEW_SQL = """
    WITH rt AS (SELECT rank, correlation, max(ts) AS ts FROM events WHERE device_type = 'cpu'
                AND kind IN ('runtime', 'driver') AND correlation IS NOT NULL GROUP BY rank, correlation),
         dev AS (SELECT rank, correlation, min(ts) AS ts FROM events WHERE device_type <> 'cpu'
                 AND kind IN ('kernel', 'memcpy', 'memset', 'collective') GROUP BY rank, correlation)
    SELECT count(*) AS n, count(*) FILTER (WHERE dev.ts < rt.ts + rt_dur.dur) AS before_end
    FROM dev JOIN rt USING (rank, correlation)
    JOIN (SELECT rank, correlation, arg_max(dur, ts) AS dur FROM events WHERE device_type = 'cpu'
          AND kind IN ('runtime', 'driver') AND correlation IS NOT NULL GROUP BY rank, correlation) rt_dur
      USING (rank, correlation)
    WHERE dev.ts < rt.ts - {tol_ns}
"""


@pytest.mark.parametrize(
    ("rel", "before_end", "skewed"),
    [
        # Launches whose device work starts before the call *ends* (ordinary asynchronous
        # launching), none before it *starts*: no clock warning (they had one before).
        ("kineto/V100/df_index_resolver.json.gz", 88, 0),
        ("kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", 1, 0),
        ("kineto/A100-nccl-parser/nccl_data.json.gz", 15, 0),
        ("kineto/MI250-rocm/mi250_minitoy_train_ROCm6_2_kineto.json.gz", 2, 0),
        ("kineto/cuda-event-sync/event_sync_trace.json.gz", 1, 0),
        ("kineto/sampled-128-ranks/sampled_rank-0.json.gz", 87, 0),
        ("kineto/sampled-128-ranks/sampled_rank-1.json.gz", 198, 0),
        ("kineto/triton/triton_example.json.gz", 1, 0),
        ("kineto/cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 0, 0),
        ("kineto/cupti-counters/benchmark_result_924719_1679055439_trace.json.gz", 0, 0),
        # torch_npu: 90 kernels start up to 17.1 µs before the AscendCL call that launches them.
        ("ascend/torch_npu", 136, 90),
    ],
)
def test_clock_warning_only_where_the_device_starts_before_the_call(
    shared_data: Path, tmp_path: Path, rel: str, before_end: int, skewed: int
) -> None:
    out, _ = import_paths([shared_data / rel], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        neg = sum(int(r["negative_delays"] or 0) for r in run(prof, "launch").rows if r["operator"] == "(all)")
        sql = _one(prof, _SKEW_SQL.format(tol_ns=CLOCK_SKEW_TOLERANCE_US * 1000))
        warnings = advise_json(prof)["warnings"]
    assert neg == before_end
    assert sql["n"] == sql["before_end"] == skewed
    clock = [w for w in warnings if "clock" in w]
    if skewed:
        assert len(clock) == 1 and clock[0].startswith(f"{skewed} launches start on the device more than 1 µs before")
    else:
        assert clock == []


def test_sampled_rank_pageable_copies(shared_data: Path, tmp_path: Path) -> None:
    with _open(shared_data, "sampled-128-ranks/sampled_rank-0.json.gz", tmp_path) as prof:
        v = _v(prof)
        p = v["data.pageable_memcpy"].advice
        n = _one(
            prof,
            """SELECT count(*) AS n, sum(bytes) AS b FROM events WHERE kind = 'memcpy'
                          AND name ILIKE '%pageable%'""",
        )
        assert p is not None and p.evidence["copies"] == n["n"] == 24
        assert p.evidence["bytes"] == n["b"]
        # 24 small copies: a gain far under 1% of the step is information, not advice.
        assert p.severity == "info"
        # SendRecv messages are ~120 MB each (record_param_comms sizes): not small packets.
        assert v["comm.small_packets"].status == "silent"
        assert v["comm.share"].status == "fired"


def test_two_sampled_ranks(shared_data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ranks"
    for r in (0, 1):
        import_paths(
            [shared_data / "kineto" / "sampled-128-ranks" / f"sampled_rank-{r}.json.gz"], folder / f"r{r}.aiprof"
        )
    with open_profile(folder) as prof:
        v = _v(prof)
        steps = prof.sql("""SELECT rank, avg(dur) / 1000.0 AS m FROM events WHERE kind = 'step'
                            AND device_type = 'cpu' GROUP BY rank""").to_pylist()
        means = [r["m"] for r in steps]
        spread = (max(means) - min(means)) / (sum(means) / 2)
        # Ranks 0 and 1 differ by under 1% per step: no slow rank.
        assert spread < 0.05
        assert v["cluster.slow_rank"].status == "silent"


def test_cpu_only_has_nothing_to_say_about_devices(shared_data: Path, tmp_path: Path) -> None:
    with _open(shared_data, "cpu-only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", tmp_path) as prof:
        v = _v(prof)
        # Its gloo all_reduce ranges (host-side, the only collectives a CPU job has)
        # take 85% of the one step: the only device-free advice that applies.
        assert [r for r, x in v.items() if x.status == "fired"] == ["comm.share"]
        # gloo, but no GPU to run NCCL on.
        assert v["comm.backend"].status == "silent"
        assert v["precision.amp"].status == "no_data"


def _captures() -> list[str]:
    from test_all_formats import CAPTURES

    return [
        *sorted(CAPTURES),
        "kineto/V100/df_index_resolver.json.gz",
        "kineto/sampled-128-ranks/sampled_rank-1.json.gz",
    ]


@pytest.mark.parametrize("rel", _captures())
def test_advice_adds_up_on_every_capture(shared_data: Path, tmp_path: Path, rel: str) -> None:
    """On every real capture: no gain above the time it claims, one item per cause (rules
    about the same time are merged and say so), and the gains sum to at most 100% with
    nothing rescaled."""
    out, _ = import_paths([shared_data / rel], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        items = advise(prof, include_info=True)
        causes = {r["cause"]: 0.0 for r in run(prof, "attribution").rows}
        for r in run(prof, "attribution").rows:
            causes[r["cause"]] += r["time_us"]
        total = sum(causes.values())
        types = {str(d.get("type")) for d in prof.devices if d.get("type")}
        accelerators = {r[0] for r in prof.con.execute("SELECT DISTINCT device_type FROM events").fetchall()} - {"cpu"}
        mindspore = any(str(s.get("importer", "")).startswith("mindspore") for s in prof.metas[0]["sources"])
    for a in items:
        # The Ascend form of a fix only where an Ascend NPU (or no device) is known; on
        # Ascend alone, the PyTorch code as torch_npu spells it; MindSpore's only on its
        # profiles; no placeholder for a path.
        assert "ascend" not in a.snippets or not types or "npu" in types, (a.rule, types)
        code = "\n".join(a.snippets.values())
        assert "PROFILE" not in code, a.rule
        if accelerators | types == {"npu"}:
            assert "torch.cuda" not in code and "'cuda'" not in code, (a.rule, code)
        assert "mindspore" not in a.snippets or mindspore, a.rule
        assert a.gain_us <= a.estimate_us + 1e-6, a.rule
        assert a.gain_us <= causes.get(a.cause or "", 0.0) + 1e-6, a.rule
        assert a.gain == pytest.approx(a.gain_us / total if total else 0.0)
        assert a.evidence and a.fix
        # A MindSpore profile gets MindSpore's code or none, never PyTorch's.
        assert ("pytorch" in a.snippets) != mindspore, a.rule
        assert not mindspore or "torch" not in code, (a.rule, code)
    with_cause = [a.cause for a in items if a.cause]
    assert len(with_cause) == len(set(with_cause))
    assert sum(a.gain for a in items) <= 1.0 + 1e-9


def test_a_capture_without_steps_is_not_told_of_steps(shared_data: Path, tmp_path: Path) -> None:
    out, _ = import_paths(
        [shared_data / "nsys" / "nsys_2022.4_vecadd_streams_T4_report1.sqlite"], tmp_path / "p.aiprof"
    )
    with open_profile(out) as prof:
        assert not [r for r in run(prof, "steps").rows if r["step"] is not None]
        items = {a.rule: a for a in advise(prof, include_info=True)}
    m = items["runtime.context_init"]
    # The first cudaMalloc (299,624.0 µs, the CUDA context's creation) of a 302,417.2 µs window.
    assert m.summary == (
        "The process's first runtime call (cudaMalloc, 299.6 ms) creates the device context (lazy initialization) "
        "and takes 99.1% of the profiled time (no steps marked): one-time start-up, not allocator or setup work."
    )
    assert m.title == "Device context creation in the profiled time"
    assert "of the time the chunks cover" in items["kernels.low_util_regions"].summary
    for a in items.values():
        assert " of the step" not in a.summary and "the steps" not in a.title, a.rule


def test_collectives_alone_say_nothing_of_their_share(shared_data: Path, tmp_path: Path) -> None:
    # ascend/cluster: 4 hcom_broadcast events of ranks 0 and 1, no steps, no computation:
    # the window is the collectives' own span (communication "100%" of it).
    out, _ = import_paths([shared_data / "ascend" / "cluster"], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        rows = run(prof, "steps").rows
        assert {r["step"] for r in rows} == {None} and sum(r["communication_us"] for r in rows) > 0
        v = _v(prof)
    for rule in ("comm.share", "comm.low_overlap"):
        assert v[rule].status == "no_data" and v[rule].reason == COLLECTIVES_ALONE, rule
    # Rank 1 starts both of its 2 broadcasts last: too few to call it a straggler.
    s = v["cluster.straggler"]
    assert s.status == "no_data" and s.reason == "2 matched collectives, fewer than 4: too few to tell a straggler"


_VECADD = "nsys/nsys_2022.4_vecadd_streams_T4_report1.sqlite"


def test_a_frameworks_long_first_call_is_not_context_creation(shared_data: Path, tmp_path: Path) -> None:
    """Ascend msprof: the process's first runtime call is the graph engine's (GE@...,
    47.6 ms, before any device work), which is no device or context set-up call: it keeps
    its class, and runtime.context_init does not fire."""
    out, _ = import_paths([shared_data / "ascend/msprof-PROF_000001"], tmp_path / "m.aiprof")
    with open_profile(out) as prof:
        first = _one(
            prof,
            """SELECT name, dur FROM events WHERE kind = 'runtime' AND device_type = 'cpu'
               AND coalesce(cat, '') <> 'osrt' ORDER BY ts LIMIT 1""",
        )
        classes = {r["class"] for r in run(prof, "runtime").rows}
        doc = advise_json(prof, include_info=True)
    assert first["name"].startswith("GE@") and first["dur"] >= 10_000_000
    assert "context" not in classes
    assert "runtime.context_init" not in {a["rule"] for a in doc["advice"]}


def test_nsys_first_cuda_call_is_context_creation_not_allocator_churn(shared_data: Path, tmp_path: Path) -> None:
    """Nsight Systems on a T4: the process's first CUDA runtime call, a cudaMalloc of
    299.6 ms before any device work, is the CUDA context created lazily, not the
    allocator; the 5 later cudaMalloc / cudaFree calls take 135.6 µs in all."""
    out, _ = import_paths([shared_data / _VECADD], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        first = _one(
            prof,
            """SELECT name, ts, dur FROM events WHERE kind = 'runtime' AND device_type = 'cpu'
               AND coalesce(cat, '') <> 'osrt' ORDER BY ts LIMIT 1""",
        )
        device = _one(prof, "SELECT min(ts) AS ts FROM events WHERE device_type <> 'cpu'")
        rest = _one(
            prof,
            f"""SELECT count(*) AS n, sum(dur) / 1000.0 AS us FROM events WHERE kind = 'runtime'
                AND name IN ('cudaMalloc', 'cudaFree') AND ts > {first["ts"]}""",
        )
        assert (first["name"], first["dur"]) == ("cudaMalloc", 299_623_989) and first["ts"] < device["ts"]
        assert (rest["n"], rest["us"]) == (5, pytest.approx(135.56))
        classes = {(r["class"], r["name"]): r for r in run(prof, "runtime").rows}
        causes = {r["cause"]: r["time_us"] for r in run(prof, "attribution").rows}
        v = _v(prof)
        doc = advise_json(prof, include_info=True)
    # The runtime view and the attribution call it context creation, not allocator time.
    assert classes[("context", "cudaMalloc")]["calls"] == 1
    assert classes[("memory", "(all)")]["calls"] == 5
    assert classes[("memory", "(all)")]["total_us"] == pytest.approx(rest["us"])
    assert causes["context_init"] == pytest.approx(299_623.989)
    assert causes["memory_mgmt"] == pytest.approx(135.56)
    # The allocator rule no longer fires: 135.6 µs is 0.04% of the window.
    assert v["runtime.memory_mgmt"].status == "silent"
    a = v["runtime.context_init"].advice
    assert a is not None and a.cause == "context_init" and a.severity == "high"
    assert a.evidence["call"] == "cudaMalloc" and a.evidence["call_us"] == pytest.approx(299_623.989)
    assert a.evidence["context_init_pct"] == pytest.approx(100 * 299_623.989 / 302_417.177, abs=1e-3)
    assert a.gain_us == pytest.approx(299_623.989)
    assert "before the timed region" in a.fix and "cudaFree(0)" in a.fix
    assert "torch.cuda.init()" in a.snippets["pytorch"] and "torch.profiler.schedule(" in a.snippets["pytorch"]
    # Nothing tells the user to keep the caching allocator warm.
    for item in doc["advice"]:
        assert "caching allocator" not in item["fix"] and "empty_cache" not in str(item["snippets"]), item["rule"]


_MS_JOB = "ascend/mindspore-raw-job"


def test_mindspore_communication_advice_is_mindspore_code(shared_data: Path, tmp_path: Path) -> None:
    """MindSpore 1.x on Ascend 910 (Wide&Deep, AllGather / ReduceScatter): communication
    not hidden by computation takes 45.5% of the 322 steps. Its advice names MindSpore's
    parallel context, never DDP or any PyTorch code."""
    out, _ = import_paths([shared_data / _MS_JOB], tmp_path / "p.aiprof")
    with open_profile(out) as prof:
        assert prof.metas[0]["sources"][0]["importer"].startswith("mindspore")
        comm = _one(prof, "SELECT sum(dur) / 1000.0 AS us FROM events WHERE kind = 'collective'")
        v = _v(prof)
        doc = advise_json(prof, include_info=True)
    share, overlap = v["comm.share"].advice, v["comm.low_overlap"].advice
    assert share is not None and overlap is not None
    assert share.evidence["communication_pct"] == pytest.approx(45.464, abs=1e-3)
    assert overlap.evidence["overlap_pct"] == pytest.approx(0.826, abs=1e-3)
    assert overlap.evidence["comm_us"] <= comm["us"]
    for a in (share, overlap):
        assert set(a.snippets) == {"mindspore"}, a.rule
        code = a.snippets["mindspore"]
        assert "import mindspore as ms" in code and "all_reduce_fusion_config=[20, 35]" in code
        assert "ParallelMode.DATA_PARALLEL" in code and "comm_fusion={'allgather'" in code
        assert "all_reduce_fusion_config" in a.fix and "DDP" not in a.fix
    # Every fired rule, merged or not: no PyTorch code and no DDP in the fixes.
    fired = [x.advice for x in v.values() if x.advice is not None]
    assert {a.rule for a in fired} >= {"comm.share", "comm.low_overlap", "kernels.low_util_regions"}
    for a in fired:
        assert "pytorch" not in a.snippets and "ascend" not in a.snippets, a.rule
        assert "torch" not in "\n".join(a.snippets.values()) and "DDP" not in a.fix, a.rule
    for item in doc["advice"]:
        assert "torch" not in json.dumps(item["snippets"]), item["rule"]
        assert all("DDP" not in o["fix"] for o in item["also"]), item["rule"]
    # The terminal shows the MindSpore code under the table.
    r = CliRunner().invoke(cli, ["advise", str(out)], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "fix #1 (Communication takes a large share of the step), MindSpore:" in r.output
    assert "all_reduce_fusion_config=[20, 35])" in r.output and "PyTorch:" not in r.output
    assert "torch" not in r.output
