// Track renderers: each kind of row draws itself with render(rc, row). The slices of
// a window come from the server already merged to the pixel; a renderer never fetches.
// Flows, marks and the range selection are overlays drawn over all tracks (timeline.ts).
import type { WindowResponse } from "../lib/api";
import { eventColor, type Theme } from "../lib/colors";
import { fmtValue } from "../lib/format";
import { type Row, ROW_H, leaves } from "../lib/tracktree";
import type { Viewport } from "../lib/viewport";

/** One window of a thread's samples: the last sample of each pixel. */
export interface SampleRun {
  ts: number[];
  stacks: number[][];
}

export interface Series {
  ts: number[];
  v: (number | null)[];
}

/** What one frame draws from: the window data, indexed by track. */
export interface Scene {
  data: WindowResponse | null;
  byTrack: Map<number, number[]>;
  series: Map<string, Series>;
  /** Name indexes (into data.names) that the search matches. */
  matches: Set<number>;
  picked: { track: number; ts: number; dur: number; depth: number } | null;
  /** Python samples per thread key, with the frame names. */
  samples: Map<string, SampleRun>;
  frameNames: string[];
  /** How long one sample stands for (ns): the larger of the pixel and the interval. */
  sampleSpan: number;
}

export interface RenderCtx {
  ctx: CanvasRenderingContext2D;
  view: Viewport;
  th: Theme;
  scene: Scene;
  /** Top of the row on the canvas. */
  y: number;
  /** Right edge of the plot. */
  right: number;
}

export interface TrackRenderer {
  render(rc: RenderCtx, row: Row): void;
}

const DARK_TEXT = new Set(["step", "kernel", "collective", "memcpy", "sync"]);

export function indexByTrack(data: WindowResponse): Map<number, number[]> {
  const m = new Map<number, number[]>();
  const tr = data.items.track;
  for (let i = 0; i < tr.length; i++) {
    let a = m.get(tr[i]!);
    if (!a) m.set(tr[i]!, (a = []));
    a.push(i);
  }
  return m;
}

/** Slices of one thread or stream, one row per nesting level. */
export const sliceTrack: TrackRenderer = {
  render(rc, row) {
    const { ctx, view, scene, th } = rc;
    const t = row.node.track;
    const data = scene.data;
    if (!t || !data) return;
    const it = data.items;
    const rows = Math.round(row.h / ROW_H);
    const scale = view.width / view.dt;
    for (const i of scene.byTrack.get(t.track) ?? []) {
      const d = it.depth[i]!;
      if (d >= rows) continue;
      const x = view.x0 + (it.ts[i]! - view.t0) * scale;
      let w = it.dur[i]! * scale;
      if (x + w < view.x0 || x > rc.right) continue;
      if (w < 1) w = 1;
      const yy = rc.y + d * ROW_H;
      const name = data.names[it.name[i]!] ?? "";
      const kind = it.kind[i]!;
      ctx.fillStyle = it.n[i]! > 1 ? th.merged : eventColor(kind, name);
      ctx.fillRect(x, yy + 1, w, ROW_H - 2);
      if (scene.matches.has(it.name[i]!)) {
        ctx.strokeStyle = th.match;
        ctx.lineWidth = 2;
        ctx.strokeRect(x, yy + 1, Math.max(w, 2), ROW_H - 2);
        ctx.lineWidth = 1;
      }
      if (w > 28 && it.n[i] === 1) {
        const x0 = Math.max(x, view.x0) + 2;
        const ww = Math.min(x + w, rc.right) - x0 - 2;
        if (ww > 20) {
          ctx.fillStyle = DARK_TEXT.has(kind) ? "#fff" : "#111";
          ctx.fillText(ellipsize(ctx, name, ww), x0, yy + ROW_H / 2);
        }
      }
    }
    const p = scene.picked;
    if (p && p.track === t.track && p.depth < rows) {
      ctx.strokeStyle = th.fg;
      ctx.lineWidth = 2;
      ctx.strokeRect(view.xOf(p.ts), rc.y + p.depth * ROW_H + 1, Math.max(2, p.dur * scale), ROW_H - 2);
      ctx.lineWidth = 1;
    }
  },
};

