// aiprof web UI: the router. Every figure on screen comes from /api/v1 (or, in the
// one-file HTML report, from the API answers embedded in window.AIPROF_EMBED).
import "./style.css";
import { api, EMBED, type ProfilesResponse } from "./lib/api";
import { $, h } from "./lib/dom";
import { formatHash, forPage, PAGES, parseHash } from "./lib/url";
import { navigate, state } from "./state/app";
import { advicePage } from "./views/advice";
import { emptyState, RECORD_STEPS } from "./views/empty";
import { flamePage } from "./views/flame";
import { comparePage } from "./views/compare";
import { countersPage } from "./views/counters";
import { distributedPage } from "./views/distributed";
import { kernelsPage } from "./views/kernels";
import { operatorsPage } from "./views/operators";
import { memoryPage } from "./views/memory";
import { notFoundPage } from "./views/notfound";
import { overviewPage } from "./views/overview";
import { showName, showStep } from "./views/show";
import { sqlPage } from "./views/sql";
import { makeTable, type TableOptions } from "./views/table";
import { timelinePage } from "./views/timeline";
import { initTheme } from "./views/theme";

type PageFn = (main: HTMLElement) => Promise<void | (() => void)>;

const TITLES: Record<string, string> = {
  overview: "Overview", timeline: "Timeline", flame: "Flame graph", operators: "Operators", kernels: "Kernels", steps: "Steps",
  memory: "Memory", counters: "Counters", distributed: "Distributed", compare: "Compare", advice: "Advice", sql: "SQL",
};
const REPORT_PAGES = new Set(["overview", "operators", "kernels", "steps", "memory", "advice"]);

const tablePage = (view: string, title: string, action?: TableOptions["action"], extra: TableOptions = {}): PageFn => async (main) => {
  main.append(h("h2", {}, title), makeTable(view, { ...extra, bindUrl: true, action: EMBED ? undefined : action }));
};
const onTimeline = (run: (r: Record<string, unknown>) => Promise<void>) => ({
  label: "timeline",
  title: "show the longest instance on the timeline",
  run: (r: Record<string, unknown>) => void run(r).catch((e: Error) => alert(e.message)),
});

const PAGE_FNS: Record<string, PageFn> = {
  overview: overviewPage,
  timeline: timelinePage,
  flame: flamePage,
  operators: (main) => operatorsPage(main, EMBED ? undefined : onTimeline((r) => showName(String(r.name)))),
  kernels: (main) => kernelsPage(main, EMBED ? undefined : onTimeline((r) => showName(String(r.name)))),
  steps: tablePage("steps", "Steps", { ...onTimeline((r) => showStep(r)), title: "show the step on the timeline" }, {
    hideEmpty: true,
    unmeasured: true,
    keys: ["rank", "step"],
    empty: () => emptyState("No steps in this profile.", "The trace marks no training steps, so there is no per-step split.",
      RECORD_STEPS),
  }),
  memory: memoryPage,
  counters: countersPage,
  distributed: distributedPage,
  compare: comparePage,
  advice: advicePage,
  sql: sqlPage,
};

function renderNav(): void {
  const nav = $("#nav")!;
  nav.textContent = "";
  for (const id of PAGES) {
    if (!(id in PAGE_FNS) || (EMBED && !REPORT_PAGES.has(id))) continue;
    nav.append(h("a", { href: formatHash(forPage(state.route, id)), class: id === state.route.page ? "active" : "", "data-page": id }, TITLES[id] ?? id));
  }
  const sel = $<HTMLSelectElement>("#profile")!;
  sel.textContent = "";
  for (const p of state.profiles) {
    const o = h("option", { value: p.id }, p.name + (p.status === "broken" ? " (broken)" : ""));
    if (p.status === "broken") o.disabled = true;
    if (p.id === state.route.pid) o.selected = true;
    sel.append(o);
  }
}

let cleanup: (() => void) | null = null;
let shown = "";

async function route(): Promise<void> {
  const r = parseHash(location.hash);
  state.route = r;
  const key = `${r.pid}/${r.page}`;
  if (!r.pid) {
    const ok = state.profiles.find((p) => p.status !== "broken");
    const main = $("#main")!;
    if (!ok) {
      main.textContent = "No readable profile in the served folders.";
      window.__aiprof.ready = true;
      return;
    }
    history.replaceState(null, "", formatHash({ pid: ok.id, page: "overview" }));
    return route();
  }
  renderNav();
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  shown = key;
  const main = $("#main")!;
  main.textContent = "";
  window.__aiprof.ready = false;
  // A page of a big profile can take seconds: say so in the header, not with a blank page.
  const status = $("#status")!;
  if (!EMBED) status.textContent = `loading ${TITLES[r.page] ?? r.page}…`;
  try {
    if (!state.profiles.some((p) => p.id === r.pid)) notFoundPage(main, "profile", r.pid);
    else if (!(r.page in PAGE_FNS) || (EMBED && !REPORT_PAGES.has(r.page))) notFoundPage(main, "page", r.page);
    else cleanup = (await PAGE_FNS[r.page]!(main)) || null;
  } catch (e) {
    main.append(h("p", { class: "error" }, "Error: " + (e as Error).message));
  }
  if (shown === key) {
    window.__aiprof.ready = true;
    if (!EMBED) status.textContent = "";
  }
}

async function start(): Promise<void> {
  initTheme($("#theme")!);
  try {
    state.profiles = (await api<ProfilesResponse>("/profiles")).profiles;
  } catch (e) {
    $("#main")!.textContent = "Cannot reach the aiprof API: " + (e as Error).message;
    return;
  }
  $("#profile")!.addEventListener("change", (e) => navigate({ pid: (e.target as HTMLSelectElement).value, page: state.route.page }));
  if (EMBED) $("#status")!.textContent = "report · " + String(EMBED.__generated || "");
  window.addEventListener("hashchange", () => void route());
  await route();
}

void start();
