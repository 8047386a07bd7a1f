"""The options of ``%%aiprof``: ``aiprof record``'s own (the same click options, so
their names, defaults and help follow that command), plus what only a notebook has."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import click

from ..errors import AiprofError
from ..record.job.collectors.python_stacks import DEFAULT_RATE_HZ

#: ``aiprof record`` options that mean something for a cell (not ``--sample-inside``:
#: the kernel is the process, so the stacks are always sampled from a thread in it).
RECORD_OPTIONS = (
    "output",
    "rate",
    "no_python",
    "ops",
    "no_device",
    "schedule_text",
    "shapes",
    "stack",
    "memory",
    "force",
)

_DISPLAY = [
    click.Option(["--no-display"], is_flag=True, help="Show nothing after the cell (the profile is still written)."),
    click.Option(["--no-timeline"], is_flag=True, help="No interactive timeline (no server in the kernel)."),
]


def _command(name: str, params: list[click.Parameter], doc: str) -> click.Command:
    return click.Command(name, params=params, callback=lambda **kw: kw, help=doc, add_help_option=True)


def record_command() -> click.Command:
    from ..cli.record import command as record

    params: list[click.Parameter] = [copy.copy(p) for p in record.params if p.name in RECORD_OPTIONS]
    return _command(
        "%%aiprof",
        params + [copy.copy(p) for p in _DISPLAY],
        "Record the cell with aiprof (the options of `aiprof record`), then show its overview, "
        "advice and top functions, and an interactive timeline.",
    )


def open_command() -> click.Command:
    params: list[click.Parameter] = [
        click.Argument(["paths"], nargs=-1, type=click.Path(path_type=Path)),
        *[copy.copy(p) for p in _DISPLAY],
    ]
    return _command(
        "%aiprof",
        params,
        "Open PATHS (a profile, a folder of profiles, or trace files, imported on the fly) and show its "
        "overview; with no PATHS, show the last profile again.",
    )


def parse(cmd: click.Command, line: str) -> dict[str, Any] | None:
    """The options given on the magic's line; None when ``--help`` was asked (and shown)."""
    try:
        args = shlex.split(line)
    except ValueError as e:
        raise AiprofError(f"cannot read the options: {e}") from None
    try:
        out = cmd.main(args, prog_name=cmd.name, standalone_mode=False)
    except click.ClickException as e:
        raise AiprofError(e.format_message()) from None
    if not isinstance(out, dict):
        return None
    return out


def profiler_settings(opts: dict[str, Any]) -> dict[str, Any]:
    """Profiler keyword arguments for the record options, as ``aiprof record`` maps them."""
    from ..record.job.schedule import parse_schedule

    rate = float(opts["rate"]) if opts.get("rate") is not None else DEFAULT_RATE_HZ
    if rate <= 0:
        raise AiprofError(f"--rate must be > 0, got {rate}")
    sched = None
    if opts.get("schedule_text"):
        try:
            sched = parse_schedule(opts["schedule_text"])
        except ValueError as e:
            raise AiprofError(str(e)) from None
    host = ([] if opts.get("no_python") else ["python"]) + ["system"] + (["ops"] if opts.get("ops") else [])
    return {
        "schedule": sched,
        "host": host,
        "device": not opts.get("no_device"),
        "rate": rate,
        "record_shapes": bool(opts.get("shapes")),
        "with_stack": bool(opts.get("stack")),
        "profile_memory": bool(opts.get("memory")),
        "force": bool(opts.get("force")),
    }
