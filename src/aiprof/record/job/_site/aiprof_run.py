"""Run by ``aiprof record``: ``python [opts] aiprof_run.py [-m module | -c code | script] args``
records the job as ``python -m aiprof.record.bootstrap ...`` does (see
aiprof.record.job.bootstrap), without the runpy import that ``-m`` costs every job."""

import os
import sys

# As under -m: the working folder first on the path, not this one (the bootstrap puts
# the script's own folder there, as ``python script.py`` does).
if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    sys.path[0] = os.getcwd()

from aiprof.record.job.bootstrap import main

main()
