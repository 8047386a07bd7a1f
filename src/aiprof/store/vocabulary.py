"""The names every importer and analyser reads the same way, stated once: which device
work is a collective, which host ranges are communication calls, and which ranges are
training steps or data loading.

Importers use these to set ``kind`` (``collective``, ``step``, ``dataloader``);
analysers use the SQL forms to find what a vendor's trace left as plain host ranges.
"""

from __future__ import annotations

import re

#: Kernels of the collective libraries: NVIDIA NCCL, AMD RCCL, Huawei HCCL, Cambricon
#: CNCL (``ncclDevKernel_AllReduce_...``, ``void ncclKernel_...``, ``rcclKernel...``).
COLLECTIVE_KERNEL_RE = re.compile(r"^\s*(?:void\s+)?(?:nccl|rccl|hccl|cncl)", re.IGNORECASE)
#: Ascend's names for collective tasks and ops (HCCL's ``hcom_*`` ops, the task types
#: torch_npu and msprof write) that do not name the library.
COLLECTIVE_OP_RE = re.compile(
    r"^(?:hcom_|REDUCE_ASYNC|all_?reduce|all_?gather|broadcast|reduce_?scatter)", re.IGNORECASE
)
#: The collective's operation inside a kernel name (``ncclKernel_AllReduce_RING`` -> AllReduce).
COLLECTIVE_OP_IN_KERNEL_RE = re.compile(r"(?:nccl|rccl|hccl|cncl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)

#: Libraries whose calls torch.profiler wraps in host ranges named ``LIB:op``
#: (``nccl:all_reduce``, ``gloo:broadcast``).
COMM_RANGE_LIBS = ("nccl", "gloo", "hccl", "mpi", "ucc")
#: The same, as a regular expression for DuckDB's ``regexp_matches``.
COMM_RANGE_SQL_RE = "^(" + "|".join(COMM_RANGE_LIBS) + "):"

#: torch.profiler's step ranges (``ProfilerStep#N``), and the numbered step names users
#: give their own NVTX / annotation ranges (``step 12``, ``train_step#3``, ``iteration 7``).
PROFILER_STEP_PREFIX = "ProfilerStep#"
STEP_NAME_RE = re.compile(
    r"^\s*(?:ProfilerStep#|(?:train(?:ing)?[ _-]?)?step[ _#:=-]*|iter(?:ation)?[ _#:=-]*|batch[ _#:=-]*)(\d+)\s*$",
    re.IGNORECASE,
)
#: torch.profiler's DataLoader ranges (``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``).
DATALOADER_PREFIX = "enumerate(DataLoader)"


def is_collective_kernel(name: str) -> bool:
    """Whether device work named ``name`` is a collective library's kernel."""
    return COLLECTIVE_KERNEL_RE.match(name) is not None


def is_collective_op(name: str) -> bool:
    """Whether a device task or op named ``name`` is a collective (a library kernel, or
    one of Ascend's collective op and task names)."""
    return COLLECTIVE_KERNEL_RE.match(name) is not None or COLLECTIVE_OP_RE.match(name) is not None


def collective_op(kernel: str) -> str:
    """The short name of a collective from its kernel name (``ncclKernel_AllReduce_RING_LL``
    -> ``AllReduce``); the name before its parameter list otherwise."""
    m = COLLECTIVE_OP_IN_KERNEL_RE.search(kernel)
    return m.group(1) if m else kernel.split("(")[0]


def step_number(name: str | None) -> int | None:
    """The N of ``ProfilerStep#N`` (or any ``...#N`` step name), else None."""
    if not name:
        return None
    _, sep, tail = name.rpartition("#")
    if sep and tail.isdigit():
        return int(tail)
    return None
