import { api, EMBED, profilePath, type AdviceResponse, type ProfileMeta, type Row, type ViewResult } from "../lib/api";
import { CAT_COLORS } from "../lib/colors";
import { h } from "../lib/dom";
import { fmtBytes, fmtNs, fmtNum, fmtValue } from "../lib/format";
import { formatHash } from "../lib/url";
import { exportButtons } from "../lib/export";
import { ACTIVE_SPAN_NOTE, deviceFigure, ranksWithSteps } from "../lib/figures";
import { hbars, stackedBars } from "../render/charts";
import { pid } from "../state/app";
import { emptyState, RECORD_STEPS } from "./empty";

const CATS = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"];
const UTIL_COLORS: Record<string, string> = { device_busy: "#2563eb", compute: "#16a34a", non_compute: "#f59e0b", idle: "#9ca3af" };
/** Advice items the overview shows (the rest are on the advice page). */
const TOP_ADVICE = 3;
/** Ranks drawn one by one in the overview (the distributed page shows them all). */
const MAX_RANKS = 8;

export function legend(colors: Record<string, string>, names: string[]): HTMLElement {
  return h("div", { class: "legend" }, names.map((n) => h("span", {}, h("i", { style: "background:" + (colors[n] || "#999") }), n)));
}

type Device = { rank: number; type: string; index: number; name?: string | null; memory_bytes?: number | null };

/** "1 × Tesla V100-SXM2-32GB" per kind of device a rank used ("2 ranks, each 1 × ..."). */
export function deviceLabel(used: Device[], listed: Device[]): string {
  const devs = used.length ? used : listed.filter((d) => d.type !== "cpu");
  if (!devs.length) return "none (host only)";
  const kind = (d: Device) => String(d.name || d.type.toUpperCase() + " device");
  const ranks = new Set(devs.map((d) => d.rank));
  const perRank = new Map<string, number>();
  for (const d of devs) perRank.set(kind(d), (perRank.get(kind(d)) || 0) + 1);
  const parts = [...perRank].map(([k, n]) => `${ranks.size > 1 ? n / ranks.size : n} × ${k}`);
  const even = [...perRank.values()].every((n) => n % ranks.size === 0);
  if (ranks.size > 1 && even) return `${ranks.size} ranks, each ${parts.join(" + ")}`;
  if (ranks.size > 1) return [...perRank].map(([k, n]) => `${n} × ${k}`).join(" + ") + ` over ${ranks.size} ranks`;
  return parts.join(" + ");
}

function deviceList(meta: ProfileMeta): HTMLElement {
  const used = (meta.devices_used || []) as Device[];
  const listed = ((meta.devices || []) as Device[]).filter((d) => d.type !== "cpu");
  const text = used.map((d) => `rank ${d.rank} · ${d.type}:${d.index}${d.name ? " " + d.name : ""}${d.memory_bytes ? " (" + fmtBytes(d.memory_bytes) + ")" : ""}`);
  const note = !used.length && listed.length
    ? `The trace lists ${listed.length} device(s) but records no work on them.`
    : listed.length > used.length ? `The trace lists ${listed.length} device(s) on the node; the profile used ${used.length}.` : "";
  return h("p", { class: "muted devices", id: "device-list" }, text.length ? "Devices used: " + text.join("; ") + "." : "", note ? " " + note : "");
}

export async function overviewPage(main: HTMLElement): Promise<void> {
  // Asked for together: the server answers them on connections of their own, so the
  // advice (the slowest on a many-rank job) does not wait for the metadata and charts.
  const advice = api<AdviceResponse>(profilePath(pid(), "/advice"));
  advice.catch(() => undefined); // read (and its error shown) by topAdvice
  const overview = api<ViewResult>(profilePath(pid(), "/views/overview"), { limit: 10000 });
  overview.catch(() => undefined);
  const meta = await api<ProfileMeta>(profilePath(pid()));
  const card = (k: string, v: string) => h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v", title: v }, v));
  const span = meta.span_ns;
  main.append(
    h("h2", {}, "Overview"),
    h("div", { class: "cards" },
      card("profile", meta.name), (meta.ranks || []).length === 1 ? card("rank", String(meta.ranks![0])) : card("ranks", meta.ranks && meta.ranks.length ? `${meta.ranks.length} (${rankSpan(meta.ranks)})` : "–"),
      card("devices", deviceLabel((meta.devices_used || []) as Device[], (meta.devices || []) as Device[])),
      card("steps", stepCount(meta.steps || [])), card("span", fmtNs((span[1] ?? 0) - (span[0] ?? 0))),
      card("events", fmtNum((meta.tables || {}).events || 0))),
    deviceList(meta),
  );
  // The top advice sits under the cards, where the eye lands first; it loads beside the charts.
  const adviceBox = h("div", { id: "top-advice" });
  main.append(adviceBox);
  const adviceShown = topAdvice(adviceBox, advice);
  const left = h("div"), right = h("div");
  main.append(h("div", { class: "grid2" }, left, right));
  left.append(h("h3", {}, "Step time"));
  try {
    // Many ranks: the first MAX_RANKS ranks' steps (the Steps and Distributed pages have them all).
    const ranks = [...(meta.ranks || [])].sort((a, b) => a - b);
    const q: Record<string, string | number> = { limit: 1000 };
    if (ranks.length > MAX_RANKS) q.filter = `rank<=${ranks[MAX_RANKS - 1]}`;
    const steps = await api<ViewResult>(profilePath(pid(), "/views/steps"), q);
    stepChart(left, steps.rows, meta.steps_error);
    if (ranks.length > MAX_RANKS)
      left.append(h("p", { class: "muted", id: "steps-chart-ranks" }, `Ranks ${ranks[0]}–${ranks[MAX_RANKS - 1]} of ${ranks.length}: every rank is on the Steps and Distributed pages.`));
  } catch (e) {
    left.append(h("p", { class: "error" }, "steps: " + (e as Error).message));
  }
  try {
    breakdown(right, (await overview).rows, meta.steps || []);
  } catch (e) {
    right.append(h("p", { class: "error" }, "overview: " + (e as Error).message));
  }
  await adviceShown;
}

