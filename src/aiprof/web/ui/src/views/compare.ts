import { api, profilePath, type CompareResponse, type ViewResult } from "../lib/api";
import { h } from "../lib/dom";
import { fmtNum, fmtValue } from "../lib/format";
import { pid, state, updateRoute } from "../state/app";

const CATS = ["duration", "kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other", "idle"];

export async function comparePage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Compare two profiles"));
  const ok = state.profiles.filter((p) => p.status !== "broken");
  const selA = h("select", { id: "cmp-a", "aria-label": "profile A" }, ok.map((p) => h("option", { value: p.id }, p.name)));
  const selB = h("select", { id: "cmp-b", "aria-label": "profile B" }, ok.map((p) => h("option", { value: p.id }, p.name)));
  const known = (id?: string) => (id && ok.some((p) => p.id === id) ? id : undefined);
  selA.value = known(state.route.a) ?? pid();
  selB.value = known(state.route.b) ?? (ok.find((p) => p.id !== selA.value) || ok[0])?.id ?? "";
  const out = h("div", { id: "cmp-out" });
  main.append(h("div", { class: "tablebar" }, "A ", selA, " B ", selB, h("button", { onclick: () => void run() }, "Compare")), out);
  async function run(): Promise<void> {
    const a = selA.value, b = selB.value;
    updateRoute({ a, b });
    out.textContent = "Loading…";
    const [sa, sb] = await Promise.all([a, b].map((p) => api<ViewResult>(profilePath(p, "/views/steps"), { limit: 1000 })));
    out.textContent = "";
    const mean = (rows: Record<string, unknown>[], k: string) => (rows.length ? rows.reduce((s, r) => s + Number(r[k] || 0), 0) / rows.length : 0);
    const t = h("table", { class: "data", id: "cmp-steps" }, h("tr", {}, ["mean per step", "A", "B", "B − A", "B / A"].map((x) => h("th", {}, x))));
    for (const c of CATS) {
      const va = mean(sa!.rows, c + "_us"), vb = mean(sb!.rows, c + "_us");
      t.append(h("tr", {}, h("td", {}, c), h("td", { class: "num" }, fmtValue(va, "µs")), h("td", { class: "num" }, fmtValue(vb, "µs")),
        h("td", { class: "num" }, fmtValue(vb - va, "µs")), h("td", { class: "num" }, va ? (vb / va).toFixed(2) + "×" : "")));
    }
    out.append(h("h3", {}, `Step time (A: ${sa!.rows.length} steps, B: ${sb!.rows.length} steps)`), t);
    for (const [title, view, id, vk] of [["Operators", "operators", "cmp-ops", "host total"], ["Kernels", "kernels", "cmp-kernels", "total"]] as const) {
      // The server compares every name (aiprof.analysis.compare); the largest changes either way first.
      const q = { a, b, view, limit: 10 };
      const [up, down] = await Promise.all([api<CompareResponse>("/compare", { ...q, sort: "-delta_us" }), api<CompareResponse>("/compare", { ...q, sort: "delta_us" })]);
      const seen = new Set<string>();
      const diffs = [...up.rows, ...down.rows]
        .filter((d) => d.status !== "same" && !seen.has(String(d.name)) && seen.add(String(d.name)))
        .sort((x, y) => Math.abs(Number(y.delta_us)) - Math.abs(Number(x.delta_us)));
      const tt = h("table", { class: "data", id }, h("tr", {}, ["name", "A " + vk, "B " + vk, "B − A", "calls A", "calls B", "status"].map((x) => h("th", {}, x))));
      for (const d of diffs)
        tt.append(h("tr", {}, h("td", { title: String(d.name) }, String(d.name)), h("td", { class: "num" }, fmtValue(d.a_us, "µs")),
          h("td", { class: "num" }, fmtValue(d.b_us, "µs")), h("td", { class: "num" }, fmtValue(d.delta_us, "µs")),
          h("td", { class: "num" }, fmtNum(d.a_count)), h("td", { class: "num" }, fmtNum(d.b_count)), h("td", {}, String(d.status))));
      out.append(h("h3", {}, `Top differences: ${title.toLowerCase()} (${up.total} names compared)`), tt);
    }
  }
  await run();
}
