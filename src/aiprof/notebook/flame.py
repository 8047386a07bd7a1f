"""A flame graph (icicle) of the Python stack samples, as plain HTML for the notebook.

Callers on top, callees below, each bar as wide as the share of samples with that
function on the stack at that place (the speedscope "left heavy" layout: children in
order of weight). One tree per sampled thread. The chain of callers that every sample
of a thread shares (a kernel's ``ipykernel_launcher`` down to the cell) is folded into
one line above the graph. Hovering a bar gives its numbers.
"""

from __future__ import annotations

import colorsys
import html
import zlib
from dataclasses import dataclass, field

from ..store import Profile

#: Bars under this share of the thread's samples are not drawn (their time stays in
#: their caller's bar, which is as wide as all its callees together).
MIN_SHARE = 0.005
#: Rows drawn below the folded callers.
MAX_DEPTH = 40
#: Bars drawn in all; past that the smallest are left to their callers.
MAX_BARS = 1500
ROW_PX = 17
#: Folded callers named at each end of the chain.
CHAIN_ENDS = 3

esc = html.escape


@dataclass
class Node:
    function: str
    file: str
    n: int = 0
    children: dict[tuple[str, str], Node] = field(default_factory=dict)

    def child(self, key: tuple[str, str]) -> Node:
        c = self.children.get(key)
        if c is None:
            c = self.children[key] = Node(key[0], key[1])
        return c


def flame_trees(profile: Profile) -> list[tuple[str, Node]]:
    """(thread label, tree of its samples) for each sampled thread, most samples first."""
    if not profile.tables.get("samples"):
        return []
    leaves = profile.sql(
        "SELECT rank, pid, tid, stack_id, count(*) AS n FROM samples GROUP BY ALL ORDER BY ALL"
    ).to_pylist()
    frames = profile.sql("SELECT rank, frame_id, parent, function, file FROM frames").to_pylist()
    parent = {(f["rank"], f["frame_id"]): f["parent"] for f in frames}
    key = {(f["rank"], f["frame_id"]): (str(f["function"]), str(f["file"])) for f in frames}
    names: dict[tuple[int, int, int], str] = {}
    if profile.tables.get("tracks"):
        for t in profile.sql(
            "SELECT rank, pid, tid, thread_name FROM tracks WHERE thread_name IS NOT NULL AND device_type = 'cpu'"
        ).to_pylist():
            names[(t["rank"], t["pid"], t["tid"])] = str(t["thread_name"])
    roots: dict[tuple[int, int, int], Node] = {}
    for s in leaves:
        thread = (s["rank"], s["pid"], s["tid"])
        root = roots.get(thread)
        if root is None:
            root = roots[thread] = Node("", "")
        path: list[tuple[str, str]] = []
        node_id = s["stack_id"]
        seen = 0
        while node_id is not None and node_id >= 0 and (s["rank"], node_id) in key and seen < 10_000:
            path.append(key[(s["rank"], node_id)])
            node_id = parent.get((s["rank"], node_id))
            seen += 1
        n = int(s["n"])
        root.n += n
        node = root
        for k in reversed(path):
            node = node.child(k)
            node.n += n
    ranks = {t[0] for t in roots}
    out = []
    for thread, root in sorted(roots.items(), key=lambda kv: -kv[1].n):
        rank, _pid, tid = thread
        label = f"thread {names.get(thread, '')} ({tid})".replace("thread  (", "thread (")
        out.append((f"rank {rank} · {label}" if len(ranks) > 1 else label, root))
    return out


def _color(file: str) -> str:
    # Hex, not hsl(): JupyterLab's sanitizer (untrusted notebooks: one run headless, or
    # opened from someone else) keeps only hex, rgb(a) and named colors in a style.
    hue = zlib.crc32(file.encode()) % 360
    r, g, b = colorsys.hls_to_rgb(hue / 360, 0.78, 0.55)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _fold(root: Node) -> tuple[list[str], Node]:
    """The callers every sample shares, and the node below them."""
    chain: list[str] = []
    node = root
    while len(node.children) == 1:
        only = next(iter(node.children.values()))
        if only.n != node.n or not only.children:
            break
        chain.append(only.function)
        node = only
    return chain, node


def _bars(node: Node, total: int, depth: int, budget: list[int]) -> str:
    kids = sorted((c for c in node.children.values() if c.n >= MIN_SHARE * total), key=lambda c: -c.n)
    if depth >= MAX_DEPTH or not kids:
        return ""
    parts = []
    for c in kids:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        share = 100.0 * c.n / total
        tip = f"{c.function} ({c.file}): {c.n:,} samples, {share:.1f}% of the thread"
        parts.append(
            f'<div style="flex:0 0 {100.0 * c.n / node.n:.4f}%;min-width:0">'
            f'<div title="{esc(tip, quote=True)}" style="height:{ROW_PX - 1}px;margin:0 1px 1px 0;'
            f"background:{_color(c.file)};color:#111;font-size:11px;line-height:{ROW_PX - 1}px;"
            f'padding:0 3px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis">{esc(c.function)}</div>'
            f"{_bars(c, total, depth + 1, budget)}</div>"
        )
    return f'<div style="display:flex">{"".join(parts)}</div>'


def flame_html(profile: Profile) -> str:
    """The flame graphs of the sampled threads ('' when the profile has no samples)."""
    trees = flame_trees(profile)
    if not trees:
        return ""
    out = []
    budget = [MAX_BARS]
    for label, root in trees:
        chain, top = _fold(root)
        head = f"{label}: {root.n:,} samples"
        if chain:
            shown = chain if len(chain) <= 2 * CHAIN_ENDS else [*chain[:CHAIN_ENDS], "…", *chain[-CHAIN_ENDS:]]
            head += f" · called from {' → '.join(shown)} ({len(chain)} frames every sample shares)"
        out.append(
            f'<div class="aiprof-flame-thread" style="margin:6px 0 10px">'
            f'<div style="font-size:12px;opacity:.75;margin-bottom:2px">{esc(head)}</div>'
            f'<div style="max-width:1100px">{_bars(top, root.n, 0, budget)}</div></div>'
        )
    if budget[0] <= 0:
        out.append(f'<div style="font-size:12px;opacity:.75">only the {MAX_BARS} widest bars are drawn</div>')
    return '<div class="aiprof-flame">' + "".join(out) + "</div>"