function stepChart(box: HTMLElement, rows: Row[], error?: string | null): void {
  if (!rows.length) {
    box.append(emptyState("No steps in this profile.", error || "The trace marks no training steps (no ProfilerStep# spans).",
      RECORD_STEPS));
    return;
  }
  const c = h("canvas", { class: "chart", id: "steps-chart" });
  // The categories measured in some step (null: not measured, README); none measured
  // (a recording without operators or device work): the step time, not split.
  const cats = CATS.filter((k) => rows.some((r) => r[k + "_us"] !== null && r[k + "_us"] !== undefined));
  const unsplit = !cats.length;
  box.append(unsplit ? legend({ step: CAT_COLORS.other! }, ["step"]) : legend(CAT_COLORS, cats), c);
  if (unsplit)
    box.append(h("p", { class: "muted small", id: "steps-chart-unsplit" }, "Not split: the profile has no operators or device work (the Steps page has the phases from the Python samples)."));
  const many = new Set(rows.map((x) => x.rank)).size > 1;
  const labels = rows.map((r) => String(r.step === null ? "all" : r.step) + (many ? "/r" + String(r.rank) : ""));
  const series = unsplit
    ? [{ name: "step", color: CAT_COLORS.other!, values: rows.map((r) => Number(r.duration_us || 0)) }]
    : cats.map((k) => ({ name: k, color: CAT_COLORS[k]!, values: rows.map((r) => Number(r[k + "_us"] || 0)) }));
  c.dataset.totals = JSON.stringify(labels.map((_, i) => series.reduce((s, x) => s + x.values[i]!, 0)));
  stackedBars(c, labels, series, (v) => fmtValue(v, "µs"));
}

/** The device figures and the all-steps breakdown, as bars with their numbers beside them. */
function breakdown(box: HTMLElement, rows: Row[], steps: { rank?: unknown; step?: unknown }[]): void {
  const all = (r: Row) => r.step === null || r.step === undefined;
  const ranks = [...new Set(rows.filter(all).map((r) => Number(r.rank)))].sort((a, b) => a - b);
  const shown = ranks.slice(0, MAX_RANKS);
  const bars = (id: string, list: Row[], color: (c: string) => string, label: (c: string) => string = (c) => c) => {
    const out = h("div", { id });
    const cols = list.length ? Object.keys(list[0]!).map((name) => ({ name })) : [];
    out.append(exportButtons(`${pid()}.${id.replace(/-table$/, "")}`, () => ({ columns: cols, rows: list })));
    for (const rank of shown) {
      const rs = list.filter((r) => Number(r.rank) === rank);
      if (rs.length) out.append(ranks.length > 1 ? h("div", { class: "muted" }, `rank ${rank}`) : "", hbars(rs.map((r) => barRow(r, color(String(r.category)), label(String(r.category))))));
    }
    if (ranks.length > shown.length) out.append(h("p", { class: "muted" }, `${ranks.length - shown.length} more ranks: see the steps view.`));
    return out;
  };
  // A figure the profile did not measure is null (time_us and percent): left out of the bars, named under them.
  const measured = (r: Row) => r.time_us !== null && r.time_us !== undefined;
  const util = rows.filter((r) => (r.section === "utilization" || r.section === "device") && all(r) && measured(r));
  box.append(h("h3", {}, "Device utilization (all steps)"));
  if (!util.length)
    box.append(emptyState("No device activity recorded.", "The profile has no kernels, copies or collectives on a device.",
      ["with torch.profiler: activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]", "aiprof record --ops -- python train.py"]));
  else {
    box.append(bars("util-table", util, (c) => UTIL_COLORS[c] || "#6b7280", deviceFigure), h("p", { class: "muted small" },
      "busy: any kernel, copy or collective running, as a share of step time; compute / non_compute / idle split the device's active span as Holistic Trace Analysis does."));
    // As `aiprof report` says under a rank's device figures where the rank has 2+ steps.
    const withUtil = shown.filter((r) => util.some((x) => Number(x.rank) === r));
    const spanned = ranksWithSteps(steps, withUtil);
    if (spanned.length)
      box.append(h("p", { class: "muted small", id: "active-span-note" },
        (withUtil.length > 1 && spanned.length < withUtil.length ? `rank${spanned.length > 1 ? "s" : ""} ${spanned.join(", ")}: ` : "") + ACTIVE_SPAN_NOTE));
  }
  const bdAll = rows.filter((r) => r.section === "breakdown" && all(r));
  const bd = bdAll.filter(measured);
  const unmeasured = [...new Set(bdAll.filter((r) => !measured(r)).map((r) => String(r.category)))];
  box.append(h("h3", {}, "Where step time goes (all steps)"));
  if (!bd.length)
    box.append(h("p", { class: "muted", id: "breakdown-none" }, bdAll.length
      ? "Not measured in this profile: it has no operators or device work to split the step time by (record with --ops for the operators; the Steps page has the phases from the Python samples)."
      : "No breakdown: the profile has no steps, or no host and device events to split."));
  else {
    box.append(bars("breakdown-table", bd, (c) => CAT_COLORS[c] || "#999"));
    if (unmeasured.length)
      box.append(h("p", { class: "muted small", id: "breakdown-unmeasured" }, "Not measured in this profile, so left out: " + unmeasured.join(", ") + "."));
  }
}

