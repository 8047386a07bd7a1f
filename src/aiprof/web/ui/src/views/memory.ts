import { api, EMBED, profilePath, type MemorySeries, type TracksResponse, type WindowResponse } from "../lib/api";
import { h } from "../lib/dom";
import { fmtBytes, fmtNs } from "../lib/format";
import { lineChart } from "../render/charts";
import { pid } from "../state/app";
import { legend } from "./overview";
import { showTime } from "./show";
import { makeTable } from "./table";

type Peak = MemorySeries["peaks"][number];

export async function memoryPage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Memory"));
  if (!EMBED) {
    const m = await api<MemorySeries>(profilePath(pid(), "/memory/series"), { width: 1000 });
    const dev = m.series.filter((s) => s.device_type !== "cpu");
    const list = dev.length ? dev : m.series;
    if (!list.length) main.append(h("p", { class: "muted" }, "No allocator events in this profile (record with profile_memory=True)."));
    for (const s of list) {
      const pk = m.peaks.find((p) => p.rank === s.rank && p.device === s.device && p.device_type === s.device_type);
      main.append(h("h3", {}, `rank ${s.rank}, ${s.device_type} ${s.device}: allocated and reserved`));
      main.append(legend({ allocated: "#2563eb", reserved: "#f59e0b", "peak of allocated": "#dc2626" }, ["allocated", "reserved", "peak of allocated"]));
      const c = h("canvas", { class: "chart", id: "mem-chart" });
      main.append(c);
      requestAnimationFrame(() =>
        lineChart(c, [{ name: "reserved", color: "#f59e0b", ts: s.ts, v: s.reserved }, { name: "allocated", color: "#2563eb", ts: s.ts, v: s.allocated }], fmtBytes,
          pk ? { ts: pk.peak_ts, v: pk.peak_bytes } : null));
      if (pk) main.append(await liveAt(pk));
    }
  }
  main.append(h("h3", {}, "Memory by device (memory view)"),
    makeTable("memory", {
      bindUrl: true,
      action: EMBED ? undefined : { label: "timeline", title: "show the peak on the timeline", run: (r) => showTime(Number(r.peak_ts_us) * 1000) },
    }));
}

/** The host operators live at the peak: the spans covering that instant (a timeline window). */
async function liveAt(pk: Peak): Promise<HTMLElement> {
  const box = h("div", { class: "panel", id: "live-at-peak" });
  box.append(h("b", {}, `Operators live at the peak (${fmtBytes(pk.peak_bytes)} at ${fmtNs(pk.peak_ts)})`),
    h("button", { class: "show-tl", onclick: () => showTime(pk.peak_ts) }, "show on timeline"));
  const w = await api<WindowResponse>(profilePath(pid(), "/timeline"), { t0: pk.peak_ts, t1: pk.peak_ts, width: 1 });
  const tracks = (await api<TracksResponse>(profilePath(pid(), "/tracks"))).tracks;
  const names = new Map(tracks.map((t) => [t.track, t]));
  const rows: { track: string; depth: number; kind: string; name: string; dur: number }[] = [];
  for (let i = 0; i < w.items.ts.length; i++) {
    const t = names.get(w.items.track[i]!);
    if (!t || t.is_device) continue;
    const kind = w.items.kind[i]!;
    if (!["cpu_op", "user_annotation", "python", "step"].includes(kind)) continue;
    rows.push({ track: t.name, depth: w.items.depth[i]!, kind, name: w.names[w.items.name[i]!]!, dur: w.items.dur[i]! });
  }
  rows.sort((a, b) => (a.track < b.track ? -1 : a.track > b.track ? 1 : a.depth - b.depth));
  const t = h("table", { class: "data" }, h("tr", {}, ["thread", "depth", "kind", "operator", "duration"].map((x) => h("th", {}, x))));
  for (const r of rows)
    t.append(h("tr", {}, h("td", { title: r.track }, r.track), h("td", {}, String(r.depth)), h("td", {}, r.kind),
      h("td", { title: r.name }, "\u00a0\u00a0".repeat(r.depth) + r.name), h("td", { class: "num" }, fmtNs(r.dur))));
  box.append(rows.length ? t : h("p", { class: "muted" }, "No host operator spans that instant."));
  return box;
}
