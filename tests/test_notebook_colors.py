"""The notebook's HTML uses only colors that JupyterLab's sanitizer keeps: in an
untrusted notebook (run headless, or opened from a colleague) an hsl() background is
dropped and the flame graph's bars lose their colors."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from aiprof.notebook.flame import flame_html
from aiprof.store import open_profile
from test_cli import cli

#: The color forms of JupyterLab's sanitizer (@jupyterlab/apputils sanitizer: hex, name, rgb, rgba).
KEPT = re.compile(r"#[0-9a-f]+|[a-z]+|rgba?\([\d\s.,%]+\)")


def test_flame_graph_colors_survive_the_sanitizer(tmp_path: Path) -> None:
    job = "import time\nt = time.time()\nwhile time.time() - t < 1.0:\n    sum(range(1000))\n"
    r = cli("record", "-o", tmp_path / "run", "--", sys.executable, "-c", job)
    assert r.returncode == 0, r.stderr
    with open_profile(tmp_path / "run") as prof:
        page = flame_html(prof)
    colors = re.findall(r"background:([^;\"]+)", page)
    assert colors, page[:500]
    assert all(KEPT.fullmatch(c.strip()) for c in colors), sorted(set(colors))[:5]
