"""Communication: collectives that take too long, overlap too little, or move tiny messages."""

from __future__ import annotations

import re

from .base import Context, NotEnoughData, Outcome, make, rule, share
from .precision import MIN_BF16_CC, lowest_cc

#: tb-profiler: communication above this share of the step.
COMM_SHARE = 0.10
#: HTA comm/comp overlap: below this share of communication time hidden behind compute.
OVERLAP_LOW = 0.50
#: ...and only when the exposed communication is at least this share of the step.
EXPOSED_SHARE = 0.03
#: msprof-analyze small packets: messages below this size (bytes)...
SMALL_PACKET_BYTES = 1 << 20
#: ...making up at least this share of the sized collectives.
SMALL_PACKET_SHARE = 0.5

_DDP_FIX = "Overlap gradient communication with the backward pass (DDP buckets), and compress or reduce what is sent."

# MindSpore's forms of the fixes (a MindSpore profile is shown no PyTorch code:
# advise.fit_snippets). MindSpore inserts the collectives itself; its parallel context
# says how they are fused: all_reduce_fusion_config splits the gradients' AllReduce
# into groups at parameter indices, comm_fusion sets the size of each fused operator.
_MS_SHARE_FIX = (
    "Hide the gradient communication behind the backward pass: under data parallelism, split the gradients into "
    "several fused AllReduce groups (all_reduce_fusion_config) so the first groups are sent while backward computes "
    "the rest; under (semi-)auto parallelism, smaller fused AllGather and ReduceScatter operators (comm_fusion) "
    "start sooner."
)
_MS_OVERLAP_FIX = (
    "Overlap the collectives with computation: under data parallelism, split the gradients into several fused "
    "AllReduce groups (all_reduce_fusion_config) so the first groups are sent while backward computes the rest, not "
    "all at the end; under (semi-)auto parallelism, smaller fused AllGather and ReduceScatter operators (comm_fusion) "
    "start sooner."
)
_MS_OVERLAP = (
    "import mindspore as ms\n"
    "# data parallel: the gradients in 3 fused AllReduce groups (split at parameter indices 20 and 35),\n"
    "# the first ones sent while backward computes the rest\n"
    "ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,\n"
    "                             all_reduce_fusion_config=[20, 35])\n"
    "# (semi-)auto parallel: fused AllGather / ReduceScatter size, MB (64 by default; smaller ones start sooner)\n"
    "ms.set_auto_parallel_context(comm_fusion={'allgather': {'mode': 'size', 'config': 32},\n"
    "                                          'reducescatter': {'mode': 'size', 'config': 32}})"
)
_MS_SMALL_FIX = (
    "Fuse the small collectives into fewer, larger ones: raise the fusion size of AllReduce, AllGather and "
    "ReduceScatter (comm_fusion, MB per fused operator, 64 by default)."
)
_MS_SMALL = (
    "import mindspore as ms\n"
    "ms.set_auto_parallel_context(comm_fusion={'allreduce': {'mode': 'size', 'config': 128},  # MB per fused op\n"
    "                                          'allgather': {'mode': 'size', 'config': 128},\n"
    "                                          'reducescatter': {'mode': 'size', 'config': 128}})"
)


def _ddp_pt(ctx: Context) -> str:
    """DDP's overlap options and a compression hook the devices run: bfloat16 from
    compute capability MIN_BF16_CC, float16 below it or where it is not known."""
    cc = lowest_cc(ctx.devices)
    hook = "bf16_compress_hook" if cc is not None and cc >= MIN_BF16_CC else "fp16_compress_hook"
    return (
        "model = DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True)\n"
        f"model.register_comm_hook(None, torch.distributed.algorithms.ddp_comm_hooks.default_hooks.{hook})"
    )


#: The steps view's categories of work that communication could hide behind.
_COMPUTE_COLS = ("kernel_us", "memcpy_us", "memset_us", "runtime_us", "dataloader_us", "cpu_exec_us")
COLLECTIVES_ALONE = "the profile holds collectives alone, without steps or any computation"


def collectives_alone(ctx: Context) -> bool:
    """Whether the profile holds collectives and nothing they could overlap, without
    steps: its window is then the collectives' own span, and their share of it, or
    their overlap with computation, says nothing about the job (a cluster folder's
    communication file alone)."""
    rows = ctx.rows("steps") or []
    return not ctx.steps() and not any(float(r[c] or 0.0) for r in rows for c in _COMPUTE_COLS)


@rule(
    "comm.share",
    "Communication takes a large share of the step",
    anchor="tb-profiler",
    cause="communication",
    thresholds={"comm_share": COMM_SHARE},
)
def comm_share(ctx: Context) -> Outcome:
    rows = ctx.rows("steps")
    step = ctx.step_us()
    if not rows or not step:
        return NotEnoughData("no step or trace window")
    if not ctx.rows("communication"):
        return NotEnoughData("no collectives in the profile")
    if collectives_alone(ctx):
        return NotEnoughData(COLLECTIVES_ALONE)
    t = sum(float(r["communication_us"] or 0.0) for r in rows)
    s = share(t, step)
    if s <= COMM_SHARE:
        return None
    return make(
        f"Communication not hidden by computation takes {100 * s:.1f}% of the step.",
        {"communication_us": t, "step_us": step, "communication_pct": 100 * s},
        t,
        _MS_SHARE_FIX if ctx.mindspore() else _DDP_FIX,
        pytorch=_ddp_pt(ctx),
        ascend="# Ascend: the same DDP options with backend='hccl'",
        mindspore=_MS_OVERLAP,
    )


