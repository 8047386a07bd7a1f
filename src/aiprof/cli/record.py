"""``aiprof record [options] -- CMD ARGS``: profile an unmodified program."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import AiprofError

#: The options of ``aiprof`` itself, which go before the verb (cli/__init__.py).
GLOBAL_OPTIONS = ("-q", "--quiet", "-v", "-vv", "-vvv", "--verbose")


def fresh_default() -> Path:
    """``aiprof-YYYYmmdd-HHMMSS`` in the working directory, ``-2``, ``-3``... after it when
    that exists: a run without -o never lands in an earlier run's folder (two in one
    second included), and claims its folder by creating it."""
    from ..record.job.controller import claim_default_output

    return Path(claim_default_output())


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Output folder (one rankN.aiprof per rank).")
@click.option("--rate", type=float, default=100.0, show_default=True, help="Python stack sampling rate (Hz).")
@click.option("--no-python", is_flag=True, help="Do not sample Python stacks.")
@click.option(
    "--sample-inside",
    is_flag=True,
    help="Sample Python stacks from a thread in the job, not by reading its memory from aiprof's process.",
)
@click.option("--ops/--no-ops", default=False, show_default=True, help="Record framework operators (torch.profiler).")
@click.option("--no-device", is_flag=True, help="Do not poll device telemetry.")
@click.option(
    "--no-device-trace",
    is_flag=True,
    help="Without --ops: do not trace the kernels, copies and launches of an accelerator torch can use.",
)
@click.option(
    "--schedule", "schedule_text", metavar="W,WU,A[,R[,S]]", help="wait,warmup,active[,repeat[,skip_first]] steps."
)
@click.option("--shapes", is_flag=True, help="With --ops: record input shapes.")
@click.option("--stack", is_flag=True, help="With --ops: record the Python stack of each operator.")
@click.option("--memory", is_flag=True, help="With --ops: record allocator events.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    help="Samples per step: the energy view and the steps view then give joules per sample.",
)
@click.option("--force", is_flag=True, help="Replace the recording already in the output folder (else record refuses).")
@click.argument("cmd", metavar="COMMAND...", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    output: Path | None,
    rate: float,
    no_python: bool,
    sample_inside: bool,
    ops: bool,
    no_device: bool,
    no_device_trace: bool,
    schedule_text: str | None,
    shapes: bool,
    stack: bool,
    memory: bool,
    batch_size: int | None,
    force: bool,
    cmd: tuple[str, ...],
) -> None:
    """Run COMMAND and record it: Python stacks, system and device telemetry, steps,
    what an accelerator ran (kernels, copies, launches, when torch sees one), and with
    --ops the framework operators. Exits with COMMAND's exit status.

    An output folder that already holds a recording is refused before COMMAND runs,
    unless --force; without -o, each run gets a new folder aiprof-DATE-TIME[-N]."""
    from ..record.job.schedule import parse_schedule
    from ..record.launcher.launch import run

    if cmd[0].startswith("-"):
        # Options after the first one record does not know would be the command to run.
        if cmd[0] in GLOBAL_OPTIONS:
            raise AiprofError(f"{cmd[0]} is an option of aiprof itself: aiprof {cmd[0]} record ...")
        raise AiprofError(
            f"no such option of aiprof record: {cmd[0]} (the command goes last: aiprof record [OPTIONS] -- COMMAND...)"
        )
    quiet = bool(click.get_current_context().find_root().params.get("quiet"))
    if rate <= 0:
        raise AiprofError(f"--rate must be > 0, got {rate}")
    if schedule_text:
        try:
            parse_schedule(schedule_text)
        except ValueError as e:
            raise AiprofError(str(e)) from None
    host = ([] if no_python else ["python"]) + ["system"] + (["ops"] if ops else [])
    options = {
        "host": host,
        "device": not no_device,
        "device_trace": not no_device_trace,
        "rate": rate,
        "sample_inside": sample_inside,
        "schedule": schedule_text,
        "record_shapes": shapes,
        "with_stack": stack,
        "profile_memory": memory,
    }
    if batch_size is not None:
        options["batch_size"] = batch_size
    out = output or fresh_default()
    # A folder this run creates is removed again when nothing is recorded into it.
    result = run(list(cmd), out, options, force=force, made=None if output else [out])
    say = not quiet  # -q: only errors (a profile that could not be written is one)
    for s in result.summaries if say else ():
        for line in s.lines():
            click.echo(f"aiprof: {line}", err=True)
    for p in result.problems if say or result.failed else ():
        click.echo(f"aiprof: {'error' if result.failed else 'warning'}: {p}", err=True)
    if not result.summaries:
        if result.problems:
            why = "see the warnings above"
        elif result.returncode:
            why = f"the job exited with code {result.returncode} before it was recorded"
        else:
            why = "the job started no recorded Python process"
        click.echo(f"aiprof: no profile was written ({why})", err=True)
    elif say:
        click.echo(f"aiprof: job {result.job_s:.3f} s, profile written in {result.finalize_s:.3f} s", err=True)
        click.echo(f"aiprof: see more: aiprof report {out}", err=True)
    # The job's status, unless the job succeeded and its profile could not be written.
    sys.exit(2 if result.failed and result.returncode == 0 else result.returncode)
