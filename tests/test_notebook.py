"""``%%aiprof`` and ``%aiprof`` in real notebooks: a real IPython kernel (ipykernel)
driven headless by nbclient, training the bundled example (examples/train_cpu.py)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiprof.advise import advise
from aiprof.analysis import run
from aiprof.notebook.flame import flame_trees
from aiprof.store import open_profile

nbformat = pytest.importorskip(
    "nbformat", reason="notebook tests need the notebook extra (pip install aiprof[notebook])"
)
nbclient = pytest.importorskip(
    "nbclient", reason="notebook tests need the notebook extra (pip install aiprof[notebook])"
)
pytest.importorskip("ipykernel", reason="notebook tests need the notebook extra (pip install aiprof[notebook])")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
V100 = "kineto/V100/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
STEPS = 30
AIPROF = [sys.executable, "-m", "aiprof"]


KERNEL = "aiprof-test-python"


@pytest.fixture(scope="module", autouse=True)
def kernelspec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A kernel of this interpreter (a "python3" kernelspec installed elsewhere on the
    machine may name another Python, without aiprof)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    old = os.environ.get("JUPYTER_PATH")
    with pytest.MonkeyPatch.context() as mp:  # module-scoped: the function fixture cannot serve
        mp.setenv("JUPYTER_PATH", str(root) + (os.pathsep + old if old else ""))
        yield


class Kernel:
    """One live kernel; ``run`` executes a cell and returns (outputs, reply status)."""

    def __init__(self, client: Any, nb: Any) -> None:
        self.client = client
        self.nb = nb
        self.replies: list[dict[str, Any]] = []
        client.on_cell_executed = lambda cell, cell_index, execute_reply: self.replies.append(execute_reply)

    def run(self, source: str) -> tuple[list[Any], str]:
        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)
        self.client.execute_cell(cell, len(self.nb.cells) - 1)
        return list(cell.outputs), str(self.replies[-1]["content"]["status"])


def html_outputs(outputs: list[Any]) -> list[str]:
    return [o["data"]["text/html"] for o in outputs if "data" in o and "text/html" in o["data"]]


def streams(outputs: list[Any], name: str = "stdout") -> str:
    return "".join(o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == name)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nb")


@pytest.fixture(scope="module")
def kernel(work: Path) -> Iterator[Kernel]:
    nb = nbformat.v4.new_notebook()
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=KERNEL, allow_errors=True, resources={"metadata": {"path": str(work)}}
    )
    with client.setup_kernel(env={**os.environ, "AIPROF_DEBUG": ""}):
        k = Kernel(client, nb)
        out, status = k.run(
            "%load_ext aiprof\n"
            f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
            "import torch; torch.set_num_threads(1)\n"
            "import train_cpu\n"
            "train_cpu.train(2, 64)  # imports and first-call costs outside the recording\n"
            f"plain = train_cpu.train({STEPS}, 64)"
        )
        assert status == "ok", out
        yield k


@pytest.fixture(scope="module")
def recorded(kernel: Kernel, work: Path) -> tuple[list[Any], str, Path]:
    """The example's training loop in a cell under ``%%aiprof --ops``."""
    prof = work / "train.aiprof"
    out, status = kernel.run(
        f"%%aiprof -o {prof} --ops\nprint('the cell prints this')\nchecksum = train_cpu.train({STEPS}, 64)\nchecksum"
    )
    return out, status, prof


def test_cell_runs_as_without_aiprof(kernel: Kernel, recorded: tuple[list[Any], str, Path]) -> None:
    out, status, _ = recorded
    assert status == "ok"
    assert streams(out) == "the cell prints this\n"
    value = [o for o in out if o["output_type"] == "execute_result"]
    assert len(value) == 1
    same, _ = kernel.run("print(checksum == plain, repr(checksum))")
    is_same, shown = streams(same).split()
    assert is_same == "True"  # profiling did not change what the cell computed
    assert value[0]["data"]["text/plain"] == shown


