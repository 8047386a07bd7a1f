"""``aiprof serve`` on a port already taken: one line on stderr, exit 2, nothing else.

It used to bind after opening the profiles and starting the warm-up thread; the exit
on the error then left that thread inside DuckDB while the interpreter finalized, and
the process died on SIGABRT ("terminate called after throwing an instance of ''")."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiprof.importers import import_paths
from test_cli import cli

V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
V100_MEM = "kineto/V100/df_index_resolver.json.gz"


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def _assert_one_line_exit_2(*args: str | Path) -> None:
    r = cli("serve", *args)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("aiprof: error: cannot listen on 127.0.0.1:") and "in use" in lines[0]
    assert "terminate" not in r.stderr and "FATAL" not in r.stderr
    assert r.stdout == ""


def test_taken_port_folder(shared_data: Path, tmp_path: Path, taken_port: int) -> None:
    # Real profiles, with the warm-up on (the default): the case that aborted.
    import_paths([shared_data / V100], tmp_path / "r0.aiprof")
    import_paths([shared_data / V100_MEM], tmp_path / "mem.aiprof")
    for _ in range(3):  # the abort was a race: every try must be clean
        _assert_one_line_exit_2(tmp_path, "--port", str(taken_port))


def test_taken_port_trace_file(shared_data: Path, taken_port: int) -> None:
    # A trace file is imported on the fly; the port is refused before that work.
    _assert_one_line_exit_2(shared_data / V100, "--port", str(taken_port))
