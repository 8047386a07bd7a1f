// Distributed: the ranks of one job side by side (the ranks, stragglers, rank_steps,
// collectives and links views through the common query; on a many-rank job each reads
// the cluster index, so the page never reads every rank's events).
import { api, profilePath, type ProfileMeta, type Row, type ViewResult } from "../lib/api";
import { h } from "../lib/dom";
import { fmtBytes, fmtNum, fmtValue } from "../lib/format";
import type { Cell, Grid } from "../lib/heatmap";
import { heatColor, heatGradient } from "../lib/heatmap";
import { stackedBars } from "../render/charts";
import { heatmap } from "../render/heatmap";
import { pid } from "../state/app";
import { legend } from "./overview";
import { exportTable } from "../lib/export";

const PAGE = 10000;
/** Slowest ranks listed beside the heatmap, and the waiting ranks named. */
const LIST_RANKS = 10;
const WAITING = 5;
/** Process groups listed in the bandwidth table (a 1,024-rank job has hundreds). */
const LIST_GROUPS = 20;
const PARTS: [string, string][] = [
  ["compute", "#2563eb"], ["non-compute", "#f59e0b"], ["exposed communication", "#7c3aed"], ["idle", "#d1d5db"],
];
const us = (v: unknown) => fmtValue(Number(v), "µs");

/** Every row of a view (paged by the API's row limit). */
async function allRows(view: string, params: Record<string, string | number> = {}): Promise<Row[]> {
  const out: Row[] = [];
  for (let offset = 0; ; offset += PAGE) {
    const r = await api<ViewResult>(profilePath(pid(), "/views/" + view), { ...params, limit: PAGE, offset });
    out.push(...r.rows);
    if (out.length >= r.total || !r.rows.length) return out;
  }
}

/** Right-align the headers of numeric columns (those whose first row's cell is numeric). */
export function alignNumbers(table: HTMLTableElement): void {
  const heads = table.querySelectorAll("tr:first-child > th, thead th");
  const first = table.querySelector("tbody tr, tr:nth-child(2)");
  if (!first) return;
  [...first.children].forEach((td, i) => {
    if (td.classList.contains("num")) heads[i]?.classList.add("num");
  });
}

function section(main: HTMLElement, id: string, title: string): HTMLElement {
  const s = h("section", { id, class: "dist-section" }, h("h3", {}, title));
  main.append(s);
  return s;
}

async function guarded(el: HTMLElement, fill: () => Promise<void>): Promise<void> {
  try {
    await fill();
  } catch (e) {
    el.append(h("p", { class: "error" }, (e as Error).message));
  }
}

/** What the heatmap can colour by: the rank's own work (what makes it slow, so the
 * straggler is the hottest row) or its whole step (which waiting stretches, so in a
 * synchronous job the straggler's is no longer than the others'). */
const METRICS: { key: string; label: string; value: (r: Row) => number }[] = [
  { key: "own", label: "own work per step (compute + copies)", value: (r) => Number(r.compute_us || 0) + Number(r.copy_us || 0) },
  { key: "step", label: "step time", value: (r) => Number(r.step_us) },
];

/** The colour scale's legend: what the colour measures, its unit, fast to slow. */
function heatLegend(grid: Grid, label: string, binned: string): HTMLElement {
  const mid = (grid.min + grid.max) / 2;
  return h("div", { class: "heat-scale", id: "dist-heat-legend" },
    h("span", { class: "heat-label" }, label + ":"),
    h("span", { class: "muted" }, "fast"), h("span", {}, us(grid.min)),
    h("span", { class: "heat-bar" },
      h("i", { style: `background:${heatGradient()}`, "data-fast": heatColor(grid.min, grid.min, grid.max), "data-slow": heatColor(grid.max, grid.min, grid.max) }),
      h("span", { class: "heat-mid" }, us(mid))),
    h("span", {}, us(grid.max)), h("span", { class: "muted" }, "slow"),
    h("span", { class: "mark-slow" }, "▭ straggler"), h("span", { class: "mark-wait" }, "▌ waiting"),
    binned ? h("span", { class: "muted heat-binned" }, binned) : null);
}