def test_cell_profile_has_steps_and_samples(recorded: tuple[list[Any], str, Path]) -> None:
    _, _, path = recorded
    with open_profile(path) as prof:
        steps = [r for r in run(prof, "steps").rows if r["step"] is not None]
        assert len(steps) >= STEPS
        assert prof.tables.get("samples", 0) > 0
        funcs = {r["function"] for r in run(prof, "python").rows}
        assert "train" in funcs  # the example's own loop was sampled
        # The kernel's own threads (IOPub pipes, heartbeat) are not the cell's work.
        assert not funcs & {"_watch_pipe_fd", "Heartbeat.run"}
        ops = run(prof, "operators").rows
        assert any(r["name"] == "aten::addmm" for r in ops)  # --ops recorded the operators
        assert prof.metas[0]["record"]["options"]["python_sampler"].startswith("in the kernel")
        trees = flame_trees(prof)  # the flame graph holds every sample, callers >= callees
        assert sum(root.n for _, root in trees) == prof.tables["samples"]
        todo = [root for _, root in trees]
        while todo:
            node = todo.pop()
            assert node.n >= sum(c.n for c in node.children.values())
            todo.extend(node.children.values())


def test_cell_shows_breakdown_advice_and_top_functions(recorded: tuple[list[Any], str, Path]) -> None:
    out, _, path = recorded
    pages = [h for h in html_outputs(out) if "aiprof-overview" in h]
    assert len(pages) == 1
    page = pages[0]
    assert "Step time breakdown" in page and 'class="aiprof-breakdown"' in page
    assert "aiprof-steps-chart" in page
    with open_profile(path) as prof:
        ov = [r for r in run(prof, "overview").rows if r["section"] == "breakdown" and r["step"] is None]
        items = advise(prof)
        top_py = run(prof, "python", None).rows
        accelerators = [d for d in prof.devices if d.get("type") != "cpu"]
    # kernel, memcpy, memset: null (no device work in a CPU --ops recording), named under the bar.
    shown = max((r for r in ov if r["percent"] is not None), key=lambda r: r["percent"])
    assert f"{shown['category']} " in page and f"({shown['percent']:.1f}%)" in page
    assert items, "the example's profile gives advice"
    for a in items[:3]:
        assert html.escape(a.title) in page and html.escape(a.fix) in page
    assert "Evidence:" in page and "Fix:" in page
    assert 'class="aiprof-devices"' in page
    assert ("No accelerator in this profile" in page) == (not accelerators)
    top = max(top_py, key=lambda r: r["self_samples"])
    assert 'class="aiprof-top-python"' in page and html.escape(top["function"]) in page
    flame = page[page.index('class="aiprof-flame"') :]
    # The example's loop in the cell's thread: a bar, or among the callers every sample shares.
    assert (">train</div>" in flame or "→ train" in flame) and "MainThread" in flame
    assert "<script" not in page  # plain HTML: the same in JupyterLab, VS Code and a saved file


def test_cell_timeline_is_served_by_the_kernel(recorded: tuple[list[Any], str, Path]) -> None:
    out, _, _ = recorded
    frames = [h for h in html_outputs(out) if "<iframe" in h]
    assert len(frames) == 1
    m = re.search(r'<iframe src="(http://127\.0\.0\.1:(\d+)/)#/([^/"]+)/timeline"', frames[0])
    assert m, frames[0]
    base, pid = m.group(1), m.group(3)
    with urllib.request.urlopen(base, timeout=30) as r:
        assert r.status == 200 and b"<html" in r.read().lower()
    with urllib.request.urlopen(base + "api/v1/profiles", timeout=30) as r:
        listing = json.loads(r.read())
    assert [p["id"] for p in listing["profiles"]] == [pid]
    with urllib.request.urlopen(base + f"api/v1/profiles/{pid}/timeline?width=800", timeout=60) as r:
        assert r.status == 200


