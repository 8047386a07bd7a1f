// A server-side table: filter (the CLI's syntax), sort by a header click, pages.
// Its state lives in the URL when ``bindUrl`` (one table per page), so reload and
// Back restore it. Numbers show with humane units; the raw value is the cell's title.
import { api, EMBED, profilePath, type Row, type ViewResult } from "../lib/api";
import { h } from "../lib/dom";
import { exportButtons } from "../lib/export";
import { hiddenColumns, isFigureType, isNull, UNMEASURED, UNMEASURED_TITLE } from "../lib/columns";
import { columnUnit, fmtValue } from "../lib/format";
import { pid, state, updateRoute } from "../state/app";

export interface TableOptions {
  bindUrl?: boolean;
  limit?: number;
  params?: Record<string, string>;
  /** A button at the end of each row (e.g. "show on timeline"). */
  action?: { label: string; title: string; run: (row: Row) => void };
  onload?: (res: ViewResult) => void;
  /** Leave out the columns that are zero or empty on every row shown (named below the table);
   * "null": those empty (null, "") on every row shown, zeros kept. */
  hideEmpty?: boolean | "null";
  /** Columns whose unit is the row's own ``unit`` cell (the counters view: one metric a row). */
  rowUnit?: string[];
  /** Shown instead of an empty table when the view has no rows at all (no filter set). */
  empty?: () => HTMLElement;
  /** Columns that say which row it is (steps: rank, step): they stay at the left, with the
   * row's button, while a wide table scrolls sideways inside its box. */
  keys?: string[];
  /** A null in a number column is a figure the profile did not measure (the steps view:
   * a phase without Python samples): shown as {@link UNMEASURED}, its tooltip says so,
   * never as a zero; with ``hideEmpty`` such columns null on every row shown are left
   * out and named as not measured, apart from those that are zero. */
  unmeasured?: boolean;
}

/** Most rows an export asks for (the API's MAX_LIMIT). */
export const EXPORT_LIMIT = 10000;

/** A header's text: the name without its unit suffix, and the unit it is shown in. */
export function headerLabel(name: string, unit: string | null): (string | HTMLElement)[] {
  let base = name.replace(/_(us|ms|ns|bytes|pct)$/, "").replace(/_/g, " ");
  // "energy j" in J, "sm frequency hz" in Hz: the unit is said once, below the name.
  if (unit && base.toLowerCase().endsWith(" " + unit.toLowerCase())) base = base.slice(0, -unit.length - 1);
  return unit ? [base, h("span", { class: "unit" }, unit)] : [base];
}

