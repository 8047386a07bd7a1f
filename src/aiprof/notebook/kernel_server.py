"""``aiprof serve`` inside the kernel: the REST API and the web UI of one profile, on
127.0.0.1, in a thread, stopped with the kernel.

It is the same app as ``aiprof serve`` (:func:`aiprof.web.server.create_app`) and the
UI's own bundle; the notebook only needs its URLs. The port is picked free; the
server answers only on a loopback host name, as ``aiprof serve`` does on loopback.
"""

from __future__ import annotations

import atexit
import html
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from ..errors import AiprofError

HOST = "127.0.0.1"
#: Seconds to wait for a server to answer before giving up on it.
START_TIMEOUT_S = 15.0
#: Height of the timeline's frame in the notebook (CSS pixels).
FRAME_HEIGHT = 620

_servers: dict[tuple[Path, ...], KernelServer] = {}
_lock = threading.Lock()


class KernelServer:
    """One running server for the profiles at ``paths``."""

    def __init__(self, paths: list[Path]) -> None:
        import uvicorn

        from ..web.server import create_app

        self.paths = list(paths)
        self.app = create_app(self.paths, host=HOST)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((HOST, 0))
        sock.listen(128)
        self.port: int = sock.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}/"
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="aiprof-server", daemon=True
        )
        self._thread.start()
        self.profile_id = self._first_profile()

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url.rstrip("/") + path, timeout=START_TIMEOUT_S) as r:
            return orjson.loads(r.read())

    def _first_profile(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                listing = self._get("/api/v1/profiles")
                break
            except OSError:
                if time.monotonic() > deadline or not self._thread.is_alive():
                    self.stop()
                    raise AiprofError(f"the profile server did not start on {self.url}") from None
                time.sleep(0.05)
        ok = [p for p in listing.get("profiles", []) if p.get("status") == "ok"]
        if not ok:
            self.stop()
            raise AiprofError("the profile server found no readable profile")
        return str(ok[0]["id"])

    def page(self, page: str = "timeline") -> str:
        """The URL of one page of the UI for this profile."""
        return f"{self.url}#/{quote(self.profile_id, safe='')}/{page}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self.app.state.library.close()

    def __repr__(self) -> str:
        return f"aiprof UI of {', '.join(str(p) for p in self.paths)} at {self.url}"

    def _repr_html_(self) -> str:
        return frame_html(self)


def frame_html(server: KernelServer, page: str = "timeline") -> str:
    """The UI in a frame, with links that open it in a browser tab."""
    url = html.escape(server.page(page), quote=True)
    links = " · ".join(
        f'<a href="{html.escape(server.page(p), quote=True)}" target="_blank" rel="noopener">{p}</a>'
        for p in ("timeline", "overview", "operators", "kernels")
    )
    return (
        f'<div class="aiprof-frame" style="font-size:12px">'
        f'<div style="margin:4px 0">aiprof UI (served by this kernel on {html.escape(server.url)}, '
        f"live while it runs): {links}</div>"
        f'<iframe src="{url}" title="aiprof timeline" loading="lazy" '
        f'style="width:100%;height:{FRAME_HEIGHT}px;border:1px solid #d1d5db;border-radius:4px"></iframe></div>'
    )


def serve(paths: list[Path]) -> KernelServer:
    """The running server of ``paths`` (started on first use)."""
    key = tuple(p.resolve() for p in paths)
    with _lock:
        s = _servers.get(key)
        if s is not None and s.running:
            return s
        s = KernelServer(list(paths))
        _servers[key] = s
        return s


def stop_all() -> None:
    """Stop every server this kernel started (at exit, or unloading the extension)."""
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for s in servers:
        try:
            s.stop()
        except Exception:
            pass


atexit.register(stop_all)
