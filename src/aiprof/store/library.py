"""Every profile below a folder, as ``aiprof serve DIR`` lists them.

- A folder holding ``profile.json`` is one profile (nothing below it is looked at).
- A folder whose children include ``rank<N>.aiprof`` profiles (what ``aiprof record
  -o OUT`` writes) is one multi-rank run, named after the folder; its rank profiles
  are not listed on their own.
- Any other folder is searched, down to :data:`MAX_DEPTH` levels; hidden folders
  (a recording's raw data) are skipped.

Names are the paths relative to DIR (``runs/mnist``, ``runs/lstm``, ``r0.aiprof``),
so they are unique and readable; DIR itself, when it is a profile or a run, is named
after itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .reader import is_profile

MAX_DEPTH = 6
_RANK = re.compile(r"^rank\d+\.aiprof$")


@dataclass(frozen=True)
class Found:
    path: Path
    """The profile folder, or the run folder holding its rank profiles."""
    name: str
    ranks: int
    """Rank profiles in a run (1 for a single profile)."""


def rank_profiles(folder: Path) -> list[Path]:
    """The ``rank<N>.aiprof`` profiles directly inside ``folder``."""
    try:
        return sorted(c for c in folder.iterdir() if _RANK.match(c.name) and is_profile(c))
    except OSError:
        return []


def is_run(folder: Path) -> bool:
    """A folder of rank profiles (``aiprof record -o OUT``'s OUT)."""
    return folder.is_dir() and not is_profile(folder) and bool(rank_profiles(folder))


def discover(root: Path) -> list[Found]:
    """Every profile and run at or below ``root`` (module doc), sorted by name."""
    out: list[Found] = []

    def walk(d: Path, depth: int) -> None:
        name = d.relative_to(root).as_posix() if d != root else root.name
        if is_profile(d):
            out.append(Found(d, name, 1))
            return
        ranks = rank_profiles(d)
        if ranks:
            out.append(Found(d, name, len(ranks)))
            return
        if depth >= MAX_DEPTH:
            return
        try:
            children = sorted(c for c in d.iterdir() if c.is_dir() and not c.name.startswith("."))
        except OSError:
            return
        for c in children:
            walk(c, depth + 1)

    if root.is_dir():
        walk(root, 0)
    return sorted(out, key=lambda f: f.name)
