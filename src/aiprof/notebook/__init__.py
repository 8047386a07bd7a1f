"""aiprof in Jupyter (and VS Code's notebooks): ``%load_ext aiprof``, then ``%%aiprof``
on a cell, or ``%aiprof PROFILE_OR_TRACE``. docs/notebook.md says more.

- magics.py: the two magics; options.py: their options (``aiprof record``'s own);
- cell_profiler.py: the recording of a cell (the Python sampler as a thread in the kernel);
- handle.py: the profile handle (``_aiprof``, :func:`aiprof.last`) and its verbs;
- table.py: the tables it returns; inline.py: the HTML shown after the cell, with
  flame.py: the flame graph of the Python samples;
- kernel_server.py: ``aiprof serve`` in the kernel, for the timeline in a frame.
"""

from __future__ import annotations

from typing import Any

from .handle import ProfileHandle, last


def load_ipython_extension(ipython: Any) -> None:
    from .magics import AiprofMagics

    ipython.register_magics(AiprofMagics)


def unload_ipython_extension(ipython: Any) -> None:
    from .kernel_server import stop_all

    stop_all()


__all__ = ["ProfileHandle", "last", "load_ipython_extension", "unload_ipython_extension"]