export function makeTable(view: string, opts: TableOptions = {}): HTMLElement {
  const r = opts.bindUrl ? state.route : { filter: undefined, sort: undefined, offset: undefined };
  const st = { sort: r.sort ?? "", filters: r.filter ?? "", offset: r.offset ?? 0, limit: opts.limit ?? 50 };
  const wrap = h("div", { class: "table", "data-view": view });
  const input = h("input", { type: "text", placeholder: "filters, ';' between: name~gemm; count>=10; kind=kernel", value: st.filters, "aria-label": "filters" });
  const info = h("span", { class: "muted pageinfo" });
  const prev = h("button", { onclick: () => { st.offset = Math.max(0, st.offset - st.limit); load(); } }, "‹ prev");
  const next = h("button", { onclick: () => { st.offset += st.limit; load(); } }, "next ›");
  const applyFilter = () => { st.filters = input.value; st.offset = 0; load(); };
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") applyFilter(); });
  const apply = h("button", { onclick: applyFilter }, "Filter");
  const tw = h("div", { class: "tablewrap" });
  const err = h("div", { class: "error" });
  // Export: every row that matches the filters, in the current order (up to the API's limit).
  const all = () => fetchPage({ offset: 0, limit: EXPORT_LIMIT });
  const exp = exportButtons(pid() + "." + view, all, (e) => { err.textContent = "Export failed: " + e.message; });
  wrap.append(h("div", { class: "tablebar" }, input, apply, prev, next, info, exp), err, tw);

  // A view a big profile computes only when asked (its operators): asked for once the
  // user pressed its button, then every page of it.
  let compute = false;
  async function fetchPage(page: { offset: number; limit: number } = st): Promise<ViewResult> {
    const filters = st.filters.split(";").map((s) => s.trim()).filter(Boolean);
    if (EMBED) {
      const all = await api<ViewResult>(profilePath(pid(), "/views/" + view));
      // A view the report could not compute, or left out (a big profile's operators): why.
      const why = (all as { error?: unknown }).error;
      if (typeof why === "string" && why) throw new Error(why);
      let rows = localFilter(all.rows, filters);
      if (st.sort) {
        const desc = st.sort.startsWith("-");
        const c = st.sort.replace(/^[-+]/, "");
        rows = rows.slice().sort((a, b) => cmp(a[c], b[c]) * (desc ? -1 : 1));
      }
      return { ...all, rows: rows.slice(page.offset, page.offset + page.limit), total: rows.length };
    }
    const params: Record<string, string | number | string[]> = { filter: filters, limit: page.limit, offset: page.offset };
    if (st.sort) params.sort = st.sort;
    for (const [k, v] of Object.entries(opts.params || {})) params["param." + k] = v;
    if (compute) params.compute = "true";
    return api<ViewResult>(profilePath(pid(), "/views/" + view), params);
  }

  function showDeferred(res: ViewResult): void {
    tw.textContent = "";
    const go = h("button", { type: "button", class: "view-compute" }, `Compute the ${view} view`) as HTMLButtonElement;
    go.addEventListener("click", () => {
      compute = true;
      go.disabled = true;
      go.textContent = `Computing the ${view} view (minutes on a profile this size)…`;
      void load();
    });
    tw.append(h("div", { class: "deferred" }, h("p", { class: "muted view-deferred" }, "Not computed yet: " + (res.reason || "") + "."), go));
    info.textContent = "not computed yet";
    info.dataset.total = "";
    prev.disabled = next.disabled = true;
    setComputed(false);
  }

  /** The filter and the CSV/JSON buttons work on a computed view only (before, an
   * export would download an empty table). */
  function setComputed(on: boolean): void {
    for (const b of [input, apply, ...Array.from(exp.querySelectorAll("button"))] as (HTMLButtonElement | HTMLInputElement)[]) b.disabled = !on;
    exp.title = on ? "" : "the view is not computed yet";
  }

  async function load(): Promise<void> {
    err.textContent = "";
    if (opts.bindUrl) updateRoute({ filter: st.filters || undefined, sort: st.sort || undefined, offset: st.offset || undefined });
    let res: ViewResult;
    try {
      res = await fetchPage();
    } catch (e) {
      err.textContent = (e as Error).message;
      return;
    }
    if (res.deferred) {
      showDeferred(res);
      return;
    }
    setComputed(true);
    const qsort = (res.query as { sort?: { column: string; desc: boolean }[] } | null | undefined)?.sort;
    if (!st.sort && qsort && qsort.length) st.sort = (qsort[0]!.desc ? "-" : "") + qsort[0]!.column;
    const t = h("table", { class: "data" });
    const trh = h("tr");
    if (opts.action) trh.append(h("th", { class: "act" + (opts.keys?.length ? " key" : "") }, ""));
    const left = hiddenColumns(res.columns, res.rows, opts.hideEmpty, opts.unmeasured);
    const hidden = [...left.notMeasured, ...left.empty];
    // The key columns first (in their order), then the rest as the view gives them.
    const keys = (opts.keys || []).filter((k) => res.columns.some((c) => c.name === k) && !hidden.includes(k));
    const shownCols = res.columns.filter((c) => !hidden.includes(c.name));
    const cols = [...keys.map((k) => shownCols.find((c) => c.name === k)!), ...shownCols.filter((c) => !keys.includes(c.name))];
    const keyCls = (name: string) => (keys.includes(name) ? " key" : "");
    for (const c of cols) {
      const unit = columnUnit(c.name, c.unit);
      const cls = st.sort === c.name ? "sorted-asc" : st.sort === "-" + c.name ? "sorted-desc" : "";
      trh.append(
        h("th", {
          class: cls + keyCls(c.name), "data-col": c.name, title: `${c.name}${unit ? " (raw values in " + unit + " in each cell's tooltip)" : ""}: click to sort`,
          onclick: () => { st.sort = st.sort === "-" + c.name ? c.name : "-" + c.name; st.offset = 0; load(); },
        }, headerLabel(c.name, unit)),
      );
    }
    t.append(h("thead", {}, trh));
    const tb = h("tbody");
    for (const row of res.rows) {
      const tr = h("tr");
      if (opts.action) {
        const a = opts.action;
        tr.append(h("td", { class: "act" + (keys.length ? " key" : "") }, h("button", { class: "show-tl", title: a.title, onclick: () => a.run(row) }, a.label)));
      }
      for (const c of cols) {
        const v = row[c.name];
        const num = typeof v === "number";
        const unit = opts.rowUnit?.includes(c.name) && row.unit ? String(row.unit) : columnUnit(c.name, c.unit);
        if (opts.unmeasured && isFigureType(c.type) && (v === null || v === undefined)) {
          tr.append(h("td", { class: "num unmeasured" + keyCls(c.name), title: UNMEASURED_TITLE }, UNMEASURED));
          continue;
        }
        const shown = num ? fmtValue(v, unit) : v === null || v === undefined ? "" : String(v);
        tr.append(h("td", { class: (num ? "num" : "") + keyCls(c.name), title: v === null || v === undefined ? "" : String(v) }, shown));
      }
      tb.append(tr);
    }
    t.append(tb);
    tw.textContent = "";
    // No rows and nothing filtered out: the empty state alone, not a header of columns.
    if (!res.total && !st.filters && opts.empty) tw.append(opts.empty());
    else tw.append(t);
    if (keys.length) pinKeys(t);
    if (hidden.length) {
      const note = h("p", { class: "muted hidden-cols" });
      if (left.notMeasured.length)
        note.append(h("span", { class: "unmeasured-cols", title: UNMEASURED_TITLE }, "Not measured in this profile, so left out: " + left.notMeasured.join(", ") + ". "));
      if (left.empty.length)
        note.append(h("span", { class: "zero-cols" }, (opts.hideEmpty === "null" ? "Empty on every row shown, so left out: " : "Zero on every row shown, so left out: ") + left.empty.join(", ") + ". "));
      tw.append(note);
    }
    // A figure shown as — in some cell: the key to it.
    if (opts.unmeasured && cols.some((c) => isFigureType(c.type) && res.rows.some((r) => isNull(r[c.name]))))
      tw.append(h("p", { class: "muted unmeasured-key" }, `${UNMEASURED} ${UNMEASURED_TITLE}.`));
    const end = Math.min(res.total, st.offset + res.rows.length);
    info.textContent = res.total ? `rows ${st.offset + 1}–${end} of ${res.total.toLocaleString("en-US")}` : "no rows";
    info.dataset.total = String(res.total);
    prev.disabled = st.offset === 0;
    next.disabled = end >= res.total;
    if (opts.onload) opts.onload(res);
  }
  void load();
  return wrap;
}

