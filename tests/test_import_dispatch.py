"""The dispatcher's file-name match (importers.name_matches) says what fnmatch says, for
every importer's pattern, on the names of every real capture and on made-up names."""

from __future__ import annotations

import fnmatch
import random
from pathlib import Path

from aiprof.importers import importers, name_matches


def test_name_matches_is_fnmatchcase(shared_data: Path) -> None:
    patterns = [p for imp in importers() for p in imp.patterns]
    patterns += ["*", "**", "a*a", "a**b", "ab*ba", "x", "*.json*", "[ab]*", "a?c"]
    names = sorted({p.name for p in shared_data.rglob("*")})
    rng = random.Random(7)
    names += ["".join(rng.choice("abcx.json*_") for _ in range(rng.randint(0, 8))) for _ in range(2000)]
    names += ["", "a", "aa", "aba", "abba", "abc", "ab", "x", "trace.json", "r.pt.trace.json.gz"]
    differ = [(n, p) for n in names for p in patterns if name_matches(n, p) != fnmatch.fnmatchcase(n, p)]
    assert differ == []
    assert sum(name_matches(n, "*.json.gz") for n in names) >= 10
