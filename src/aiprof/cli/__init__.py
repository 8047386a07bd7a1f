"""The ``aiprof`` command line: one thin module per verb over the library.

Verbs are loaded lazily from :data:`VERBS` (name -> "module:attribute"), so
``aiprof --help`` stays fast and a verb's heavy imports cost only its own users.
Adding a verb is one module and one line here.

Errors: an :class:`~aiprof.errors.AiprofError` prints one line on stderr and exits 2;
anything unexpected prints one line too (set ``AIPROF_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..errors import AiprofError

VERBS: dict[str, str] = {
    "monitor": "aiprof.cli.monitor:command",
    "import": "aiprof.cli.import_cmd:command",
    "record": "aiprof.cli.record:command",
    "recover": "aiprof.cli.recover:command",
    "report": "aiprof.cli.report:command",
    "sql": "aiprof.cli.sql:command",
    "diff": "aiprof.cli.diff:command",
    "advise": "aiprof.cli.advise:command",
    "serve": "aiprof.cli.serve:command",
    "timechart": "aiprof.cli.timechart:command",
    "export": "aiprof.cli.export:command",
}

#: Each verb's help, first sentence, as ``aiprof --help`` lists it without importing
#: the verbs (their imports cost ~0.5 s; tests/test_cli_start.py holds it equal to
#: each command's own help).
SUMMARIES: dict[str, str] = {
    "monitor": "Live device telemetry (dmon's metric groups) for every accelerator found, or the CPU.",
    "import": "Import foreign profiler output (Kineto JSON, ...) into a profile.",
    "record": (
        "Run COMMAND and record it: Python stacks, system and device telemetry, steps, what an accelerator ran "
        "(kernels, copies, launches, when torch sees one), and with --ops the framework operators."
    ),
    "recover": "Write the profiles of the raw recordings in FOLDER (after aiprof record was killed).",
    "report": "Summarise PROFILE (a .aiprof folder, a folder of them, or a trace file).",
    "sql": "Run QUERY over the tables events, counters, memory, samples, frames, tracks, kernel_metrics.",
    "diff": (
        "Compare run B against run A (or a folder of baseline runs): per-step figures with a statistical verdict, "
        "then the largest changes by name."
    ),
    "advise": "Optimization advice for PROFILE (a profile folder, a folder of them, or a trace file).",
    "serve": "Serve profiles (or folders of profiles, or trace files) over REST and a web UI.",
    "timechart": "Write PROFILE as Chrome Trace Event JSON (Perfetto, chrome://tracing).",
    "export": "Export PROFILE's data in another tool's format (speedscope: Python stack samples).",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = VERBS.get(cmd_name)
        if target is None:
            return None
        mod, _, attr = target.partition(":")
        cmd = getattr(importlib.import_module(mod), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, from :data:`SUMMARIES` instead of importing every verb."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, click.Command(n, help=SUMMARIES[n]).get_short_help_str(limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aiprof")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def cli(verbose: int, quiet: bool) -> None:
    """aiprof: record, import, analyse and show AI workload profiles."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="aiprof: %(levelname)s: %(message)s", stream=sys.stderr, force=True)


def verb(args: list[str]) -> str | None:
    """The verb of a command line (the group's own options take no values)."""
    return next((a for a in args if not a.startswith("-")), None)


#: The temporary file an output is written to before it takes its name (atomic writes:
#: ``.NAME.tmp-PID``, the store's ``.NAME.tmp-PID-NS``).
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp-\d+(?:-\d+)?$")


def as_named(filename: str) -> str:
    """``filename`` as the user named it: an atomic write's temporary file is the output's
    own path (an error on it is one on what the user asked for)."""
    path = Path(filename)
    m = _TEMP_NAME.match(path.name)
    return str(path.with_name(m.group("name"))) if m else filename


def main(argv: list[str] | None = None) -> Any:
    """Console entry point."""
    from ..allocators import use_lean

    use_lean(importing=verb(sys.argv[1:] if argv is None else argv) == "import")
    try:
        return cli.main(args=argv, prog_name="aiprof", standalone_mode=True)
    except AiprofError as e:
        click.echo(f"aiprof: error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("aiprof: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as e:
        # The machine's answer (a full disk, a permission), not aiprof's bug: one line.
        where = f": {as_named(str(e.filename))}" if e.filename else ""
        click.echo(f"aiprof: error: {e.strerror or e}{where}", err=True)
        sys.exit(2)
    except Exception as e:
        if os.environ.get("AIPROF_DEBUG"):
            raise
        click.echo(f"aiprof: internal error: {type(e).__name__}: {e} (set AIPROF_DEBUG=1 for details)", err=True)
        sys.exit(1)
