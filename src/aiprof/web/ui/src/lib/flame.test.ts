import { describe, expect, it } from "vitest";
import { callTree, functionTotals, icicle, nodeAt, sandwich } from "./flame";

// Frames: 0 main, 1 a, 2 b, 3 leaf
const stacks = [
  [0, 1, 3], // main > a > leaf
  [0, 2, 3], // main > b > leaf
  [0, 1], // main > a
  [0, 1, 1, 3], // main > a > a > leaf (recursion)
];
const rows = [
  { stack: 0, weight: 30 },
  { stack: 1, weight: 10 },
  { stack: 2, weight: 5 },
  { stack: 3, weight: 5 },
];

describe("flame graph model", () => {
  it("call tree totals and selves", () => {
    const root = callTree(stacks, rows);
    expect(root.total).toBe(50);
    const main = root.children[0]!;
    expect([main.frame, main.total, main.self]).toEqual([0, 50, 0]);
    expect(main.children.map((c) => [c.frame, c.total, c.self])).toEqual([[1, 40, 5], [2, 10, 0]]);
    expect(nodeAt(root, [0, 1, 3])!.total).toBe(30);
    expect(nodeAt(root, [0, 9])).toBeNull();
  });
  it("icicle bars tile each parent, zoom re-roots", () => {
    const root = callTree(stacks, rows);
    const bars = icicle(root);
    const kids = bars.filter((b) => b.depth === 2);
    expect(kids.map((b) => [b.node.frame, b.x, b.w])).toEqual([[1, 0, 0.8], [2, 0.8, 0.2]]);
    const zoomed = icicle(nodeAt(root, [0, 1])!, [0, 1]);
    expect(zoomed[0]!.w).toBe(1);
    expect(zoomed.find((b) => b.node.frame === 3 && b.depth === 1)!.w).toBe(0.75);
    expect(zoomed[1]!.path).toEqual([0, 1, 3]);
  });
  it("function totals count recursion once", () => {
    const t = functionTotals(stacks, rows);
    expect(t.get(1)).toEqual({ self: 5, total: 40 });
    expect(t.get(3)).toEqual({ self: 45, total: 45 });
  });
  it("sandwich: callers and callees of one function", () => {
    const { callers } = sandwich(stacks, rows, 3);
    expect(callers.total).toBe(45);
    expect(callers.children.map((c) => [c.frame, c.total])).toEqual([[1, 35], [2, 10]]);
    const s = sandwich(stacks, rows, 1);
    expect(s.callees.total).toBe(40);
    expect(s.callees.children.map((c) => [c.frame, c.total])).toEqual([[3, 30], [1, 5]]);
  });
});
