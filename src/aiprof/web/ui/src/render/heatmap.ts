// The rank × step heatmap on a canvas (lib/heatmap.ts bins the ranks into rows).
import { theme } from "../lib/colors";
import { binGrid, heatColor, type Cell, type Grid } from "../lib/heatmap";
import { hideTip, showTip } from "../views/tooltip";
import { setupCanvas } from "./charts";

export interface HeatmapMarks {
  /** Ranks outlined in the foreground colour, their label in red (the straggler). */
  slow: Set<number>;
  /** Ranks marked in blue at the left edge (the ranks that wait). */
  waiting: Set<number>;
}

const LEFT = 64, BOTTOM = 22, TOP = 4;
/** Rows of at least this many px; more ranks than fit are binned. */
const MIN_ROW_PX = 2;

/** Draw cells (rank × step, coloured fast to slow by lib/heatmap's scale); label names
 * the value in the tooltip. The canvas's data-* attributes give the rows' geometry
 * (CSS px) and the straggler's row, for the tests. */
export function heatmap(canvas: HTMLCanvasElement, cells: Cell[], marks: HeatmapMarks, fmt: (v: number) => string, label: string): Grid {
  const nRanks = new Set(cells.map((c) => c.rank)).size;
  const cssH = Math.min(560, Math.max(120, nRanks * 14 + TOP + BOTTOM));
  const grid = binGrid(cells, Math.floor((cssH - TOP - BOTTOM) / MIN_ROW_PX));
  canvas.dataset.rows = String(grid.bands.length);
  canvas.dataset.ranks = String(grid.ranks.length);
  canvas.dataset.steps = String(grid.steps.length);
  canvas.dataset.top = String(TOP);
  canvas.dataset.left = String(LEFT);
  canvas.dataset.rowPx = String((cssH - TOP - BOTTOM) / grid.bands.length);
  canvas.dataset.slowRows = grid.bands.map(([a, b], row) => (grid.ranks.slice(a, b + 1).some((r) => marks.slow.has(r)) ? row : -1)).filter((r) => r >= 0).join(",");
  const draw = () => {
    const { ctx, w, h: H } = setupCanvas(canvas, cssH);
    const th = theme();
    const rowH = (H - TOP - BOTTOM) / grid.bands.length;
    const colW = (w - LEFT) / Math.max(1, grid.steps.length);
    ctx.font = "11px system-ui";
    ctx.textBaseline = "middle";
    const rankIn = (row: number, set: Set<number>) => {
      const [a, b] = grid.bands[row]!;
      for (let i = a; i <= b; i++) if (set.has(grid.ranks[i]!)) return true;
      return false;
    };
    const labelEvery = Math.max(1, Math.ceil(14 / rowH));
    grid.bands.forEach(([a, b], row) => {
      const y = TOP + row * rowH;
      grid.values[row]!.forEach((v, col) => {
        ctx.fillStyle = heatColor(v, grid.min, grid.max);
        ctx.fillRect(LEFT + col * colW, y, Math.ceil(colW), Math.ceil(rowH));
      });
      if (rankIn(row, marks.waiting)) {
        ctx.fillStyle = "#2563eb";
        ctx.fillRect(LEFT - 6, y, 4, Math.max(2, rowH));
      }
      if (row % labelEvery === 0) {
        ctx.fillStyle = th.muted;
        ctx.fillText(a === b ? "r" + grid.ranks[a] : `r${grid.ranks[a]}–${grid.ranks[b]}`, 2, y + Math.max(rowH, 10) / 2);
      }
    });
    // The straggler on top of everything, so no neighbour hides it.
    grid.bands.forEach((_, row) => {
      if (!rankIn(row, marks.slow)) return;
      const y = TOP + row * rowH;
      // Not red: the slow end of the scale is dark red, so the outline is the text colour.
      ctx.strokeStyle = th.fg;
      ctx.lineWidth = 2;
      ctx.strokeRect(LEFT + 1, y - 1, w - LEFT - 2, Math.max(2, rowH) + 2);
      ctx.fillStyle = th.bg;
      ctx.fillRect(0, y + Math.max(rowH, 10) / 2 - 7, LEFT - 8, 14);
      ctx.fillStyle = "#dc2626";
      ctx.fillText("r" + [...marks.slow].join(","), 2, y + Math.max(rowH, 10) / 2);
    });
    const stepEvery = Math.max(1, Math.ceil(40 / colW));
    ctx.fillStyle = th.fg;
    grid.steps.forEach((s, col) => {
      if (col % stepEvery === 0) ctx.fillText(String(s), LEFT + col * colW + 2, H - 10);
    });
    canvas.onmousemove = (e) => {
      const row = Math.floor((e.offsetY - TOP) / rowH), col = Math.floor((e.offsetX - LEFT) / colW);
      if (row < 0 || row >= grid.bands.length || col < 0 || col >= grid.steps.length) return hideTip();
      const [a, b] = grid.bands[row]!;
      const v = grid.values[row]![col]!;
      showTip(e.clientX, e.clientY, [
        `step ${grid.steps[col]}`,
        ["ranks", a === b ? String(grid.ranks[a]) : `${grid.ranks[a]}–${grid.ranks[b]} (slowest shown)`],
        [label, Number.isFinite(v) ? fmt(v) : "–"],
        ["slowest rank", String(grid.argmax[row]![col]!)],
        ["vs median", Number.isFinite(v) && grid.median ? `${((100 * (v - grid.median)) / grid.median).toFixed(1)} %` : "–"],
      ]);
    };
    canvas.onmouseleave = hideTip;
  };
  requestAnimationFrame(draw);
  return grid;
}
