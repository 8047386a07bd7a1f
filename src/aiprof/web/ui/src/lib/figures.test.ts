import { describe, expect, it } from "vitest";
import { ACTIVE_SPAN_NOTE, deviceFigure, metricsHeading, metricSources, ranksWithSteps } from "./figures";

describe("device figures", () => {
  it("carry the CLI's qualifiers", () => {
    expect(["device_busy", "idle", "compute", "non_compute"].map(deviceFigure)).toEqual([
      "busy (of step time)", "idle (of active span)", "compute (of active span)", "non_compute (of active span)",
    ]);
    expect(ACTIVE_SPAN_NOTE).toMatch(/^active span: the device's first operation to its last one launched before the last step \(Holistic Trace Analysis's window/);
  });
  it("the note applies to the ranks with two or more steps", () => {
    const steps = [{ rank: 0, step: 1 }, { rank: 0, step: 2 }, { rank: 1, step: 1 }];
    expect(ranksWithSteps(steps, [0, 1])).toEqual([0]);
    expect(ranksWithSteps([{ rank: 0, step: 1 }], [0])).toEqual([]);
  });
});

describe("kernel metrics heading", () => {
  const trace = { importer: "ascend-pt", path: "/d/torch_npu/trace_view.json", file_kind: "trace_view" };
  const details = { importer: "ascend-pt", file: "kernel_details.csv", file_kind: "kernel_details" };
  it("names Ascend's kernel_details by its file, not Nsight Compute", () => {
    expect(metricsHeading([{ importer: "ascend-trace", path: "/d/trace_view.json" }, trace, details])).toBe("Ascend kernel details (kernel_details.csv)");
    expect(metricSources([trace, details, { importer: "ascend-pt", path: "/d/operator_memory.csv", file_kind: "operator_memory" }]).map((s) => s.label))
      .toEqual(["Ascend kernel details (kernel_details.csv)"]);
  });
  it("Nsight Compute only when every source is ncu", () => {
    expect(metricsHeading([{ importer: "kineto", path: "/t.json" }, { importer: "ncu", path: "/x/ncu_details.csv" }])).toBe("Nsight Compute launches");
    expect(metricsHeading([{ importer: "ncu", path: "/x/ncu.csv" }, details])).toBe("Nsight Compute (ncu.csv) · Ascend kernel details (kernel_details.csv)");
  });
});
