"""Precision and Tensor Cores: matrix work that could run on tensor/matrix cores."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.tensor_cores import uses_tensor_cores
from .base import Context, NotEnoughData, Outcome, make, needs, rule

#: tb-profiler: tensor cores exist from compute capability 7.0; TF32 from 8.0.
MIN_TC_CC = 7.0
MIN_TF32_CC = 8.0
#: bfloat16 Tensor Cores exist from compute capability 8.0 (Ampere): from there the
#: mixed-precision fix autocasts to bfloat16 (no loss scaling); below it (V100, T4) to
#: float16 with torch.amp.GradScaler.
MIN_BF16_CC = 8.0
#: DLProf: eligible ops whose kernels skip tensor cores, share of kernel time.
FP32_ELIGIBLE_SHARE = 0.10
#: What tensor cores are assumed to save of the eligible kernels' time (a 2x speed-up).
TC_SAVING = 0.5

#: Operators whose kernels can use tensor cores (GEMMs, convolutions, attention).
ELIGIBLE_OP = re.compile(
    r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|conv|cudnn_conv|convolution|_convolution"
    r"|miopen_conv|_scaled_dot_product|scaled_dot_product|_flash_attention|_efficient_attention)"
)

AMP_BF16 = (
    "with torch.autocast('cuda', dtype=torch.bfloat16):  # no GradScaler needed\n"
    "    loss = model(x)\n"
    "loss.backward(); opt.step()"
)
AMP_FP16 = (
    "scaler = torch.amp.GradScaler('cuda')\n"
    "with torch.autocast('cuda', dtype=torch.float16):\n"
    "    loss = model(x)\n"
    "scaler.scale(loss).backward(); scaler.step(opt); scaler.update()"
)
AMP_GENERIC = (
    f"# compute capability >= {MIN_BF16_CC:.1f}: bfloat16, no GradScaler\n{AMP_BF16}\n"
    f"# compute capability < {MIN_BF16_CC:.1f} (no bfloat16): float16 with a GradScaler\n{AMP_FP16}"
)
AMP_NPU = "with torch.autocast('npu', dtype=torch.float16): loss = model(x)  # torch_npu"
AMP_FIX = "Train with automatic mixed precision{} so GEMMs and convolutions run on Tensor Cores."


def amp_fix(devices: list[dict[str, Any]]) -> tuple[str, dict[str, str]]:
    """The mixed-precision fix and its snippets for ``devices``: on NVIDIA GPUs of a known
    compute capability (the lowest counts), bfloat16 from :data:`MIN_BF16_CC` and float16
    with a GradScaler below it, and no Ascend form; on Ascend NPUs the torch_npu form
    only; where neither is known, the generic CUDA forms and the Ascend one."""
    types = {str(d.get("type")) for d in devices}
    cc = lowest_cc(devices)
    ascend = {"ascend": AMP_NPU} if "npu" in types else {}
    if cc is not None and cc >= MIN_BF16_CC:
        how = f" in bfloat16 (compute capability {cc:.1f}; no loss scaling needed)"
        return AMP_FIX.format(how), {"pytorch": AMP_BF16, **ascend}
    if cc is not None:
        how = f" in float16 with a GradScaler (compute capability {cc:.1f} has no bfloat16, which needs {MIN_BF16_CC:.1f})"
        return AMP_FIX.format(how), {"pytorch": AMP_FP16, **ascend}
    if "npu" in types and "cuda" not in types:
        return "Train with automatic mixed precision in float16 (torch_npu) so matrix work runs on the Cube units.", {
            "pytorch": AMP_NPU
        }
    how = f" (bfloat16 from compute capability {MIN_BF16_CC:.1f}, float16 with a GradScaler below)"
    return AMP_FIX.format(how), {"pytorch": AMP_GENERIC, "ascend": AMP_NPU}


def lowest_cc(devices: list[dict[str, Any]]) -> float | None:
    """The lowest compute capability of the NVIDIA devices (None: none, or none known)."""
    ccs: list[float] = []
    for d in devices:
        if str(d.get("type")) != "cuda":
            continue
        try:
            ccs.append(float(d.get("compute_capability")))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
    return min(ccs) if ccs else None


def _eligible_on_nvidia(ctx: Context) -> tuple[float, float, float, float] | NotEnoughData:
    """(compute capability, *:func:`_eligible`) on a profile of NVIDIA devices."""
    cc = lowest_cc(ctx.devices)
    if cc is None:
        return NotEnoughData("no NVIDIA device with a known compute capability")
    got = _eligible(ctx)
    if isinstance(got, NotEnoughData):
        return got
    return (cc, *got)


def _per_launch(names: pa.ChunkedArray, test: Callable[[str], bool]) -> np.ndarray:
    """``test`` of each launch's name (its text, "None" for none) as a boolean array."""
    coded = names.combine_chunks().dictionary_encode() if len(names) else pa.array([], pa.string()).dictionary_encode()
    verdicts = np.array([test(str(v)) for v in coded.dictionary.to_pylist()] + [test("None")], dtype=bool)
    codes = pc.fill_null(coded.indices, len(coded.dictionary)).to_numpy()
    out: np.ndarray = verdicts[codes]
    return out


