"""Record an unmodified script: ``python -m aiprof.record.bootstrap script.py args``.

``aiprof record -- python script.py`` runs exactly that (keeping the user's
interpreter and its options). Every other Python process of the job, such as the
ranks a launcher starts (``aiprof record -- torchrun ... train.py``), is recorded by
the ``sitecustomize`` that ``aiprof record`` puts on ``PYTHONPATH``. Both read their
settings from the environment:

- ``AIPROF_RECORD=OUT``: record into ``OUT/rank<R>.aiprof`` (R from ``RANK``).
  Setting it by hand (with ``PYTHONPATH=$(python -m aiprof.record.bootstrap --site-dir)``)
  records the ranks of any launcher without the ``aiprof record`` wrapper.
- ``AIPROF_RECORD_OPTIONS``: JSON (rate, host collectors, device, schedule text...).
- ``AIPROF_RECORD_DEFER=1``: only dump raw data; ``aiprof record`` writes the profile
  after the job, so the job does not pay for it.
- ``AIPROF_RECORD_POLLER=PID``: process PID polls the system and device telemetry of
  its direct children (aiprof.record.launcher.outside); a recorded process whose parent it is
  leaves that to it, any other one polls in-process.

Which processes record: one per rank. A process whose rank (``RANK``, or "main" without
one) already has a recording in an ancestor (``AIPROF_RECORD_CLAIMED``) does not
(DataLoader workers, helper subprocesses); launchers (torchrun, deepspeed, accelerate)
do not either, their ranks do.

Steps: explicit ``prof.step()`` / :func:`aiprof.record.mark_step` calls, else every
``optimizer.step()`` of the first optimizer that steps.

Outcome: an exception, SIGINT or SIGTERM still writes the profile, marked partial;
a job that exits with a status of its own (``sys.exit(3)``) is recorded whole, not
partial (``aiprof record`` says the status). The exit status is the script's. A script
that cannot be opened is not recorded: Python's own message and status 2, as ``python
script.py`` gives them. A ``-m`` module that cannot be found is not recorded either:
Python's own one line (``python: No module named x``) and status 2, as a script that
cannot be opened (Python's own status there is 1). Only its top-level name is looked
up before the job starts, which runs none of the job's code; a missing submodule of a
package that exists (``-m pkg.nosuch``) is known only once the package has run,
recorded: the same line and status, and the profile of that import, partial.
"""

from __future__ import annotations

import os
import sys

from .. import _log
from .._log import log
from ..environment import ENV_CLAIMED, ENV_DEFER, ENV_OPTIONS, ENV_OUT, ENV_POLLER, RUNNER, SITE_DIR, launch_file
from . import wire
from .api import Profiler

TYPE_CHECKING = False  # typing.TYPE_CHECKING would import typing into every recorded job
if TYPE_CHECKING:
    from typing import Any

#: The exit status of a job whose script cannot be opened or whose -m module cannot be found.
CANNOT_START = 2

LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "deepspeed", "accelerate")


def profiler_from_env() -> Profiler:
    """A Profiler configured by the environment that ``aiprof record`` sets."""
    opts: dict[str, Any] = wire.loads(os.environ.get(ENV_OPTIONS) or "{}")
    sched = None
    if opts.get("schedule"):
        from .schedule import parse_schedule

        sched = parse_schedule(opts["schedule"])
    host = opts.get("host")
    return Profiler(
        os.environ.get(ENV_OUT) or None,
        schedule=sched,
        host=host if host is not None else ["python", "system"],
        device=opts.get("device", True),
        rate=float(opts.get("rate", 100.0)),
        record_shapes=bool(opts.get("record_shapes")),
        with_stack=bool(opts.get("with_stack")),
        profile_memory=bool(opts.get("profile_memory")),
        device_trace=bool(opts.get("device_trace", True)),
        batch_size=opts.get("batch_size"),
        defer=os.environ.get(ENV_DEFER) == "1",
        telemetry_outside=os.environ.get(ENV_POLLER) == str(os.getppid()),
        # aiprof record checked its output for an earlier recording before the job, and
        # the job's processes record into it side by side (api.Profiler's force).
        _output_checked=True,
    )


