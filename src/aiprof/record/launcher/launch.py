"""``aiprof record -- CMD``: run a command with recording enabled, then write profiles.

The job runs as a child process with the environment of aiprof.record.bootstrap; a
Python command is rewritten to ``python RUNNER ...`` (as ``-m aiprof.record.bootstrap``) with the same
interpreter and options. SIGTERM sent to aiprof is passed on to the job; SIGINT from
the terminal reaches the job directly (same process group), so aiprof itself only
waits. While the job runs, this process samples its Python stacks (by reading its
memory) and polls its system metrics and the devices (aiprof.record.launcher.outside), so the
job does not. After the job, raw folders become
profiles here, not in the job.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..environment import (
    ANSWER_TIMEOUT_S,
    ENV_CLAIMED,
    ENV_DEFER,
    ENV_OPTIONS,
    ENV_OUT,
    ENV_POLLER,
    ENV_STACKS,
    RUNNER,
    SITE_DIR,
)
from ..finalizer import RecordSummary, finalize, find_raw, warm_up
from ..rawfile import DISK_FULL, MAIN_RAW_SUFFIX

_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")
#: Interpreter options that take a value (``python -W ignore script.py``).
_OPTS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


@dataclass
class RecordResult:
    """The outcome of ``aiprof record``."""

    returncode: int
    """The job's exit status, shell-style (128 + N when killed by signal N)."""
    job_s: float
    finalize_s: float = 0.0
    summaries: list[RecordSummary] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    failed: bool = False
    """A raw folder could not become a profile (see problems)."""


def wrap_python(cmd: list[str]) -> list[str]:
    """``python [opts] script args`` -> ``python [opts] RUNNER script args``: RUNNER
    (aiprof.record.environment.RUNNER) does what ``-m aiprof.record.bootstrap`` would,
    without the runpy import that ``-m`` costs the job.

    Anything that is not a plain Python invocation is returned unchanged (its Python
    processes are recorded by the sitecustomize instead).
    """
    if not cmd or not _PYTHON_RE.match(os.path.basename(cmd[0])):
        return cmd
    i = 1
    while i < len(cmd) and cmd[i].startswith("-") and cmd[i] not in ("-m", "-c", "-"):
        i += 2 if cmd[i] in _OPTS_WITH_VALUE else 1
    if i >= len(cmd) or cmd[i] == "-":
        return cmd  # an interactive or stdin program: leave it to sitecustomize
    return [*cmd[:i], RUNNER, *cmd[i:]]


def record_env(output: Path, options: dict[str, Any], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes a job's processes record into ``output`` (without the
    allocator settings aiprof made for itself: aiprof/allocators.py)."""
    from ...allocators import job_environment

    env = job_environment(os.environ if base is None else base)
    env[ENV_OUT] = str(output)
    env[ENV_OPTIONS] = json.dumps(options)
    env[ENV_DEFER] = "1"
    env[ENV_POLLER] = str(os.getpid())
    env.pop(ENV_CLAIMED, None)
    # The package itself must be importable by the job's interpreter, and our
    # sitecustomize must come first.
    pkg_root = str(Path(__file__).resolve().parents[2])
    parts = [str(SITE_DIR), pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def _offers_stacks(options: dict[str, Any]) -> bool:
    host = options.get("host")
    return host is None or "python" in host


def _await_offer(stacks: Any, child: subprocess.Popen[bytes]) -> None:
    """Until the job's offer is answered, it exits, or it had the time to offer."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while not stacks.wait_answered(child.pid, 0.05):
        if child.poll() is not None or time.monotonic() > deadline:
            return


def run(
    cmd: list[str], output: Path, options: dict[str, Any], *, force: bool = False, made: list[Path] | None = None
) -> RecordResult:
    """Run ``cmd`` recorded into ``output``; write the profiles; return the outcome.

    The output is checked and locked first (:class:`~.output_guard.OutputLock`): an
    unwritable one, or one another recording holds, is an error before the job runs.
    So is one that holds an earlier recording (:func:`~.output_guard.check_earlier`),
    unless ``force``: then that recording's profiles and raw folders are removed first.

    The folders this run creates for the output (``made``: those the caller created for
    it, else the ones missing now) are removed again when they are left empty: a command
    that cannot run, or a job that recorded nothing, leaves no empty output behind.
    """
    from .output_guard import OutputLock, check_earlier, missing_folders, remove_empty

    lock = OutputLock(output)
    made = missing_folders(lock.folder) if made is None else made
    result = None
    try:
        with lock:
            check_earlier(output, force)
            result = _run(cmd, output, options)
            return result
    finally:
        if result is None or not result.summaries:
            remove_empty(made)


