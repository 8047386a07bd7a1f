// The one place that reads and writes the URL state: #/PROFILE/PAGE?key=value&...
// Every view's state that a link should carry lives here (one schema, parsed and
// defaulted in one place); views read a Route and ask for a new one, never location.

export const PAGES = ["overview", "timeline", "flame", "operators", "kernels", "steps", "memory", "counters", "distributed", "compare", "advice", "sql"] as const;
export type Page = (typeof PAGES)[number];

export interface Route {
  pid: string | null;
  page: string;
  /** Timeline window, ns. */
  t0?: number;
  t1?: number;
  /** Selected event: track id, start ts (ns) and duration (ns). */
  sel?: { track: number; ts: number; dur: number };
  /** Timeline search text and whether it is a regular expression (on the SQL page: the query). */
  q?: string;
  re?: boolean;
  /** Table state: filters (';' between), sort column ("-" = descending), first row. */
  filter?: string;
  sort?: string;
  offset?: number;
  /** Compare pair. */
  a?: string;
  b?: string;
  /** Flame graph: thread key, rank, step range, zoomed frame path, sandwich function. */
  thread?: string;
  rank?: number;
  steps?: string;
  focus?: string;
  fn?: string;
  /** Operators page: group_by (shapes, stack; name when absent). */
  group?: string;
}

const INTS = ["t0", "t1", "offset", "rank"] as const;
const STRS = ["q", "filter", "sort", "a", "b", "thread", "steps", "focus", "fn", "group"] as const;

function int(v: string | null): number | undefined {
  if (v === null || v === "" || !/^-?\d+$/.test(v)) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : undefined;
}

/** The route a hash names; unknown keys are ignored, bad values dropped. */
export function parseHash(hash: string): Route {
  const h = hash.replace(/^#/, "");
  const [path, query = ""] = h.split("?", 2) as [string, string?];
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const r: Route = { pid: parts[0] ?? null, page: parts[1] ?? "overview" };
  const p = new URLSearchParams(query);
  for (const k of INTS) {
    const v = int(p.get(k));
    if (v !== undefined) r[k] = v;
  }
  for (const k of STRS) {
    const v = p.get(k);
    if (v !== null && v !== "") r[k] = v;
  }
  if (p.get("re") === "1") r.re = true;
  const sel = p.get("sel");
  if (sel) {
    const [a, b, c] = sel.split(":").map((x) => int(x));
    if (a !== undefined && b !== undefined) r.sel = { track: a, ts: b, dur: c ?? 0 };
  }
  if (r.t0 !== undefined && r.t1 !== undefined && r.t1 <= r.t0) {
    delete r.t0;
    delete r.t1;
  }
  return r;
}

/** The hash of a route (keys in a fixed order, empty values left out). */
export function formatHash(r: Route): string {
  let s = "#/" + encodeURIComponent(r.pid ?? "") + "/" + encodeURIComponent(r.page);
  const p = new URLSearchParams();
  if (r.t0 !== undefined && r.t1 !== undefined) {
    p.set("t0", String(Math.round(r.t0)));
    p.set("t1", String(Math.round(r.t1)));
  }
  if (r.sel) p.set("sel", `${r.sel.track}:${r.sel.ts}:${r.sel.dur}`);
  for (const k of STRS) {
    const v = r[k];
    if (v) p.set(k, v);
  }
  if (r.re) p.set("re", "1");
  if (r.offset) p.set("offset", String(r.offset));
  if (r.rank !== undefined) p.set("rank", String(r.rank));
  const q = p.toString();
  return q ? s + "?" + q : s;
}

/** The keys that belong to a page: moving to another page drops the others. */
export function forPage(r: Route, page: string): Route {
  const out: Route = { pid: r.pid, page };
  if (page === "compare") {
    if (r.a) out.a = r.a;
    if (r.b) out.b = r.b;
  }
  if (page === "operators" && r.group) out.group = r.group;
  return out;
}
