"""What runs inside the recorded job: the Profiler API, its controller and collectors,
the bootstrap of unmodified scripts and the ``sitecustomize`` that ``aiprof record``
puts on the job's PYTHONPATH. Nothing here imports the store or the importers."""
