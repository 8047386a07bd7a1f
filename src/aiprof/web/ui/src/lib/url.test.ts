import { describe, expect, it } from "vitest";
import { formatHash, forPage, parseHash } from "./url";

describe("url state", () => {
  it("round-trips every key", () => {
    const r = parseHash("#/r0.aiprof/timeline?t0=100&t1=900&sel=3:450:20&q=nccl&re=1");
    expect(r).toEqual({ pid: "r0.aiprof", page: "timeline", t0: 100, t1: 900, sel: { track: 3, ts: 450, dur: 20 }, q: "nccl", re: true });
    expect(parseHash(formatHash(r))).toEqual(r);
    const t = parseHash("#/p%20q/kernels?filter=name~gemm%3B+count%3E%3D2&sort=-count&offset=50");
    expect(t.pid).toBe("p q");
    expect(t.filter).toBe("name~gemm; count>=2");
    expect(t.sort).toBe("-count");
    expect(t.offset).toBe(50);
    expect(parseHash(formatHash(t))).toEqual(t);
  });
  it("defaults and drops bad values", () => {
    expect(parseHash("")).toEqual({ pid: null, page: "overview" });
    expect(parseHash("#/x/timeline?t0=9&t1=3&offset=abc&sel=zz")).toEqual({ pid: "x", page: "timeline" });
  });
  it("a page change keeps only that page's keys", () => {
    const r = parseHash("#/x/kernels?sort=-count&a=x&b=y");
    expect(forPage(r, "compare")).toEqual({ pid: "x", page: "compare", a: "x", b: "y" });
    expect(forPage(r, "steps")).toEqual({ pid: "x", page: "steps" });
  });
});
