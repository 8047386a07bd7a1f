import { api, profilePath, type AdviceResponse } from "../lib/api";
import { h } from "../lib/dom";
import { columnUnit, fmtValue } from "../lib/format";
import { pid } from "../state/app";

export async function adviceList(n?: number): Promise<HTMLElement> {
  const box = h("div", { id: "advice" });
  try {
    const a = await api<AdviceResponse>(profilePath(pid(), "/advice"));
    if (!a.available) box.append(h("p", { class: "muted" }, "No advice: " + (a.reason || "the proposer is not available") + "."));
    else if (!a.advice.length) box.append(h("p", { class: "muted" }, "No advice: nothing stands out."));
    for (const raw of (a.advice || []).slice(0, n ?? 1000)) {
      const item = raw as Record<string, unknown>;
      const title = String(item.title || item.rule || item.name || "advice");
      const div = h("div", { class: "advice" }, h("div", { class: "t" }, title));
      for (const k of ["message", "summary", "detail", "fix", "expected_gain", "gain", "evidence"]) {
        const v = item[k];
        if (v === undefined || v === null) continue;
        div.append(h("div", {}, h("span", { class: "muted" }, k + ": "), typeof v === "object" ? figures(v as Record<string, unknown>) : String(v)));
      }
      box.append(div);
    }
  } catch (e) {
    box.append(h("p", { class: "muted" }, "Advice unavailable: " + (e as Error).message));
  }
  return box;
}

export async function advicePage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "Advice"), await adviceList());
}

/** An advice's evidence as "name value" pairs in humane units (the key's suffix names the unit). */
function figures(v: Record<string, unknown>): string {
  if (Array.isArray(v)) return JSON.stringify(v);
  return Object.entries(v)
    .map(([k, x]) => `${k.replace(/_(us|ms|ns|bytes|pct)$/, "")} ${typeof x === "number" ? fmtValue(x, columnUnit(k, null)) : JSON.stringify(x)}`)
    .join(" · ");
}
