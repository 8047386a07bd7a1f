// The rank × step grid of the distributed page, binned to the rows a canvas can show:
// with more ranks than rows, each row holds a band of ranks and shows the band's
// slowest value, so a straggler stays visible among 1,000+ ranks.

export interface Cell {
  rank: number;
  step: number;
  value: number;
}

export interface Grid {
  ranks: number[];
  steps: number[];
  /** Rows shown; row r covers ranks[bands[r][0] .. bands[r][1]] (inclusive indices). */
  bands: [number, number][];
  /** values[row][col]: the band's largest value at that step (NaN: no value). */
  values: number[][];
  /** The rank holding each band's largest value, per row and col. */
  argmax: number[][];
  min: number;
  max: number;
  median: number;
}

export function binGrid(cells: Cell[], maxRows: number): Grid {
  const ranks = [...new Set(cells.map((c) => c.rank))].sort((a, b) => a - b);
  const steps = [...new Set(cells.map((c) => c.step))].sort((a, b) => a - b);
  const ri = new Map(ranks.map((r, i) => [r, i]));
  const si = new Map(steps.map((s, i) => [s, i]));
  const per = Math.max(1, Math.ceil(ranks.length / Math.max(1, maxRows)));
  const rows = Math.ceil(ranks.length / per);
  const bands: [number, number][] = Array.from({ length: rows }, (_, r) => [r * per, Math.min(ranks.length, (r + 1) * per) - 1]);
  const values = Array.from({ length: rows }, () => new Array<number>(steps.length).fill(NaN));
  const argmax = Array.from({ length: rows }, () => new Array<number>(steps.length).fill(-1));
  for (const c of cells) {
    const row = Math.floor(ri.get(c.rank)! / per), col = si.get(c.step)!;
    if (!(values[row]![col]! >= c.value)) {
      values[row]![col] = c.value;
      argmax[row]![col] = c.rank;
    }
  }
  const all = cells.map((c) => c.value).filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  return {
    ranks, steps, bands, values, argmax,
    min: all.length ? all[0]! : 0,
    max: all.length ? all[all.length - 1]! : 0,
    median: all.length ? all[Math.floor(all.length / 2)]! : 0,
  };
}

/** The heatmap's colour scale, fast to slow: ColorBrewer's YlOrRd (pale yellow through
 * orange to dark red), so the slowest cell reads as the hottest and darkest. */
export const HEAT_STOPS: [number, number, number][] = [
  [255, 255, 204], [254, 217, 118], [253, 141, 60], [227, 26, 28], [128, 0, 38],
];

/** The colour of a value between min (fast: pale) and max (slow: dark red). */
export function heatColor(v: number, min: number, max: number): string {
  if (!Number.isFinite(v)) return "rgba(0,0,0,0)";
  const t = max > min ? Math.min(1, Math.max(0, (v - min) / (max - min))) : 0;
  const x = t * (HEAT_STOPS.length - 1), i = Math.min(HEAT_STOPS.length - 2, Math.floor(x)), f = x - i;
  const a = HEAT_STOPS[i]!, b = HEAT_STOPS[i + 1]!;
  const c = a.map((ai, k) => Math.round(ai + (b[k]! - ai) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** The scale as a CSS gradient, fast (left) to slow (right). */
export function heatGradient(): string {
  return `linear-gradient(90deg,${HEAT_STOPS.map((c) => `rgb(${c.join(",")})`).join(",")})`;
}
