// Draws icicle bars on a canvas (top-down, or bottom-up for a sandwich's callers) and
// answers which bar is under a point. The bars come from lib/flame.ts.
import { hashHue, theme } from "../lib/colors";
import type { Bar } from "../lib/flame";
import { setupCanvas } from "./charts";
import { ellipsize } from "./tracks";

export const BAR_H = 18;

export interface IcicleDrawing {
  bars: Bar[];
  at(x: number, y: number): Bar | null;
}

export function drawIcicle(canvas: HTMLCanvasElement, bars: Bar[], label: (b: Bar) => string, opts: { upward?: boolean; highlight?: number } = {}): IcicleDrawing {
  const depth = bars.reduce((m, b) => Math.max(m, b.depth), 0) + 1;
  const { ctx, w, h } = setupCanvas(canvas, Math.max(BAR_H * 2, depth * BAR_H + 2));
  const th = theme();
  ctx.fillStyle = th.bg;
  ctx.fillRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  const yOf = (d: number) => (opts.upward ? h - (d + 1) * BAR_H : d * BAR_H);
  for (const b of bars) {
    const x = b.x * w, bw = b.w * w;
    if (bw < 0.5) continue;
    const y = yOf(b.depth);
    const name = label(b);
    ctx.fillStyle = b.node.frame < 0 ? th.merged : `hsl(${hashHue(name)},55%,${opts.highlight === b.node.frame ? 45 : 65}%)`;
    ctx.fillRect(x, y + 1, Math.max(1, bw - 1), BAR_H - 2);
    if (bw > 24) {
      ctx.fillStyle = "#111";
      ctx.fillText(ellipsize(ctx, name, bw - 6), x + 3, y + BAR_H / 2);
    }
  }
  return {
    bars,
    at(x: number, y: number) {
      const d = opts.upward ? Math.floor((h - y) / BAR_H) : Math.floor(y / BAR_H);
      const fx = x / w;
      return bars.find((b) => b.depth === d && fx >= b.x && fx < b.x + b.w) ?? null;
    },
  };
}