/** A collapsed group: every slice of its tracks on one line, so busy stretches show. */
export const groupSummary: TrackRenderer = {
  render(rc, row) {
    const { ctx, view, scene, th } = rc;
    const data = scene.data;
    if (!row.node.collapsed || !data) return;
    const it = data.items;
    const scale = view.width / view.dt;
    ctx.globalAlpha = 0.45;
    for (const leaf of leaves(row.node)) {
      if (!leaf.track) continue;
      for (const i of scene.byTrack.get(leaf.track.track) ?? []) {
        if (it.depth[i] !== 0) continue;
        const x = view.x0 + (it.ts[i]! - view.t0) * scale;
        const w = Math.max(1, it.dur[i]! * scale);
        if (x + w < view.x0 || x > rc.right) continue;
        ctx.fillStyle = leaf.track.is_device ? th.accent : th.muted;
        ctx.fillRect(x, rc.y + 4, w, row.h - 8);
      }
    }
    ctx.globalAlpha = 1;
  },
};

/** A counter: a step area from its first sample, its scale and unit in the corner. */
export const counterTrack: TrackRenderer = {
  render(rc, row) {
    const { ctx, view, scene, th } = rc;
    const c = row.node.counter;
    if (!c) return;
    const s = scene.series.get(row.node.id);
    const top = rc.y + 12;
    const hh = row.h - 14;
    ctx.fillStyle = th.muted;
    ctx.fillText(`${fmtValue(c.max, c.unit)} max`, view.x0 + 4, rc.y + 6);
    if (!s || !s.ts.length) return;
    const max = c.max > 0 ? c.max : 1;
    ctx.fillStyle = c.type === "memory" ? "rgba(37,99,235,0.35)" : "rgba(5,150,105,0.38)";
    ctx.strokeStyle = c.type === "memory" ? "rgba(37,99,235,0.9)" : "rgba(5,150,105,0.95)";
    ctx.beginPath();
    const base = top + hh;
    let started = false;
    let lastX = 0;
    for (let i = 0; i < s.ts.length; i++) {
      const x = Math.max(view.x0, view.xOf(s.ts[i]!));
      const xn = i + 1 < s.ts.length ? view.xOf(s.ts[i + 1]!) : Math.min(rc.right, view.xOf(view.t1));
      const vy = base - (Math.max(0, s.v[i] ?? 0) / max) * hh;
      if (xn < view.x0 || x > rc.right) continue;
      if (!started) {
        ctx.moveTo(x, base);
        started = true;
      }
      ctx.lineTo(x, vy);
      lastX = Math.min(rc.right, Math.max(x, xn));
      ctx.lineTo(lastX, vy);
    }
    if (started) {
      ctx.lineTo(lastX, base);
      ctx.closePath();
      ctx.fill();
    }
  },
};

export function ellipsize(ctx: CanvasRenderingContext2D, s: string, maxW: number): string {
  if (ctx.measureText(s).width <= maxW) return s;
  const per = ctx.measureText("m").width * 0.8 || 6;
  let n = Math.max(1, Math.floor(maxW / per));
  while (n > 1 && ctx.measureText(s.slice(0, n) + "…").width > maxW) n--;
  return s.slice(0, n) + "…";
}

/** A thread's Python samples as a flame chart: per depth, runs of the same function
 * in consecutive samples become one bar. */
export const sampleTrack: TrackRenderer = {
  render(rc, row) {
    const { ctx, view, scene } = rc;
    const sm = row.node.samples;
    if (!sm) return;
    const run = scene.samples.get(sm.key);
    if (!run || !run.ts.length) return;
    const rows = Math.round(row.h / ROW_H);
    const gapMax = 2 * scene.sampleSpan;
    for (let d = 0; d < rows; d++) {
      let start = -1;
      let frame = -1;
      let last = 0;
      const flush = () => {
        if (frame < 0) return;
        const x0 = view.xOf(start), x1 = view.xOf(last + scene.sampleSpan);
        if (x1 < view.x0 || x0 > rc.right) return;
        const name = scene.frameNames[frame] ?? "";
        ctx.fillStyle = eventColor("python", name);
        ctx.fillRect(x0, rc.y + d * ROW_H + 1, Math.max(1, x1 - x0 - 0.5), ROW_H - 2);
        if (x1 - x0 > 28) {
          ctx.fillStyle = "#111";
          ctx.fillText(ellipsize(ctx, name, Math.min(x1, rc.right) - Math.max(x0, view.x0) - 4), Math.max(x0, view.x0) + 2, rc.y + d * ROW_H + ROW_H / 2);
        }
      };
      for (let i = 0; i < run.ts.length; i++) {
        const f = run.stacks[i]![d] ?? -1;
        const t = run.ts[i]!;
        if (f !== frame || t - last > gapMax) {
          flush();
          frame = f;
          start = t;
        }
        last = t;
      }
      flush();
    }
  },
};
