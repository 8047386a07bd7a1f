"""``aiprof monitor``: live device telemetry, line-compatible with ``nvidia-smi dmon``."""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import TextIO

import click

from ..errors import AiprofError

#: Backend -> the device type it reads (to open only what -i asks for).
BACKEND_TYPES = {"nvml": "cuda", "amdsmi": "rocm", "npu-smi": "npu", "cnmon": "mlu", "hl-smi": "hpu", "cpu": "cpu"}


def _stop_on_sigterm() -> None:
    # `kill` and service managers send SIGTERM: end like ^C, so a --record still commits.
    def handler(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread (embedded use): leave it
        signal.signal(signal.SIGTERM, handler)


def _interval(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if value <= 0:
        raise click.BadParameter("must be above 0 (fractions of a second are allowed)")
    return value


@click.command("monitor")
@click.option("-i", "--id", "ids", help="Devices: indices (0,1), types (cuda, cpu) or both (cuda:0).")
@click.option("-s", "--select", "groups", default="puc", show_default=True, help="Metric groups: p u c v m e t.")
@click.option(
    "-d",
    "--delay",
    "delay",
    type=float,
    default=1.0,
    show_default=True,
    callback=_interval,
    help="Seconds between samples.",
)
@click.option("-c", "--count", type=click.IntRange(min=1), help="Stop after this many samples.")
@click.option("-o", "--options", "options", help="D: date, T: time, DT: both (dmon format).")
@click.option("-f", "--filename", "filename", type=click.Path(dir_okay=False), help="Write the lines to this file.")
@click.option("--format", "fmt", type=click.Choice(["dmon", "csv", "json"]), help="Line format (default dmon).")
@click.option("--record", "record", type=click.Path(), help="Also write the samples into this profile (NAME.aiprof).")
@click.option("--serve", "serve", metavar="HOST:PORT", help="Serve Prometheus /metrics (host defaults to 127.0.0.1).")
@click.option(
    "--backend", "backend_names", help="Comma-separated backends to open (nvml, amdsmi, npu-smi, cnmon, hl-smi, cpu)."
)
def command(
    ids: str | None,
    groups: str,
    delay: float,
    count: int | None,
    options: str | None,
    filename: str | None,
    fmt: str | None,
    record: str | None,
    serve: str | None,
    backend_names: str | None,
) -> None:
    """Live device telemetry (dmon's metric groups) for every accelerator found, or the CPU.

    On a terminal: a full-screen view (q quits). Piped, or with --format/-f: one line per
    device per sample, in dmon's layout by default.
    """
    from ..devices import BACKENDS, available_backends
    from ..devices.base import METRICS
    from ..monitor.loop import Monitor, parse_selectors
    from ..render.monitor import EQUIVALENT, LineRenderer, parse_groups, parse_options

    metrics = parse_groups(groups)
    date, time_ = parse_options(options)
    selectors = parse_selectors(ids)
    listen = None
    if serve:
        from ..monitor.prom import parse_listen

        listen = parse_listen(serve)
    if backend_names:
        names = [n.strip() for n in backend_names.split(",") if n.strip()]
        bad = [n for n in names if n not in BACKENDS]
        if bad:
            raise AiprofError(f"--backend: unknown {', '.join(bad)}; known: {', '.join(BACKENDS)}")
    else:
        wanted_types = {s.device_type for s in selectors}
        names = [n for n, t in BACKEND_TYPES.items() if not wanted_types - {None} or t in wanted_types]
    backends = available_backends(names)
    if not backend_names and not {s.device_type for s in selectors} & {"cpu"}:
        # dmon shows accelerators; the CPU joins only when there is none (or when asked for).
        accel = [b for b in backends if b.device_type != "cpu"]
        if accel:
            for b in backends:
                if b.device_type == "cpu":
                    b.close()
            backends = accel
    if not backends:
        raise AiprofError("no device backend is available on this machine" + (f" for -i {ids}" if ids else ""))
    mon = Monitor(
        backends, interval_s=delay, selectors=selectors, warn=lambda m: click.echo(f"aiprof: warning: {m}", err=True)
    )
    devices = mon.devices()
    if not devices:
        mon.close()
        raise AiprofError(f"no device matches -i {ids}" if ids else "the backends found no device")
    if not backend_names and all(d.device_type == "cpu" for d in devices) and not any(s.device_type for s in selectors):
        # Not asked for: say so, or the '# gpu' header reads as if this machine had one.
        stand_ins = ", ".join(f"{METRICS[m].dmon or m} = {c}" for m, c in EQUIVALENT.items() if m in metrics)
        click.echo(
            "aiprof: no accelerator found: showing the host CPU"
            + (f" (in dmon's columns {stand_ins})" if stand_ins else ""),
            err=True,
        )
    mixed = len({d.device_type for d in devices}) > 1
    label_width = max(len(f"{d.device_type}:{d.index}" if mixed else str(d.index)) for d in devices)
    names_by_key = {(d.device_type, d.index): d.name for d in devices}

    recorder = None
    if record:
        from ..monitor.record import CounterRecorder

        recorder = CounterRecorder(record, devices, [b.name for b in mon.backends])
    server = None
    if listen:
        from ..monitor.prom import MetricsServer

        server = MetricsServer(listen[0], listen[1], devices)
        click.echo(f"aiprof: serving Prometheus metrics on http://{server.host}:{server.port}/metrics", err=True)

    _stop_on_sigterm()
    out: TextIO = sys.stdout
    if filename:
        out = open(filename, "w", encoding="utf-8")
    live = fmt is None and filename is None and sys.stdout.isatty()
    try:
        if live:
            from ..monitor.live import LiveView

            with LiveView(metrics, names_by_key) as view:
                mon._wait = view.wait
                for samples in mon.run(count):
                    if recorder:
                        recorder.add(samples)
                    if server:
                        server.update(samples)
                    view.update(samples)
        else:
            renderer = LineRenderer(
                out, metrics, fmt=fmt or "dmon", date=date, time=time_, mixed=mixed, label_width=label_width
            )
            renderer.header()
            for samples in mon.run(count):
                # Keep before showing: what a reader has seen is in the recording too.
                if recorder:
                    recorder.add(samples)
                if server:
                    server.update(samples)
                renderer.write(samples)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # A closed pipe (| head) ends the monitor; the recording still gets written.
        sys.stdout = open("/dev/null", "w")
    finally:
        mon.close()
        if server:
            server.close()
        if filename:
            out.close()
        if recorder:
            path = recorder.commit()
            click.echo(f"aiprof: recorded {path}", err=True)
