"""Which kernels run on Tensor Cores (or AMD matrix cores), by name: the one rule.

The base is tb-profiler's (torch_tb_profiler, after NVIDIA PyProf's tc.py): a kernel
uses Tensor Cores when its name contains one of :data:`TC_KERNEL_SUBSTRINGS`. Newer
libraries name their tiles otherwise, so :data:`TC_KERNEL_EXTRA_SUBSTRINGS` adds
cutlass's ``tensorop`` and Hopper's ``gmma`` (wgmma) kernels, and
:data:`MFMA_TILE_PATTERN` AMD's MFMA tiles in rocBLAS/hipBLASLt names ("MI16x16x1").
It is a name test only, so a kernel named otherwise counts as not on Tensor Cores
(tb-profiler's list misses, e.g., cuDNN's ``sm80_xmma_fprop_implicit_gemm`` TF32 kernels).
The kernels view, the Tensor Core share and the precision advice all use it.
"""

from __future__ import annotations

import re

#: tb-profiler's Tensor Core kernel name fragments (case-sensitive substrings).
TC_KERNEL_SUBSTRINGS: tuple[str, ...] = (
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816",
    "dgrad_1x1_stride_2x2", "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1",
    "direct_group", "xmma_implicit_gemm", "xmma_sparse_conv", "xmma_warp_specialized_implicit_gemm",
    "xmma_gemm", "xmma_sparse_gemm", "c1688",
)  # fmt: skip
#: Fragments tb-profiler's list predates: cutlass 2.x/3.x ``tensorop`` and Hopper ``gmma``.
TC_KERNEL_EXTRA_SUBSTRINGS: tuple[str, ...] = ("tensorop", "gmma")
#: AMD MFMA (matrix core) tiles as rocBLAS/hipBLASLt/Tensile name them: ``MI<m>x<n>x<k>``.
MFMA_TILE_PATTERN = r"MI[0-9]+x[0-9]+x[0-9]+"

_SUBSTRINGS = TC_KERNEL_SUBSTRINGS + TC_KERNEL_EXTRA_SUBSTRINGS
_MFMA = re.compile(MFMA_TILE_PATTERN)


def uses_tensor_cores(name: str) -> bool:
    """The rule on one kernel name."""
    return any(s in name for s in _SUBSTRINGS) or _MFMA.search(name) is not None


def tensor_core_sql(column: str = "name") -> str:
    """The same rule as a DuckDB boolean expression on ``column``."""
    tests = [f"contains({column}, '{s}')" for s in _SUBSTRINGS]
    tests.append(f"regexp_matches({column}, '{MFMA_TILE_PATTERN}')")
    return "(" + " OR ".join(tests) + ")"
