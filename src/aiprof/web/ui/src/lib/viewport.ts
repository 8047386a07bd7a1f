// The timeline's time axis as explicit math: a window [t0, t1] (ns) drawn on
// [x0, x0 + width] pixels. Zoom around a point and pan are a few lines here, not
// special cases in the views.

export const MIN_WINDOW_NS = 100;

export class Viewport {
  constructor(
    public t0: number,
    public t1: number,
    public x0 = 0,
    public width = 1000,
  ) {}

  get dt(): number {
    return this.t1 - this.t0;
  }
  xOf(t: number): number {
    return this.x0 + ((t - this.t0) / this.dt) * this.width;
  }
  tOf(x: number): number {
    return this.t0 + ((x - this.x0) / this.width) * this.dt;
  }
  /** Scale the window by ``f`` (< 1 zooms in) keeping time ``at`` under the same pixel. */
  zoomAround(f: number, at: number): void {
    let t0 = at - (at - this.t0) * f;
    let t1 = at + (this.t1 - at) * f;
    if (t1 - t0 < MIN_WINDOW_NS) {
      const k = (at - this.t0) / this.dt;
      t0 = at - k * MIN_WINDOW_NS;
      t1 = t0 + MIN_WINDOW_NS;
    }
    this.t0 = t0;
    this.t1 = t1;
  }
  /** Move by ``frac`` of the window (negative: to the left). */
  pan(frac: number): void {
    const d = this.dt * frac;
    this.t0 += d;
    this.t1 += d;
  }
  /** Show [a, b] with ``margin`` (a fraction of its length) on each side. */
  fit(a: number, b: number, margin = 0.1): void {
    const len = Math.max(b - a, MIN_WINDOW_NS / (1 + 2 * margin));
    this.t0 = a - len * margin;
    this.t1 = a + len * (1 + margin);
  }
  /** Centre on [a, b], keeping the zoom when it fits, else zooming so it fills a third. */
  reveal(a: number, b: number): void {
    const len = Math.max(1, b - a);
    let w = this.dt;
    if (len > w * 0.8 || len * 300 < w) w = Math.max(len * 3, MIN_WINDOW_NS);
    const mid = (a + b) / 2;
    this.t0 = mid - w / 2;
    this.t1 = mid + w / 2;
  }
}
