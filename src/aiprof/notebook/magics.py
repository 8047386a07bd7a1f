"""``%%aiprof`` (record a cell) and ``%aiprof PATH`` (open a profile or a trace)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ..errors import AiprofError
from . import handle as handles
from .options import open_command, parse, profiler_settings, record_command

#: Where a cell's profile goes when ``-o`` is not given (under the working directory).
DEFAULT_FOLDER = "aiprof-notebook"


def default_output(cell: int | None) -> Path:
    """``aiprof-notebook/cellN-YYYYmmdd-HHMMSS.aiprof``, never one that exists or that
    the raw folders of a killed recording are beside (an output holding an earlier
    recording is refused: a default one never is)."""
    from ..record.launcher.output_guard import earlier_recording

    base = Path(DEFAULT_FOLDER) / f"cell{cell or 0}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = base.with_name(base.name + ".aiprof"), 2
    while out.exists() or any(earlier_recording(out)):
        out, n = base.with_name(f"{base.name}-{n}.aiprof"), n + 1
    return out


def _needs_await(shell: Any, cell: str) -> bool:
    try:
        transformed = shell.transform_cell(cell)
    except Exception:
        return False  # run_cell shows the cell's own error
    return bool(shell.should_run_async(cell, transformed_cell=transformed, preprocessing_exc_tuple=None))


@magics_class
class AiprofMagics(Magics):
    @line_cell_magic
    def aiprof(self, line: str, cell: str | None = None) -> None:
        """%%aiprof [options]: record the cell with aiprof, then show its overview, the
        top advice, the top functions and an interactive timeline; the profile is left
        in ``_aiprof`` (and ``aiprof.last()``). Options: those of ``aiprof record``
        (``%%aiprof --help`` lists them).

        %aiprof PATH...: open a profile, a folder of profiles or trace files (imported
        on the fly) and show the same; ``%aiprof`` alone shows the last one again."""
        try:
            if cell is None:
                self._open(line)
            else:
                self._record(line, cell)
        except AiprofError as e:
            raise UsageError(str(e)) from None

    # -- %aiprof PATH -------------------------------------------------------------------

    def _open(self, line: str) -> None:
        opts = parse(open_command(), line)
        if opts is None:
            return
        paths: tuple[Path, ...] = opts["paths"]
        h = handles.open_handle(list(paths)) if paths else handles.last()
        for note in h.notes if paths else []:
            print(f"aiprof: {note}", file=sys.stderr)
        self._publish(h)
        if not opts["no_display"]:
            h.show(timeline=not opts["no_timeline"])

    # -- %%aiprof ----------------------------------------------------------------------

    def _record(self, line: str, cell: str) -> None:
        from .cell_profiler import CellProfiler

        opts = parse(record_command(), line)
        if opts is None:
            return
        settings = profiler_settings(opts)
        shell: Any = self.shell
        if _needs_await(shell, cell):
            raise AiprofError("%%aiprof cannot record a cell with top-level await: call the coroutine from a function")
        count = shell.execution_count - 1  # IPython counts the cell before running it: In [count]
        out = opts["output"] or default_output(count)
        # An output holding an earlier recording is refused here, before the cell runs,
        # unless --force (Profiler's force: output_guard.check_earlier, one line).
        prof = CellProfiler(out, **settings)
        outer = shell.displayhook.exec_result
        prof.start()
        result = None
        try:
            result = shell.run_cell(cell, store_history=False)
        finally:
            err = None if result is None else (result.error_before_exec or result.error_in_exec)
            failed = result is None or err is not None
            reason = f"{type(err).__name__} raised in the cell" if err is not None else None
            path = prof.stop(partial=failed, reason=reason or ("the cell was interrupted" if failed else None))
            shell.displayhook.exec_result = outer
        if err is not None and outer is not None:
            # The cell's error is the cell's: the traceback was shown as without aiprof,
            # and the cell fails as it would have (Run All stops there).
            outer.error_in_exec = err
        if path is None:
            return
        # What went wrong while recording (a collector that stopped) is in the profile's warnings.
        h = handles.ProfileHandle([path], label=f"cell [{count}] · {path.name}")
        self._publish(h)
        if not opts["no_display"]:
            try:
                h.show(timeline=not opts["no_timeline"])
            except Exception as e:  # showing the profile never breaks the cell
                print(f"aiprof: the profile is in {path}, but it could not be shown: {e}", file=sys.stderr)

    def _publish(self, h: handles.ProfileHandle) -> None:
        handles.set_last(h)
        shell: Any = self.shell
        shell.user_ns["_aiprof"] = h
