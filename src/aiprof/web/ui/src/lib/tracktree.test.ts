import { describe, expect, it } from "vitest";
import { ancestors, buildTree, layout, leaves, memoryCounters, type CounterInfo, type TrackInfo } from "./tracktree";

const host = (track: number, tid: number, events: number, pid = 1102): TrackInfo => ({
  track, rank: 0, pid, tid, device_type: "cpu", device: null, is_device: false,
  name: `pid ${pid} / thread ${tid}`, process_name: "python", thread_name: `t${tid}`, events, max_depth: 3,
});
const dev = (track: number, stream: number, events: number, rank = 0): TrackInfo => ({
  track, rank, pid: 0, tid: stream, device_type: "cuda", device: 0, is_device: true,
  name: `CUDA 0 stream ${stream}`, process_name: null, thread_name: `stream ${stream}`, events, max_depth: 0,
});
const power: CounterInfo = { type: "counter", rank: 0, device_type: "cuda", device: 0, metric: "power", unit: "W", max: 300, min: 0 };

describe("track tree", () => {
  it("device groups first, empty tracks left out, counters under their device", () => {
    const root = buildTree([host(0, 1, 5000), host(1, 2, 0), dev(2, 7, 9000), dev(3, 8, 20)], [power]);
    expect(root.children.map((c) => c.title)).toEqual(["CUDA 0", "python 1102"]);
    expect(root.children[0]!.children.map((c) => c.title)).toEqual(["stream 7", "stream 8", "power (W)"]);
    expect(root.children[1]!.children.map((c) => c.title)).toEqual(["t1 1"]);
    expect(leaves(root).length).toBe(4);
  });
  it("ranks are the top level when there are several; quiet host processes start collapsed", () => {
    const root = buildTree([host(0, 1, 1), dev(1, 7, 9000), dev(2, 7, 9000, 1)]);
    expect(root.children.map((c) => c.title)).toEqual(["rank 0", "rank 1"]);
    const proc = root.children[0]!.children[1]!;
    expect(proc.title).toBe("python 1102");
    expect(proc.collapsed).toBe(true);
  });
  it("layout: collapsed groups are one row, pinned tracks come first", () => {
    const root = buildTree([host(0, 1, 5000), host(1, 2, 5000), dev(2, 7, 9000)]);
    let l = layout(root, new Set());
    expect(l.rows.map((r) => r.node.title)).toEqual(["CUDA 0", "stream 7", "python 1102", "t1 1", "t2 2"]);
    root.children[1]!.collapsed = true;
    l = layout(root, new Set(["t1"]));
    expect(l.rows.map((r) => [r.node.title, r.pinned])).toEqual([
      ["t2 2", true], ["CUDA 0", false], ["stream 7", false], ["python 1102", false],
    ]);
    expect(l.rows[1]!.y).toBe(l.pinnedH);
    expect(ancestors(root, "t1").map((n) => n.title)).toEqual(["python 1102"]);
  });
});

describe("sample charts", () => {
  it("a sampled thread gets a flame chart track first in its process", () => {
    const root = buildTree([host(0, 1, 5000)], [], [{ key: "0:1102:1", rank: 0, pid: 1102, tid: 1, depth: 40 }]);
    const proc = root.children[0]!;
    expect(proc.children.map((c) => c.title)).toEqual(["Python samples · t1", "t1 1"]);
    const l = layout(root, new Set());
    expect(l.rows[1]!.h).toBe(16 * 18);
  });
});

describe("memory tracks", () => {
  const GIB = 1024 ** 3;
  it("allocated scaled to its own peak, reserved named as such with its peak", () => {
    // df_index_resolver's device: peak allocated 6.17 GiB, peak reserved 11.9 GiB.
    const mem = memoryCounters([
      { rank: 1, device_type: "cuda", device: 0, peak_bytes: 6.17 * GIB, peak_reserved: 11.9 * GIB },
      { rank: 1, device_type: "cpu", device: null, peak_bytes: 5, peak_reserved: null },
    ]);
    expect(mem.map((c) => [c.metric, c.max])).toEqual([["allocated", 6.17 * GIB], ["reserved", 11.9 * GIB]]);
    const root = buildTree([dev(2, 7, 9000, 1)], mem);
    expect(root.children[0]!.children.map((c) => c.title)).toEqual(["stream 7", "memory allocated (B)", "memory reserved (B)"]);
    expect(leaves(root).map((n) => n.full).slice(1)).toEqual(["memory allocated · rank 1 CUDA 0 · B", "memory reserved · rank 1 CUDA 0 · B"]);
  });
  it("no reserved track where the allocator did not record it", () => {
    const mem = memoryCounters([{ rank: 0, device_type: "cuda", device: 0, peak_bytes: 100, peak_reserved: null }]);
    expect(mem.map((c) => [c.metric, c.max])).toEqual([["allocated", 100]]);
  });
});