def _run(cmd: list[str], output: Path, options: dict[str, Any]) -> RecordResult:
    env = record_env(output, options)
    for stale in find_raw(output):
        shutil.rmtree(stale, ignore_errors=True)
    argv = wrap_python(cmd)
    stacks = None
    if not options.get("sample_inside") and sys.platform.startswith("linux"):
        # Every recorded process of the job offers its interpreter's layout (and a
        # launcher's ranks their telemetry) on this socket (collectors.python_outside):
        # then its stacks are sampled, and the ranks' telemetry polled, from here.
        from .outside_stacks import StackServer

        try:
            stacks = StackServer(options)
        except OSError:
            stacks = None  # no Unix sockets: each process samples itself
        else:
            env[ENV_STACKS] = stacks.name
            stacks.start()
            stacks.spill_into(output)
    # Imported before the job starts, not while it waits for its offer's answer.
    from .outside import ChildPoller

    t0 = time.perf_counter()
    try:
        child = subprocess.Popen(argv, env=env)
    except OSError as e:
        from ...errors import AiprofError

        if stacks is not None:
            stacks.stop()
        raise AiprofError(f"cannot run {cmd[0]!r}: {e.strerror}") from None
    prev_term = signal.getsignal(signal.SIGTERM)
    prev_int = signal.getsignal(signal.SIGINT)

    def forward(signum: int, frame: Any) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    # Ctrl-C reaches the whole foreground group: the job gets it from the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    poller = ChildPoller(child.pid, options)
    try:
        if stacks is not None and argv is not cmd and _offers_stacks(options):  # a Python job, wrapped
            # The job offers its layout first thing and waits for the answer: the
            # telemetry's first readings (finding the device backends) would take this
            # process's GIL from the answer. Readings before the job's recording
            # started are dropped at the merge anyway.
            _await_offer(stacks, child)
        poller.start()
        # The profile's modules load beside the job, not after it (a daemon thread: a
        # job that ends first just waits for the imports, as it would have anyway).
        threading.Thread(target=warm_up, name="aiprof-warm-up", daemon=True).start()
        rc = child.wait()
    finally:
        signal.signal(signal.SIGTERM, prev_term)
        signal.signal(signal.SIGINT, prev_int)
    job_s = time.perf_counter() - t0
    poller.stop()
    if stacks is not None:
        stacks.stop()
    code = 128 - rc if rc < 0 else rc
    result = RecordResult(returncode=code, job_s=job_s)
    # Killed by a signal: cut short, whatever the raw folder says. A non-zero exit is
    # partial only where the job's recording did not stop cleanly (finalize decides).
    reason = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else None
    t1 = time.perf_counter()
    raws = find_raw(output)
    ranked = [r for r in raws if not r.name.endswith(MAIN_RAW_SUFFIX)]
    for raw in raws:
        if ranked and raw.name.endswith(MAIN_RAW_SUFFIX):
            # The process without a rank launched the ranks: keep only theirs.
            shutil.rmtree(raw, ignore_errors=True)
            continue
        try:
            poller.merge(raw)
            if stacks is not None:
                stacks.merge(raw)
            summary = finalize(raw, partial_reason=reason, exit_code=rc if rc > 0 else None)
            result.summaries.append(summary)
            if (summary.partial_reason or "").startswith(DISK_FULL):
                # The profile is written, but not all of the run is in it: say so.
                result.failed = True
                result.problems.append(f"{raw.name}: {summary.partial_reason}; the profile holds what was written")
        except OSError as e:
            result.failed = True
            if e.errno == errno.ENOSPC:
                result.problems.append(
                    f"the disk is full: the profile of {raw.name} could not be written (its temporary files are "
                    f"removed; the raw data is kept: free some space, then run aiprof recover {output})"
                )
            else:
                result.problems.append(f"{raw.name}: the profile could not be written: {e}")
        except Exception as e:
            result.failed = True
            result.problems.append(f"{raw.name}: {type(e).__name__}: {e}")
    result.finalize_s = time.perf_counter() - t1
    return result


__all__ = ["RecordResult", "record_env", "run", "wrap_python"]
