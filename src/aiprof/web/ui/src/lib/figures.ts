// How figures are named on the pages, the same words as the CLI's report.

/** A device figure of the overview view as `aiprof report` names it (cli/overview.py):
 * device_busy is a share of step time, the others of the device's active span. */
export function deviceFigure(category: string): string {
  return category === "device_busy" ? "busy (of step time)" : `${category} (of active span)`;
}

/** The CLI's note under the device figures of a rank with two or more steps. */
export const ACTIVE_SPAN_NOTE =
  "active span: the device's first operation to its last one launched before the last step " +
  "(Holistic Trace Analysis's window: the profiler usually cuts the last step short); " +
  "the step time split covers every step";

/** The ranks (of ``ranks``) with two or more steps in ``steps`` (the profile's steps). */
export function ranksWithSteps(steps: { rank?: unknown; step?: unknown }[], ranks: number[]): number[] {
  const n = new Map<number, number>();
  for (const s of steps) if (s.step !== null && s.step !== undefined) n.set(Number(s.rank ?? 0), (n.get(Number(s.rank ?? 0)) || 0) + 1);
  return ranks.filter((r) => (n.get(r) || 0) >= 2);
}

/** A source as the API lists it (``file``: the file's name; ``path`` in the profile's own metadata). */
type Source = { importer?: unknown; file?: unknown; path?: unknown; file_kind?: unknown };

/** The importers' families, as their tools are called. */
const VENDORS: [RegExp, string][] = [
  [/^ncu/, "Nsight Compute"], [/^nsys/, "Nsight Systems"], [/^ascend/, "Ascend"], [/^mindspore/, "MindSpore"],
  [/^cnperf/, "Cambricon CNPerf"], [/^popvision/, "PopVision"], [/^kineto/, "Kineto"],
];
/** File kinds that go to the timeline, memory or counters, not to kernel_metrics. */
const NOT_METRICS = /^(trace|timeline)|memory|_mem$/;

const base = (p: unknown) => String(p ?? "").split(/[\\/]/).pop() || "";

/** The sources the kernel_metrics rows come from: Nsight Compute files, and the summary
 * files of a multi-file importer (its ``file_kind``) that are not timelines or memory. */
export function metricSources(sources: Source[]): { label: string; ncu: boolean }[] {
  const out: { label: string; ncu: boolean }[] = [];
  for (const s of sources) {
    const imp = String(s.importer ?? "");
    const kind = typeof s.file_kind === "string" ? s.file_kind : "";
    const ncu = /^ncu/.test(imp);
    if (!ncu && (!kind || NOT_METRICS.test(kind))) continue;
    const vendor = VENDORS.find(([re]) => re.test(imp))?.[1] ?? imp;
    const label = ncu ? `${vendor} (${base(s.file ?? s.path)})` : `${vendor} ${kind.replace(/_/g, " ")} (${base(s.file ?? s.path)})`;
    if (!out.some((o) => o.label === label)) out.push({ label, ncu });
  }
  return out;
}

/** The heading of the kernel_metrics section: "Nsight Compute launches" only where every
 * row comes from ncu; else the sources it comes from ("Ascend kernel details (kernel_details.csv)"). */
export function metricsHeading(sources: Source[]): string {
  const src = metricSources(sources);
  if (src.length && src.every((s) => s.ncu)) return "Nsight Compute launches";
  if (!src.length) return "Kernel metrics (per launch)";
  return src.map((s) => s.label).join(" · ");
}
