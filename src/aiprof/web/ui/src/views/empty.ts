// The one empty state: what is missing, why, and how to record it.
import { h } from "../lib/dom";

export function emptyState(what: string, why: string, record: string[] = []): HTMLElement {
  return h("div", { class: "empty" },
    h("div", { class: "t" }, what),
    h("div", {}, why),
    record.length ? h("div", { class: "muted" }, "To record it:") : null,
    record.length ? h("ul", {}, record.map((c) => h("li", {}, h("code", {}, c)))) : null);
}

/** How to get steps into a profile. */
export const RECORD_STEPS = ["with torch.profiler: call prof.step() once per iteration", "aiprof record -- python train.py  (one step per optimizer.step())"];
