"""Rules on the real Kineto traces: which fire, which do not, with evidence checked
against figures worked out from the events with SQL here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import CLOCK_SKEW_TOLERANCE_US, advise, advise_json, evaluate
from aiprof.advise.communication import COLLECTIVES_ALONE
from aiprof.analysis import run
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
        assert a.evidence and a.fix and "pytorch" in a.snippets
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
    m = items["runtime.memory_mgmt"]
    # cudaMalloc and cudaFree over the whole window: 299,759.5 of 302,417.2 µs.
    assert (
        m.summary
        == "Allocator calls (cudaMalloc, cudaFree) take 99.1% of the profiled time (no steps marked) on the host."
    )
    assert m.title == "Allocator calls in the profiled time"
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
