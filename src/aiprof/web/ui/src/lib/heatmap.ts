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

/** The colour of a value: pale at the minimum through orange to dark red at the maximum. */
export function heatColor(v: number, min: number, max: number): string {
  if (!Number.isFinite(v)) return "rgba(0,0,0,0)";
  const t = max > min ? Math.min(1, Math.max(0, (v - min) / (max - min))) : 0;
  const hue = 50 - 50 * t, light = 92 - 57 * t;
  return `hsl(${hue.toFixed(0)},85%,${light.toFixed(0)}%)`;
}
