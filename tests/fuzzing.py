"""Mangled copies of real captures, and a runner that imports each one and sorts the outcome.

Shared by the fuzz tests (tests/test_fuzz_formats.py, a short budget) and the long run
(bench/fuzz.py). A seed is one real input of ../shared/data (a file, or a folder with
one of its files to mangle); a mutation turns its bytes into a damaged copy: byte flips,
cuts, splices, deleted ranges, long lines, type swaps, huge numbers, deep nesting, and
gzip tricks (trailing bytes, several members, a corrupt or cut stream). The outcome of
importing one copy is one of:

- ``imported``: a profile was written (maybe with warnings: ``Outcome.warnings`` counts
  them; a damaged copy that imports with a warning kept what it could read);
- ``clean``: aiprof's own error (the CLI prints one line and exits 2);
- ``crash``: any other exception, or :class:`~aiprof.errors.UnexpectedInputError` (an
  importer tripped on input it did not foresee: the CLI still prints one line and exits
  2, but the importer has a bug to fix);
- ``hang``: still running after the time limit.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import signal
import traceback
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiprof.errors import AiprofError, UnexpectedInputError

#: Seeds bigger than this are cut down (their first events, lines or bytes) so that one
#: mangled copy imports in milliseconds; damage deep in a big file is the cuts' job.
SEED_BYTES = 256 << 10
#: Events kept of a big JSON trace.
SEED_EVENTS = 1500
#: Inputs of the data folder that are expected outputs, not inputs.
SKIP_NAMES = ("README.md", "output_data_preprocess_aicpu_0.txt")
HUGE_NUMBERS = (2**63, -(2**63) - 1, 2**64 + 7, 10**30, 1e308, -1e308, 1.5e-320, 2**53 + 1)
DEEP = 100_000


@dataclass(frozen=True)
class Seed:
    """One real input: ``root`` (a file, or a folder) imported as ``importer``; ``target``
    is the file that mutations change (``root`` itself for a file)."""

    name: str
    root: Path
    target: Path
    importer: str
    data: bytes
    """The (possibly cut down) content of ``target``."""


def discover(data_root: Path) -> list[Seed]:
    """A seed for every input of ``data_root`` an importer recognises; for a recognised
    folder (msprof's device folder, a MindSpore output folder), one per file in it."""
    from aiprof.importers import choose

    seeds: list[Seed] = []
    claimed: set[Path] = set()
    for p in sorted(data_root.rglob("*")):
        if p.name in SKIP_NAMES or any(c in claimed for c in p.parents):
            continue
        try:
            imp = choose(p).name
        except AiprofError:
            continue
        if p.is_file():
            seeds.append(Seed(str(p.relative_to(data_root)), p, p, imp, _shrink(p)))
            continue
        files = [f for f in sorted(p.rglob("*")) if f.is_file() and f.stat().st_size and f.name not in SKIP_NAMES]
        # Files recognised alone are seeds of their own (with their own importer); the
        # folder's importer is fuzzed through the files only it reads.
        only_folder = [f for f in files if not _recognised(f)]
        if not only_folder:
            continue
        claimed.add(p)
        for f in files:
            if f in only_folder:
                seeds.append(Seed(f"{p.relative_to(data_root)}/{f.relative_to(p)}", p, f, imp, _shrink(f)))
            else:
                seeds.append(Seed(str(f.relative_to(data_root)), f, f, choose(f).name, _shrink(f)))
    return seeds


def _recognised(p: Path) -> bool:
    from aiprof.importers import choose

    try:
        choose(p)
    except AiprofError:
        return False
    return True


def _shrink(p: Path) -> bytes:
    data = p.read_bytes()
    if len(data) <= SEED_BYTES:
        return data
    gz = data[:2] == b"\x1f\x8b"
    text = gzip.decompress(data) if gz else data
    out = _first_events(text)
    if out is None:
        if p.suffix == ".sqlite":
            return data  # a database cannot be cut; flips and cuts apply to the whole
        cut = text[:SEED_BYTES]
        out = cut[: cut.rfind(b"\n") + 1] or cut
    return gzip.compress(out, 6) if gz else out


def _first_events(text: bytes) -> bytes | None:
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(doc, list):
        return json.dumps(doc[:SEED_EVENTS]).encode()
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        doc["traceEvents"] = doc["traceEvents"][:SEED_EVENTS]
        return json.dumps(doc).encode()
    return None


# -- mutations ------------------------------------------------------------------------

Mutation = Callable[[random.Random, bytes], bytes]


def flip(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 16))):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
    return bytes(b)


