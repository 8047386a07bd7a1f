// Lookups in sorted time series.

/** Index of the last element of sorted ``ts`` that is <= t, or -1. */
export function lastAtOrBefore(ts: ArrayLike<number>, t: number): number {
  let lo = 0;
  let hi = ts.length - 1;
  let ans = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (ts[mid]! <= t) {
      ans = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return ans;
}

/** The largest finite value of ``v`` (0 when none). */
export function maxOf(v: ArrayLike<number | null>): number {
  let m = 0;
  for (let i = 0; i < v.length; i++) {
    const x = v[i];
    if (x !== null && x !== undefined && Number.isFinite(x) && x > m) m = x;
  }
  return m;
}
