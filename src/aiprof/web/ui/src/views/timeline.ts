// The timeline page: a track tree (lib/tracktree.ts) drawn on one canvas that fills
// the window, Perfetto's keys (W/S zoom around the pointer, A/D pan, F fit, M mark,
// / search), server-side search, flows of the selection, counter tracks with their
// scale, tooltips; its window, selection and search live in the URL.
import {
  api, profilePath, type CounterMetrics, type CounterSeries, type EventsResponse, type MemorySeries,
  type SampleWindowResponse, type SamplesResponse, type SearchResponse, type SummaryResponse, type TracksResponse,
  type WindowResponse,
} from "../lib/api";
import { theme } from "../lib/colors";
import { h } from "../lib/dom";
import { exportButtons, serverDownload } from "../lib/export";
import { fmtNs, fmtNum, fmtTick, fmtValue, rulerTicks } from "../lib/format";
import { lastAtOrBefore } from "../lib/series";
import {
  ancestors, buildTree, isLeaf, layout as layoutTree, memoryCounters, ROW_H, type CounterInfo, type Row, type SampleInfo, type TrackInfo, type TrackNode,
} from "../lib/tracktree";
import { Viewport } from "../lib/viewport";
import { counterTrack, ellipsize, groupSummary, indexByTrack, sampleTrack, sliceTrack, type Scene, type Series } from "../render/tracks";
import { pid, state, updateRoute } from "../state/app";
import { hideTip, showTip } from "./tooltip";

const LABEL_W = 240;
const RULER_H = 24;
const PIN_W = 18;
const ZOOM_STEP = 0.8;

interface Hit {
  i: number;
  track: number;
  depth: number;
  ts: number;
  dur: number;
  n: number;
  name: string;
  kind: string;
}

/** A pixel without a value (null) keeps the one before it (reserved is not on every allocator event). */
function carried(v: (number | null | undefined)[]): number[] {
  let last = 0;
  return v.map((x) => (last = x ?? last));
}