def test_cell_output_in_chromium(recorded: tuple[list[Any], str, Path], tmp_path: Path) -> None:
    """The cell's outputs as a front end shows them, in real Chromium: the summary with no
    request anywhere, and the frame loading the UI from the kernel (nothing forbids it
    to be framed; it fetches only from the kernel's server)."""
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("needs Chromium at /usr/bin/chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python")
    out, _, _ = recorded
    page_file = tmp_path / "outputs.html"
    page_file.write_text(
        "<!doctype html><html><body>" + "".join(html_outputs(out)) + "</body></html>", encoding="utf-8"
    )
    base = re.search(r'<iframe src="(http://127\.0\.0\.1:\d+/)', "".join(html_outputs(out))).group(1)  # type: ignore[union-attr]
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium), args=["--headless", "--no-sandbox", "--disable-gpu"])
        pg = b.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        outside: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.on("request", lambda r: outside.append(r.url) if not r.url.startswith((base, "file:", "data:")) else None)
        pg.goto(page_file.as_uri())
        assert pg.locator(".aiprof-steps-chart > div").count() >= STEPS
        pg.locator("iframe").scroll_into_view_if_needed()  # it loads when seen (loading=lazy)
        frame = pg.frame_locator("iframe[title='aiprof timeline']")
        frame.locator("body").wait_for(timeout=60000)
        ui = next(f for f in pg.frames if f.url.startswith(base))
        # The UI drew its page in the frame (no detail of its DOM: it is rewritten apart).
        ui.wait_for_function("document.body && document.body.innerText.length > 100", timeout=60000)
        assert len(frame.locator("body").inner_text()) > 100
        b.close()
    assert not errors, errors
    assert not outside, f"fetched from outside the kernel's server: {outside}"


def test_only_the_cells_threads_are_sampled(kernel: Kernel, recorded: tuple[list[Any], str, Path], work: Path) -> None:
    prof = work / "threads.aiprof"
    out, status = kernel.run(
        "import urllib.request\n"
        "urllib.request.urlopen(_aiprof.serve().url + 'api/v1/profiles').read()  # the server's workers exist now"
    )
    assert status == "ok", out
    out, status = kernel.run(
        f"%%aiprof -o {prof} --no-timeline\n"
        "import threading, time\n"
        "def spin():\n"
        "    t = time.time()\n"
        "    while time.time() - t < 0.4:\n"
        "        pass\n"
        "names = [t.name for t in threading.enumerate()]\n"
        "w = threading.Thread(target=spin, name='user-worker'); w.start(); time.sleep(0.4); w.join()\n"
        "print(threading.main_thread().native_id, w.native_id, 'AnyIO worker thread' in names, len(names))"
    )
    assert status == "ok", out
    main_tid, user_tid, workers, n = streams(out).split()
    assert workers == "True" and int(n) >= 6  # the kernel's and the server's threads were running
    with open_profile(prof) as p:
        tids = {r["tid"] for r in p.sql("SELECT DISTINCT tid FROM samples").to_pylist()}
    assert tids == {int(main_tid), int(user_tid)}