def cut(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def delete(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + data[i + rng.randrange(1, 4096) :]


def splice(rng: random.Random, data: bytes) -> bytes:
    i, j = rng.randrange(len(data) + 1), rng.randrange(len(data) + 1)
    piece = data[j : j + rng.randrange(1, 2048)]
    if rng.random() < 0.3:
        piece = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    return data[:i] + piece + data[i:]


def long_line(rng: random.Random, data: bytes) -> bytes:
    i = data.find(b"\n", rng.randrange(len(data) + 1))
    i = len(data) if i < 0 else i
    filler = rng.choice((b"x", b",", b"9", b" ", b"\t", b'"'))
    return data[:i] + filler * (128 << 10) + data[i:]


def dup_lines(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    return b"\n".join(lines[:i] + [lines[i]] * rng.randrange(2, 50) + lines[i + 1 :])


def swap_field(rng: random.Random, data: bytes) -> bytes:
    """A CSV/text field replaced by a value of another kind."""
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    sep = b"," if b"," in lines[i] else (b"\t" if b"\t" in lines[i] else b" ")
    fields = lines[i].split(sep)
    j = rng.randrange(len(fields))
    fields[j] = rng.choice((b"", b"-", b"nan", b"inf", b"1e999", b"-1", b"abc", b"99999999999999999999999", b'"'))
    lines[i] = sep.join(fields)
    return b"\n".join(lines)


def _json_mutation(change: Callable[[random.Random, Any], Any]) -> Mutation:
    def mutate(rng: random.Random, data: bytes) -> bytes:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return flip(rng, data)
        doc = change(rng, doc)
        if isinstance(doc, _Raw):
            return doc.text
        return json.dumps(doc, allow_nan=True).encode()

    mutate.__name__ = change.__name__
    return mutate


class _Raw:
    def __init__(self, text: bytes) -> None:
        self.text = text


def _nodes(doc: Any, limit: int = 5000) -> list[tuple[Any, Any]]:
    """(container, key) of up to ``limit`` values of ``doc``, found breadth first."""
    out: list[tuple[Any, Any]] = []
    todo = [doc]
    while todo and len(out) < limit:
        c = todo.pop()
        items = c.items() if isinstance(c, dict) else enumerate(c) if isinstance(c, list) else ()
        for k, v in items:
            out.append((c, k))
            if isinstance(v, (dict, list)):
                todo.append(v)
    return out


def _other_type(rng: random.Random, v: Any) -> Any:
    choices: list[Any] = [None, True, 0, -1, 1.5, "", "x" * 10, [], {}, [1, "a"], {"k": [None]}, 2**64, "1e999"]
    if isinstance(v, str):
        choices += [len(v), [v]]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        choices += [str(v), [v], {"v": v}]
    return rng.choice(choices)


def type_swap(rng: random.Random, doc: Any) -> Any:
    nodes = _nodes(doc)
    for _ in range(rng.choice((1, 1, 3, 10))):
        if nodes:
            c, k = rng.choice(nodes)
            c[k] = _other_type(rng, c[k])
    return doc


def huge_number(rng: random.Random, doc: Any) -> Any:
    nodes = [(c, k) for c, k in _nodes(doc) if isinstance(c[k], (int, float)) and not isinstance(c[k], bool)]
    nodes = nodes or _nodes(doc)
    for _ in range(rng.choice((1, 2, 8))):
        if nodes:
            c, k = rng.choice(nodes)
            c[k] = rng.choice(HUGE_NUMBERS)
    return doc


def deep_nesting(rng: random.Random, doc: Any) -> Any:
    nodes = _nodes(doc)
    marker = "__aiprof_fuzz_deep__"
    if nodes:
        c, k = rng.choice(nodes)
        c[k] = marker
    else:
        doc = [marker]
    opener, closer = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
    depth = rng.choice((200, 1000, DEEP))
    text = json.dumps(doc).encode().replace(f'"{marker}"'.encode(), opener * depth + b"1" + closer * depth, 1)
    return _Raw(text)


JSON_MUTATIONS: tuple[Mutation, ...] = tuple(_json_mutation(f) for f in (type_swap, huge_number, deep_nesting))
BYTE_MUTATIONS: tuple[Mutation, ...] = (flip, cut, delete, splice)
TEXT_MUTATIONS: tuple[Mutation, ...] = (long_line, dup_lines, swap_field)


def gzip_trick(rng: random.Random, plain: bytes) -> bytes:
    """A gzip of ``plain`` with a trick: trailing bytes or zeros, several members, a
    corrupt or cut compressed stream, a member that is itself gzip."""
    trick = rng.randrange(6)
    if trick == 0:
        return gzip.compress(plain) + rng.choice((b"\0" * rng.randrange(1, 5000), b"junk after the end", b"\x1f\x8b"))
    if trick == 1:
        cuts = sorted(rng.randrange(len(plain) + 1) for _ in range(rng.randrange(1, 4)))
        parts = [plain[a:b] for a, b in zip([0, *cuts], [*cuts, len(plain)])]
        return b"".join(gzip.compress(p) for p in parts)
    if trick == 2:
        z = bytearray(gzip.compress(plain))
        if len(z) > 20:
            z[rng.randrange(10, len(z) - 8)] ^= 0xFF
        return bytes(z)
    if trick == 3:
        z = gzip.compress(plain)
        return z[: rng.randrange(len(z) + 1)]
    if trick == 4:
        return gzip.compress(gzip.compress(plain))
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    return co.compress(plain) + co.flush() + gzip.compress(b"")  # an empty last member


def mutate(rng: random.Random, seed: Seed) -> tuple[str, bytes]:
    """One damaged copy of ``seed``'s target: (mutation name, bytes)."""
    data = seed.data
    gz = data[:2] == b"\x1f\x8b"
    plain = gzip.decompress(data) if gz else data
    is_json = plain.lstrip()[:1] in (b"{", b"[")
    pool: list[Mutation] = list(BYTE_MUTATIONS) + list(TEXT_MUTATIONS)
    if is_json:
        pool += list(JSON_MUTATIONS) * 2
    if gz and rng.random() < 0.25:
        return "gzip_trick", gzip_trick(rng, plain)
    if gz and rng.random() < 0.2:
        m = rng.choice(BYTE_MUTATIONS)
        return f"{m.__name__}(gz)", m(rng, data)
    m = rng.choice(pool)
    out = m(rng, plain) if plain else splice(rng, plain)
    if rng.random() < 0.15 and m not in (cut,):
        out = rng.choice(BYTE_MUTATIONS)(rng, out)
        name = f"{m.__name__}+"
    else:
        name = m.__name__
    if not gz and rng.random() < 0.03:
        return f"{name}+gzip_trick", gzip_trick(rng, out)
    return name, gzip.compress(out, 1) if gz else out


def input_at(seeds: list[Seed], i: int, rng_seed: int = 0) -> tuple[Seed, str, bytes]:
    """Mangled copy number ``i``: seeds round robin, each copy from its own random stream,
    so any one is made again from (``rng_seed``, ``i``) alone."""
    seed = seeds[i % len(seeds)]
    name, data = mutate(random.Random(rng_seed * 1_000_003 + i), seed)
    return seed, name, data


def inputs(seeds: list[Seed], n: int, rng_seed: int = 0) -> Iterator[tuple[Seed, str, bytes]]:
    """``n`` mangled copies (see :func:`input_at`)."""
    for i in range(n):
        yield input_at(seeds, i, rng_seed)


# -- running ----------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str
    """imported, clean, crash or hang."""
    detail: str = ""
    cause: str = ""
    """For a crash or hang: the exception type and where it was raised (one line), so
    that copies which crash for the same reason are counted together."""
    warnings: int = 0
    """For an import: the warnings it gave (losses the user is told of)."""


class Hang(BaseException):
    """Raised by the alarm when one import runs past its limit."""


def place(seed: Seed, data: bytes, work: Path) -> Path:
    """Write the damaged copy where the importer will read it; return what to import."""
    if seed.root == seed.target:
        p = work / seed.target.name
        p.write_bytes(data)
        return p
    dest = work / seed.root.name
    shutil.copytree(seed.root, dest)
    (dest / seed.target.relative_to(seed.root)).write_bytes(data)
    return dest


def run_one(seed: Seed, data: bytes, work: Path, limit_s: float = 10.0) -> Outcome:
    """Import one damaged copy in this process (``work`` is an empty folder)."""
    from aiprof.importers import choose, import_paths

    src = place(seed, data, work)

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang()

    prev = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        try:
            choose(src)  # the detectors read damaged input too (aiprof import without -f)
        except AiprofError:
            pass
        _, ctx = import_paths([src], work / "out.aiprof", forced=seed.importer)
        return Outcome("imported", warnings=len(ctx.warnings))
    except Hang as e:
        return Outcome("hang", f"still running after {limit_s:.0f} s\n{_tb(e)}", _where(e))
    except UnexpectedInputError as e:
        return Outcome("crash", f"{e}\n{_tb(e)}", _where(e))
    except AiprofError as e:
        return Outcome("clean", str(e))
    except Exception as e:
        return Outcome("crash", f"{type(e).__name__}: {e}\n{_tb(e)}", _where(e))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, prev)


def _where(e: BaseException) -> str:
    cause = e.__cause__ or e
    frames = traceback.extract_tb(cause.__traceback__)
    ours = [f for f in frames if "/aiprof/" in f.filename] or frames
    at = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
    return f"{type(cause).__name__} at {at}"


def _tb(e: BaseException) -> str:
    cause = e.__cause__ or e
    return "".join(traceback.format_exception(type(cause), cause, cause.__traceback__)[-6:])
