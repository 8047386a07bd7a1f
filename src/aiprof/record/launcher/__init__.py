"""What runs in ``aiprof record``'s own process: launching the job, polling its
telemetry from outside, and reading its Python stacks from its memory."""
