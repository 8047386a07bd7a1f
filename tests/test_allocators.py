"""aiprof's own processes choose lean allocators (aiprof/allocators.py); a recorded job
keeps its own."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from aiprof import allocators
from aiprof.cli import verb

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "kineto" / "V100" / "df_index_resolver.json.gz"
PY = sys.executable
LEAN_ENV = (*allocators.LEAN, *allocators.IMPORTING)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the lean allocators are Linux's")
x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="pyarrow bundles jemalloc on x86-64 Linux")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LEAN_ENV}
    env.update(extra)
    return env


def python(code: str, **extra: str) -> str:
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env(**extra))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@x86_64
def test_use_lean_gives_arrow_the_jemalloc_pool_before_it_loads_and_an_import_duckdbs_decay() -> None:
    code = (
        "import sys\n"
        "from aiprof.allocators import use_lean\n"
        "print(sorted(use_lean(importing=sys.argv[1] == 'import')))\n"
        "import os, pyarrow as pa\n"
        "print(pa.default_memory_pool().backend_name, os.environ.get('DUCKDB_JE_MALLOC_CONF'))\n"
    )

    def run(verb: str) -> list[str]:
        done = subprocess.run([PY, "-c", code, verb], capture_output=True, text=True, timeout=120, env=clean_env())
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert run("import") == [
        "['ARROW_DEFAULT_MEMORY_POOL', 'DUCKDB_JE_MALLOC_CONF']",
        "jemalloc dirty_decay_ms:0,muzzy_decay_ms:0",
    ]
    assert run("report") == ["['ARROW_DEFAULT_MEMORY_POOL']", "jemalloc None"]


@x86_64
def test_use_lean_keeps_the_users_choice_and_does_nothing_once_a_library_is_loaded() -> None:
    code = (
        "from aiprof.allocators import use_lean\n"
        "print(use_lean(importing=True))\n"
        "import pyarrow as pa\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    assert python(code, ARROW_DEFAULT_MEMORY_POOL="system").splitlines() == ["['DUCKDB_JE_MALLOC_CONF']", "system"]
    late = (
        "import duckdb\nfrom aiprof.allocators import use_lean\nimport os\n"
        "print(use_lean(importing=True), 'DUCKDB_JE_MALLOC_CONF' in os.environ)"
    )
    assert python(late) == "[] False"


@pytest.fixture
def unloaded() -> Iterator[None]:
    """As if pyarrow and duckdb were not loaded yet, and use_lean had set nothing."""
    saved = dict(allocators._set_here)
    allocators._set_here.clear()
    modules: dict[str, ModuleType] = {m: sys.modules.pop(m) for m in ("pyarrow", "duckdb") if m in sys.modules}
    try:
        yield
    finally:
        sys.modules.update(modules)
        allocators._set_here.clear()
        allocators._set_here.update(saved)


def test_arm_linux_gets_duckdbs_setting_but_not_a_pool_its_pyarrow_lacks(
    unloaded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    env: dict[str, str] = {}
    assert allocators.use_lean(env, importing=True) == ["DUCKDB_JE_MALLOC_CONF"]
    assert allocators.use_lean({}) == []


def test_job_environment_takes_back_only_what_use_lean_set(unloaded: None) -> None:
    env: dict[str, str] = {"ARROW_DEFAULT_MEMORY_POOL": "system", "PATH": "/bin"}
    assert allocators.use_lean(env, importing=True) == ["DUCKDB_JE_MALLOC_CONF"]
    assert env["DUCKDB_JE_MALLOC_CONF"] == allocators.IMPORTING["DUCKDB_JE_MALLOC_CONF"]
    assert allocators.job_environment(env) == {"ARROW_DEFAULT_MEMORY_POOL": "system", "PATH": "/bin"}


def test_only_the_import_verb_imports() -> None:
    assert verb(["-v", "-v", "import", "t.json", "-o", "p"]) == "import"
    assert verb(["-q", "report", "import.aiprof"]) == "report"
    assert verb(["--version"]) is None


@x86_64
def test_the_import_command_runs_on_the_lean_allocators(tmp_path: Path) -> None:
    out = tmp_path / "p.aiprof"
    done = subprocess.run(
        [PY, "-m", "aiprof", "-v", "-v", "import", str(TRACE), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "memory: Arrow's memory pool jemalloc, DuckDB's jemalloc dirty_decay_ms:0,muzzy_decay_ms:0" in done.stderr
    assert (out / "profile.json").is_file()


@x86_64
def test_a_recorded_job_keeps_the_allocators_it_would_have_had(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(
        "import os\n"
        "print('pool', os.environ.get('ARROW_DEFAULT_MEMORY_POOL'), os.environ.get('DUCKDB_JE_MALLOC_CONF'))\n"
    )

    def record(**extra: str) -> str:
        done = subprocess.run(
            [PY, "-m", "aiprof", "record", "-o", str(tmp_path / f"run{len(extra)}"), "--", PY, str(job)],
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env(**extra),
        )
        assert done.returncode == 0, done.stderr
        return next(line for line in done.stdout.splitlines() if line.startswith("pool"))

    assert record() == "pool None None"
    assert record(ARROW_DEFAULT_MEMORY_POOL="system") == "pool system None"


@x86_64
def test_the_dask_workers_of_an_import_have_its_allocators() -> None:
    code = (
        "from aiprof.allocators import use_lean\n"
        "use_lean(importing=True)\n"
        "from aiprof.cluster.engine import Where, client\n"
        "def probe():\n"
        "    import os, pyarrow as pa\n"
        "    return pa.default_memory_pool().backend_name, os.environ.get('DUCKDB_JE_MALLOC_CONF')\n"
        "if __name__ == '__main__':\n"
        "    with client(Where('local', None, 2)) as c:\n"
        "        for got in sorted(c.run(probe).values()):\n"
        "            print(*got)\n"
    )
    assert python(code).splitlines() == ["jemalloc dirty_decay_ms:0,muzzy_decay_ms:0"] * 2
