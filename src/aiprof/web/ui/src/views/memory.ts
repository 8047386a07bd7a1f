// Memory: allocated and reserved per device (allocated is derived from the events'
// Bytes when the trace has no totals, at import), the peak marked, the allocations
// live at the peak with their operator and call stack, and the largest allocations.
import { api, EMBED, profilePath, type MemorySeries, type ProfileMeta, type Row, type ViewResult } from "../lib/api";
import { h } from "../lib/dom";
import { fmtBytes, fmtNs, fmtValue } from "../lib/format";
import { lineChart, type LineSeries } from "../render/charts";
import { pid } from "../state/app";
import { emptyState } from "./empty";
import { legend } from "./overview";
import { showTime } from "./show";
import { localFilter, makeTable } from "./table";
import { exportTable } from "../lib/export";

type Series = MemorySeries["series"][number];
type Peak = MemorySeries["peaks"][number];

/** Live allocations listed per device (the rest are counted). */
const LIVE_ROWS = 25;
const COLORS = { allocated: "#2563eb", reserved: "#f59e0b", "peak of allocated": "#dc2626" };

export const RECORD_MEMORY = [
  "torch.profiler.profile(activities=[...], profile_memory=True, record_shapes=True, with_stack=True)",
  "aiprof record --ops --memory -- python train.py",
];

const key = (r: { rank?: number | null; device_type?: string | null; device?: number | null }) => `${r.rank}:${r.device_type}:${r.device}`;

export async function memoryPage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Memory"));
  const [m, meta] = await Promise.all([api<MemorySeries>(profilePath(pid(), "/memory/series"), { width: 1000 }), api<ProfileMeta>(profilePath(pid()))]);
  const dev = m.series.filter((s) => s.device_type !== "cpu");
  const list = dev.length ? dev : m.series;
  if (!list.length) {
    main.append(emptyState("No allocator events in this profile.",
      "The memory page draws the caching allocator's events ([memory] events in a Kineto trace); this trace has none, so there is no allocated or reserved curve and no peak.",
      RECORD_MEMORY));
    return;
  }
  if (!dev.length) main.append(h("p", { class: "muted" }, "Only host (CPU) allocations were recorded; no device memory events."));
  const derived = (meta.warnings || []).map(String).filter((w) => w.includes("running sum of Bytes"));
  if (derived.length)
    main.append(h("p", { class: "muted", id: "mem-derived", title: derived.join("\n") },
      "Allocated memory is derived from the running sum of each allocator event's Bytes: the trace records no totals. Memory held before the trace began counts only as far as its frees show."));
  const live = await allocationRows([{ col: "live_at_peak", v: true }]);
  const again = () => { main.textContent = ""; return memoryPage(main); };
  for (const s of list) {
    const pk = m.peaks.find((p) => key(p) === key(s));
    main.append(deviceSection(s, pk, { ...live, rows: live.rows.filter((r) => key(r as unknown as Peak) === key(s)) }, meta, again));
  }
  main.append(h("h3", {}, "Largest allocations"),
    h("p", { class: "muted small" }, EMBED ? "The report holds the 500 largest allocations and those live at each peak." : "Every block the allocator handed out; filter e.g. device_type=cuda; live_at_peak=true; operator~mm"),
    makeTable("allocations", { bindUrl: true, action: EMBED ? undefined : { label: "timeline", title: "show the allocation on the timeline", run: (r) => showTime(Number(r.ts_us) * 1000) } }));
  main.append(h("h3", {}, "Memory by operator at the peak (memory view)"), makeTable("memory", {}));
}

/** Allocation rows, or why there are none yet: a big profile computes the allocations
 * view when asked (``deferred``, the API) or leaves it out of its report (``error``). */
interface Allocations { rows: Row[]; why?: string; deferred?: boolean }

function deviceSection(s: Series, pk: Peak | undefined, live: Allocations, meta: ProfileMeta, again: () => Promise<void>): HTMLElement {
  const box = h("section", { class: "mem-device", "data-device": key(s) });
  const hasReserved = s.reserved.some((v) => v !== null && v !== undefined && v >= 0);
  box.append(h("h3", {}, `rank ${s.rank}, ${s.device_type}:${s.device}: allocated${hasReserved ? " and reserved" : ""}`));
  const names = hasReserved ? ["allocated", "reserved", "peak of allocated"] : ["allocated", "peak of allocated"];
  box.append(legend(COLORS, names));
  const c = h("canvas", { class: "chart", id: "mem-chart", "data-peak": pk?.peak_bytes ?? "" });
  box.append(c);
  const lines: LineSeries[] = [{ name: "allocated", color: COLORS.allocated, ts: s.ts, v: s.allocated }];
  if (hasReserved) lines.unshift({ name: "reserved", color: COLORS.reserved, ts: s.ts, v: s.reserved });
  const peakAt = pk && pk.peak_ts !== null && pk.peak_bytes !== null ? { ts: pk.peak_ts, v: pk.peak_bytes } : null;
  requestAnimationFrame(() => lineChart(c, lines, fmtBytes, peakAt));
  const used = (meta.devices_used || []) as { rank: number; type: string; index: number; memory_bytes?: number | null }[];
  const capacity = used.find((d) => d.rank === s.rank && d.type === s.device_type && d.index === s.device)?.memory_bytes;
  const card = (k: string, v: string, id?: string) => h("div", { class: "card", id }, h("div", { class: "k" }, k), h("div", { class: "v", title: v }, v));
  box.append(h("div", { class: "cards" },
    card("peak allocated", peakAt ? fmtBytes(peakAt.v) : "–", "mem-peak"),
    card("at", peakAt ? fmtNs(peakAt.ts) : "–"),
    card("peak reserved", hasReserved && pk?.peak_reserved !== null && pk?.peak_reserved !== undefined ? fmtBytes(pk.peak_reserved) : "not recorded"),
    capacity ? card("of device memory", fmtValue(peakAt ? (100 * peakAt.v) / capacity : 0, "%") + " of " + fmtBytes(capacity)) : null));
  if (!peakAt) {
    box.append(emptyState("No peak.", "This device's allocator events carry neither totals nor sizes, so the allocated memory is unknown.", RECORD_MEMORY));
    return box;
  }
  box.append(live.why ? notComputed(live, peakAt, again) : liveTable(live.rows, peakAt));
  return box;
}

