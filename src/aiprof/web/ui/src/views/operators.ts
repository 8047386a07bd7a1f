// Operators: grouped by name, by name + input shapes or by name + call stack (the
// operators view's group_by), each row expandable to the kernels it launched (the
// operator-kernels view).
import { api, EMBED, profilePath, type Row, type ViewResult } from "../lib/api";
import { h } from "../lib/dom";
import { fmtNum, fmtValue } from "../lib/format";
import { navigate, pid, state } from "../state/app";
import { makeTable, type TableOptions } from "./table";

const GROUPS: [string, string][] = [["name", "name"], ["shapes", "name + input shapes"], ["stack", "name + call stack"]];
const KEY_COLUMN: Record<string, string> = { shapes: "input_shapes", stack: "call_stack" };

export async function operatorsPage(main: HTMLElement, action?: TableOptions["action"]): Promise<void> {
  const group = GROUPS.some((g) => g[0] === state.route.group) ? state.route.group! : "name";
  const sel = h("select", { id: "op-group", "aria-label": "group by" }, GROUPS.map(([v, l]) => h("option", { value: v }, l)));
  sel.value = group;
  sel.addEventListener("change", () => navigate({ pid: state.route.pid, page: "operators", group: sel.value === "name" ? undefined : sel.value }));
  const note = h("p", { class: "muted", id: "op-note" });
  main.append(h("h2", {}, "Operators"));
  if (!EMBED) main.append(h("div", { class: "tablebar" }, "group by ", sel, h("span", { class: "muted" }, "click a row's ▸ to list the kernels it launched")));
  main.append(note);
  const params = group === "name" ? undefined : { group_by: group };
  const key = KEY_COLUMN[group];
  const table = makeTable("operators", {
    bindUrl: true, params, action,
    onload: (res) => {
      if (key && res.rows.length && res.rows.every((r) => !r[key]))
        note.textContent = group === "stack"
          ? "No call stacks in this profile: record them with torch.profiler.profile(with_stack=True) (or aiprof record --ops --stack)."
          : "No input shapes in this profile: record them with torch.profiler.profile(record_shapes=True).";
      else note.textContent = "";
      if (!EMBED) addExpanders(table, res, key);
    },
  });
  main.append(table);
}

function addExpanders(table: HTMLElement, res: ViewResult, key: string | undefined): void {
  const trs = [...table.querySelectorAll<HTMLTableRowElement>("tbody tr")];
  trs.forEach((tr, i) => {
    const row = res.rows[i];
    if (!row) return;
    const btn = h("button", { class: "expand", title: "the kernels this operator launched", "aria-expanded": "false" }, "▸");
    const cell = h("td", { class: "act" }, btn);
    tr.prepend(cell);
    let open: HTMLTableRowElement | null = null;
    btn.addEventListener("click", () => {
      if (open) {
        open.remove();
        open = null;
        btn.textContent = "▸";
        btn.setAttribute("aria-expanded", "false");
        return;
      }
      btn.textContent = "▾";
      btn.setAttribute("aria-expanded", "true");
      const td = h("td", { colspan: String(tr.children.length) }, "Loading…");
      open = h("tr", { class: "expanded" }, td);
      tr.after(open);
      void launched(row, key).then((el) => { td.textContent = ""; td.append(el); }, (e: Error) => { td.textContent = e.message; });
    });
  });
  const head = table.querySelector("thead tr");
  if (head && trs.length) head.prepend(h("th", { class: "act" }, ""));
}

async function launched(row: Row, key: string | undefined): Promise<HTMLElement> {
  const params: Record<string, unknown> = { name: row.name };
  if (key === "input_shapes") params[key] = row[key] ?? "";
  const r = await api<ViewResult>(profilePath(pid(), "/views/operator-kernels"), {}, { params, limit: 50 });
  if (!r.rows.length) return h("p", { class: "muted" }, "This operator launched no device work (itself or through its children).");
  const t = h("table", { class: "data sub", "data-view": "operator-kernels" }, h("thead", {}, h("tr", {}, ["kernel", "kind", "count", "total", "mean", "tensor core"].map((x) => h("th", {}, x)))));
  const tb = h("tbody");
  for (const k of r.rows)
    tb.append(h("tr", {}, h("td", { title: String(k.name) }, String(k.name)), h("td", {}, String(k.kind)), h("td", { class: "num" }, fmtNum(k.count)),
      h("td", { class: "num" }, fmtValue(k.total_us, "µs")), h("td", { class: "num" }, fmtValue(k.mean_us, "µs")), h("td", {}, k.tensor_core ? "yes" : "no")));
  t.append(tb);
  const note = key === "call_stack" ? h("p", { class: "muted" }, `Kernels of every call of ${String(row.name)}, from all its call sites.`) : null;
  return h("div", {}, note, t, r.total > r.rows.length ? h("p", { class: "muted" }, `${r.rows.length} of ${r.total} kernel names`) : null);
}