export async function timelinePage(main: HTMLElement): Promise<() => void> {
  const P = (p: string) => profilePath(pid(), p);
  const r0 = state.route;
  // The first window is asked for with the track list, not after it: the server's
  // default window is what the shown tracks draw (shown_ns), which is the view when the
  // URL holds none (and the canvas will be about as wide as the page).
  const w0 = r0.t0 !== undefined && r0.t1 !== undefined ? padded(r0.t0, r0.t1) : {};
  const firstWin = api<WindowResponse>(P("/timeline"), { ...w0, width: Math.round(Math.max(50, (main.clientWidth || 1000) - LABEL_W) * 1.5) })
    .catch(() => null);
  const [trk, memInfo, counterList, sampled] = await Promise.all([
    api<TracksResponse>(P("/tracks")),
    api<MemorySeries>(P("/memory/series"), { width: 1 }).catch(() => null),
    api<CounterMetrics>(P("/counters")).catch((): CounterMetrics => ({ metrics: [] })),
    api<SamplesResponse>(P("/samples")).catch(() => null),
  ]);
  const samplers: SampleInfo[] = (sampled?.threads ?? []).map((t, i) => {
    let depth = 0;
    const R = sampled!.rows;
    for (let j = 0; j < R.thread.length; j++) if (R.thread[j] === i) depth = Math.max(depth, sampled!.stacks[R.stack[j]!]?.length ?? 0);
    return { key: t.key, rank: t.rank, pid: t.pid, tid: t.tid, depth };
  });
  const tracks = trk.tracks as TrackInfo[];
  // The first view (and "0"): what the shown tracks draw, not the whole span, which
  // also covers the tracks left out (Kineto's placeholder span starts when the profiler
  // was set up, ~95 ms before the first event of a trace). The axis stays the profile's.
  const span = (trk.shown_ns ?? trk.span_ns) as [number, number];
  const metrics = counterList.metrics;
  const counters: CounterInfo[] = [];
  counters.push(...memoryCounters(memInfo?.peaks ?? []));
  for (const m of metrics)
    counters.push({ type: "counter", rank: m.rank, device_type: m.device_type, device: m.device ?? null, metric: m.metric, unit: m.unit ?? "", max: m.max ?? 0, min: m.min ?? 0 });
  const tree = buildTree(tracks, counters, samplers);
  const pinned = new Set<string>();
  const counterNodes = [...walkCounters(tree)];
  const counterLabel = (c: CounterInfo) => (c.type === "memory" ? `memory ${c.metric} (${c.device_type} ${c.device})` : `${c.metric} (${c.device_type} ${c.device})`);

  // -- the page ----------------------------------------------------------------------------
  const search = h("input", { id: "tl-search", type: "search", placeholder: "search event names ( / )", "aria-label": "search event names" });
  const regex = h("input", { id: "tl-regex", type: "checkbox", title: "regular expression (RE2)" });
  const count = h("span", { id: "tl-count", class: "muted" });
  const prevB = h("button", { id: "tl-prev", title: "previous match (Shift+Enter)" }, "‹");
  const nextB = h("button", { id: "tl-next", title: "next match (Enter)" }, "›");
  const flowsAll = h("input", { id: "tl-flows", type: "checkbox" });
  const help = h("span", { id: "tl-help", class: "muted" },
    "W/S zoom at pointer · A/D pan · F fit selection · M mark · 0 reset · / search · drag pan · Shift+drag measure · Ctrl+wheel zoom");
  const toolbar = h("div", { class: "tl-toolbar" },
    search, h("label", { class: "chk" }, regex, "regex"), prevB, nextB, count,
    h("label", { class: "chk", title: "draw every flow arrow of the window (default: the selected event's only)" }, flowsAll, "all flows"),
    serverDownload("Export trace", "download the visible window as a Chrome trace (Perfetto, chrome://tracing)", P("/timeline/chrome-trace"),
      () => ({ t0: Math.floor(view.t0), t1: Math.ceil(view.t1) })), help);
  const canvas = h("canvas", { id: "tl-canvas", tabindex: "0" });
  const wrap = h("div", { id: "tl-wrap" }, canvas);
  const details = h("div", { class: "panel", id: "tl-details" }, h("span", { class: "muted" }, "Click an event for its details."));
  const summary = h("div", { class: "panel", id: "tl-summary" }, h("span", { class: "muted" }, "Shift+drag to measure a range: the totals of what it covers show here."));
  const pageEl = h("div", { id: "tl-page" }, toolbar, wrap, h("div", { id: "tl-side" }, details, summary));
  main.append(pageEl);
  main.classList.add("full");

  // -- state ---------------------------------------------------------------------------------
  const view = new Viewport(r0.t0 ?? span[0], r0.t1 ?? Math.max(span[1], span[0] + 1000), LABEL_W, 1000);
  const scene: Scene = { data: null, byTrack: new Map(), series: new Map(), matches: new Set(), picked: null, samples: new Map(), frameNames: [], sampleSpan: 1 };
  let scrollY = 0;
  let rows: Row[] = [];
  let pinnedH = 0;
  let contentH = 0;
  let W = 0, H = 0;
  let ctx: CanvasRenderingContext2D = canvas.getContext("2d")!;
  let sel: { t0: number; t1: number } | null = null;
  const marks: { t0: number; t1: number }[] = [];
  let mouse: { x: number; y: number } | null = null;
  let inflight = 0;
  let found: SearchResponse | null = null;
  let cur = -1;
  let matcher: ((s: string) => boolean) | null = null;

  function relayout(): void {
    const l = layoutTree(tree, pinned);
    rows = l.rows;
    pinnedH = l.pinnedH;
    contentH = l.contentH;
    scrollY = Math.max(0, Math.min(scrollY, Math.max(0, contentH - (H - RULER_H) + 8)));
  }
  const rowY = (r: Row) => RULER_H + r.y - (r.pinned ? 0 : scrollY);

  function resize(): void {
    const top = pageEl.getBoundingClientRect().top;
    pageEl.style.height = Math.max(360, window.innerHeight - top - 8) + "px";
    const dpr = window.devicePixelRatio || 1;
    W = wrap.clientWidth || 1000;
    H = Math.max(120, wrap.clientHeight || 400);
    canvas.style.width = W + "px";
    canvas.style.height = H + "px";
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
    ctx = canvas.getContext("2d")!;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    view.x0 = LABEL_W;
    view.width = Math.max(50, W - LABEL_W);
    relayout();
  }

  // -- drawing -------------------------------------------------------------------------------
  function draw(): number {
    const started = performance.now();
    const th = theme();
    ctx.fillStyle = th.bg;
    ctx.fillRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const right = W;
    const scrollTop = RULER_H + pinnedH;
    const drawRows = (pinnedPass: boolean) => {
      ctx.save();
      ctx.beginPath();
      if (pinnedPass) ctx.rect(0, RULER_H, W, pinnedH);
      else ctx.rect(0, scrollTop, W, H - scrollTop);
      ctx.clip();
      for (const r of rows) {
        if (r.pinned !== pinnedPass) continue;
        const y = rowY(r);
        if (y + r.h < RULER_H || y > H) continue;
        ctx.save();
        ctx.beginPath();
        ctx.rect(LABEL_W, y, W - LABEL_W, r.h);
        ctx.clip();
        const rc = { ctx, view, th, scene, y, right };
        if (r.node.track) sliceTrack.render(rc, r);
        else if (r.node.counter) counterTrack.render(rc, r);
        else if (r.node.samples) sampleTrack.render(rc, r);
        else groupSummary.render(rc, r);
        ctx.restore();
        drawLabel(r, y, th);
      }
      ctx.restore();
    };
    drawRows(false);
    drawRows(true);
    if (pinnedH) {
      ctx.strokeStyle = th.accent;
      ctx.beginPath();
      ctx.moveTo(0, scrollTop - 2);
      ctx.lineTo(W, scrollTop - 2);
      ctx.stroke();
    }
    drawOverlays(th);
    drawRuler(th);
    const ms = performance.now() - started;
    const dbg = window.__aiprof;
    dbg.frames.push(ms);
    if (dbg.frames.length > 1000) dbg.frames.shift();
    dbg.lastFrameMs = ms;
    return ms;
  }

  function drawLabel(r: Row, y: number, th: ReturnType<typeof theme>): void {
    const n = r.node;
    ctx.fillStyle = isLeaf(n) ? th.panel : th.line;
    ctx.fillRect(0, y, LABEL_W, r.h);
    ctx.strokeStyle = th.line;
    ctx.beginPath();
    ctx.moveTo(0, y + r.h + 2);
    ctx.lineTo(W, y + r.h + 2);
    ctx.stroke();
    const x = 6 + r.indent * 12;
    ctx.fillStyle = n.track?.is_device || n.counter ? th.accent : th.fg;
    let text = n.title;
    if (!isLeaf(n)) {
      text = (n.collapsed ? "▸ " : "▾ ") + n.title;
      ctx.font = "600 11px system-ui, sans-serif";
    }
    ctx.fillText(ellipsize(ctx, text, LABEL_W - x - PIN_W - 4), x, y + Math.min(r.h, ROW_H) / 2 + 1);
    ctx.font = "11px system-ui, sans-serif";
    if (isLeaf(n)) {
      ctx.fillStyle = r.pinned ? th.accent : th.muted;
      ctx.fillText(r.pinned ? "●" : "○", LABEL_W - PIN_W + 3, y + Math.min(r.h, ROW_H) / 2 + 1);
    }
  }

  function centreOf(track: number, depth: number): number | null {
    const r = rows.find((x) => x.node.track?.track === track);
    if (r) return rowY(r) + Math.min(depth, Math.round(r.h / ROW_H) - 1) * ROW_H + ROW_H / 2;
    // A track inside a collapsed group: its group's row.
    const g = rows.find((x) => x.node.collapsed && ancestorsOfTrack(track).includes(x.node));
    return g ? rowY(g) + g.h / 2 : null;
  }

  function drawOverlays(th: ReturnType<typeof theme>): void {
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, RULER_H, W - LABEL_W, H - RULER_H);
    ctx.clip();
    for (const m of marks) {
      ctx.fillStyle = th.mark;
      const a = view.xOf(m.t0), b = view.xOf(m.t1);
      ctx.fillRect(a, RULER_H, Math.max(1, b - a), H);
    }
    if (sel) {
      ctx.fillStyle = th.select;
      const a = view.xOf(Math.min(sel.t0, sel.t1)), b = view.xOf(Math.max(sel.t0, sel.t1));
      ctx.fillRect(a, RULER_H, b - a, H);
    }
    // Flow arrows: the selected event's only, unless "all flows" is on.
    const data = scene.data, p = scene.picked;
    if (data && (flowsAll.checked || p)) {
      const f = data.flows;
      ctx.strokeStyle = th.flow;
      ctx.fillStyle = th.flow;
      for (let i = 0; i < f.to_ts.length; i++) {
        if (!flowsAll.checked && p && !((f.from_track[i] === p.track && f.from_ts[i] === p.ts) || (f.to_track[i] === p.track && f.to_ts[i] === p.ts))) continue;
        const y1 = centreOf(f.from_track[i]!, f.from_depth[i]!), y2 = centreOf(f.to_track[i]!, f.to_depth[i]!);
        if (y1 === null || y2 === null) continue;
        const x1 = view.xOf(f.from_ts[i]!), x2 = view.xOf(f.to_ts[i]!);
        ctx.beginPath();
        ctx.moveTo(x1, y1);
        ctx.bezierCurveTo(x1 + 30, y1, x2 - 30, y2, x2, y2);
        ctx.stroke();
        ctx.beginPath();
        ctx.moveTo(x2, y2);
        ctx.lineTo(x2 - 6, y2 - 3);
        ctx.lineTo(x2 - 6, y2 + 3);
        ctx.fill();
      }
    }
    // The value under the pointer on counter tracks: a hairline.
    if (mouse && mouse.x > LABEL_W) {
      ctx.strokeStyle = th.muted;
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(mouse.x, RULER_H);
      ctx.lineTo(mouse.x, H);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.restore();
  }

  function drawRuler(th: ReturnType<typeof theme>): void {
    ctx.fillStyle = th.bg;
    ctx.fillRect(0, 0, W, RULER_H);
    ctx.strokeStyle = th.line;
    ctx.beginPath();
    ctx.moveTo(0, RULER_H);
    ctx.lineTo(W, RULER_H);
    ctx.stroke();
    const { step, ticks } = rulerTicks(view.t0, view.t1, view.width, (s) => ctx.measureText(fmtTick(view.t1, s)).width);
    ctx.fillStyle = th.fg;
    for (const t of ticks) {
      const x = view.xOf(t);
      if (x < LABEL_W) continue;
      ctx.fillRect(x, RULER_H - 7, 1, 7);
      const label = fmtTick(t, step);
      if (x + 3 + ctx.measureText(label).width <= W) ctx.fillText(label, x + 3, 10);
    }
    for (const m of marks) {
      ctx.fillStyle = th.match;
      const a = view.xOf(m.t0);
      ctx.fillRect(Math.max(LABEL_W, a), RULER_H - 4, Math.max(2, view.xOf(m.t1) - a), 4);
    }
    ctx.fillStyle = th.panel;
    ctx.fillRect(0, 0, LABEL_W, RULER_H);
    ctx.fillStyle = th.fg;
    ctx.fillText(`window ${fmtNs(view.dt)}`, 6, 11);
  }

  // -- data ------------------------------------------------------------------------------------
  let fetchTimer = 0;
  function requestData(): void {
    clearTimeout(fetchTimer);
    fetchTimer = window.setTimeout(() => void fetchData(), 60);
  }

  /** ``pre``: the window asked for already (the first one), else null. */
  async function fetchData(pre: Promise<WindowResponse | null> | null = null): Promise<void> {
    const id = ++inflight;
    const { t0, t1 } = padded(view.t0, view.t1);
    const width = Math.round(view.width * 1.5);
    const started = performance.now();
    updateRoute({ t0: Math.round(view.t0), t1: Math.round(view.t1) });
    const memReq = new Map<string, Promise<MemorySeries>>();
    const samplesP = samplers.length ? api<SampleWindowResponse>(P("/samples/window"), { t0, t1, width }) : Promise.resolve(null);
    const [win, sw, ...cs] = await Promise.all([
      pre?.then((w) => w ?? api<WindowResponse>(P("/timeline"), { t0, t1, width })) ?? api<WindowResponse>(P("/timeline"), { t0, t1, width }),
      samplesP,
      ...counterNodes.map((n) => {
        const c = n.counter!;
        // One request per device for its allocated and reserved tracks.
        const key = `${c.rank}/${c.device}`;
        if (c.type === "memory" && !memReq.has(key)) memReq.set(key, api<MemorySeries>(P("/memory/series"), { t0, t1, width, rank: c.rank, device: c.device }));
        return c.type === "memory"
          ? memReq.get(key)!.then((m): Series => {
              const s = m.series.find((x) => x.device_type === c.device_type) ?? { ts: [], allocated: [], reserved: [] };
              return { ts: s.ts, v: c.metric === "reserved" ? carried(s.reserved) : s.allocated };
            })
          : api<CounterSeries>(P("/counters/series"), { metric: c.metric, rank: c.rank, device: c.device, t0, t1, width }).then((s): Series => ({ ts: s.ts, v: s.max }));
      }),
    ]);
    if (id !== inflight) return;
    scene.data = win;
    scene.byTrack = indexByTrack(win);
    scene.series = new Map(counterNodes.map((n, i) => [n.id, cs[i] as Series]));
    scene.samples = new Map();
    if (sw) {
      scene.frameNames = sw.frames.map((f) => f.name);
      scene.sampleSpan = Math.max(sw.bucket_ns, sw.interval_ns, 1);
      sw.threads.forEach((t, ti) => {
        const ts: number[] = [], stacks: number[][] = [];
        for (let j = 0; j < sw.rows.ts.length; j++)
          if (sw.rows.thread[j] === ti) {
            ts.push(sw.rows.ts[j]!);
            stacks.push(sw.stacks[sw.rows.stack[j]!] ?? []);
          }
        scene.samples.set(t.key, { ts, stacks });
      });
    }
    refreshMatches();
    const dbg = window.__aiprof;
    dbg.lastFetchMs = performance.now() - started;
    dbg.items = win.items.ts.length;
    draw();
    dbg.painted = (dbg.painted || 0) + 1;
    if (!dbg.firstPaintAt) dbg.firstPaintAt = performance.now();
    canvas.dataset.painted = String(dbg.painted);
  }

  // -- navigation ---------------------------------------------------------------------------
  function pointerT(): number {
    return mouse && mouse.x > LABEL_W ? view.tOf(mouse.x) : (view.t0 + view.t1) / 2;
  }
  function zoom(f: number, atX?: number): void {
    view.zoomAround(f, atX === undefined ? pointerT() : view.tOf(atX));
    draw();
    requestData();
  }
  function pan(frac: number): void {
    view.pan(frac);
    draw();
    requestData();
  }
  function scrollBy(dy: number): void {
    scrollY = Math.max(0, Math.min(Math.max(0, contentH - (H - RULER_H) + 8), scrollY + dy));
    draw();
  }
  function fitSelection(): void {
    if (scene.picked) view.fit(scene.picked.ts, scene.picked.ts + Math.max(scene.picked.dur, 1));
    else if (sel) view.fit(Math.min(sel.t0, sel.t1), Math.max(sel.t0, sel.t1), 0.02);
    else return;
    draw();
    requestData();
  }
  function mark(): void {
    const m = scene.picked ? { t0: scene.picked.ts, t1: scene.picked.ts + scene.picked.dur } : sel ? { t0: Math.min(sel.t0, sel.t1), t1: Math.max(sel.t0, sel.t1) } : null;
    if (!m) return;
    const i = marks.findIndex((x) => x.t0 === m.t0 && x.t1 === m.t1);
    if (i >= 0) marks.splice(i, 1);
    else marks.push(m);
    draw();
  }
  function ancestorsOfTrack(track: number): TrackNode[] {
    return ancestors(tree, "t" + track);
  }
  /** Expand the groups holding ``track`` and scroll it into view. */
  function reveal(track: number): void {
    let changed = false;
    for (const g of ancestorsOfTrack(track))
      if (g.collapsed) {
        g.collapsed = false;
        changed = true;
      }
    if (changed) relayout();
    const r = rows.find((x) => x.node.track?.track === track);
    if (r && !r.pinned) {
      const y = rowY(r);
      if (y < RULER_H + pinnedH || y + r.h > H) scrollY = Math.max(0, r.y - pinnedH - 40);
    }
  }

  const onKey = (e: KeyboardEvent) => {
    const tgt = e.target as HTMLElement | null;
    if (tgt && (tgt.tagName === "INPUT" || tgt.tagName === "SELECT" || tgt.tagName === "TEXTAREA")) {
      if (e.key === "Escape") tgt.blur();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key.toLowerCase();
    if (k === "w") zoom(ZOOM_STEP);
    else if (k === "s") zoom(1 / ZOOM_STEP);
    else if (k === "a") pan(-0.1);
    else if (k === "d") pan(0.1);
    else if (k === "f") fitSelection();
    else if (k === "m") mark();
    else if (k === "/") search.focus();
    else if (k === "escape") { scene.picked = null; sel = null; updateRoute({ sel: undefined }); draw(); }
    else if (k === "0") { view.t0 = span[0]; view.t1 = Math.max(span[1], span[0] + 1000); draw(); requestData(); }
    else return;
    e.preventDefault();
  };
  document.addEventListener("keydown", onKey);

  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    if (e.ctrlKey || e.metaKey) zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, e.offsetX > LABEL_W ? e.offsetX : undefined);
    else if (e.shiftKey) pan((e.deltaY || e.deltaX) > 0 ? 0.1 : -0.1);
    else if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) pan(e.deltaX / view.width);
    else scrollBy(e.deltaY);
  }, { passive: false });

  let drag: { x: number; y: number; t0: number; t1: number; sy: number; moved: boolean; select: boolean } | null = null;
  canvas.addEventListener("mousedown", (e) => {
    canvas.focus();
    drag = { x: e.offsetX, y: e.offsetY, t0: view.t0, t1: view.t1, sy: scrollY, moved: false, select: e.shiftKey && e.offsetX > LABEL_W };
    if (drag.select) sel = { t0: view.tOf(e.offsetX), t1: view.tOf(e.offsetX) };
  });
  canvas.addEventListener("mousemove", (e) => {
    mouse = { x: e.offsetX, y: e.offsetY };
    if (!drag) {
      hover(e);
      draw();
      return;
    }
    hideTip();
    const dx = e.offsetX - drag.x;
    if (Math.abs(dx) + Math.abs(e.offsetY - drag.y) > 3) drag.moved = true;
    if (drag.select && sel) {
      sel.t1 = view.tOf(e.offsetX);
      draw();
      return;
    }
    const dtp = (drag.t1 - drag.t0) / view.width;
    view.t0 = drag.t0 - dx * dtp;
    view.t1 = drag.t1 - dx * dtp;
    scrollY = Math.max(0, Math.min(Math.max(0, contentH - (H - RULER_H) + 8), drag.sy - (e.offsetY - drag.y)));
    draw();
  });
  canvas.addEventListener("mouseleave", () => {
    mouse = null;
    hideTip();
    draw();
  });
  canvas.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    if (d.select && d.moved) return void showSummary();
    if (d.select) {
      sel = null;
      draw();
      return;
    }
    if (d.moved) return requestData();
    if (e.offsetX < LABEL_W) return clickLabel(e.offsetX, e.offsetY);
    void pick(e.offsetX, e.offsetY);
  });

  function rowAt(y: number): Row | null {
    for (const r of rows) {
      const yy = rowY(r);
      if (!r.pinned && yy < RULER_H + pinnedH) continue;
      if (y >= yy && y < yy + r.h) return r;
    }
    return null;
  }
  function clickLabel(x: number, y: number): void {
    const r = rowAt(y);
    if (!r) return;
    const n = r.node;
    if (isLeaf(n)) {
      if (x < LABEL_W - PIN_W) return;
      if (pinned.has(n.id)) pinned.delete(n.id);
      else pinned.add(n.id);
    } else n.collapsed = !n.collapsed;
    relayout();
    draw();
  }
  function toggle(id: string): void {
    for (const r of rows) if (r.node.id === id) r.node.collapsed = !r.node.collapsed;
    relayout();
    draw();
  }

  function hit(x: number, y: number): Hit | null {
    const data = scene.data;
    if (!data || x < LABEL_W) return null;
    const r = rowAt(y);
    if (!r || !r.node.track) return null;
    const depth = Math.floor((y - rowY(r)) / ROW_H);
    const it = data.items;
    const tx = view.tOf(x), tol = (3 / view.width) * view.dt;
    let best: Hit | null = null;
    for (const i of scene.byTrack.get(r.node.track.track) ?? []) {
      if (it.depth[i] !== depth) continue;
      if (it.ts[i]! - tol <= tx && tx <= it.ts[i]! + it.dur[i]! + tol && (!best || it.dur[i]! < best.dur))
        best = { i, track: r.node.track.track, depth, ts: it.ts[i]!, dur: it.dur[i]!, n: it.n[i]!, name: data.names[it.name[i]!]!, kind: it.kind[i]! };
    }
    return best;
  }

  function hover(e: MouseEvent): void {
    const r = rowAt(e.offsetY);
    if (!r) return hideTip();
    if (e.offsetX < LABEL_W) {
      const n = r.node;
      const lines: (string | [string, string])[] = [n.full];
      if (n.track) lines.push(["events", fmtNum(n.track.events)], ["", e.offsetX >= LABEL_W - PIN_W ? "click: pin to the top" : "click ○: pin"]);
      else if (!n.counter) lines.push(["", n.collapsed ? "click: expand" : "click: collapse"]);
      return showTip(e.clientX, e.clientY, lines);
    }
    if (r.node.counter) {
      const c = r.node.counter;
      const s = scene.series.get(r.node.id);
      const t = view.tOf(e.offsetX);
      const i = s ? lastAtOrBefore(s.ts, t) : -1;
      return showTip(e.clientX, e.clientY, [r.node.full, ["at", fmtNs(t)], ["value", i >= 0 && s ? fmtValue(s.v[i] ?? 0, c.unit) : "no sample yet"], [c.type === "memory" ? `peak ${c.metric}` : "max", fmtValue(c.max, c.unit)]]);
    }
    if (r.node.samples) {
      const run = scene.samples.get(r.node.samples.key);
      const t = view.tOf(e.offsetX);
      const i = run ? lastAtOrBefore(run.ts, t) : -1;
      const d = Math.floor((e.offsetY - rowY(r)) / ROW_H);
      if (!run || i < 0 || t - run.ts[i]! > 2 * scene.sampleSpan) return hideTip();
      const st = run.stacks[i]!;
      return showTip(e.clientX, e.clientY, [scene.frameNames[st[d] ?? -1] ?? "(no frame this deep)", ["sample at", fmtNs(run.ts[i]!)], ["stack", st.slice(Math.max(0, st.length - 4)).map((f) => scene.frameNames[f]).join(" › ")]]);
    }
    const b = hit(e.offsetX, e.offsetY);
    if (!b) return hideTip();
    if (b.n > 1) return showTip(e.clientX, e.clientY, [`${fmtNum(b.n)} events merged`, ["longest", b.name], ["span", fmtNs(b.dur)], ["", "zoom in (W) to see them"]]);
    showTip(e.clientX, e.clientY, [b.name, ["kind", b.kind], ["duration", fmtNs(b.dur)], ["start", fmtNs(b.ts)]]);
  }

  async function pick(x: number, y: number): Promise<void> {
    const b = hit(x, y);
    if (!b) {
      scene.picked = null;
      updateRoute({ sel: undefined });
      details.textContent = "";
      details.append(h("span", { class: "muted" }, "Nothing there."));
      draw();
      return;
    }
    if (b.n > 1) {
      scene.picked = null;
      details.textContent = "";
      details.append(h("b", {}, `${fmtNum(b.n)} events merged`), h("div", {}, `longest: ${b.name} · ${fmtNs(b.ts)} – ${fmtNs(b.ts + b.dur)}`), h("div", { class: "muted" }, "Zoom in (W) to see them one by one."));
      draw();
      return;
    }
    await select(b.track, b.ts, b.dur, b.depth);
  }

  /** Select the event on ``track`` at ``ts`` and show its details (kernel/launch links). */
  async function select(track: number, ts: number, dur: number, depth?: number): Promise<void> {
    let d = depth;
    if (d === undefined && scene.data) {
      const it = scene.data.items;
      for (const i of scene.byTrack.get(track) ?? []) if (it.ts[i] === ts && it.dur[i] === dur) d = it.depth[i];
    }
    scene.picked = { track, ts, dur, depth: d ?? 0 };
    updateRoute({ sel: { track, ts, dur } });
    reveal(track);
    draw();
    details.textContent = "";
    try {
      const r = await api<EventsResponse>(P("/timeline/event"), { track, ts });
      const ev = (r.events.find((x) => x.dur === dur) || r.events[0]) as Record<string, unknown>;
      const kv = h("table", { class: "kv" });
      for (const k of ["name", "kind", "cat", "ts", "dur", "rank", "device_type", "device", "pid", "tid", "step", "correlation", "external_id", "bytes", "grid", "block"]) {
        const v = ev[k];
        if (v === null || v === undefined) continue;
        const shown = k === "ts" ? `${fmtNs(Number(v))} (${v} ns)` : k === "dur" ? fmtNs(Number(v)) : k === "bytes" ? fmtValue(v, "B") : String(v);
        kv.append(h("tr", {}, h("td", {}, k), h("td", { class: k === "name" ? "ev-name" : "" }, shown)));
      }
      details.append(h("b", {}, "Event"), kv);
      const linked = (ev.linked as { track: number; ts: number; dur: number; kind: string; name: string; depth: number }[]) || [];
      if (linked.length) {
        details.append(h("b", {}, "Linked by correlation"));
        for (const l of linked)
          details.append(h("div", {}, h("a", { href: "javascript:void 0", class: "link", onclick: () => { view.reveal(l.ts, l.ts + l.dur); void select(l.track, l.ts, l.dur, l.depth); requestData(); } },
            `${l.kind}: ${l.name}`), ` @ ${fmtNs(l.ts)} (${fmtNs(l.dur)})`));
      }
      if (ev.args) details.append(h("b", {}, "args"), h("pre", {}, String(ev.args)));
    } catch (e) {
      details.append(h("span", { class: "error" }, (e as Error).message));
    }
  }

  async function showSummary(): Promise<void> {
    if (!sel) return;
    const a = Math.floor(Math.min(sel.t0, sel.t1)), b = Math.ceil(Math.max(sel.t0, sel.t1));
    summary.textContent = "";
    const s = await api<SummaryResponse>(P("/timeline/summary"), { t0: a, t1: b });
    summary.append(h("b", {}, `Selection ${fmtNs(a)} – ${fmtNs(b)} (${fmtNs(b - a)}): ${fmtNum(s.events)} events`));
    const t = h("table", { class: "data", id: "sel-kinds" }, h("tr", {}, h("th", {}, "kind"), h("th", {}, "events"), h("th", {}, "time in selection")));
    for (const k of s.by_kind) t.append(h("tr", {}, h("td", {}, k.kind), h("td", { class: "num" }, fmtNum(k.events)), h("td", { class: "num" }, fmtNs(k.time_ns))));
    const t2 = h("table", { class: "data" }, h("tr", {}, h("th", {}, "name"), h("th", {}, "kind"), h("th", {}, "events"), h("th", {}, "time")));
    for (const k of s.top.slice(0, 10))
      t2.append(h("tr", {}, h("td", { title: k.name }, k.name), h("td", {}, k.kind), h("td", { class: "num" }, fmtNum(k.events)), h("td", { class: "num" }, fmtNs(k.time_ns))));
    const kindCols = ["kind", "events", "time_ns"].map((name) => ({ name }));
    const nameCols = ["name", "kind", "events", "time_ns"].map((name) => ({ name }));
    summary.append(exportButtons(`${pid()}.selection.kinds`, () => ({ columns: kindCols, rows: s.by_kind, raw: s })), t,
      h("div", { class: "muted" }, "Top names ", exportButtons(`${pid()}.selection.names`, () => ({ columns: nameCols, rows: s.top, raw: s }))), t2);
  }

  // -- search ----------------------------------------------------------------------------------
  function refreshMatches(): void {
    scene.matches = new Set();
    const data = scene.data;
    if (!data || !matcher) return;
    data.names.forEach((n, i) => {
      if (matcher!(n)) scene.matches.add(i);
    });
  }
  async function runSearch(q: string, re: boolean, jump = true): Promise<void> {
    count.textContent = "";
    found = null;
    cur = -1;
    matcher = null;
    updateRoute({ q: q || undefined, re: re || undefined });
    if (!q) {
      refreshMatches();
      draw();
      return;
    }
    try {
      found = await api<SearchResponse>(P("/timeline/search"), { q, regex: re, limit: 5000 });
    } catch (e) {
      count.textContent = (e as Error).message;
      count.className = "error";
      return;
    }
    count.className = "muted";
    if (re) {
      try {
        const rx = new RegExp(q);
        matcher = (s) => rx.test(s);
      } catch {
        const names = new Set(found.matches.map((m) => m.name));
        matcher = (s) => names.has(s);
      }
    } else {
      const lq = q.toLowerCase();
      matcher = (s) => s.toLowerCase().includes(lq);
    }
    refreshMatches();
    showCount();
    if (jump && found.matches.length) {
      const mid = (view.t0 + view.t1) / 2;
      const i = found.matches.findIndex((m) => m.ts >= mid);
      await goTo(i >= 0 ? i : 0);
    } else draw();
  }
  function showCount(): void {
    if (!found) return;
    const shown = found.matches.length;
    count.textContent = found.total
      ? `${cur >= 0 ? fmtNum(cur + 1) : "–"} / ${fmtNum(found.total)}${found.truncated ? ` (first ${fmtNum(shown)} listed)` : ""} · ${fmtNum(found.names)} names`
      : "no match";
    count.dataset.total = String(found.total);
  }
  async function goTo(i: number): Promise<void> {
    if (!found || !found.matches.length) return;
    cur = (i + found.matches.length) % found.matches.length;
    const m = found.matches[cur]!;
    showCount();
    view.reveal(m.ts, m.ts + m.dur);
    requestData();
    await select(m.track, m.ts, m.dur, m.depth);
  }
  search.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    const q = search.value.trim();
    if (found && found.q === q && found.regex === regex.checked) void goTo(cur + (e.shiftKey ? -1 : 1));
    else void runSearch(q, regex.checked);
  });
  regex.addEventListener("change", () => void runSearch(search.value.trim(), regex.checked));
  nextB.addEventListener("click", () => (found ? void goTo(cur + 1) : void runSearch(search.value.trim(), regex.checked)));
  prevB.addEventListener("click", () => void goTo(cur - 1));
  flowsAll.addEventListener("change", () => draw());

  // -- start -------------------------------------------------------------------------------------
  const debugHandle = {
    zoom, pan, view, draw, tracks, tree, hit, xOf: (t: number) => view.xOf(t),
    scrollY: () => scrollY,
    get layout() {
      const m = new Map<number, { y: number; h: number; t: TrackInfo }>();
      for (const r of rows) if (r.node.track) m.set(r.node.track.track, { y: rowY(r) + scrollY, h: r.h, t: r.node.track });
      return m;
    },
    get rows() {
      return rows.map((r) => ({ id: r.node.id, title: r.node.title, full: r.node.full, y: rowY(r), h: r.h, pinned: r.pinned, collapsed: r.node.collapsed, group: !isLeaf(r.node) }));
    },
    counterTracks: counterNodes.map((n) => ({ label: counterLabel(n.counter!), id: n.id, unit: n.counter!.unit })),
    counterSamples: () => [...scene.series.values()].reduce((s, c) => s + c.ts.length, 0),
    pythonSamples: () => [...scene.samples.values()].reduce((s, c) => s + c.ts.length, 0),
    clickAt: (x: number, y: number) => pick(x, y),
    selectRange: async (a: number, b: number) => { sel = { t0: a, t1: b }; draw(); await showSummary(); },
    search: runSearch, next: () => goTo(cur + 1), toggle,
    pin: (id: string) => { pinned.add(id); relayout(); draw(); },
    picked: () => scene.picked,
  };
  window.__aiprof.timeline = debugHandle;
  resize();
  draw();
  const ro = new ResizeObserver(() => { resize(); draw(); });
  ro.observe(wrap);
  const onResize = () => { resize(); draw(); };
  window.addEventListener("resize", onResize);
  await fetchData(firstWin);
  if (r0.q) {
    search.value = r0.q;
    regex.checked = !!r0.re;
    await runSearch(r0.q, !!r0.re, !r0.sel);
  }
  if (r0.sel) await select(r0.sel.track, r0.sel.ts, r0.sel.dur);
  return () => {
    document.removeEventListener("keydown", onKey);
    window.removeEventListener("resize", onResize);
    ro.disconnect();
    clearTimeout(fetchTimer);
    hideTip();
    main.classList.remove("full");
    delete window.__aiprof.timeline;
  };
}

/** The window fetched for a view of [t0, t1]: a quarter of it more on each side, so
 * that a pan redraws from what is there until the refined window comes. */
function padded(t0: number, t1: number): { t0: number; t1: number } {
  const dt = t1 - t0;
  return { t0: Math.floor(t0 - dt * 0.25), t1: Math.ceil(t1 + dt * 0.25) };
}

function* walkCounters(n: TrackNode): Generator<TrackNode> {
  if (n.counter) yield n;
  for (const c of n.children) yield* walkCounters(c);
}
