// The advice page: exactly the document `aiprof advise --format json` prints (the API
// serves advise_json), one card per item in its order: severity, expected gain as a
// bar, the summary and how the gain was bounded, the evidence as a table with units,
// the fix with its code snippets (copy buttons) and "show on timeline" where the
// evidence names a step or an event; under them, the rules that could not judge for
// lack of data (not_judged), per missing datum, as `aiprof advise` words them.
import { api, EMBED, profilePath, type AdviceResponse, type ProfileMeta } from "../lib/api";
import { h } from "../lib/dom";
import { exportButtons } from "../lib/export";
import { columnUnit, fmtNs, fmtValue } from "../lib/format";
import { pid } from "../state/app";
import { showName, showStep } from "./show";

type Item = AdviceResponse["advice"][number];
type NotJudged = NonNullable<AdviceResponse["not_judged"]>[number];

export async function adviceList(n?: number, every = false): Promise<HTMLElement> {
  const box = h("div", { id: "advice" });
  let a: AdviceResponse;
  try {
    a = await api<AdviceResponse>(profilePath(pid(), "/advice"), every ? { all: "true" } : {});
  } catch (e) {
    box.append(h("p", { class: "error" }, "Advice unavailable: " + (e as Error).message));
    return box;
  }
  if (!a.available && a.deferred && !EMBED) {
    // A big profile: the advice takes minutes and GiBs, computed when the user asks.
    box.append(h("p", { class: "muted", id: "advice-deferred" }, "Not computed yet: " + (a.reason || "") + "."));
    const go = h("button", { id: "advice-compute", type: "button" }, "Compute the advice") as HTMLButtonElement;
    go.addEventListener("click", async () => {
      go.disabled = true;
      go.textContent = "Computing the advice (minutes on a profile this size)…";
      try {
        await api<AdviceResponse>(profilePath(pid(), "/advice"), { compute: "true" });
        box.replaceWith(await adviceList(n));
      } catch (e) {
        go.replaceWith(h("p", { class: "error" }, "Advice unavailable: " + (e as Error).message));
      }
    });
    box.append(go);
    return box;
  }
  if (!a.available) {
    box.append(h("p", { class: "muted" }, "No advice: " + (a.reason || "the proposer is not available") + "."));
    return box;
  }
  for (const w of a.warnings ?? []) box.append(h("p", { class: "warn-line" }, "Warning: " + w));
  const groups = a.not_judged ?? [];
  if (!a.advice.length) {
    // Rules that could not judge: "no rule fired" would read as "nothing wrong" (the CLI's words).
    const none = groups.length ? NONE_ON_THIS_DATA : "No advice: no rule fired, not even under 1% of step time.";
    box.append(h("p", { class: "muted empty" }, every ? none : await whyEmpty(groups.length > 0)));
    if (n === undefined && groups.length) box.append(notJudged(groups));
    if (n === undefined && !every && !EMBED) box.append(allButton(box, n));
    return box;
  }
  const items = a.advice.slice(0, n ?? a.advice.length);
  items.forEach((item, i) => box.append(card(item, i + 1, n === undefined, a.gain_of ?? "step time")));
  if (n === undefined) {
    box.append(h("p", { class: "muted", id: "advice-sum" },
      `Sum of the gains: ${a.gain_sum_pct?.toFixed(1) ?? "?"}% of ${a.gain_of ?? "step time"} (each µs counted for one cause)` +
        (a.total_us ? `; profiled step time ${fmtNs(a.total_us * 1e3)}.` : ".")));
    if (groups.length) box.append(notJudged(groups));
    if (!every && !EMBED) box.append(allButton(box, n));
  }
  return box;
}

/** `aiprof advise`'s first line where no rule fired and some could not judge. */
const NONE_ON_THIS_DATA = "No advice: no rule fired on the data this profile holds.";

/** The rules that could not judge for lack of data, one line per missing datum, in the
 * CLI's words (cli/advise.py not_judged_lines), unfolded (it folds). */
function notJudged(groups: NotJudged[]): HTMLElement {
  const n = groups.reduce((s, g) => s + g.rules.length, 0);
  const list = h("ul", {}, groups.map((g) => h("li", { "data-missing": g.missing },
    h("span", { class: "missing" }, g.missing), ": ", h("span", { class: "rules" }, g.rules.join(", ")))));
  return h("details", { id: "advice-not-judged", class: "not-judged", open: true },
    h("summary", {}, h("b", {}, "Not judged"), ` · ${n} rules could not judge for lack of data:`), list);
}

