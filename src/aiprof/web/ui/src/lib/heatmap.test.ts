import { describe, expect, it } from "vitest";
import { binGrid, heatColor } from "./heatmap";

describe("binGrid", () => {
  it("keeps one row per rank when they fit", () => {
    const g = binGrid([{ rank: 1, step: 5, value: 2 }, { rank: 0, step: 5, value: 1 }, { rank: 0, step: 6, value: 3 }], 10);
    expect(g.ranks).toEqual([0, 1]);
    expect(g.steps).toEqual([5, 6]);
    expect(g.bands).toEqual([[0, 0], [1, 1]]);
    expect(g.values[0]).toEqual([1, 3]);
    expect(g.values[1]![0]).toBe(2);
    expect(Number.isNaN(g.values[1]![1]!)).toBe(true);
    expect([g.min, g.max]).toEqual([1, 3]);
  });
  it("bins 1,024 ranks into bands that show their slowest rank", () => {
    const cells = [];
    for (let r = 0; r < 1024; r++) for (let s = 0; s < 4; s++) cells.push({ rank: r, step: s, value: r === 341 ? 120 : 100 + (r % 3) });
    const g = binGrid(cells, 300);
    expect(g.bands.length).toBeLessThanOrEqual(300);
    expect(g.bands[0]).toEqual([0, 3]);
    const row = Math.floor(341 / 4);
    expect(g.values[row]).toEqual([120, 120, 120, 120]);
    expect(g.argmax[row]![2]).toBe(341);
    expect(g.max).toBe(120);
  });
});

describe("heatColor", () => {
  it("runs pale (fast) to dark red (slow)", () => {
    expect(heatColor(0, 0, 10)).toBe("rgb(255,255,204)");
    expect(heatColor(5, 0, 10)).toBe("rgb(253,141,60)");
    expect(heatColor(10, 0, 10)).toBe("rgb(128,0,38)");
    expect(heatColor(99, 0, 10)).toBe("rgb(128,0,38)");
    expect(heatColor(NaN, 0, 10)).toBe("rgba(0,0,0,0)");
  });
  it("darkens as the value grows", () => {
    const lum = (s: string) => s.match(/\d+/g)!.slice(0, 3).map(Number).reduce((a, b) => a + b, 0);
    for (let v = 1; v <= 10; v++) expect(lum(heatColor(v, 0, 10))).toBeLessThan(lum(heatColor(v - 1, 0, 10)));
  });
});
