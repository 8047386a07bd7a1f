"""A ``.nsys-rep`` report, turned into an SQLite export by ``nsys export`` when nsys is here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ....errors import ImportFormatError


def export_report(report: Path, out_dir: Path) -> Path:
    """Run ``nsys export --type sqlite`` on ``report`` into ``out_dir``; the SQLite path."""
    nsys = shutil.which("nsys")
    if nsys is None:
        raise ImportFormatError(
            f"{report}: an Nsight Systems report; nsys is not on PATH here, so export it first with "
            f"`nsys export --type sqlite --output {report.stem}.sqlite {report}` and import the .sqlite"
        )
    out = out_dir / (report.stem + ".sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ImportFormatError(f"{report}: nsys export failed to run ({e})") from None
    if res.returncode != 0 or not out.is_file():
        last = (res.stderr or res.stdout or "").strip().splitlines()
        raise ImportFormatError(f"{report}: nsys export failed: {last[-1] if last else f'exit {res.returncode}'}")
    return out
