import { api, EMBED, profilePath, type CounterMetrics, type CounterSeries } from "../lib/api";
import { h } from "../lib/dom";
import { fmtValue } from "../lib/format";
import { lineChart } from "../render/charts";
import { pid } from "../state/app";
import { emptyState } from "./empty";
import { makeTable } from "./table";

export async function countersPage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Counters"), makeTable("counters", { bindUrl: true, rowUnit: ["min", "mean", "max", "last"] }));
  if (EMBED) return;
  const m = await api<CounterMetrics>(profilePath(pid(), "/counters"));
  if (!m.metrics.length) {
    main.append(emptyState("No counters in this profile.", "Counters are device telemetry sampled over time (power, clocks, utilization, memory); this profile has none.",
      ["aiprof record -- python train.py  (polls device telemetry unless --no-device)", "aiprof import dmon.txt  (nvidia-smi dmon, hl-smi or cnmon output)"]));
    return;
  }
  const sel = h("select", { id: "counter-metric", "aria-label": "metric" },
    m.metrics.map((x, i) => h("option", { value: i }, `${x.metric}${x.unit ? " (" + x.unit + ")" : ""} · rank ${x.rank}, ${x.device_type} ${x.device ?? ""}`)));
  const c = h("canvas", { class: "chart" });
  main.append(h("h3", {}, "Counter over time"), sel, c);
  const draw = async () => {
    const x = m.metrics[Number(sel.value)]!;
    const s = await api<CounterSeries>(profilePath(pid(), "/counters/series"), { metric: x.metric, rank: x.rank, device: x.device, width: 800 });
    lineChart(c, [{ name: x.metric, color: "#059669", ts: s.ts, v: s.max }], (v) => fmtValue(v, x.unit));
  };
  sel.addEventListener("change", () => void draw());
  requestAnimationFrame(() => void draw());
}
