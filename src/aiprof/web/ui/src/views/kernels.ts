// Kernels: the kernels view (with tb-profiler's Tensor Core test and the launch
// shapes Kineto records), the Tensor Core share per rank, and the kernel_metrics
// table's per-launch rows where the profile has them, named by their source (Nsight
// Compute's with their bound class; Ascend's kernel_details.csv...), the columns empty
// on every row left out.
import { api, EMBED, profilePath, type ProfileMeta, type Row, type ViewResult } from "../lib/api";
import { metricSources, metricsHeading } from "../lib/figures";
import { h } from "../lib/dom";
import { fmtValue } from "../lib/format";
import { pid } from "../state/app";
import { makeTable, type TableOptions } from "./table";

export async function kernelsPage(main: HTMLElement, action?: TableOptions["action"]): Promise<void> {
  main.append(h("h2", {}, "Kernels"));
  const tc = h("div", { id: "tc-share", class: "cards" });
  main.append(tc);
  // The one-file report embeds the kernels table only.
  if (!EMBED) try {
    const r = await api<ViewResult>(profilePath(pid(), "/views/tensor-cores"), { limit: 1000 });
    const sum = (k: string) => r.rows.reduce((s, x) => s + Number(x[k] || 0), 0);
    const all = sum("kernel_us"), on = sum("tensor_core_us");
    const card = (k: string, v: string) => h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));
    if (!r.rows.length || !all) tc.append(card("Tensor Cores", "no kernels"));
    else {
      tc.append(card("kernel time on Tensor Cores", fmtValue((100 * on) / all, "%")), card("Tensor Core kernel time", on ? fmtValue(on, "µs") : "none"),
        card("Tensor Core kernels", `${sum("tensor_core_kernels")} of ${sum("kernels")} names`));
      if (r.rows.length > 1) tc.append(card("per rank", r.rows.map((x: Row) => `r${x.rank}: ${Number(x.tensor_core_pct || 0).toFixed(1)} %`).join(" · ")));
    }
  } catch (e) {
    tc.append(h("p", { class: "error" }, (e as Error).message));
  }
  main.append(h("p", { class: "muted" }, "tensor_core: the kernel's name is a Tensor Core (or AMD matrix core) kernel's: tb-profiler's name patterns (h884, s1688, hmma, xmma_gemm…) plus cutlass tensorop, Hopper gmma and MFMA tiles (MI16x16x1), the rule the precision advice uses. grid, block, registers, shared memory and occupancy come from the trace where it records them."),
    makeTable("kernels", { bindUrl: true, action, keys: ["name"] }));
  const ncu = h("section", { id: "ncu-box" });
  main.append(ncu);
  if (!EMBED) try {
    const probe = await api<ViewResult>(profilePath(pid(), "/views/kernel-metrics"), { limit: 0 });
    if (probe.total) {
      const sources = ((await api<ProfileMeta>(profilePath(pid()))).sources || []) as Parameters<typeof metricSources>[0];
      ncu.append(h("h3", { id: "kernel-metrics-heading" }, metricsHeading(sources)));
      if (metricSources(sources).some((x) => x.ncu))
        ncu.append(h("p", { class: "muted" }, "bound: compute-bound, memory-bound, latency-bound or balanced, from the Speed-of-Light throughputs."));
      ncu.append(makeTable("kernel-metrics", { limit: 25, hideEmpty: "null" }));
    }
  } catch {
    // No kernel_metrics table: nothing to show (the Kineto kernels above stand alone).
  }
}
