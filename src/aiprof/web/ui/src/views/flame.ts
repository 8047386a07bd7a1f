// The flame graph page: the Python stack samples of a recording as an icicle, per
// thread, rank and step range; click a frame to zoom into it; the sandwich of one
// function (its callers above, its callees below), as speedscope has. The choices
// live in the URL (thread, rank, steps, focus, fn).
import { api, profilePath, type ProfileMeta, type SamplesResponse, type SearchResponse } from "../lib/api";
import { h } from "../lib/dom";
import { exportButtons } from "../lib/export";
import { callTree, functionTotals, icicle, nodeAt, sandwich, type Bar, type FlameNode } from "../lib/flame";
import { fmtNs, fmtNum } from "../lib/format";
import { drawIcicle, type IcicleDrawing } from "../render/flame";
import { pid, state, updateRoute } from "../state/app";
import { hideTip, showTip } from "./tooltip";

export async function flamePage(main: HTMLElement): Promise<() => void> {
  const P = (p: string) => profilePath(pid(), p);
  const meta = await api<ProfileMeta>(P(""));
  main.append(h("h2", {}, "Flame graph (Python samples)"));
  if (!meta.tables.samples) {
    main.append(h("p", { class: "muted", id: "flame-empty" }, "No Python stack samples in this profile: record one with `aiprof record -- python train.py`."));
    return () => undefined;
  }
  // Steps on the timeline's axis, from the step annotations.
  const stepEv = await api<SearchResponse>(P("/timeline/search"), { q: ".", regex: true, kind: "step", limit: 5000 }).catch(() => null);
  const steps = (stepEv?.matches ?? []).map((m) => ({ label: (m.name.match(/(\d+)\s*$/) || [])[1] ?? m.name, ts: m.ts, end: m.ts + m.dur })).sort((a, b) => a.ts - b.ts);
  const r = state.route;
  const rankSel = h("select", { id: "flame-rank", "aria-label": "rank" }, h("option", { value: "" }, "all ranks"), (meta.ranks || []).map((x) => h("option", { value: x }, `rank ${x}`)));
  const threadSel = h("select", { id: "flame-thread", "aria-label": "thread" });
  const fromSel = h("select", { id: "flame-from", "aria-label": "first step" }, h("option", { value: "" }, "first"), steps.map((s, i) => h("option", { value: i }, `step ${s.label}`)));
  const toSel = h("select", { id: "flame-to", "aria-label": "last step" }, h("option", { value: "" }, "last"), steps.map((s, i) => h("option", { value: i }, `step ${s.label}`)));
  if (r.rank !== undefined) rankSel.value = String(r.rank);
  if (r.steps) {
    const [a, b] = r.steps.split("-");
    fromSel.value = a ?? "";
    toSel.value = b ?? "";
  }
  const info = h("span", { class: "muted", id: "flame-info" });
  const crumbs = h("div", { class: "crumbs", id: "flame-crumbs" });
  const canvas = h("canvas", { class: "flame", id: "flame-canvas" });
  const sw = h("div", { id: "flame-sandwich" });
  const fnTable = h("div", { class: "tablewrap", id: "flame-functions" });
  main.append(
    h("div", { class: "tablebar" }, rankSel, threadSel, "steps ", fromSel, " to ", toSel, info),
    crumbs, h("div", { class: "flamewrap" }, canvas),
    h("div", { class: "grid2" }, h("div", {}, h("h3", {}, "Functions by self time (click for the sandwich)"), fnTable), h("div", {}, sw)),
  );

  let data: SamplesResponse | null = null;
  let focus: number[] = [];
  let fn: number | null = null;
  let drawing: IcicleDrawing | null = null;
  const name = (f: number) => (f < 0 ? "all" : data!.frames[f]?.name ?? "?");
  const pathKey = (p: number[]) => p.map(name).join(";");

  async function load(): Promise<void> {
    const a = fromSel.value === "" ? undefined : steps[Number(fromSel.value)]?.ts;
    const b = toSel.value === "" ? undefined : steps[Number(toSel.value)]?.end;
    data = await api<SamplesResponse>(P("/samples"), { rank: rankSel.value === "" ? undefined : Number(rankSel.value), t0: a, t1: b });
    const keep = threadSel.value || r.thread || "";
    threadSel.textContent = "";
    threadSel.append(h("option", { value: "" }, `all threads (${data.threads.length})`), ...data.threads.map((t) => h("option", { value: t.key }, `${t.name || "thread " + t.tid} · rank ${t.rank} · ${fmtNum(t.samples)} samples`)));
    threadSel.value = data.threads.some((t) => t.key === keep) ? keep : "";
    // Restore a zoom and a sandwich from the URL by names.
    if (r.focus && !focus.length) focus = pathFromNames(r.focus.split(";"));
    if (r.fn && fn === null) {
      const i = data.frames.findIndex((f) => `${f.name}@${f.file}` === r.fn);
      fn = i >= 0 ? i : null;
    }
    render();
  }

  function rows(): { stack: number; weight: number }[] {
    if (!data) return [];
    const t = threadSel.value;
    const ti = t ? data.threads.findIndex((x) => x.key === t) : -1;
    const out: { stack: number; weight: number }[] = [];
    const R = data.rows;
    for (let i = 0; i < R.stack.length; i++) if (ti < 0 || R.thread[i] === ti) out.push({ stack: R.stack[i]!, weight: R.weight_ns[i]! || R.samples[i]! });
    return out;
  }

  function pathFromNames(names: string[]): number[] {
    if (!data) return [];
    const root = callTree(data.stacks, rows());
    const path: number[] = [];
    let n: FlameNode | undefined = root;
    for (const nm of names) {
      n = n?.children.find((c) => name(c.frame) === nm);
      if (!n) break;
      path.push(n.frame);
    }
    return path;
  }

  function render(): void {
    if (!data) return;
    const rs = rows();
    const root = callTree(data.stacks, rs);
    let top = nodeAt(root, focus);
    if (!top) {
      focus = [];
      top = root;
    }
    updateRoute({
      thread: threadSel.value || undefined, rank: rankSel.value === "" ? undefined : Number(rankSel.value),
      steps: fromSel.value || toSel.value ? `${fromSel.value}-${toSel.value}` : undefined,
      focus: focus.length ? pathKey(focus) : undefined, fn: fn !== null ? `${data.frames[fn]!.name}@${data.frames[fn]!.file}` : undefined,
    });
    const samples = rs.reduce((s, x) => s + x.weight, 0);
    info.textContent = `${fmtNum(data.total_samples)} samples · ${fmtNs(samples)} sampled · interval ${fmtNs(data.interval_ns)}`;
    info.dataset.samples = String(data.total_samples);
    crumbs.textContent = "";
    crumbs.append(h("a", { href: "javascript:void 0", onclick: () => { focus = []; render(); } }, "all"));
    focus.forEach((f, i) => crumbs.append(" › ", h("a", { href: "javascript:void 0", onclick: () => { focus = focus.slice(0, i + 1); render(); } }, name(f))));
    const total = top.total || 1;
    drawing = drawIcicle(canvas, icicle(top, focus, 0.0005), (b) => name(b.node.frame), { highlight: fn ?? undefined });
    hook(canvas, () => drawing, total, (b) => {
      if (b.node.frame < 0) focus = [];
      else focus = b.path;
      render();
    });
    // Functions by self time.
    const ft = [...functionTotals(data.stacks, rs).entries()].sort((a, b) => b[1].self - a[1].self).slice(0, 50);
    const t = h("table", { class: "data" }, h("tr", {}, ["function", "file", "self", "total"].map((x) => h("th", {}, x))));
    for (const [f, v] of ft)
      t.append(h("tr", { class: f === fn ? "active" : "" },
        h("td", {}, h("a", { href: "javascript:void 0", class: "fn", onclick: () => { fn = f; render(); } }, data.frames[f]!.name)),
        h("td", { title: data.frames[f]!.file }, data.frames[f]!.file), h("td", { class: "num" }, pct(v.self, samples)), h("td", { class: "num" }, pct(v.total, samples))));
    const fnRows = ft.map(([f, v]) => ({ function: data!.frames[f]!.name, file: data!.frames[f]!.file, self_samples: v.self, total_samples: v.total }));
    const fnCols = ["function", "file", "self_samples", "total_samples"].map((name) => ({ name }));
    fnTable.textContent = "";
    fnTable.append(exportButtons(`${pid()}.functions`, () => ({ columns: fnCols, rows: fnRows })), t);
    renderSandwich(rs);
    window.__aiprof.flame = { bars: drawing.bars.length, top: name(top.frame), focus: focus.map(name), fn: fn !== null ? name(fn) : null, total: top.total };
  }

  function renderSandwich(rs: { stack: number; weight: number }[]): void {
    sw.textContent = "";
    if (fn === null || !data) {
      sw.append(h("p", { class: "muted" }, "Pick a function for its callers and callees."));
      return;
    }
    const { callers, callees } = sandwich(data.stacks, rs, fn);
    const c1 = h("canvas", { class: "flame", id: "flame-callers" });
    const c2 = h("canvas", { class: "flame", id: "flame-callees" });
    sw.append(h("h3", {}, `Sandwich: ${name(fn)}`), h("div", { class: "muted" }, "callers (bottom-up)"), h("div", { class: "flamewrap" }, c1), h("div", { class: "muted" }, "callees"), h("div", { class: "flamewrap" }, c2));
    requestAnimationFrame(() => {
      const d1 = drawIcicle(c1, icicle(callers), (b) => name(b.node.frame), { upward: true });
      const d2 = drawIcicle(c2, icicle(callees), (b) => name(b.node.frame));
      hook(c1, () => d1, callers.total || 1, () => undefined);
      hook(c2, () => d2, callees.total || 1, () => undefined);
    });
  }

  function pct(v: number, of: number): string {
    return `${fmtNs(v)} (${of ? ((100 * v) / of).toFixed(1) : "0"} %)`;
  }

  function hook(c: HTMLCanvasElement, get: () => IcicleDrawing | null, total: number, click: (b: Bar) => void): void {
    c.onmousemove = (e) => {
      const b = get()?.at(e.offsetX, e.offsetY);
      if (!b || !data) return hideTip();
      const f = data.frames[b.node.frame];
      showTip(e.clientX, e.clientY, [name(b.node.frame), ...(f?.file ? [["file", f.file] as [string, string]] : []), ["total", pct(b.node.total, total)], ["self", pct(b.node.self, total)]]);
    };
    c.onmouseleave = hideTip;
    c.onclick = (e) => {
      const b = get()?.at(e.offsetX, e.offsetY);
      if (b) click(b);
    };
  }

  for (const s of [rankSel, fromSel, toSel]) s.addEventListener("change", () => { focus = []; void load(); });
  threadSel.addEventListener("change", () => { focus = []; render(); });
  const onResize = () => render();
  window.addEventListener("resize", onResize);
  await load();
  return () => {
    window.removeEventListener("resize", onResize);
    hideTip();
    delete window.__aiprof.flame;
  };
}
