// Small canvas charts (stacked bars, step lines) with a value readout under the pointer.
import { theme } from "../lib/colors";
import { h } from "../lib/dom";
import { fmtNs } from "../lib/format";
import { lastAtOrBefore } from "../lib/series";
import { hideTip, showTip } from "../views/tooltip";

export function setupCanvas(c: HTMLCanvasElement, cssH: number): { ctx: CanvasRenderingContext2D; w: number; h: number } {
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth || 800;
  c.style.height = cssH + "px";
  c.width = Math.round(w * dpr);
  c.height = Math.round(cssH * dpr);
  const ctx = c.getContext("2d")!;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, w, h: cssH };
}

export interface BarSeries {
  name: string;
  values: number[];
  color: string;
}

/** Stacked bars per label; hovering a bar lists its parts. */
export function stackedBars(canvas: HTMLCanvasElement, labels: string[], series: BarSeries[], fmt: (v: number) => string): void {
  const draw = () => {
    const { ctx, w, h: H } = setupCanvas(canvas, 260);
    const th = theme();
    const left = 64, bottom = 24, top = 8;
    const totals = labels.map((_, i) => series.reduce((s, x) => s + Math.max(0, x.values[i] || 0), 0));
    const max = Math.max(1e-9, ...totals);
    ctx.font = "11px system-ui";
    ctx.textBaseline = "middle";
    for (let g = 0; g <= 4; g++) {
      const y = top + (H - top - bottom) * (1 - g / 4);
      ctx.fillStyle = th.muted;
      ctx.fillText(fmt((max * g) / 4), 2, y);
      ctx.strokeStyle = th.line;
      ctx.beginPath();
      ctx.moveTo(left, y);
      ctx.lineTo(w, y);
      ctx.stroke();
    }
    const slot = (w - left) / Math.max(1, labels.length);
    const bw = Math.max(3, Math.min(60, slot * 0.7));
    const every = Math.max(1, Math.ceil(40 / slot));
    labels.forEach((lab, i) => {
      const x = left + slot * (i + 0.5) - bw / 2;
      let y = H - bottom;
      for (const s of series) {
        const hh = (Math.max(0, s.values[i] || 0) / max) * (H - top - bottom);
        ctx.fillStyle = s.color;
        ctx.fillRect(x, y - hh, bw, hh);
        y -= hh;
      }
      if (i % every === 0) {
        ctx.fillStyle = th.fg;
        ctx.fillText(lab, x, H - 10);
      }
    });
    canvas.onmousemove = (e) => {
      const i = Math.floor((e.offsetX - left) / slot);
      if (i < 0 || i >= labels.length) return hideTip();
      showTip(e.clientX, e.clientY, [labels[i]!, ["total", fmt(totals[i]!)], ...series.filter((s) => s.values[i]).map((s): [string, string] => [s.name, fmt(s.values[i]!)])]);
    };
    canvas.onmouseleave = hideTip;
  };
  requestAnimationFrame(draw);
}

export interface LineSeries {
  name: string;
  color: string;
  ts: number[];
  v: (number | null)[];
}

/** Step lines over time (ns) from the first sample on (no ramp from zero); hover reads
 * every series at the pointer's time. */
export function lineChart(canvas: HTMLCanvasElement, series: LineSeries[], fmt: (v: number) => string, peak?: { ts: number; v: number } | null): void {
  const { ctx, w, h: H } = setupCanvas(canvas, 260);
  const th = theme();
  const left = 84, bottom = 22, top = 10, right = 10;
  let t0 = Infinity, t1 = -Infinity, vmax = 0;
  for (const s of series)
    for (let i = 0; i < s.ts.length; i++) {
      t0 = Math.min(t0, s.ts[i]!);
      t1 = Math.max(t1, s.ts[i]!);
      vmax = Math.max(vmax, s.v[i] || 0);
    }
  ctx.font = "11px system-ui";
  if (!Number.isFinite(t0)) {
    ctx.fillStyle = th.muted;
    ctx.fillText("no samples", 10, 20);
    return;
  }
  if (t1 === t0) t1 = t0 + 1;
  if (vmax === 0) vmax = 1;
  const X = (t: number) => left + ((t - t0) / (t1 - t0)) * (w - left - right);
  const Y = (v: number) => top + (1 - v / vmax) * (H - top - bottom);
  ctx.textBaseline = "middle";
  for (let g = 0; g <= 4; g++) {
    const v = (vmax * g) / 4;
    ctx.fillStyle = th.muted;
    ctx.fillText(fmt(v), 2, Y(v));
    ctx.strokeStyle = th.line;
    ctx.beginPath();
    ctx.moveTo(left, Y(v));
    ctx.lineTo(w - right, Y(v));
    ctx.stroke();
  }
  ctx.fillStyle = th.muted;
  ctx.fillText(fmtNs(t0), left, H - 8);
  const endLabel = fmtNs(t1);
  ctx.fillText(endLabel, w - right - ctx.measureText(endLabel).width, H - 8);
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let lastY: number | null = null;
    for (let i = 0; i < s.ts.length; i++) {
      const x = X(s.ts[i]!), y = Y(s.v[i] || 0);
      if (lastY === null) ctx.moveTo(x, y);
      else ctx.lineTo(x, lastY);
      ctx.lineTo(x, y);
      lastY = y;
    }
    ctx.stroke();
    ctx.lineWidth = 1;
  }
  if (peak) {
    const x = X(peak.ts), y = Y(peak.v);
    ctx.strokeStyle = "#dc2626";
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, H - bottom);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = "#dc2626";
    ctx.beginPath();
    ctx.arc(x, y, 4, 0, 2 * Math.PI);
    ctx.fill();
    const label = "peak " + fmt(peak.v) + " at " + fmtNs(peak.ts);
    const lw = ctx.measureText(label).width;
    const lx = x + 8 + lw < w - right ? x + 8 : x - 8 - lw, ly = Math.max(y + 14, 22);
    ctx.fillStyle = th.bg;
    ctx.fillRect(lx - 3, ly - 8, lw + 6, 16);
    ctx.fillStyle = "#dc2626";
    ctx.fillText(label, lx, ly);
  }
  canvas.onmousemove = (e) => {
    if (e.offsetX < left) return hideTip();
    const t = t0 + ((e.offsetX - left) / (w - left - right)) * (t1 - t0);
    const lines: (string | [string, string])[] = [fmtNs(t)];
    for (const s of series) {
      const i = lastAtOrBefore(s.ts, t);
      if (i >= 0) lines.push([s.name, fmt(s.v[i] ?? 0)]);
    }
    showTip(e.clientX, e.clientY, lines);
  };
  canvas.onmouseleave = hideTip;
}

export interface HBar {
  label: string;
  /** 0-100: the bar's length. */
  pct: number;
  color: string;
  /** The numbers shown beside the bar. */
  text: string;
  title?: string;
}

/** Horizontal bars with their numbers beside them (HTML, so it prints and copies). */
export function hbars(rows: HBar[]): HTMLElement {
  return h("table", { class: "hbars" }, rows.map((r) =>
    h("tr", { title: r.title || "" },
      h("td", { class: "lab" }, h("i", { class: "swatch", style: `background:${r.color}` }), r.label),
      h("td", { class: "barcell" }, h("span", { class: "hbar", style: `width:${Math.max(0, Math.min(100, r.pct)).toFixed(2)}%;background:${r.color}` })),
      h("td", { class: "num" }, r.text))));
}