def claim() -> bool:
    """True if this process should record (one per rank); marks the claim for children."""
    key = os.environ.get("RANK", "main")
    if os.environ.get(ENV_CLAIMED) == key:
        return False
    os.environ[ENV_CLAIMED] = key
    return True


def _safe_stop(prof: Profiler, reason: str | None) -> None:
    try:
        prof.finish(partial=reason is not None, reason=reason)
    except Exception as e:
        log.warning("could not write the profile: %s: %s", type(e).__name__, e)


def _install_sigterm(prof: Profiler) -> None:
    # _signal, not signal: signal.py turns every constant into an enum at import, a
    # cost every recorded job would pay for these three calls.
    import _signal

    if _signal.getsignal(_signal.SIGTERM) != _signal.SIG_DFL:
        return  # the script (or a launcher) handles it; its handler decides

    def on_term(signum: int, frame: Any) -> None:
        # Write what ran, then die of the same signal, as the job would have.
        _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
        _safe_stop(prof, "terminated by SIGTERM")
        os.kill(os.getpid(), _signal.SIGTERM)

    try:
        _signal.signal(_signal.SIGTERM, on_term)
    except ValueError:
        pass  # not the main thread


def _start(prof: Profiler) -> bool:
    try:
        prof.start()
    except Exception as e:
        log.warning("could not start recording (%s: %s); the job runs without it", type(e).__name__, e)
        return False
    _install_sigterm(prof)
    return True