/** The live allocations' place on a big profile: why they are not listed yet and, on a
 * server, a button that computes the allocations view and draws the page again. */
function notComputed(live: Allocations, peak: { ts: number; v: number }, again: () => Promise<void>): HTMLElement {
  const box = h("div", { class: "panel live-at-peak", id: "live-at-peak" });
  box.append(h("b", {}, `Allocations live at the peak (${fmtBytes(peak.v)} at ${fmtNs(peak.ts)})`),
    h("p", { class: "muted", id: "live-deferred" }, "Not computed yet: " + live.why + "."));
  if (!live.deferred) return box;
  const go = h("button", { type: "button", class: "view-compute", id: "live-compute" }, "Compute the allocations") as HTMLButtonElement;
  go.addEventListener("click", async () => {
    go.disabled = true;
    go.textContent = "Computing the allocations (minutes on a profile this size)…";
    try {
      await api<ViewResult>(profilePath(pid(), "/views/allocations"), { compute: "true", limit: 1 });
      await again();
    } catch (e) {
      go.replaceWith(h("p", { class: "error" }, "Allocations unavailable: " + (e as Error).message));
    }
  });
  box.append(go);
  return box;
}

/** The allocations held at the peak, largest first: size, operator, when, call stack. */
function liveTable(rows: Row[], peak: { ts: number; v: number }): HTMLElement {
  const box = h("div", { class: "panel live-at-peak", id: "live-at-peak" });
  const held = rows.reduce((a, r) => a + Number(r.bytes || 0), 0);
  const unseen = peak.v - held;
  box.append(h("b", {}, `Allocations live at the peak (${fmtBytes(peak.v)} at ${fmtNs(peak.ts)})`));
  if (!EMBED) box.append(h("button", { class: "show-tl", onclick: () => showTime(peak.ts) }, "show on timeline"));
  box.append(h("div", { class: "muted small" },
    `${rows.length.toLocaleString("en-US")} blocks hold ${fmtBytes(held)}` + (unseen > 0 ? `; ${fmtBytes(unseen)} was allocated before the trace began (its owner is unknown)` : "") + "."));
  if (!rows.length) return box;
  const t = h("table", { class: "data" }, h("thead", {}, h("tr", {}, ["size", "% of peak", "operator", "allocated at", "held for", "call stack"].map((x) => h("th", {}, x)))));
  const tb = h("tbody");
  for (const r of rows.slice(0, LIVE_ROWS)) {
    const stack = String(r.stack || "");
    tb.append(h("tr", {},
      h("td", { class: "num", title: String(r.bytes) }, fmtBytes(Number(r.bytes))),
      h("td", { class: "num" }, fmtValue((100 * Number(r.bytes)) / peak.v, "%")),
      h("td", { title: String(r.operator || "") }, String(r.operator || "")),
      h("td", { class: "num" }, fmtValue(r.ts_us, "µs")),
      h("td", { class: "num" }, r.lifetime_us === null || r.lifetime_us === undefined ? "to the end" : fmtValue(r.lifetime_us, "µs")),
      h("td", { class: "stack", title: stack }, stack || h("span", { class: "muted" }, "not recorded"))));
  }
  t.append(tb);
  box.append(h("div", {}, exportTable(`${pid()}.live-at-peak`, t, () => rows)), t);
  if (rows.length > LIVE_ROWS) box.append(h("div", { class: "muted small" }, `${rows.length - LIVE_ROWS} smaller blocks not listed: filter the table below with live_at_peak=true.`));
  return box;
}

/** Rows of the allocations view matching ``filters``, largest first (the report filters its embedded rows). */
async function allocationRows(filters: { col: string; v: unknown }[]): Promise<Allocations> {
  const text = filters.map((f) => `${f.col}=${String(f.v)}`);
  if (EMBED) {
    const all = await api<ViewResult>(profilePath(pid(), "/views/allocations"));
    const why = (all as { error?: unknown }).error;  // left out of a big profile's report
    if (typeof why === "string" && why) return { rows: [], why };
    return { rows: localFilter(all.rows, text).sort((a, b) => Number(b.bytes) - Number(a.bytes)) };
  }
  const res = await api<ViewResult>(profilePath(pid(), "/views/allocations"), { filter: text, sort: "-bytes", limit: 10000 });
  return res.deferred ? { rows: [], why: res.reason || "", deferred: true } : { rows: res.rows };
}
