import { describe, expect, it } from "vitest";
import { lastAtOrBefore, maxOf } from "./series";

describe("series", () => {
  it("finds the sample in force at t", () => {
    const ts = [10, 20, 30];
    expect(lastAtOrBefore(ts, 5)).toBe(-1);
    expect(lastAtOrBefore(ts, 10)).toBe(0);
    expect(lastAtOrBefore(ts, 29)).toBe(1);
    expect(lastAtOrBefore(ts, 99)).toBe(2);
    expect(lastAtOrBefore([], 1)).toBe(-1);
  });
  it("max ignores nulls", () => {
    expect(maxOf([null, 3, 7, null, 2])).toBe(7);
    expect(maxOf([])).toBe(0);
  });
});