@rule(
    "comm.low_overlap",
    "Communication barely overlaps computation",
    cause="communication",
    anchor="HTA",
    thresholds={"overlap_share": OVERLAP_LOW, "exposed_share": EXPOSED_SHARE},
)
def low_overlap(ctx: Context) -> Outcome:
    rows = ctx.rows("comm_overlap")
    if not rows:
        return NotEnoughData("no collectives in the profile")
    if collectives_alone(ctx):
        return NotEnoughData(COLLECTIVES_ALONE)
    comm = sum(float(r["comm_us"]) for r in rows)
    ov = sum(float(r["overlap_us"]) for r in rows)
    exposed = sum(float(r["exposed_us"]) for r in rows)
    step = sum(float(r["step_us"]) for r in rows)
    if comm <= 0:
        return NotEnoughData("collectives take no time inside the steps")
    o = ov / comm
    s = share(exposed, step)
    if o >= OVERLAP_LOW or s < EXPOSED_SHARE:
        return None
    return make(
        f"Only {100 * o:.1f}% of communication time overlaps computation; {100 * s:.1f}% of the step is exposed.",
        {"overlap_pct": 100 * o, "comm_us": comm, "overlap_us": ov, "exposed_us": exposed, "step_us": step},
        exposed * (OVERLAP_LOW - o) / OVERLAP_LOW if o < OVERLAP_LOW else 0.0,
        _MS_OVERLAP_FIX if ctx.mindspore() else _DDP_FIX,
        pytorch=_ddp_pt(ctx),
        mindspore=_MS_OVERLAP,
    )


@rule(
    "comm.small_packets",
    "Collectives move small messages",
    cause="communication",
    anchor="msprof-analyze",
    thresholds={"packet_bytes": SMALL_PACKET_BYTES, "share": SMALL_PACKET_SHARE},
)
def small_packets(ctx: Context) -> Outcome:
    rows = ctx.rows("communication")
    if not rows:
        return NotEnoughData("no collectives in the profile")
    sized = [r for r in rows if r["sized_calls"]]
    if not sized:
        return NotEnoughData("no collective records its message size")
    calls = sum(int(r["sized_calls"]) for r in sized)
    small = sum(int(r["sized_calls"]) for r in sized if float(r["mean_bytes"]) < SMALL_PACKET_BYTES)
    s = small / calls
    if s < SMALL_PACKET_SHARE:
        return None
    t = sum(float(r["total_us"]) for r in sized if float(r["mean_bytes"]) < SMALL_PACKET_BYTES)
    return make(
        f"{100 * s:.0f}% of sized collectives move less than 1 MiB each.",
        {"small_calls": small, "sized_calls": calls, "small_pct": 100 * s, "small_comm_us": t},
        t * 0.5,
        _MS_SMALL_FIX
        if ctx.mindspore()
        else "Bucket small tensors into fewer, larger collectives (bigger DDP buckets, coalesced calls).",
        pytorch="model = DDP(model, bucket_cap_mb=100)\n# or: dist.all_reduce_coalesced / torch.cat before all_reduce",
        mindspore=_MS_SMALL,
    )


@rule("comm.backend", "Non-NCCL backend on NCCL-capable GPUs", anchor="tb-profiler", cause="communication")
def backend(ctx: Context) -> Outcome:
    backends = {str(m.get("distributed", {}).get("backend", "")).lower() for m in ctx.metas if m.get("distributed")}
    if not backends or backends == {""}:
        return NotEnoughData("the profile does not name the distributed backend")
    gpus = [d for d in ctx.devices if d.get("type") == "cuda"]
    if not gpus:
        return None
    bad = sorted(b for b in backends if b and not re.search(r"nccl", b))
    if not bad:
        return None
    comm = ctx.rows("steps") or []
    t = sum(float(r["communication_us"] or 0.0) for r in comm)
    return make(
        f"Collectives use {', '.join(bad)} on NVIDIA GPUs, where NCCL is much faster.",
        {"backends": bad, "gpus": len(gpus), "communication_us": t},
        t * 0.5,
        "Initialise the process group with NCCL for GPU tensors.",
        pytorch="torch.distributed.init_process_group(backend='nccl')",
        ascend="torch.distributed.init_process_group(backend='hccl')",
    )


_DP_OPS = re.compile(r"DataParallel|^torch\.nn\.parallel|Broadcast(Coalesced)?$|ReduceAddCoalesced|^Gather$|^Scatter$")


@rule("comm.dataparallel", "DataParallel on several devices", anchor="tb-profiler", cause=None)
def dataparallel(ctx: Context) -> Outcome:
    ops = ctx.rows("operators")
    launches = ctx.table("launches")
    if not ops or launches is None or not launches.num_rows:
        return NotEnoughData("no operators or launches recorded")
    per_rank: dict[int, set[int]] = {}
    for r in launches.group_by(["rank", "device"]).aggregate([]).to_pylist():
        per_rank.setdefault(int(r["rank"]), set()).add(int(r["device"]))
    devs = max(len(v) for v in per_rank.values())
    dp = sorted({str(r["name"]) for r in ops if _DP_OPS.search(str(r["name"]))})
    if devs < 2 or not dp:
        return None
    return make(
        f"One process drives {devs} devices through DataParallel ({', '.join(dp[:3])}).",
        {"devices_per_process": devs, "dataparallel_ops": dp[:5]},
        0.0,
        "Use DistributedDataParallel, one process per device: no per-step model replication and no "
        "single-thread scatter/gather.",
        pytorch="torchrun --nproc_per_node=N train.py\nmodel = DDP(model.to(local_rank), device_ids=[local_rank])",
    )
