import { describe, expect, it } from "vitest";
import { columnUnit, fmtBytes, fmtNs, fmtNum, fmtTick, fmtValue, niceStep, rulerTicks } from "./format";

describe("fmtNs", () => {
  it("picks the unit by size, 3 significant digits", () => {
    expect(fmtNs(7_701_771_200)).toBe("7.70 s");
    expect(fmtNs(12_345_678)).toBe("12.3 ms");
    expect(fmtNs(845)).toBe("845 ns");
    expect(fmtNs(1500)).toBe("1.50 µs");
    expect(fmtNs(0)).toBe("0");
    expect(fmtNs(null)).toBe("");
  });
});

describe("fmtBytes and fmtValue", () => {
  it("binary units", () => {
    expect(fmtBytes(2_662_000_000)).toBe("2.48 GiB");
    expect(fmtBytes(512)).toBe("512 B");
    expect(fmtBytes(1536)).toBe("1.50 KiB");
  });
  it("follows the column unit", () => {
    expect(fmtValue(7_701_771.2, "µs")).toBe("7.70 s");
    expect(fmtValue(12.5, "%")).toBe("12.5 %");
    expect(fmtValue(1_410_000_000, "Hz")).toBe("1.41 GHz");
    expect(fmtValue(300, "W")).toBe("300 W");
    expect(fmtValue("gemm", "µs")).toBe("gemm");
    expect(fmtNum(1234567)).toBe("1,234,567");
  });
  it("counters: byte units and rates, tiny values without an e", () => {
    expect(fmtValue(1536, "MiB")).toBe("1.50 GiB");
    expect(fmtValue(3 * 1024 * 1024, "B/s")).toBe("3.00 MiB/s");
    expect(fmtValue(1.42e-11, "s")).toBe("0.0142 ns");
    expect(fmtValue(1.42e-11, "J")).toBe("14.2 pJ");
    expect(fmtValue(0.25, "W")).toBe("250 mW");
    expect(fmtNum(1.42e-11)).toBe("1.42×10⁻¹¹");
    expect(fmtValue(0.0000202, "%")).toBe("< 0.01 %");
    for (const v of [1.42e-11, 3e-7, 0.0005]) expect(fmtNum(v)).not.toMatch(/e/);
    // Prefixed units scale from their base; units without prefixes print as they come.
    expect(fmtValue(0.5, "MB")).toBe("500 kB");
    expect(fmtValue(40000, "MB")).toBe("40.0 GB");
    expect(fmtValue(1410, "MHz")).toBe("1.41 GHz");
    expect(fmtValue(1200, "MB/s")).toBe("1.20 GB/s");
    expect(fmtValue(38, "C")).toBe("38.0 C");
    expect(fmtValue(0.5, "errors")).toBe("0.500 errors");
  });
});

describe("ruler", () => {
  it("nice steps", () => {
    expect(niceStep(3)).toBe(5);
    expect(niceStep(11)).toBe(20);
    expect(niceStep(1000)).toBe(1000);
  });
  it("labels differ at a 400 µs window 800 ms in, in ms", () => {
    const a = fmtTick(800_300_000, 20_000);
    const b = fmtTick(800_320_000, 20_000);
    expect(a).toBe("800.30 ms");
    expect(b).toBe("800.32 ms");
  });
  it("labels never overlap", () => {
    const labelPx = (step: number) => fmtTick(800_300_000, step).length * 7;
    for (const dt of [400_000, 1_000, 7_000_000_000, 33]) {
      const { step, ticks } = rulerTicks(800_000_000, 800_000_000 + dt, 1000, labelPx);
      expect(ticks.length).toBeGreaterThan(1);
      expect((step / dt) * 1000).toBeGreaterThanOrEqual(labelPx(step) + 12);
      const labels = ticks.map((t) => fmtTick(t, step));
      expect(new Set(labels).size).toBe(labels.length);
    }
  });
});

describe("columnUnit", () => {
  it("reads the unit from the column's suffix", () => {
    expect(columnUnit("duration_us")).toBe("µs");
    expect(columnUnit("energy_j")).toBe("J");
    expect(columnUnit("avg_w")).toBe("W");
    expect(columnUnit("name")).toBe(null);
    expect(columnUnit("x_j", "kJ")).toBe("kJ");
  });
});
