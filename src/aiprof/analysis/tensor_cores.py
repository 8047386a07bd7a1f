"""Which kernels run on Tensor Cores, by name.

The rule is tb-profiler's (torch_tb_profiler, after NVIDIA PyProf's tc.py): a kernel
uses Tensor Cores when its name contains one of :data:`TC_KERNEL_SUBSTRINGS`. It is a
name test only (cuBLAS/cuDNN/cutlass tile names), so a kernel named otherwise counts
as not on Tensor Cores.
"""

from __future__ import annotations

#: tb-profiler's Tensor Core kernel name fragments (case-sensitive substrings).
TC_KERNEL_SUBSTRINGS: tuple[str, ...] = (
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816",
    "dgrad_1x1_stride_2x2", "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1",
    "direct_group", "xmma_implicit_gemm", "xmma_sparse_conv", "xmma_warp_specialized_implicit_gemm",
    "xmma_gemm", "xmma_sparse_gemm", "c1688",
)  # fmt: skip


def uses_tensor_cores(name: str) -> bool:
    """tb-profiler's test on one kernel name."""
    return any(s in name for s in TC_KERNEL_SUBSTRINGS)


def tensor_core_sql(column: str = "name") -> str:
    """The same test as a DuckDB boolean expression on ``column``."""
    return "(" + " OR ".join(f"contains({column}, '{s}')" for s in TC_KERNEL_SUBSTRINGS) + ")"
