"""What every rank task needs, imported once by the fork server that the LocalCluster's
workers are forked from (engine.local_config): each worker then starts with it, instead
of paying its import (about 0.3 s of CPU, measured by the first task of a fresh worker
against its second) before its first rank.

Importing this module has no other effect than the imports.
"""

from __future__ import annotations

import duckdb  # noqa: F401
import numpy.ma  # noqa: F401  (numpy imports it lazily, in a task's first calls)
import pyarrow.json
import pyarrow.parquet  # noqa: F401

from ..analysis import device_use, idle, kernels, tensor_cores  # noqa: F401
from ..analysis.derived import derived_tables  # noqa: F401
from ..importers import importers
from ..importers.kineto import columnar  # noqa: F401
from ..store.derived import has_derived, write_derived  # noqa: F401
from ..store.writer import write_meta  # noqa: F401
from .derived_mem import derive_rank  # noqa: F401
from .parallel import import_rank  # noqa: F401
from .summary import ranks_table, summarize  # noqa: F401
from .summary_mem import summarize_rank  # noqa: F401

importers()  # every importer module: a task chooses one by its input
