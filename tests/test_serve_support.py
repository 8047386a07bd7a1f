"""A real ``aiprof serve`` process on 127.0.0.1 for the API and UI tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

URL_RE = re.compile(r"(http://\S+?:\d+/)(\?token=(\S+))?")


@contextmanager
def running_server(
    *paths: Path, host: str = "127.0.0.1", extra: tuple[str, ...] = ()
) -> Iterator[tuple[str, str | None]]:
    """Start ``python -m aiprof serve PATHS --port 0``; yield (base URL, token or None)."""
    cmd = [sys.executable, "-m", "aiprof", "serve", *map(str, paths), "--host", host, "--port", "0", *extra]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("AIPROF_TOKEN", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server printed its URL (or died)
        m = URL_RE.search(line)
        if not m:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"no URL from aiprof serve: {line!r} {err}")
        base, token = m.group(1), m.group(3)
        if host not in ("127.0.0.1", "localhost"):
            # The URL names the bound address; talk to it through loopback.
            base = re.sub(r"//[^/]+:", "//127.0.0.1:", base)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        for _ in range(500):  # bounded readiness poll
            try:
                httpx.get(base + "api/v1/openapi.json", headers=headers, timeout=5)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise AssertionError(f"aiprof serve exited: {proc.stderr.read() if proc.stderr else ''}") from None
        yield base, token
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
