"""aiprof: one profiler for AI workloads, whatever the accelerator."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Lazy, so `import aiprof` (and the CLI) does not pay for the recording package.
    if name in ("Profiler", "schedule", "annotate"):
        from . import record

        return getattr(record, name)
    if name == "last":
        from .notebook import last

        return last
    raise AttributeError(f"module 'aiprof' has no attribute {name!r}")


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext aiprof``: the ``%%aiprof`` and ``%aiprof`` magics (aiprof.notebook)."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    from .notebook import unload_ipython_extension as unload

    unload(ipython)