/** Each key cell's left offset: the widths of the key cells before it in its row. */
function pinKeys(t: HTMLElement): void {
  const head = [...t.querySelectorAll<HTMLElement>("thead th.key")];
  const lefts: number[] = [];
  let x = 0;
  for (const th of head) {
    lefts.push(x);
    x += th.getBoundingClientRect().width;
  }
  for (const tr of t.querySelectorAll("tr"))
    tr.querySelectorAll<HTMLElement>(".key").forEach((c, i) => {
      c.style.left = `${lefts[i] ?? 0}px`;
      if (i === lefts.length - 1) c.classList.add("key-last");
    });
}

function cmp(a: unknown, b: unknown): number {
  if (a === b) return 0;
  if (a === null || a === undefined) return 1;
  if (b === null || b === undefined) return -1;
  return (a as number) < (b as number) ? -1 : 1;
}

/** The CLI's filter syntax, in the browser (the one-file report has no server). */
export function localFilter(rows: Row[], filters: string[]): Row[] {
  const re = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|!~|>=|<=|=|~|>|<)\s*(.*?)\s*$/;
  const preds = filters.map((f) => {
    const m = f.match(re);
    if (!m) return () => true;
    const [, c, op, raw] = m as unknown as [string, string, string, string];
    const n = Number(raw);
    return (r: Row) => {
      const v = r[c];
      const s = v === null || v === undefined ? "" : String(v);
      switch (op) {
        case "=": return raw.split(",").includes(s);
        case "!=": return !raw.split(",").includes(s);
        case "~": return s.toLowerCase().includes(raw.toLowerCase());
        case "!~": return !s.toLowerCase().includes(raw.toLowerCase());
        case ">=": return (v as number) >= n;
        case ">": return (v as number) > n;
        case "<=": return (v as number) <= n;
        case "<": return (v as number) < n;
      }
      return true;
    };
  });
  return rows.filter((r) => preds.every((p) => p(r)));
}
