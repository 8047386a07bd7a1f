import { describe, expect, it } from "vitest";
import { hiddenColumns, isFigureType, UNMEASURED, UNMEASURED_TITLE } from "./columns";

// Columns and two rows of the steps view of the real V100 trace
// (kineto/V100/rank-0...pt.trace.json.gz): no Python samples, no DataLoader in the steps.
const columns = [
  { name: "step", type: "int64" },
  { name: "duration_us", type: "double" },
  { name: "dataloader_us", type: "double" },
  { name: "forward_us", type: "double" },
  { name: "step_trace_comm_us", type: "double" },
  { name: "outlier", type: "bool" },
];
const rows = [
  { step: 101, duration_us: 35115.869, dataloader_us: 0.0, forward_us: null, step_trace_comm_us: null, outlier: false },
  { step: 102, duration_us: 72077.474, dataloader_us: 0.0, forward_us: null, step_trace_comm_us: 0.0, outlier: false },
];

describe("columns a table leaves out", () => {
  it("names the figures not measured apart from the zeros, and keeps a column of zeros and nulls", () => {
    expect(hiddenColumns(columns, rows, true, true)).toEqual({ notMeasured: ["forward_us"], empty: ["dataloader_us"] });
  });
  it("without unmeasured figures, a null is empty like a zero (as before)", () => {
    expect(hiddenColumns(columns, rows, true)).toEqual({ notMeasured: [], empty: ["dataloader_us", "forward_us", "step_trace_comm_us"] });
    expect(hiddenColumns(columns, rows, "null")).toEqual({ notMeasured: [], empty: ["forward_us"] });
    expect(hiddenColumns(columns, [], true, true)).toEqual({ notMeasured: [], empty: [] });
    expect(hiddenColumns(columns, rows, false, true)).toEqual({ notMeasured: [], empty: [] });
  });
  it("a null step (no step markers) is no unmeasured figure", () => {
    expect(hiddenColumns(columns, [{ ...rows[0], step: null }], true, true).notMeasured).toEqual(["forward_us", "step_trace_comm_us"]);
    expect(["double", "float", "int64", "bool", "string"].map(isFigureType)).toEqual([true, true, false, false, false]);
  });
  it("a dash, and a tooltip that says so", () => {
    expect(UNMEASURED).toBe("—");
    expect(UNMEASURED_TITLE).toBe("not measured in this profile");
  });
});
