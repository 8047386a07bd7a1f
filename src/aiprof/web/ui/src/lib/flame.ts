// Flame graph model: a call tree from interned root-first stacks and their weights,
// an icicle layout, zoom into a frame by path, and speedscope's "sandwich" (the
// callers and the callees of one function, over every place it occurs).

export interface FlameNode {
  /** Index into the frames, -1 for the root. */
  frame: number;
  total: number;
  self: number;
  children: FlameNode[];
}

export interface WeightedStack {
  stack: number;
  weight: number;
}

function child(n: FlameNode, frame: number): FlameNode {
  for (const c of n.children) if (c.frame === frame) return c;
  const c: FlameNode = { frame, total: 0, self: 0, children: [] };
  n.children.push(c);
  return c;
}

function sortTree(n: FlameNode): FlameNode {
  n.children.sort((a, b) => b.total - a.total || a.frame - b.frame);
  for (const c of n.children) sortTree(c);
  return n;
}

/** The call tree: each stack's weight added along its path (root first). */
export function callTree(stacks: number[][], rows: WeightedStack[]): FlameNode {
  const root: FlameNode = { frame: -1, total: 0, self: 0, children: [] };
  for (const r of rows) {
    const path = stacks[r.stack];
    if (!path || !path.length) continue;
    root.total += r.weight;
    let n = root;
    for (const f of path) {
      n = child(n, f);
      n.total += r.weight;
    }
    n.self += r.weight;
  }
  return sortTree(root);
}

/** The node at ``path`` (frame indexes from the root's children down), or null. */
export function nodeAt(root: FlameNode, path: number[]): FlameNode | null {
  let n: FlameNode | undefined = root;
  for (const f of path) {
    n = n.children.find((c) => c.frame === f);
    if (!n) return null;
  }
  return n;
}

export interface Bar {
  node: FlameNode;
  depth: number;
  /** Left edge and width as fractions of the graph's width. */
  x: number;
  w: number;
  path: number[];
}

/** Icicle bars of ``top``'s subtree (``top`` itself at depth 0 spans the width). */
export function icicle(top: FlameNode, topPath: number[] = [], minFrac = 0): Bar[] {
  const out: Bar[] = [];
  const total = top.total || 1;
  const visit = (n: FlameNode, depth: number, x: number, path: number[]) => {
    const w = n.total / total;
    if (w < minFrac) return;
    out.push({ node: n, depth, x, w, path });
    let cx = x;
    for (const c of n.children) {
      visit(c, depth + 1, cx, [...path, c.frame]);
      cx += c.total / total;
    }
  };
  visit(top, 0, 0, topPath);
  return out;
}

/** Self and total weight per function (recursion counted once per stack). */
export function functionTotals(stacks: number[][], rows: WeightedStack[]): Map<number, { self: number; total: number }> {
  const m = new Map<number, { self: number; total: number }>();
  for (const r of rows) {
    const path = stacks[r.stack];
    if (!path || !path.length) continue;
    for (const f of new Set(path)) {
      let e = m.get(f);
      if (!e) m.set(f, (e = { self: 0, total: 0 }));
      e.total += r.weight;
    }
    m.get(path[path.length - 1]!)!.self += r.weight;
  }
  return m;
}

/** Sandwich of ``frame``: callers (a tree rooted at the function, its children the
 * callers, their children the callers' callers) and callees (rooted at the function,
 * merged over every stack it is on, from its outermost occurrence). */
export function sandwich(stacks: number[][], rows: WeightedStack[], frame: number): { callers: FlameNode; callees: FlameNode } {
  const callerRows: number[][] = [];
  const calleeRows: number[][] = [];
  const weights: number[] = [];
  for (const r of rows) {
    const path = stacks[r.stack];
    if (!path) continue;
    const i = path.indexOf(frame);
    if (i < 0) continue;
    callerRows.push(path.slice(0, i + 1).reverse());
    calleeRows.push(path.slice(i));
    weights.push(r.weight);
  }
  const asRows = weights.map((w, i) => ({ stack: i, weight: w }));
  const callers = callTree(callerRows, asRows).children[0] ?? { frame, total: 0, self: 0, children: [] };
  const callees = callTree(calleeRows, asRows).children[0] ?? { frame, total: 0, self: 0, children: [] };
  return { callers, callees };
}
