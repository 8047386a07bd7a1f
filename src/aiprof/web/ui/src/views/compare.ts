// Compare: B against A. The step breakdown as a chart, `aiprof diff`'s verdicts per
// figure (analysis/regression.py), the largest changes by name with % and absolute, and
// a warning when the runs are not of one job: all from GET /compare (one shape).
import { api, profilePath, type CompareResponse, type Schemas, type ViewResult } from "../lib/api";
import { CAT_COLORS } from "../lib/colors";
import { h } from "../lib/dom";
import { fmtNum, fmtValue } from "../lib/format";
import { stackedBars } from "../render/charts";
import { pid, state, updateRoute } from "../state/app";
import { alignNumbers } from "./distributed";
import { legend } from "./overview";
import { exportTable } from "../lib/export";

/** The parts of step time (they add up to the step, as in the overview's breakdown). */
const CATS = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"];
const TOP = 10;
type Related = Schemas["RelatedResponse"];

const VERDICT_CLASS: Record<string, string> = { slower: "bad", higher: "bad", faster: "good", lower: "good" };

export async function comparePage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Compare two profiles"));
  const ok = state.profiles.filter((p) => p.status !== "broken");
  const known = (id?: string) => (id && ok.some((p) => p.id === id) ? id : undefined);
  const selA = h("select", { id: "cmp-a", "aria-label": "profile A" }, ok.map((p) => h("option", { value: p.id }, p.name)));
  const selB = h("select", { id: "cmp-b", "aria-label": "profile B" });
  selA.value = known(state.route.a) ?? pid();
  const out = h("div", { id: "cmp-out" });
  const go = h("button", { id: "cmp-go", onclick: () => void run() }, "Compare");
  main.append(h("div", { class: "tablebar" }, "A ", selA, " B ", selB, go), out);

  /** B's choices, each marked when its job differs from A's; returns the first of A's job. */
  async function fillB(): Promise<string | undefined> {
    const rel = await api<Related>("/compare/related", { a: selA.value });
    const diff = new Map(rel.profiles.map((p) => [p.id, p.differences]));
    selB.textContent = "";
    selB.append(h("option", { value: "" }, "— pick B —"));
    for (const p of ok) {
      const d = diff.get(p.id);
      const label = p.id === selA.value ? p.name + " (A itself)" : p.name + (d && d.length ? " (other job)" : "");
      selB.append(h("option", { value: p.id, title: d && d.length ? d.join("; ") : "" }, label));
    }
    // The default B: a profile of A's job, with as many ranks as A where there is one.
    const same = rel.profiles.filter((p) => !p.differences.length);
    return (same.find((p) => p.ranks === rel.ranks) ?? same[0])?.id;
  }

  async function run(): Promise<void> {
    const a = selA.value, b = selB.value;
    out.textContent = "";
    if (!b) {
      updateRoute({ a, b: undefined });
      out.append(h("p", { class: "muted", id: "cmp-pick" }, "No other profile comes from the same job as A (world size, devices and operators agree). Pick B to compare anyway."));
      return;
    }
    updateRoute({ a, b });
    out.textContent = "Loading…";
    // The server compares every name (aiprof.analysis.compare); the largest changes either way first.
    const changes = (view: "operators" | "kernels", sort: string) => api<CompareResponse>("/compare", { a, b, view, limit: TOP, sort });
    const [sa, sb, opsUp, opsDown, kUp, kDown] = await Promise.all([
      api<ViewResult>(profilePath(a, "/views/steps"), { limit: 10000 }),
      api<ViewResult>(profilePath(b, "/views/steps"), { limit: 10000 }),
      changes("operators", "-delta_us"), changes("operators", "delta_us"),
      changes("kernels", "-delta_us"), changes("kernels", "delta_us"),
    ]);
    const v = opsUp; // verdicts, too_few_steps and differences are the same in every /compare answer
    out.textContent = "";
    if (v.differences.length)
      out.append(h("div", { class: "warning", id: "cmp-warning", role: "alert" },
        h("strong", {}, "These runs come from different jobs; the comparison may mean little."), h("ul", {}, v.differences.map((d) => h("li", {}, d)))));
    // The mean over the steps that measured the figure; null where none did (not measured, README).
    const mean = (rows: Record<string, unknown>[], k: string): number | null => {
      const got = rows.filter((r) => r[k] !== null && r[k] !== undefined);
      return got.length ? got.reduce((s, r) => s + Number(r[k]), 0) / got.length : null;
    };
    const chart = h("canvas", { class: "chart", id: "cmp-chart" });
    // The categories either run measured; none (no operators or device work in either): the step, not split.
    const cats = CATS.filter((k) => mean(sa.rows, k + "_us") !== null || mean(sb.rows, k + "_us") !== null);
    const parts = cats.length ? cats : ["step"];
    const colors: Record<string, string> = { ...CAT_COLORS, step: CAT_COLORS.other! };
    const left = h("div", {}, h("h3", {}, `Mean step (A: ${sa.rows.length} steps, B: ${sb.rows.length} steps)`), legend(colors, parts), chart);
    const t = h("table", { class: "data", id: "cmp-steps" }, h("tr", {}, ["mean per step", "A", "B", "B − A", "change"].map((x) => h("th", {}, x))));
    // Device idle overlaps the host's parts (the device waits while the host runs): a row of the table, not a bar.
    const NOT_MEASURED = "not measured";
    for (const c of ["duration", ...CATS, "idle"]) {
      const va = mean(sa.rows, c + "_us"), vb = mean(sb.rows, c + "_us");
      if (!va && !vb) continue;
      const cell = (x: number | null) => h("td", { class: "num" }, x === null ? NOT_MEASURED : fmtValue(x, "µs"));
      const both = va !== null && vb !== null;
      t.append(h("tr", {}, h("td", {}, c === "duration" ? "step" : c === "idle" ? "device idle" : c), cell(va), cell(vb),
        h("td", { class: "num" }, both ? signed(vb - va, "µs") : "–"), h("td", { class: "num" }, !both ? "–" : va ? pct((100 * (vb - va)) / va) : "new")));
    }
    out.append(h("div", { class: "grid2" }, left, h("div", {}, h("h3", {}, "Breakdown ", exportTable(`${a}-vs-${b}.breakdown`, t, () => ({ a: sa, b: sb }))), t)));
    alignNumbers(t);
    const col = (k: string) => (k === "step" ? "duration_us" : k + "_us");
    stackedBars(chart, ["A", "B"], parts.map((k) => ({ name: k, color: colors[k] || "#999", values: [mean(sa.rows, col(k)) ?? 0, mean(sb.rows, col(k)) ?? 0] })), (x) => fmtValue(x, "µs"));

    const significant = v.verdicts.filter((r) => VERDICT_CLASS[String(r.verdict)]);
    const verdictsHead = h("h3", {}, "Verdicts per step figure (as aiprof diff) ");
    out.append(verdictsHead);
    // Why a figure was not tested, in aiprof diff's words (too few steps; or too few that did not wait for a CPU).
    if (v.note) out.append(h("p", { class: "muted", id: "cmp-note" }, v.note[0].toUpperCase() + v.note.slice(1) + "."));
    const vt = h("table", { class: "data", id: "cmp-verdicts" }, h("thead", {}, h("tr", {}, ["figure", "A median", "B median", "change", "95% interval", "p", "verdict"].map((x) => h("th", {}, x)))));
    const vb = h("tbody");
    for (const r of v.verdicts) {
      const unit = String(r.unit || "");
      vb.append(h("tr", { class: VERDICT_CLASS[String(r.verdict)] || "" }, h("td", {}, String(r.figure)),
        h("td", { class: "num" }, fmtValue(r.a_median, unit)), h("td", { class: "num" }, fmtValue(r.b_median, unit)),
        h("td", { class: "num" }, r.change_pct === null ? "–" : pct(Number(r.change_pct))),
        h("td", { class: "num" }, r.ci_low_pct === null || r.ci_low_pct === undefined ? "–" : `${pct(Number(r.ci_low_pct))} … ${pct(Number(r.ci_high_pct))}`),
        h("td", { class: "num" }, r.p_value === null || r.p_value === undefined ? "–" : Number(r.p_value) < 0.001 ? "< 0.001" : Number(r.p_value).toFixed(3)),
        h("td", { class: "verdict" }, String(r.verdict))));
    }
    vt.append(vb);
    verdictsHead.append(exportTable(`${a}-vs-${b}.verdicts`, vt, () => v));
    out.append(h("div", { class: "scrollx" }, vt));
    alignNumbers(vt);
    // Said once, as aiprof diff says them: the figures a run did not measure, and how the phases compare.
    const nm = v.not_measured || {};
    const leftOut = ([["both", "in A and B"], ["a", "in A"], ["b", "in B"]] as const)
      .filter(([k]) => (nm[k] || []).length).map(([k, where]) => `${where}: ${(nm[k] || []).join(", ")}`);
    if (leftOut.length) out.append(h("p", { class: "muted small", id: "cmp-not-measured" }, "Not compared, not measured " + leftOut.join("; ") + "."));
    if (v.phase_rule) out.append(h("p", { class: "muted small", id: "cmp-phase-rule" }, "The " + v.phase_rule + "."));

    let changed = 0;
    for (const [title, view, id, vk, up, down] of [["Operators", "operators", "cmp-ops", "host total", opsUp, opsDown], ["Kernels", "kernels", "cmp-kernels", "total", kUp, kDown]] as const) {
      const seen = new Set<string>();
      const diffs = [...up.rows, ...down.rows]
        .filter((d) => d.status !== "same" && Number(d.delta_us) !== 0 && !seen.has(String(d.name)) && seen.add(String(d.name)))
        .sort((x, y) => Math.abs(Number(y.delta_us)) - Math.abs(Number(x.delta_us)))
        .slice(0, TOP);
      changed += diffs.length;
      out.append(h("h3", {}, `Top changes: ${title.toLowerCase()} (${fmtNum(up.total)} names compared)`));
      if (!diffs.length) {
        out.append(h("p", { class: "muted" }, `No ${title.toLowerCase()} changed.`));
        continue;
      }
      const tt = h("table", { class: "data", id }, h("tr", {}, ["name", "A " + vk, "B " + vk, "B − A", "change", "calls A", "calls B", "status"].map((x) => h("th", {}, x))));
      for (const d of diffs)
        tt.append(h("tr", {}, h("td", { class: "name", title: String(d.name) }, String(d.name)), h("td", { class: "num" }, fmtValue(d.a_us, "µs")),
          h("td", { class: "num" }, fmtValue(d.b_us, "µs")), h("td", { class: "num" }, signed(Number(d.delta_us), "µs")),
          h("td", { class: "num" }, d.delta_pct === null || d.delta_pct === undefined ? (d.status === "added" ? "new" : "–") : pct(Number(d.delta_pct))),
          h("td", { class: "num" }, fmtNum(d.a_count)), h("td", { class: "num" }, fmtNum(d.b_count)), h("td", {}, String(d.status))));
      out.append(h("div", { class: "muted" }, exportTable(`${a}-vs-${b}.${view}`, tt, () => diffs)), h("div", { class: "scrollx" }, tt));
      alignNumbers(tt);
    }
    if (!significant.length && !changed)
      out.prepend(h("p", { class: "nodiff", id: "cmp-nodiff" }, "No difference: no step figure changed significantly and no kernel or operator time changed."));
    else if (!significant.length && v.too_few_steps)
      out.prepend(h("p", { class: "nodiff", id: "cmp-nodiff" }, "Too few steps to tell: a side has fewer than 4 steps, so no change can be called significant; the figures below are the totals."));
    else if (!significant.length)
      out.prepend(h("p", { class: "nodiff", id: "cmp-nodiff" }, "No significant difference in step time or its parts (the names below changed, within the noise of the steps)."));
  }

  selA.addEventListener("change", () => void fillB().then((first) => { selB.value = first ?? ""; return run(); }));
  selB.addEventListener("change", () => void run());
  const first = await fillB();
  selB.value = known(state.route.b) ?? first ?? "";
  await run();
}

/** A change in %; past +1000 % as a factor ("3131 ×"), which reads where "+313006.5 %" does not. */
function pct(v: number): string {
  if (v >= 1000) return (1 + v / 100).toFixed(0) + " ×";
  return (v > 0 ? "+" : "") + v.toFixed(1) + " %";
}

function signed(v: number, unit: string): string {
  return (v > 0 ? "+" : v < 0 ? "−" : "") + fmtValue(Math.abs(v), unit);
}
