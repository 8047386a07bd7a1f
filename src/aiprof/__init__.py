"""aiprof: one profiler for AI workloads, whatever the accelerator."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Lazy, so `import aiprof` (and the CLI) does not pay for the recording package.
    if name in ("Profiler", "schedule", "annotate"):
        from . import record

        return getattr(record, name)
    raise AttributeError(f"module 'aiprof' has no attribute {name!r}")
