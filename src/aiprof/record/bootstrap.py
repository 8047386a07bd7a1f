"""The entry point ``python -m aiprof.record.bootstrap script.py args`` (what ``aiprof
record`` runs, and what its users may run by hand): the recording it starts lives in
:mod:`aiprof.record.job.bootstrap`."""

from .job.bootstrap import main

if __name__ == "__main__":
    main()