def main(argv: list[str] | None = None) -> None:
    """Run ``[-m module | -c code | script] args...`` under a profiler from the environment."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--site-dir"]:
        print(SITE_DIR)
        return
    if not args:
        sys.exit("usage: python -m aiprof.record.bootstrap [-m module | -c code | script.py] [args...]")
    _log.basic_config = True  # aiprof's format for its warnings, set when one comes
    if args[0] == "-m":
        cannot = cannot_find(args[1]) if len(args) > 1 else None
    else:
        cannot = cannot_open(args[0]) if args[0] != "-c" else None
    if cannot is not None:
        # As `python nosuch.py` (or `python -m nosuch`): its message, status 2, and
        # nothing to record.
        sys.stderr.write(cannot + "\n")
        sys.exit(CANNOT_START)
    prof = profiler_from_env()
    recording = claim() and _start(prof)
    reason: str | None = None
    try:
        _run_target(args)
    except SystemExit:
        # The job ended as it chose to, whatever its status: all it ran is recorded.
        raise
    except KeyboardInterrupt:
        reason = "interrupted (SIGINT)"
        _print_from_the_script()
        raise
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        failed: Exception | None = e
    except BaseException as e:
        reason = f"{type(e).__name__}: {e}"
        _print_from_the_script()
        raise
    else:
        failed = None
    finally:
        if recording:
            _safe_stop(prof, reason)
    if failed is not None and args[0] == "-m" and runpy_error(failed):
        # runpy could not find or run the module (`python -m` says it in one line).
        sys.stderr.write(f"{_prog()}: {failed}\n")
        sys.exit(CANNOT_START)
    if failed is not None:
        # As Python would report it, from the script's own frame: not from this
        # bootstrap's or runpy's.
        tb = script_traceback(failed.__traceback__)
        sys.excepthook(type(failed), failed.with_traceback(tb), tb)
        sys.exit(1)


def cannot_open(script: str) -> str | None:
    """Python's own message when it cannot open ``script`` (it then exits with 2), else
    None (a folder or zip file is runpy's to judge)."""
    if os.path.isdir(script):
        return None
    try:
        with open(script, "rb"):
            pass
    except OSError as e:
        return f"{_prog()}: can't open file '{os.path.abspath(script)}': [Errno {e.errno}] {e.strerror}"
    return None


def cannot_find(module: str) -> str | None:
    """Python's own message when ``-m module`` names a module that cannot be found, by
    its top-level name (looking it up runs none of the job's code), else None (runpy
    judges the rest once the package has run: :func:`runpy_error`)."""
    if not module or module.startswith("."):
        return None  # runpy's own words (empty, relative), as `python -m` says them
    top = module.partition(".")[0]
    # Here, not at the top: only -m needs it (runpy imports it anyway).
    import importlib.util

    # The path the module is run with (_run_target): the working folder first.
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(top) is not None
    except Exception:
        return None  # not a plain "not found" (or a finder that fails): runpy says what it is
    finally:
        del sys.path[0]
    if found:
        return None
    if top == module:
        return f"{_prog()}: No module named {module}"
    return f"{_prog()}: Error while finding module specification for {module!r} (ModuleNotFoundError: No module named {top!r})"


def runpy_error(e: BaseException) -> bool:
    """``e`` is runpy's own ImportError (no module, a package without ``__main__``...),
    raised from its frames, not from the job's code: `python -m` gives these as one line."""
    if not isinstance(e, ImportError):
        return False
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.basename(tb.tb_frame.f_code.co_filename) in ("runpy.py", "<frozen runpy>")


def _prog() -> str:
    """The interpreter as the job's command named it, as Python's own messages begin."""
    return str((getattr(sys, "orig_argv", None) or [sys.executable])[0])


def _print_from_the_script() -> None:
    """An exception this bootstrap lets through (Ctrl-C's KeyboardInterrupt: Python then
    prints it and ends by SIGINT, as ``python script.py`` does) is printed from the
    script's own frame, not from the runner's and this bootstrap's."""
    hook = sys.excepthook

    def trimmed(tp: Any, value: BaseException, tb: Any) -> None:
        tb = script_traceback(tb)
        hook(tp, value.with_traceback(tb), tb)

    sys.excepthook = trimmed


def script_traceback(tb: Any) -> Any:
    """``tb`` without its leading frames of aiprof's bootstrap, its runner and runpy."""
    while tb is not None and tb.tb_next is not None and launch_file(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def _run_target(args: list[str]) -> None:
    if args[0] == "-m":
        if len(args) < 2:
            sys.exit("aiprof: -m needs a module name")
        # Here, not at the top: runpy brings importlib.util, pkgutil and typing into
        # every recorded job; only -m needs it.
        import runpy

        sys.argv = [args[1], *args[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        if len(args) < 2:
            sys.exit("aiprof: -c needs a program")
        sys.argv = ["-c", *args[2:]]
        sys.path.insert(0, "")
        code = compile(args[1], "<string>", "exec")
        main_mod = sys.modules["__main__"]
        exec(code, {"__name__": "__main__", "__builtins__": main_mod.__dict__["__builtins__"]})
    else:
        script = args[0]
        sys.argv = list(args)
        # As `python script.py` does: the script's folder first on the path.
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        if script.endswith((".py", ".pyw")) and os.path.isfile(script):
            _run_source(script)
        else:  # a folder or zip with __main__.py, a .pyc: runpy knows them all
            import runpy

            runpy.run_path(script, run_name="__main__")


def _run_source(script: str) -> None:
    """Run a .py file as ``python script.py`` does: compiled from its bytes (so its
    coding line counts), in a fresh module that is ``__main__``, the one pickle and
    multiprocessing find."""
    import builtins
    import types

    with open(script, "rb") as f:
        source = f.read()
    code = compile(source, script, "exec", dont_inherit=True)
    main_mod = types.ModuleType("__main__")
    main_mod.__dict__.update(
        __file__=script, __cached__=None, __loader__=None, __package__=None, __spec__=None, __builtins__=builtins
    )
    sys.modules["__main__"] = main_mod
    exec(code, main_mod.__dict__)


def activate_from_env() -> None:
    """Called by the sitecustomize of ``aiprof record``: record this process if it is a
    rank (or the job itself) and not a launcher or a child of a recorded process."""
    if not os.environ.get(ENV_OUT):
        return
    argv = getattr(sys, "orig_argv", [])
    if "aiprof.record.bootstrap" in argv or RUNNER in argv:
        return  # bootstrap records it, knowing the outcome exactly
    if any(os.path.basename(a) in LAUNCHERS or a in LAUNCHERS for a in argv[1:3]):
        return
    if not claim():
        return
    prof = profiler_from_env()
    if not _start(prof):
        return
    import atexit

    state: dict[str, str | None] = {"reason": None}
    prev = sys.excepthook

    def excepthook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
        state["reason"] = f"{tp.__name__}: {value}" if tp is not KeyboardInterrupt else "interrupted (SIGINT)"
        prev(tp, value, tb)

    sys.excepthook = excepthook
    atexit.register(lambda: _safe_stop(prof, state["reason"]))


if __name__ == "__main__":
    main()
