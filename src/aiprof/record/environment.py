"""The contract between ``aiprof record``'s process and the recorded job: the environment
variables one sets and the other reads, where the job's ``sitecustomize`` lives, and the
line protocol of the stacks socket.

- :data:`ENV_OUT` (``AIPROF_RECORD=OUT``): record into ``OUT/rank<R>.aiprof``;
- :data:`ENV_OPTIONS`: JSON (rate, host collectors, device, schedule text...);
- :data:`ENV_DEFER` (``=1``): the job only dumps raw data, ``aiprof record`` writes the
  profile after it;
- :data:`ENV_POLLER` (a pid): that process polls the telemetry of its direct children;
- :data:`ENV_CLAIMED`: the rank an ancestor already records (set by the job);
- :data:`ENV_STACKS`: the abstract Unix socket of ``aiprof record`` that takes the job's
  offer to have its stacks read from outside (lines of JSON, :func:`read_line`).

Set by launcher/launch.py; read by job/bootstrap.py, job/api.py and
job/collectors/python_outside.py; see job/bootstrap.py for the recording they start.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

ENV_OUT = "AIPROF_RECORD"
ENV_OPTIONS = "AIPROF_RECORD_OPTIONS"
ENV_DEFER = "AIPROF_RECORD_DEFER"
ENV_CLAIMED = "AIPROF_RECORD_CLAIMED"
ENV_POLLER = "AIPROF_RECORD_POLLER"
#: The name, in the abstract namespace, of ``aiprof record``'s Unix socket that takes
#: the offers (aiprof.record.launcher.outside_stacks.StackServer).
ENV_STACKS = "AIPROF_RECORD_STACKS"
#: Seconds the job waits for ``aiprof record`` to say it reads the stacks.
ANSWER_TIMEOUT_S = 5.0
#: Put on the job's PYTHONPATH: its ``sitecustomize`` records every rank of the job.
#: A str (pathlib would cost every recorded job its import).
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "job", "_site")
#: What ``aiprof record`` runs a Python job with: ``python [opts] RUNNER script args``
#: does what ``python -m aiprof.record.bootstrap script args`` does, without the
#: runpy import that ``-m`` costs the job.
RUNNER = os.path.join(SITE_DIR, "aiprof_run.py")
#: The other files that run before a recorded job's own code: the bootstrap that
#: ``RUNNER`` calls and ``python -m aiprof.record.bootstrap``'s entry.
_LAUNCH = (
    RUNNER,
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "job", "bootstrap.py"),
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py"),
)


def launch_file(file: str) -> bool:
    """Is ``file`` (a code object's ``co_filename``) one of those that start a job
    before its own code: aiprof's runner and bootstrap, and runpy (``-m``)? A traceback
    (job/bootstrap.py) and the recorded stacks (finalizer.py) start below them."""
    return os.path.basename(file) in ("runpy.py", "<frozen runpy>") or os.path.abspath(file) in _LAUNCH


def read_line(sock: Any) -> bytes:
    """Bytes from ``sock`` up to a newline (what came before EOF if none does)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        line += chunk
    return line