function barRow(r: Row, color: string, label = String(r.category)): { label: string; pct: number; text: string; color: string; title: string } {
  const pct = Number(r.percent || 0);
  return { label, pct, color, text: `${fmtValue(r.time_us, "µs")} · ${fmtValue(r.percent, "%")}`, title: `${String(r.time_us)} µs` };
}

async function topAdvice(box: HTMLElement, answer: Promise<AdviceResponse>): Promise<void> {
  box.append(h("h3", {}, "Top advice"));
  const link = (label: string) => h("a", { href: formatHash({ pid: pid(), page: "advice" }), class: "advice-link" }, label);
  try {
    const a = await answer;
    if (!a.available && a.deferred && !EMBED) {
      box.append(h("p", { class: "muted" }, "Not computed yet: " + (a.reason || "") + "."));
      box.append(link("Compute it on the Advice page →"));
    } else if (!a.available) box.append(h("p", { class: "muted" }, "No advice: " + (a.reason || "the proposer is not available") + "."));
    else if (!a.advice.length) {
      // Rules that could not judge for lack of data: not "nothing stands out" (the CLI's words).
      const n = (a.not_judged ?? []).reduce((s, g) => s + g.rules.length, 0);
      box.append(h("p", { class: "muted", id: "top-advice-none" }, ...(n
        ? [`No advice: no rule fired on the data this profile holds; ${n} rules could not judge for lack of data (the `,
          link("Advice page"), " lists them)."]
        : ["No advice: nothing stands out in this profile."])));
    }
    for (const raw of a.advice.slice(0, TOP_ADVICE)) {
      const item = raw as Record<string, unknown>;
      const gain = Number(item.gain_pct);
      box.append(h("div", { class: "advice" },
        h("div", { class: "t" }, h("span", { class: "sev sev-" + String(item.severity || "info") }, String(item.severity || "")), " ", link(String(item.title || item.rule || "advice")),
          Number.isFinite(gain) && gain > 0 ? h("span", { class: "muted gain" }, `\u00a0· up to ${fmtValue(gain, "%")} of ${a.gain_of ?? "step time"}`) : null),
        item.summary ? h("div", {}, String(item.summary)) : null));
    }
    if (a.available && a.advice.length) box.append(link(a.advice.length > TOP_ADVICE ? `All ${a.advice.length} items on the Advice page →` : "Details on the Advice page →"));
  } catch (e) {
    box.append(h("p", { class: "muted" }, (EMBED ? "No advice in this report: " : "Advice unavailable: ") + (e as Error).message));
  }
}

/** The steps card: the steps' count, or for several ranks the step numbers times the ranks ("2 × 1024 ranks"). */
export function stepCount(steps: { rank?: unknown; step?: unknown }[]): string {
  const ranks = new Set(steps.map((s) => s.rank)).size;
  if (ranks <= 1) return String(steps.length);
  return `${new Set(steps.map((s) => s.step)).size} × ${ranks} ranks`;
}

/** "0-127" for consecutive ranks, else the first few ("0, 2, 5, …"). */
function rankSpan(ranks: number[]): string {
  const r = [...ranks].sort((a, b) => a - b);
  if (r[r.length - 1]! - r[0]! === r.length - 1) return `${r[0]}-${r[r.length - 1]}`;
  return r.length > 4 ? `${r.slice(0, 4).join(", ")}, …` : r.join(", ");
}