export async function distributedPage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Distributed"));
  // The ranks view (from a many-rank job's index) tells whether there is anything to
  // compare; the profile's metadata (steps, timeline span: slow on 1,000 ranks) is read
  // only to explain a profile of one rank.
  const rankRows = await allRows("ranks");
  if (rankRows.length < 2) {
    const meta = await api<ProfileMeta>(profilePath(pid()));
    const ranks = meta.ranks || [];
    main.append(h("div", { class: "empty", id: "dist-empty" },
      h("p", {}, `This profile holds ${ranks.length === 1 ? "one rank" : "no rank"}` +
        (meta.world_size && meta.world_size > 1 ? ` of a ${meta.world_size}-rank job` : "") + ": the distributed views compare ranks."),
      h("p", {}, "Record every rank into one folder, or import the ranks' traces together:"),
      h("pre", {}, "aiprof record -o run -- torchrun --nproc-per-node 2 train.py\naiprof import rank0.json.gz rank1.json.gz -o run\naiprof serve run")));
    return;
  }
  const [stragglers, steps] = await Promise.all([allRows("stragglers"), allRows("rank_steps")]);
  const top = stragglers[0];
  const slow = new Set<number>(top && Number(top.lost_pct) > 0 ? [Number(top.rank)] : []);
  // The ranks that arrive first at the collectives wait the longest for the others.
  const waitingRows = rankRows.filter((r) => r.mean_late_us !== null && !slow.has(Number(r.rank)))
    .sort((a, b) => Number(a.mean_late_us) - Number(b.mean_late_us)).slice(0, WAITING);
  const waiting = new Set(waitingRows.map((r) => Number(r.rank)));
  const world = Math.max(0, ...rankRows.map((r) => Number(r.world_size || 0)));
  const card = (k: string, v: string, id?: string) => h("div", { class: "card", id }, h("div", { class: "k" }, k), h("div", { class: "v", title: v }, v));
  main.append(h("div", { class: "cards" },
    card("ranks", fmtNum(rankRows.length)),
    card("world size", fmtNum(world || rankRows.length), "dist-world"),
    card("straggler", top && slow.size ? `rank ${top.rank}: ${Number(top.lost_pct).toFixed(1)} % of step time lost` : "none", "dist-straggler"),
    card("waiting ranks", waitingRows.length ? (waitingRows.length > 1 ? "ranks " : "rank ") + waitingRows.map((r) => r.rank).join(", ") : "–", "dist-waiting")));
  main.append(h("p", { class: "muted" },
    "Straggler: the rank whose steps cost the others the most time (the stragglers view's lost_pct). ",
    "Waiting ranks: those that reach the collectives first (lowest mean lateness), so they wait longest."));

  // From the cluster summaries (a many-rank job's index), not from every rank's events.
  const hm = section(main, "dist-heatmap-box", "Rank × step");
  await guarded(hm, async () => {
    const stepRows = steps.filter((r) => r.step !== null);
    if (!stepRows.length) return void hm.append(h("p", { class: "muted" }, "No step marks: each rank's steps are needed for the grid."));
    const c = h("canvas", { class: "chart heatmap", id: "dist-heatmap" });
    // The stragglers view's order: in a synchronous job every rank's step lasts as long
    // as the slowest one's, so the ranks are ranked by their own (compute) time.
    const slowest = stragglers.slice(0, LIST_RANKS);
    const list = h("table", { class: "data", id: "dist-slowest" },
      h("thead", {}, h("tr", {}, ["rank", "mean step", "compute", "lost", "slow steps"].map((x) => h("th", {}, x)))),
      h("tbody", {}, slowest.map((r) => h("tr", { class: slow.has(Number(r.rank)) ? "slow" : waiting.has(Number(r.rank)) ? "waiting" : "" },
        h("td", {}, String(r.rank)), h("td", { class: "num" }, us(r.step_us)), h("td", { class: "num" }, us(r.compute_us)),
        h("td", { class: "num" }, fmtValue(Number(r.lost_pct), "%")), h("td", { class: "num" }, fmtNum(r.slow_steps))))));
    alignNumbers(list);
    const sel = h("select", { id: "dist-heat-metric", "aria-label": "colour by" }, METRICS.map((m) => h("option", { value: m.key }, m.label)));
    const scale = h("div");
    hm.append(h("div", { class: "tablebar" }, h("label", {}, "colour by ", sel)),
      h("div", { class: "heat-wrap" }, h("div", { class: "heat-main" }, c, scale), h("div", { class: "heat-side" }, h("h4", {}, "Slowest ranks (by their own time) ", exportTable(`${pid()}.slowest-ranks`, list, () => slowest)), list)));
    const draw = () => {
      const m = METRICS.find((x) => x.key === sel.value) ?? METRICS[0]!;
      const cells: Cell[] = stepRows.map((r) => ({ rank: Number(r.rank), step: Number(r.step), value: m.value(r) }));
      const grid = heatmap(c, cells, { slow, waiting }, us, m.label);
      c.dataset.metric = m.key;
      scale.replaceChildren(heatLegend(grid, m.label,
        grid.bands.length < grid.ranks.length ? `${fmtNum(grid.ranks.length)} ranks in ${grid.bands.length} rows, each showing its slowest rank` : ""));
    };
    sel.addEventListener("change", draw);
    draw();
  });

  const bars = section(main, "dist-bars-box", "Per-rank breakdown of one step");
  await guarded(bars, async () => {
    const stepIds = [...new Set(steps.map((r) => r.step).filter((s) => s !== null).map(Number))].sort((a, b) => a - b);
    if (!stepIds.length) return void bars.append(h("p", { class: "muted" }, "No steps."));
    // Default: the step whose slowest rank is slowest.
    const worst = steps.reduce((m, r) => (Number(r.step_us) > Number(m.step_us) ? r : m), steps[0]!);
    const sel = h("select", { id: "dist-step", "aria-label": "step" }, stepIds.map((s) => h("option", { value: String(s) }, "step " + s)));
    sel.value = String(worst.step);
    const c = h("canvas", { class: "chart", id: "dist-bars" });
    bars.append(h("div", { class: "tablebar" }, sel, legend(Object.fromEntries(PARTS), PARTS.map((p) => p[0]))), c);
    const draw = () => {
      const step = Number(sel.value);
      const rows = steps.filter((r) => Number(r.step) === step).sort((a, b) => Number(a.rank) - Number(b.rank));
      const mark = (r: Row) => (slow.has(Number(r.rank)) ? " ★" : waiting.has(Number(r.rank)) ? " ·" : "");
      const val = (r: Row, k: string) => Number(r[k] || 0);
      stackedBars(c, rows.map((r) => "r" + String(r.rank) + mark(r)), [
        { name: PARTS[0]![0], color: PARTS[0]![1], values: rows.map((r) => val(r, "compute_us")) },
        { name: PARTS[1]![0], color: PARTS[1]![1], values: rows.map((r) => val(r, "copy_us")) },
        { name: PARTS[2]![0], color: PARTS[2]![1], values: rows.map((r) => val(r, "exposed_comm_us")) },
        { name: PARTS[3]![0], color: PARTS[3]![1], values: rows.map((r) => val(r, "idle_us")) },
      ], (v) => fmtValue(v, "µs"));
    };
    sel.addEventListener("change", draw);
    draw();
    bars.append(h("p", { class: "muted" }, "compute: kernels; non-compute: memcpy and memset; exposed communication: collectives alone on the device, with no kernel or copy under them; idle: the device does nothing. ★ straggler, · waiting rank."));
  });

  const skew = section(main, "dist-skew-box", "Collective skew (arrival spread per collective)");
  await guarded(skew, async () => {
    const r = await api<ViewResult>(profilePath(pid(), "/views/collectives"), { sort: "-arrival_spread_us", limit: 15 });
    if (!r.rows.length) return void skew.append(h("p", { class: "muted" }, "No collectives matched across ranks."));
    const max = Math.max(1e-9, ...r.rows.map((x) => Number(x.arrival_spread_us || 0)));
    const t = h("table", { class: "data", id: "dist-skew" }, h("thead", {}, h("tr", {},
      ["group", "op", "step", "ranks", "size", "arrival spread", "", "last to arrive", "mean wait", "bus bw"].map((x) => h("th", {}, x)))));
    const tb = h("tbody");
    for (const x of r.rows) {
      const w = (100 * Number(x.arrival_spread_us || 0)) / max;
      tb.append(h("tr", {}, h("td", {}, String(x.pg ?? "")), h("td", {}, String(x.op ?? "")), h("td", { class: "num" }, String(x.step ?? "")),
        h("td", { class: "num" }, fmtNum(x.ranks)), h("td", { class: "num" }, fmtBytes(Number(x.bytes || 0))),
        h("td", { class: "num" }, us(x.arrival_spread_us)), h("td", { class: "barcell" }, h("i", { style: `width:${w.toFixed(1)}%` })),
        h("td", { class: "num" }, "rank " + String(x.last_rank)), h("td", { class: "num" }, us(x.mean_wait_us)),
        h("td", { class: "num" }, x.busbw_gbps === null || x.busbw_gbps === undefined ? "–" : Number(x.busbw_gbps).toFixed(1) + " GB/s")));
    }
    t.append(tb);
    alignNumbers(t);
    skew.append(h("p", { class: "muted" }, `The ${r.rows.length} widest of ${fmtNum(r.total)} collectives: the time between the first and the last rank's arrival.`), exportTable(`${pid()}.collective-skew`, t, () => r), h("div", { class: "scrollx" }, t));
  });

  const bw = section(main, "dist-bw-box", "Communication bandwidth");
  await guarded(bw, async () => {
    const withBw = rankRows.filter((r) => r.comm_gbps !== null && r.comm_gbps !== undefined);
    if (withBw.length) {
      const c = h("canvas", { class: "chart", id: "dist-bw-ranks" });
      bw.append(h("h4", {}, "Per rank (bytes moved by collectives / their time)"), c);
      stackedBars(c, withBw.map((r) => "r" + String(r.rank)), [{ name: "GB/s", color: "#7c3aed", values: withBw.map((r) => Number(r.comm_gbps)) }], (v) => v.toFixed(2) + " GB/s");
    } else bw.append(h("p", { class: "muted" }, "No collective sizes recorded, so no bandwidth per rank."));
    const all = await allRows("links");
    bw.append(h("h4", {}, "Per process group"));
    if (!all.length) return void bw.append(h("p", { class: "muted" }, "No process groups with sized collectives."));
    // Slow links first, then the lowest bandwidth; the rest are counted, not listed.
    const links = [...all].sort((a, b) => Number(!!b.slow) - Number(!!a.slow) || Number(a.rel_bw ?? 1) - Number(b.rel_bw ?? 1)).slice(0, LIST_GROUPS);
    if (all.length > links.length) bw.append(h("p", { class: "muted" }, `The ${links.length} slowest of ${fmtNum(all.length)} process groups (slow links first).`));
    const t = h("table", { class: "data", id: "dist-links" }, h("thead", {}, h("tr", {},
      ["group", "ranks", "op", "size", "instances", "bytes", "bus bw", "vs best", "slowest rank", "slow"].map((x) => h("th", {}, x)))));
    const tb = h("tbody");
    for (const x of links)
      tb.append(h("tr", { class: x.slow ? "slow" : "" }, h("td", {}, String(x.pg ?? "")), h("td", { title: String(x.pg_ranks ?? "") }, String(x.pg_ranks ?? "")),
        h("td", {}, String(x.op ?? "")), h("td", { class: "num" }, fmtNum(x.pg_size)), h("td", { class: "num" }, fmtNum(x.instances)),
        h("td", { class: "num" }, fmtBytes(Number(x.bytes || 0))),
        h("td", { class: "num" }, x.busbw_gbps === null ? "–" : Number(x.busbw_gbps).toFixed(2) + " GB/s"),
        h("td", { class: "num" }, x.rel_bw === null ? "–" : (100 * Number(x.rel_bw)).toFixed(0) + " %"),
        h("td", { class: "num" }, String(x.slowest_rank ?? "")), h("td", {}, x.slow ? "slow link" : "")));
    t.append(tb);
    alignNumbers(t);
    bw.append(exportTable(`${pid()}.links`, t, () => links), h("div", { class: "scrollx" }, t));
  });
}
