// The SQL page: one read-only SELECT over the profile's tables (DuckDB through the API,
// with a time limit and a row limit), errors inline, the schema beside the editor, the
// result as a table with CSV/JSON export. The query is kept in the URL (?q=).
import { api, ApiError, EMBED, profilePath, type Schemas } from "../lib/api";
import { h } from "../lib/dom";
import { exportButtons } from "../lib/export";
import { columnUnit, fmtValue } from "../lib/format";
import { pid, state, updateRoute } from "../state/app";

type SqlSchema = Schemas["SqlSchema"];
type SqlResponse = Schemas["SqlResponse"];

const EXAMPLE = "SELECT name, count(*) AS calls, sum(dur) AS total_ns\nFROM events WHERE kind = 'kernel'\nGROUP BY name ORDER BY total_ns DESC LIMIT 20";

export async function sqlPage(main: HTMLElement): Promise<void> {
  main.append(h("h2", {}, "SQL"));
  if (EMBED) {
    main.append(h("p", { class: "muted empty" }, "The one-file report has no server to query: run `aiprof serve PROFILE` and open this page there, or `aiprof sql PROFILE QUERY`."));
    return;
  }
  const schemaBox = h("div", { class: "panel sql-schema", id: "sql-schema" }, h("span", { class: "muted" }, "loading the tables…"));
  const editor = h("textarea", { id: "sql-query", spellcheck: "false", rows: 8, "aria-label": "SQL query" });
  editor.value = state.route.q ?? EXAMPLE;
  const rowsIn = h("input", { id: "sql-rows", type: "number", min: 1, max: 10000, value: 1000, "aria-label": "row limit" });
  const timeIn = h("input", { id: "sql-timeout", type: "number", min: 1, max: 60, step: 1, value: 10, "aria-label": "time limit (s)" });
  const runB = h("button", { id: "sql-run", title: "run (Ctrl+Enter)" }, "Run");
  const status = h("span", { class: "muted", id: "sql-status" });
  const err = h("div", { class: "error sql-error", id: "sql-error", role: "alert" });
  const result = h("div", { class: "tablewrap", id: "sql-result" });
  let last: SqlResponse | null = null;
  const exp = exportButtons(pid() + ".sql", () => {
    if (!last) throw new Error("run a query first");
    return { columns: last.columns, rows: last.rows, raw: last };
  }, (e) => { err.textContent = e.message; });
  const bar = h("div", { class: "tablebar" }, runB,
    h("label", { class: "chk" }, "rows ≤ ", rowsIn), h("label", { class: "chk" }, "time ≤ ", timeIn, " s"), status, exp);
  main.append(h("div", { class: "sql-page" },
    h("div", { class: "sql-main" },
      h("p", { class: "muted" }, "One SELECT over the tables on the right (DuckDB's dialect). The profile is read-only: DROP, COPY … TO, ATTACH, INSTALL, SET and the like are refused. Times are ns."),
      editor, bar, err, result),
    schemaBox));

  async function run(): Promise<void> {
    const query = editor.value.trim();
    err.textContent = "";
    updateRoute({ q: query || undefined });
    if (!query) {
      err.textContent = "Write a query first.";
      return;
    }
    runB.disabled = true;
    status.textContent = "running…";
    try {
      last = await api<SqlResponse>(profilePath(pid(), "/sql"), {}, { query, max_rows: Number(rowsIn.value) || 1000, timeout_s: Number(timeIn.value) || 10 });
      status.textContent = `${last.total.toLocaleString("en-US")} rows${last.truncated ? ` (stopped at the row limit, ${last.max_rows.toLocaleString("en-US")})` : ""} · ${last.elapsed_ms.toFixed(0)} ms`;
      status.dataset.total = String(last.total);
      result.textContent = "";
      result.append(resultTable(last));
    } catch (e) {
      last = null;
      status.textContent = "";
      result.textContent = "";
      const what = e instanceof ApiError && e.status === 408 ? "Stopped: " : e instanceof ApiError && e.status === 400 ? "" : "Error: ";
      err.textContent = what + (e as Error).message;
    } finally {
      runB.disabled = false;
    }
  }
  runB.addEventListener("click", () => void run());
  editor.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      void run();
    }
  });

  try {
    const s = await api<SqlSchema>(profilePath(pid(), "/sql/schema"));
    schemaBox.textContent = "";
    schemaBox.append(h("div", { class: "muted" }, "Tables (click a name to insert it)"));
    s.tables.forEach((t, i) => {
      const cols = h("ul", { class: "sql-cols" }, t.columns.map((c) => h("li", {}, h("code", {}, c.name), " ", h("span", { class: "muted" }, c.type.toLowerCase()))));
      const name = h("a", { href: "#", class: "sql-table", "data-table": t.name }, t.name);
      name.addEventListener("click", (e) => {
        e.preventDefault();
        editor.setRangeText(t.name, editor.selectionStart, editor.selectionEnd, "end");
        editor.focus();
      });
      // The events table open, the others folded so that every name shows.
      schemaBox.append(h("details", { open: i === 0 ? "" : undefined }, h("summary", {}, name, h("span", { class: "muted" }, ` ${t.rows.toLocaleString("en-US")} rows`)), cols));
    });
  } catch (e) {
    schemaBox.textContent = "";
    schemaBox.append(h("p", { class: "error" }, "Cannot list the tables: " + (e as Error).message));
  }
  await run();
}

function resultTable(res: SqlResponse): HTMLElement {
  if (!res.columns.length) return h("p", { class: "muted" }, "The statement returned no columns.");
  const t = h("table", { class: "data" });
  t.append(h("thead", {}, h("tr", {}, res.columns.map((c) => h("th", { "data-col": c.name, title: `${c.name} (${c.type})` }, c.name)))));
  const tb = h("tbody");
  for (const row of res.rows) {
    tb.append(h("tr", {}, res.columns.map((c) => {
      const v = row[c.name];
      const num = typeof v === "number";
      const raw = v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
      return h("td", { class: num ? "num" : "", title: raw }, num ? fmtValue(v, columnUnit(c.name, null)) : raw);
    })));
  }
  t.append(tb);
  if (!res.rows.length) return h("div", {}, t, h("p", { class: "muted" }, "No rows."));
  return t;
}