/** The items under 1% of step time too (aiprof advise --all), shown when asked. */
function allButton(box: HTMLElement, n?: number): HTMLElement {
  const b = h("button", { id: "advice-all", type: "button" }, "Show the smaller items too (under 1% of step time: aiprof advise --all)") as HTMLButtonElement;
  b.addEventListener("click", async () => {
    b.disabled = true;
    box.replaceWith(await adviceList(n, true));
  });
  return b;
}

export async function advicePage(main: HTMLElement): Promise<void> {
  const head = h("div", { class: "pagehead" }, h("h2", {}, "Advice"));
  main.append(head);
  const list = await adviceList();
  // The whole document, as `aiprof advise --format json` writes it.
  head.append(exportButtons(pid() + ".advice", async () => {
    const a = await api<AdviceResponse>(profilePath(pid(), "/advice"));
    return { columns: ITEM_COLUMNS, rows: a.advice.map(flat), raw: a };
  }));
  main.append(list);
}

const ITEM_COLUMNS = ["rule", "title", "severity", "gain_pct", "gain_us", "estimate_us", "cause", "cause_us", "summary", "evidence", "fix"].map((name) => ({ name }));
const flat = (a: Item): Record<string, unknown> => Object.fromEntries(ITEM_COLUMNS.map((c) => [c.name, (a as Record<string, unknown>)[c.name]]));

function card(a: Item, rank: number, full: boolean, of: string): HTMLElement {
  const gain = Math.max(0, Math.min(100, a.gain_pct));
  const div = h("div", { class: "advice sev-" + a.severity, "data-rule": a.rule },
    h("div", { class: "advice-head" },
      h("span", { class: "rank" }, String(rank) + "."),
      h("span", { class: "sev sev-" + a.severity, title: "severity: high ≥ 5% of step time, medium ≥ 3%, low ≥ 1%" }, a.severity),
      h("span", { class: "t" }, a.title),
      h("span", { class: "gain", title: `expected gain: ${a.gain_pct}% of ${of}` },
        h("span", { class: "gainbar" }, h("i", { style: `width:${gain.toFixed(2)}%` })),
        h("span", { class: "gain-pct" }, `${a.gain_pct.toFixed(1)}%`))),
    h("div", { class: "summary" }, a.summary));
  if (!full) return div;
  div.append(h("div", { class: "muted gainline" }, gainLine(a)));
  div.append(evidenceTable(a.evidence, a.rule));
  div.append(h("div", { class: "fix" }, h("b", {}, "Fix: "), a.fix));
  const snips = Object.entries(a.snippets ?? {});
  if (snips.length) div.append(h("div", { class: "snippets" }, snips.map(([name, code]) => snippet(name, code))));
  for (const o of a.also ?? []) {
    div.append(h("div", { class: "also" }, h("span", { class: "muted" }, "Same time, also seen: "), h("b", {}, String(o.title)),
      ` (${String(o.rule)}): ${String(o.summary)} Fix: ${String(o.fix)}`));
  }
  const evRows = Object.entries(a.evidence).map(([key, value]) => ({ key, value }));
  div.append(h("div", { class: "muted rule" }, "rule " + a.rule + " · evidence ",
    exportButtons(pid() + "." + a.rule + ".evidence", () => ({ columns: [{ name: "key" }, { name: "value" }], rows: evRows, raw: a.evidence }))));
  return div;
}

/** Why no rule fired, from what the profile holds, and the command that records what is
 * missing; ``unjudged``: some rules could not judge (listed under it). */
async function whyEmpty(unjudged: boolean): Promise<string> {
  let meta: ProfileMeta | null = null;
  try {
    meta = await api<ProfileMeta>(profilePath(pid()));
  } catch {
    // The reason is then the general one.
  }
  const t = (meta?.tables ?? {}) as Record<string, number>;
  if (meta && !t.events) {
    const rows = Object.entries(t).filter(([, n]) => n > 0).map(([k, n]) => `${n.toLocaleString("en-US")} rows of ${k}`);
    const held = rows.length ? ` (it holds ${rows.join(", ")} only)` : "";
    const record = "Record a trace with `aiprof record -o OUT -- python train.py` (add --ops for operators), or import the framework profiler's trace (`aiprof import trace.json`).";
    if (unjudged) return `${NONE_ON_THIS_DATA.slice(0, -1)}: it has no trace events${held}. ${record}`;
    return `No advice: this profile has no trace events${held}, and every rule reads the run's events. ${record}`;
  }
  const mark = "Mark steps (torch.profiler's prof.step(), or aiprof.annotate) or let `aiprof record` find them (one per optimizer.step()).";
  if (meta && !(meta.steps ?? []).length)
    return unjudged
      ? `${NONE_ON_THIS_DATA.slice(0, -1)}, and no training steps were found (gains are shares of step time). ${mark}`
      : `No advice: no training steps were found, and gains are shares of step time. ${mark}`;
  if (unjudged) return NONE_ON_THIS_DATA.slice(0, -1) + " (`aiprof advise --all` lists the items under 1% of step time).";
  return "No advice: nothing stands out; no rule's expected gain reaches 1% of step time (`aiprof advise --all` lists the smaller items).";
}

