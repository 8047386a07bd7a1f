import { api, profilePath, type ProfileMeta, type ViewResult } from "../lib/api";
import { CAT_COLORS } from "../lib/colors";
import { h } from "../lib/dom";
import { fmtNs, fmtNum, fmtValue } from "../lib/format";
import { stackedBars } from "../render/charts";
import { pid } from "../state/app";
import { adviceList } from "./advice";

const CATS = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"];

export function legend(colors: Record<string, string>, names: string[]): HTMLElement {
  return h("div", { class: "legend" }, names.map((n) => h("span", {}, h("i", { style: "background:" + (colors[n] || "#999") }), n)));
}

export async function overviewPage(main: HTMLElement): Promise<void> {
  const meta = await api<ProfileMeta>(profilePath(pid()));
  const devs = (meta.devices || []).filter((d) => d.type !== "cpu");
  const card = (k: string, v: string) => h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v", title: v }, v));
  const span = meta.span_ns;
  main.append(
    h("h2", {}, "Overview"),
    h("div", { class: "cards" },
      card("profile", meta.name), card("ranks", (meta.ranks || []).join(", ") || "–"),
      card("devices", devs.length ? `${devs.length} × ${String(devs[0]!.name || devs[0]!.type)}` : "none"),
      card("steps", String((meta.steps || []).length)), card("span", fmtNs((span[1] ?? 0) - (span[0] ?? 0))),
      card("events", fmtNum((meta.tables || {}).events || 0))),
  );
  const left = h("div"), right = h("div");
  main.append(h("div", { class: "grid2" }, left, right));
  left.append(h("h3", {}, "Step time breakdown"));
  try {
    const steps = await api<ViewResult>(profilePath(pid(), "/views/steps"), { limit: 1000 });
    const rows = steps.rows;
    if (!rows.length) left.append(h("p", { class: "muted" }, "No steps."));
    else {
      const c = h("canvas", { class: "chart", id: "steps-chart" });
      left.append(legend(CAT_COLORS, CATS), c);
      const many = new Set(rows.map((x) => x.rank)).size > 1;
      const labels = rows.map((r) => String(r.step === null ? "all" : r.step) + (many ? "/r" + String(r.rank) : ""));
      stackedBars(c, labels, CATS.map((k) => ({ name: k, color: CAT_COLORS[k]!, values: rows.map((r) => Number(r[k + "_us"] || 0)) })), (v) => fmtValue(v, "µs"));
    }
  } catch (e) {
    left.append(h("p", { class: "error" }, "steps: " + (e as Error).message));
  }
  right.append(h("h3", {}, "Device utilization"));
  try {
    const ov = await api<ViewResult>(profilePath(pid(), "/views/overview"), { limit: 10000 });
    const all = (r: Record<string, unknown>) => r.step === null || r.step === undefined;
    const util = ov.rows.filter((r) => r.section === "device" && all(r));
    const busy = ov.rows.filter((r) => r.section === "utilization" && all(r));
    const t = h("table", { class: "data", id: "util-table" }, h("tr", {}, ["rank", "device", "figure", "time", "%"].map((x) => h("th", {}, x))));
    for (const r of busy.concat(util)) {
      const pct = Number(r.percent || 0);
      t.append(h("tr", {},
        h("td", {}, String(r.rank)), h("td", {}, r.device === null || r.device === undefined ? "" : String(r.device)), h("td", {}, String(r.category)),
        h("td", { class: "num", title: String(r.time_us) }, fmtValue(r.time_us, "µs")),
        h("td", { class: "num" }, h("span", {}, fmtValue(r.percent, "%")), h("span", { class: "bar", style: `width:${Math.max(0, Math.min(100, pct))}px` }))));
    }
    right.append(t);
    const bd = ov.rows.filter((r) => r.section === "breakdown" && all(r));
    if (bd.length) {
      right.append(h("h3", {}, "Where step time goes (all steps)"));
      const t2 = h("table", { class: "data", id: "breakdown-table" }, h("tr", {}, ["rank", "category", "time", "%"].map((x) => h("th", {}, x))));
      for (const r of bd)
        t2.append(h("tr", {}, h("td", {}, String(r.rank)),
          h("td", {}, h("i", { class: "swatch", style: `background:${CAT_COLORS[String(r.category)] || "#999"}` }), String(r.category)),
          h("td", { class: "num", title: String(r.time_us) }, fmtValue(r.time_us, "µs")), h("td", { class: "num" }, fmtValue(r.percent, "%"))));
      right.append(t2);
    }
  } catch (e) {
    right.append(h("p", { class: "error" }, "overview: " + (e as Error).message));
  }
  main.append(h("h3", {}, "Top advice"), await adviceList(5));
}
