import { describe, expect, it } from "vitest";
import { MIN_WINDOW_NS, Viewport } from "./viewport";

describe("Viewport", () => {
  it("zooms around the pointer: the time under it stays put", () => {
    const v = new Viewport(0, 1000, 200, 800);
    const x = 500;
    const t = v.tOf(x);
    v.zoomAround(0.5, t);
    expect(v.dt).toBe(500);
    expect(v.xOf(t)).toBeCloseTo(x, 9);
  });
  it("never below the smallest window", () => {
    const v = new Viewport(0, 1000);
    for (let i = 0; i < 50; i++) v.zoomAround(0.5, 300);
    expect(v.dt).toBeCloseTo(MIN_WINDOW_NS, 6);
    expect(v.t0).toBeLessThanOrEqual(300);
    expect(v.t1).toBeGreaterThanOrEqual(300);
  });
  it("pans, fits and reveals", () => {
    const v = new Viewport(0, 1000);
    v.pan(0.1);
    expect([v.t0, v.t1]).toEqual([100, 1100]);
    v.fit(5000, 6000, 0.1);
    expect([v.t0, v.t1]).toEqual([4900, 6100]);
    v.reveal(10_000, 10_010);
    expect(v.dt).toBeCloseTo(1200, 6);
    expect((v.t0 + v.t1) / 2).toBe(10_005);
    v.reveal(0, 1_000_000);
    expect(v.dt).toBe(3_000_000);
  });
});
