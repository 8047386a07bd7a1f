"""``aiprof serve PROFILE_OR_FOLDER...``: the REST API and the web UI."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path
from typing import Any

import click

from ..errors import AiprofError
from ..store import find_profiles


@click.command("serve")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind; others than loopback need a token."
)
@click.option("--port", default=8080, show_default=True, type=int, help="Port (0 picks a free one).")
@click.option("--token", envvar="AIPROF_TOKEN", help="Token to require (default: a new one when not on loopback).")
@click.option(
    "--warm/--no-warm", default=True, show_default=True, help="Prepare timelines and common views in the background."
)
@click.option(
    "--keep-answers",
    "keep_mb",
    default=64,
    show_default=True,
    type=click.IntRange(min=0),
    help="MiB of read answers kept, sent again without recomputing them (0: compute each one).",
)
def command(paths: tuple[Path, ...], host: str, port: int, token: str | None, warm: bool, keep_mb: int) -> None:
    """Serve profiles (or folders of profiles, or trace files) over REST and a web UI."""
    from ..importers import import_paths
    from ..web.server import LOOPBACK, create_app, new_token

    if host not in LOOPBACK and not token:
        token = new_token()
    # The port first: a taken port is one line and exit 2 before anything is imported,
    # opened or started. Failing after create_app left its warm-up thread inside DuckDB
    # while the interpreter exited, and the process died on SIGABRT.
    sock = _listen(host, port)
    with sock, tempfile.TemporaryDirectory(prefix="aiprof-serve-") as tmp:
        roots: list[Path] = []
        for i, p in enumerate(paths):
            if not p.exists():
                raise AiprofError(f"{p}: no such file or folder")
            if p.is_file():
                out, _ctx = import_paths([p], Path(tmp) / f"{p.name.split('.')[0] or 'trace'}-{i}.aiprof")
                roots.append(out)
            elif find_profiles(p) or p.is_dir():
                roots.append(p)
        app = create_app(roots, token=token, host=host, warm=warm, keep_bytes=keep_mb << 20)
        try:
            _serve(app, sock, host, token)
        finally:
            app.state.library.close()


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (not yet listening); AiprofError when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Answers go out at once (no Nagle wait on kept-alive connections); accepted
        # sockets inherit it.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise AiprofError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


def _serve(app: Any, sock: socket.socket, host: str, token: str | None) -> None:
    import uvicorn

    sock.listen(128)  # clients that connect before uvicorn runs wait in the backlog
    real_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{real_port}/"
    click.echo(
        f"aiprof: serving {len(app.state.library.scan())} profile(s) at {url}" + (f"?token={token}" if token else ""),
        nl=True,
    )
    if token:
        click.echo(f"aiprof: API token: {token} (header 'Authorization: Bearer TOKEN')")
    click.echo("aiprof: press Ctrl+C to stop", err=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30)
    uvicorn.Server(config).run(sockets=[sock])