def test_error_in_the_cell_is_the_cells(kernel: Kernel, work: Path) -> None:
    prof = work / "fails.aiprof"
    out, status = kernel.run(f"%%aiprof -o {prof} --no-timeline\nprint('started')\nraise ValueError('boom')")
    assert status == "error"  # the cell fails as it would have: Run All stops there
    errors = [o for o in out if o["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ValueError" and errors[0]["evalue"] == "boom"
    assert "magics.py" not in "".join(errors[0]["traceback"])  # the user's traceback, not aiprof's
    assert streams(out) == "started\n"
    with open_profile(prof) as p:
        assert p.metas[0]["partial"] is True
        assert "ValueError" in p.metas[0]["partial_reason"]
    shown = [h for h in html_outputs(out) if "aiprof-overview" in h]  # what was recorded is shown
    assert len(shown) == 1 and "This profile is partial" in shown[0]
    with open_profile(prof) as p:
        assert all(html.escape(w) in shown[0] for w in p.warnings)


def test_bad_option_is_one_line(kernel: Kernel) -> None:
    out, status = kernel.run("%%aiprof --rate 0\nx = 1")
    assert status == "error"
    text = streams(out, "stderr") + "".join(o.get("evalue", "") for o in out if o["output_type"] == "error")
    assert "--rate must be > 0" in text
    assert not [o for o in out if o["output_type"] == "error" and len(o["traceback"]) > 2]


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden raw folders included), with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_output_holding_a_recording_is_refused_before_the_cell_runs(kernel: Kernel, work: Path) -> None:
    out, ran = work / "again", work / "again-ran"

    def cell(force: str) -> tuple[list[Any], str]:
        # The cell's visible side effects: a line appended to a file, a model trained.
        return kernel.run(
            f"%%aiprof -o {out} --no-display{force}\n"
            f"open({str(ran)!r}, 'a').write('ran\\n')\n"
            "again = train_cpu.train(3, 64)"
        )

    first, status = cell("")
    assert status == "ok", first
    assert ran.read_text() == "ran\n"
    origin = json.loads((out / "rank0.aiprof" / "profile.json").read_text())["time_origin_ns"]
    before = _files(work / "again")
    kernel.run("again = None")
    refused, status = cell("")
    assert status == "error"
    # One line, as a bad option's (a UsageError): no traceback.
    assert refused == [
        {
            "output_type": "stream",
            "name": "stderr",
            "text": f"UsageError: {out} already holds a recording (rank0.aiprof): "
            "give another -o, or --force to replace it\n",
        }
    ]
    assert ran.read_text() == "ran\n"  # the cell's code did not run
    unchanged, _ = kernel.run("print(again)")
    assert streams(unchanged) == "None\n"
    assert _files(work / "again") == before  # the earlier profile byte for byte
    # --force replaces it: the cell runs, recorded, in its place.
    forced, status = cell(" --force")
    assert status == "ok", forced
    assert ran.read_text() == "ran\nran\n"
    assert sorted(p.name for p in out.iterdir()) == ["rank0.aiprof"]
    with open_profile(out) as p:
        assert p.metas[0]["time_origin_ns"] > origin and p.metas[0]["partial"] is False


def test_a_default_cell_output_never_holds_an_earlier_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiprof.notebook import magics
    from aiprof.record import Profiler

    monkeypatch.chdir(tmp_path)
    stamp = "20261207-120000"
    monkeypatch.setattr(magics, "time", type("T", (), {"strftime": staticmethod(lambda fmt: stamp)}))
    # A kernel killed while recording cell 5 left its raw data beside the name the
    # default gives (no profile there yet): aiprof recover finishes it.
    killed = Path("aiprof-notebook") / f"cell5-{stamp}.aiprof"
    with Profiler(output=killed, host=["system"], device=False, defer=True) as prof:
        prof.step()
    assert prof.raw_dir is not None and prof.raw_dir.is_dir() and not killed.exists()
    (killed.parent / f"cell5-{stamp}-2.aiprof").mkdir()  # and a profile of that second
    assert magics.default_output(5) == killed.parent / f"cell5-{stamp}-3.aiprof"


def test_open_a_trace_shows_its_overview(kernel: Kernel, shared_data: Path) -> None:
    trace = shared_data / V100
    out, status = kernel.run(f"%aiprof {trace} --no-timeline")
    assert status == "ok", out
    page = next(h for h in html_outputs(out) if "aiprof-overview" in h)
    r = subprocess.run(
        [*AIPROF, "report", str(trace), "--view", "overview", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(r.stdout)
    kernel_row = next(x for x in doc["rows"] if x["category"] == "kernel" and x["step"] is None)
    assert f"kernel {kernel_row['time_us'] / 1e3:.1f} ms ({kernel_row['percent']:.1f}%)" in page
    assert "Tesla V100-SXM2-32GB" in page and "5 steps" in page
    assert "No Tensor Core kernels" in page  # its top advice
    assert 'class="aiprof-top-kernels"' in page
    assert "aiprof-flame" not in page  # a Kineto trace has no Python samples


def _cli_json(*args: str | Path) -> Any:
    r = subprocess.run([*AIPROF, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_handle_rows_are_the_clis(kernel: Kernel, recorded: tuple[list[Any], str, Path], work: Path) -> None:
    _, _, path = recorded
    chart = work / "nb-trace.json"
    out, status = kernel.run(
        f"%aiprof {path} --no-display\n"
        "import json, aiprof\n"
        "h = aiprof.last()\n"
        "assert h is _aiprof\n"
        "doc = {\n"
        "  'ops': _aiprof.report('operators', sort='-host_self_us', limit=5).rows,\n"
        "  'steps': _aiprof.report('steps', filter='step>=3').rows,\n"
        "  'steps_total': _aiprof.report('steps', filter=['step>=3'], limit=2).total,\n"
        "  'python': _aiprof.report('python', filter='function~train', sort='-total_samples').rows,\n"
        "  'advice': _aiprof.advise().to_json(),\n"
        "  'sql': _aiprof.sql('SELECT count(*) AS n, count(DISTINCT tid) AS threads FROM samples').rows,\n"
        f"  'chart': str(_aiprof.timechart({str(chart)!r})),\n"
        f"  'html': str(_aiprof.html({str(work / 'nb-report.html')!r})),\n"
        "}\n"
        "print(json.dumps(doc, default=str))"
    )
    assert status == "ok", out
    doc = json.loads(streams(out))
    assert (
        doc["ops"]
        == _cli_json(
            "report", path, "--view", "operators", "--sort", "-host_self_us", "--limit", "5", "--format", "json"
        )["rows"]
    )
    steps = _cli_json("report", path, "--view", "steps", "--filter", "step>=3", "--format", "json")
    assert doc["steps"] == steps["rows"] and doc["steps_total"] == steps["total"] and len(steps["rows"]) >= STEPS - 3
    py = _cli_json(
        "report", path, "--view", "python", "--filter", "function~train", "--sort", "-total_samples", "--format", "json"
    )
    assert doc["python"] == py["rows"] and doc["python"]
    assert doc["advice"] == _cli_json("advise", path, "--format", "json")["advice"]
    q = "SELECT count(*) AS n, count(DISTINCT tid) AS threads FROM samples"
    assert doc["sql"] == _cli_json("sql", path, q, "--format", "json")["rows"]
    report = Path(doc["html"]).read_text(encoding="utf-8")
    assert "window.AIPROF_EMBED" in report and "aten::addmm" in report  # the one-file report, with its rows
    cli_chart = work / "cli-trace.json"
    subprocess.run(
        [*AIPROF, "timechart", str(path), "-o", str(cli_chart)], check=True, capture_output=True, timeout=300
    )
    mine, theirs = json.loads(chart.read_text()), json.loads(cli_chart.read_text())
    # The same events; counters of one timestamp come in no fixed order.
    ordered = [sorted(json.dumps(e, sort_keys=True) for e in d.pop("traceEvents")) for d in (mine, theirs)]
    assert ordered[0] == ordered[1] and len(ordered[0]) > 1000 and mine == theirs


def test_table_displays_and_converts(kernel: Kernel) -> None:
    out, status = kernel.run(
        "t = _aiprof.report('steps')\n"
        "import importlib.util\n"
        "print(t.to_arrow().num_rows == len(t) == len(t.rows), t.columns[:2])\n"
        "for name in ('to_pandas', 'to_polars'):\n"
        "    lib = name[3:]\n"
        "    try:\n"
        "        df = getattr(t, name)()\n"
        "        print(lib, 'rows', len(df))\n"
        "    except Exception as e:\n"
        "        print(lib, 'error', type(e).__name__, e, importlib.util.find_spec(lib) is None)\n"
        "t"
    )
    assert status == "ok", out
    lines = streams(out).splitlines()
    assert lines[0] == "True ['rank', 'step']"
    n = int(
        re.search(
            r"of (\d+) rows", next(o["data"]["text/plain"] for o in out if o["output_type"] == "execute_result")
        ).group(1)
    )  # type: ignore[union-attr]
    for line in lines[1:]:
        lib, kind, *rest = line.split(" ", 2)
        if kind == "rows":
            assert int(rest[0]) == n
        else:  # not installed: a message that says what to install
            assert rest[0].startswith("AiprofError") and f"pip install {lib}" in rest[0] and rest[0].endswith("True")
    page = html_outputs(out)[0]
    assert "<table" in page and "duration_us (µs)" in page


def test_example_notebook_runs(tmp_path: Path) -> None:
    """examples/notebook.ipynb, every cell, as a user runs it (in its own folder)."""
    import shutil

    for f in ("notebook.ipynb", "train_cpu.py"):
        shutil.copy(EXAMPLES / f, tmp_path / f)
    nb = nbformat.read(tmp_path / "notebook.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name=KERNEL, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    pages = [h for c in nb.cells if c.cell_type == "code" for h in html_outputs(c.outputs) if "aiprof-overview" in h]
    assert len(pages) == 3  # the two recorded cells and %aiprof
    recorded = sorted((tmp_path / "aiprof-notebook").glob("cell*.aiprof"), key=lambda p: int(p.name[4:].split("-")[0]))
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%aiprof")]
    assert [int(p.name[4:].split("-")[0]) for p in recorded] == counts  # named for the cell's In [N]
    with open_profile(recorded[0]) as p:
        assert len([r for r in run(p, "steps").rows if r["step"] is not None]) >= 200
    with open_profile(recorded[1]) as p:
        assert p.tables.get("events", 0) > 0 and run(p, "operators").rows