/** How the gain was bounded, in the CLI's words. */
function gainLine(a: Item): string {
  if (!a.cause) return "Gain: this advice saves no step time.";
  const ms = (us: number) => fmtNs(us * 1e3);
  return `Gain: ${ms(a.gain_us)}, the rule's estimate (${ms(a.estimate_us)}) bounded by the time attributed to ${a.cause} (${ms(a.cause_us)}).`;
}

/** Evidence keys that name something on the timeline: a step, or an event by its name. */
const STEP_KEYS = new Set(["step", "worst_step", "slowest_step", "outlier_steps"]);
const NAME_KEYS = new Set(["kernel", "operator", "op", "name", "top_kernel", "top_operator", "api", "collective", "event"]);

function evidenceTable(ev: Record<string, unknown>, rule: string): HTMLElement {
  const t = h("table", { class: "data evidence", "data-rule": rule });
  t.append(h("thead", {}, h("tr", {}, h("th", {}, "evidence"), h("th", {}, "value"), h("th", { class: "act" }, ""))));
  const tb = h("tbody");
  for (const [k, v] of Object.entries(ev)) {
    const unit = columnUnit(k, null);
    const label = k.replace(/_(us|ms|ns|bytes|pct)$/, "").replace(/_/g, " ");
    const shown = typeof v === "number" ? fmtValue(v, unit) : v === null || v === undefined ? "" : typeof v === "object" ? listText(v) : String(v);
    const act = h("td", { class: "act" });
    const step = Array.isArray(v) ? v[0] : v;
    if (EMBED) {
      // The one-file report has no timeline to show it on.
    } else if (STEP_KEYS.has(k) && (typeof step === "number" || typeof step === "string"))
      act.append(showButton(`show step ${step} on the timeline`, () => showStep({ step })));
    else if (NAME_KEYS.has(k) && typeof v === "string" && v)
      act.append(showButton("show the longest instance on the timeline", () => showName(v)));
    tb.append(h("tr", { "data-key": k },
      h("td", { title: k + (unit ? ` (${unit})` : "") }, label),
      h("td", { class: typeof v === "number" ? "num" : "", title: v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v) }, shown),
      act));
  }
  t.append(tb);
  return h("div", { class: "evidence-wrap" }, t);
}

/** A list or record in evidence, readable: "a, b, c" or "k: v · k: v". */
function listText(v: object): string {
  if (Array.isArray(v)) return v.map((x) => (typeof x === "object" && x !== null ? listText(x) : String(x))).join(", ");
  return Object.entries(v).map(([k, x]) => `${k}: ${typeof x === "number" ? fmtValue(x, columnUnit(k, null)) : typeof x === "object" && x !== null ? listText(x) : String(x)}`).join(" · ");
}

function showButton(title: string, run: () => Promise<void>): HTMLElement {
  const b = h("button", { class: "show-tl", title }, "timeline");
  b.addEventListener("click", () => void run().catch((e: Error) => { b.replaceWith(h("span", { class: "error small" }, e.message)); }));
  return b;
}

const SNIPPET_NAMES: Record<string, string> = { pytorch: "PyTorch", mindspore: "MindSpore", torch_npu: "torch_npu (Ascend)", cuda: "CUDA", rocm: "ROCm", ascend: "Ascend", vendor: "vendor" };

function snippet(name: string, code: string): HTMLElement {
  const copy = h("button", { class: "copy", title: "copy the code" }, "copy");
  copy.addEventListener("click", () => {
    void copyText(code).then((ok) => {
      copy.textContent = ok ? "copied" : "select and copy";
      setTimeout(() => (copy.textContent = "copy"), 1500);
    });
  });
  return h("div", { class: "snippet", "data-name": name },
    h("div", { class: "snippet-head" }, h("span", {}, SNIPPET_NAMES[name] ?? name), copy),
    h("pre", {}, h("code", {}, code)));
}

async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // No clipboard API (plain http on another host, or the report opened from a file).
    const ta = h("textarea", { style: "position:fixed;left:-9999px" });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    return ok;
  }
}
