// Downloads: any table as CSV or JSON (the API's shapes), and files the server writes
// (the timeline window's Chrome trace). One helper for every page's tables.
import { API, EMBED, qs, type Params } from "./api";
import { h } from "./dom";

export interface TableData {
  columns: { name: string }[];
  rows: Record<string, unknown>[];
  /** What the JSON download holds when it is not the table itself (the API's whole answer). */
  raw?: unknown;
}

/** One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
export function csvField(v: unknown): string {
  if (v === null || v === undefined) return "";
  const s = typeof v === "object" ? JSON.stringify(v) : String(v);
  return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}

/** A table as CSV: a header of column names, then one line per row (raw values, not formatted). */
export function toCsv(t: TableData): string {
  const cols = t.columns.map((c) => c.name);
  const lines = [cols.map(csvField).join(",")];
  for (const r of t.rows) lines.push(cols.map((c) => csvField(r[c])).join(","));
  return lines.join("\r\n") + "\r\n";
}

/** Save ``text`` as a file named ``name``. */
export function download(name: string, text: string, mime: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: mime }));
  const a = h("a", { href: url, download: name, style: "display:none" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** "CSV" and "JSON" buttons that download what ``get`` returns: the CSV of its columns
 * and rows, and the JSON exactly as the API answered it. */
export function exportButtons(name: string, get: () => Promise<TableData> | TableData, onError?: (e: Error) => void): HTMLElement {
  const run = (fmt: "csv" | "json") => async () => {
    try {
      const data = await get();
      if (fmt === "csv") download(name + ".csv", toCsv(data), "text/csv");
      else download(name + ".json", JSON.stringify(data.raw ?? data, null, 1), "application/json");
    } catch (e) {
      if (onError) onError(e as Error);
      else alert((e as Error).message);
    }
  };
  return h("span", { class: "export" },
    h("button", { class: "export-csv", title: "download this table as CSV (all rows that match the filters)", onclick: run("csv") }, "CSV"),
    h("button", { class: "export-json", title: "download this table as JSON (the API's answer)", onclick: run("json") }, "JSON"));
}

/** A table drawn by a page itself (not the shared table component), as export data: the
 *  header cells name the columns, each body row's cells (as shown, units included) are
 *  the values; ``raw`` (the API's answer the table was drawn from) is the JSON download. */
export function domTableData(table: HTMLTableElement, raw?: unknown): TableData {
  const trs = Array.from(table.querySelectorAll("tr"));
  const head = trs.find((tr) => tr.querySelector("th"));
  const columns = head ? Array.from(head.querySelectorAll("th")).map((th, i) => ({ name: (th.textContent || "").trim() || `column ${i + 1}` })) : [];
  const rows = trs.filter((tr) => tr.querySelector("td")).map((tr) =>
    Object.fromEntries(Array.from(tr.querySelectorAll("td")).map((td, i) => [columns[i]?.name ?? `column ${i + 1}`, (td.textContent || "").trim()])));
  return { columns, rows, raw: raw ?? rows };
}

/** CSV / JSON buttons for a table a page drew itself (see domTableData). */
export function exportTable(name: string, table: HTMLTableElement, raw?: () => unknown): HTMLElement {
  return exportButtons(name, () => domTableData(table, raw ? raw() : undefined));
}

/** A link that downloads a file the server writes (not in the one-file report). */
export function serverDownload(label: string, title: string, path: string, params: () => Params): HTMLElement | null {
  if (EMBED) return null;
  const a = h("a", { class: "button", href: "#", title, download: "" }, label);
  a.addEventListener("click", () => {
    a.setAttribute("href", API + path + qs(params()));
  });
  return a;
}