def _sum(values: np.ndarray) -> float:
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def _eligible(ctx: Context) -> tuple[float, float, float] | NotEnoughData:
    """(eligible-op kernel time on tensor cores, eligible-op time off them, all kernel time) in µs."""
    t = ctx.table("launches")
    if t is None or not t.num_rows:
        return NotEnoughData("no kernels linked to their launching operators")
    t = t.filter(pc.equal(t["kind"], "kernel"))
    k = pc.fill_null(t["kernel_us"].cast(pa.float64()), 0.0).to_numpy()
    # Each rule on each distinct operator and kernel name, then per launch by code.
    eligible = _per_launch(t["operator"], lambda s: bool(ELIGIBLE_OP.match(s)))
    tc = _per_launch(t["kernel"], uses_tensor_cores)
    # Summed launch by launch in their order, as a loop over the rows would (cumsum).
    on, off, total = (_sum(k[m]) for m in (eligible & tc, eligible & ~tc, np.ones(len(k), bool)))
    if on + off == 0:
        return NotEnoughData("no tensor-core-eligible operators (GEMM, convolution, attention) found")
    return on, off, total


@rule(
    "precision.amp",
    "No Tensor Core kernels: use mixed precision",
    anchor="tb-profiler",
    cause="compute",
    thresholds={"min_compute_capability": MIN_TC_CC, "bf16_min_compute_capability": MIN_BF16_CC},
)
@needs(_eligible_on_nvidia)
def amp(ctx: Context, got: tuple[float, float, float, float]) -> Outcome:
    cc, on, off, total = got
    if cc < MIN_TC_CC or on > 0:
        return None
    fix, snippets = amp_fix(ctx.devices)
    return make(
        f"Compute capability {cc:.1f} has Tensor Cores, but none of the eligible operators' kernels used them "
        f"({off / 1000:.1f} ms of kernels in GEMMs/convolutions).",
        {"compute_capability": cc, "eligible_kernel_us": off, "kernel_us": total, "tensor_core_kernel_us": on},
        off * TC_SAVING,
        fix,
        **snippets,
    )


@rule(
    "precision.fp32_eligible",
    "Tensor-core-eligible operators run in FP32",
    anchor="DLProf",
    cause="compute",
    thresholds={"fp32_eligible_share": FP32_ELIGIBLE_SHARE, "bf16_min_compute_capability": MIN_BF16_CC},
)
@needs(_eligible)
def fp32_eligible(ctx: Context, got: tuple[float, float, float]) -> Outcome:
    on, off, total = got
    if on == 0:
        return None  # precision.amp covers the all-FP32 case
    s = off / total if total else 0.0
    if s < FP32_ELIGIBLE_SHARE:
        return None
    return make(
        f"Eligible operators spend {100 * s:.1f}% of kernel time in kernels that skip Tensor Cores.",
        {"eligible_fp32_kernel_us": off, "tensor_core_kernel_us": on, "kernel_us": total, "fp32_pct": 100 * s},
        off * TC_SAVING,
        "Cover the remaining layers with autocast, and keep dimensions multiples of 8 (16 for int8) so "
        "the libraries pick Tensor Core kernels.",
        **amp_fix(ctx.devices)[1],
    )


@rule(
    "precision.tf32",
    "FP32 GEMMs without TF32 on Ampere or newer",
    anchor="PyTorch TF32 guidance",
    cause="compute",
    thresholds={"min_compute_capability": MIN_TF32_CC, "share": FP32_ELIGIBLE_SHARE},
)
@needs(_eligible_on_nvidia)
def tf32(ctx: Context, got: tuple[float, float, float, float]) -> Outcome:
    cc, _, off, total = got
    s = off / total if total else 0.0
    if cc < MIN_TF32_CC or s < FP32_ELIGIBLE_SHARE:
        return None
    ev: dict[str, Any] = {"compute_capability": cc, "fp32_gemm_kernel_us": off, "kernel_us": total, "fp32_pct": 100 * s}
    return make(
        f"{100 * s:.1f}% of kernel time is FP32 GEMM/convolution on a GPU with TF32 Tensor Cores.",
        ev,
        off * TC_SAVING,
        "Allow TF32 for matmuls and convolutions (a small precision change, usually harmless for training).",
        pytorch="torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n"
        "# or: torch.set_float32_matmul_precision('high')",
    )
