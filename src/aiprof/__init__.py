"""aiprof: one profiler for AI workloads, whatever the accelerator."""

__version__ = "0.1.0"
