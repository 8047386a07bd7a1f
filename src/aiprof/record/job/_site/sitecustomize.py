"""Put on PYTHONPATH by ``aiprof record``: records each Python process of the job that
is a rank (see aiprof.record.bootstrap), then hands over to any other sitecustomize."""

import os
import sys


def _aiprof_activate() -> None:
    if not os.environ.get("AIPROF_RECORD"):
        return
    argv = getattr(sys, "orig_argv", ())
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "aiprof_run.py")
    if "aiprof.record.bootstrap" in argv or runner in argv:
        return  # the bootstrap records this process itself (importing it here would confuse runpy)
    try:
        from aiprof.record.job.bootstrap import activate_from_env

        activate_from_env()
    except Exception as e:
        sys.stderr.write(f"aiprof: warning: recording not started in pid {os.getpid()}: {e}\n")


def _chain() -> None:
    # A sitecustomize of the environment itself would be shadowed by this one: run it.
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        # The import system expects this module under its name when we return.
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_aiprof_activate()
_chain()
