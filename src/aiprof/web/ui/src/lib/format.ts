// The one place that turns numbers into text with units (ns -> "1.20 ms", bytes -> "2.48 GiB").

const NS_UNITS: [number, string][] = [
  [1e9, "s"],
  [1e6, "ms"],
  [1e3, "µs"],
  [1, "ns"],
];

/** A duration in ns with 3 significant digits: 7.70 s, 12.3 ms, 845 ns. */
export function fmtNs(ns: number | null | undefined): string {
  if (ns === null || ns === undefined || !Number.isFinite(ns)) return "";
  const a = Math.abs(ns);
  if (a === 0) return "0";
  for (const [div, unit] of NS_UNITS) {
    if (a >= div || div === 1) return sig3(ns / div) + " " + unit;
  }
  return String(ns);
}

/** 3 significant digits, no trailing exponent: 7.70, 12.3, 845, 1234 (integers above 999 stay whole). */
export function sig3(v: number): string {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1000) return Math.round(v).toLocaleString("en-US");
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  if (a >= 1e-3) return v.toPrecision(3);
  // Tiny values in a readable power of ten (never "1.42e-11").
  const [m, e] = v.toExponential(2).split("e") as [string, string];
  return `${m}×10${Number(e).toString().replace(/[-0-9]/g, (c) => SUP[c] ?? c)}`;
}

const SUP: Record<string, string> = { "-": "⁻", "0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹" };

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/** Bytes in binary units: 2.48 GiB, 512 B. */
export function fmtBytes(b: number | null | undefined): string {
  if (b === null || b === undefined || !Number.isFinite(b)) return "";
  let v = b;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  return (i ? sig3(v) : String(Math.round(v))) + " " + BYTE_UNITS[i];
}

/** A plain number: integers with thousands separators, others with 3 significant digits. */
export function fmtNum(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  return sig3(v);
}

const SI: [number, string][] = [
  [1e12, "T"],
  [1e9, "G"],
  [1e6, "M"],
  [1e3, "k"],
];

const SI_SMALL: [number, string][] = [
  [1e-3, "m"],
  [1e-6, "µ"],
  [1e-9, "n"],
  [1e-12, "p"],
  [1e-15, "f"],
];

/** Units that take SI prefixes (others are printed as they come). */
const SI_BASE = new Set(["Hz", "W", "J", "V", "A", "FLOP/s", "FLOPS", "op/s"]);
const PREFIX: Record<string, number> = { k: 1e3, K: 1e3, M: 1e6, G: 1e9, T: 1e12, m: 1e-3 };
const PREFIXED = /^(k|K|M|G|T|m)(Hz|W|J|V|A|FLOP\/s|B\/s|B)$/;

/** ``v`` in ``unit`` with an SI prefix: 1.41 GHz, 250 mW, 14.2 pJ, 2.00 MB (decimal). */
function si(v: number, unit: string): string {
  const a = Math.abs(v);
  for (const [div, p] of SI) if (a >= div) return sig3(v / div) + " " + p + unit;
  if (a > 0 && a < 1) for (const [div, p] of SI_SMALL) if (a >= div) return sig3(v / div) + " " + p + unit;
  return sig3(v) + " " + unit;
}

/** A value in the unit a column or counter declares ("µs", "ms", "B", "%", "Hz", "W"...). */
export function fmtValue(v: unknown, unit?: string | null): string {
  if (v === null || v === undefined) return "";
  if (typeof v !== "number") return String(v);
  switch (unit) {
    case "ns":
      return fmtNs(v);
    case "µs":
    case "us":
      return fmtNs(v * 1e3);
    case "ms":
      return fmtNs(v * 1e6);
    case "s":
      return fmtNs(v * 1e9);
    case "B":
    case "bytes":
      return fmtBytes(v);
    case "KiB":
    case "MiB":
    case "GiB":
      return fmtBytes(v * Math.pow(1024, BYTE_UNITS.indexOf(unit)));
    case "B/s":
      return fmtBytes(v) + "/s";
    case "%":
      return v !== 0 && Math.abs(v) < 0.01 ? (v < 0 ? "> -0.01 %" : "< 0.01 %") : sig3(v) + " %";
    case null:
    case undefined:
    case "":
      return fmtNum(v);
    default: {
      // A prefixed SI unit ("MHz", "MB/s", "kW") is scaled from its base unit, decimal.
      const m = unit.match(PREFIXED);
      if (m) return si(v * PREFIX[m[1]!]!, m[2]!);
      return SI_BASE.has(unit) ? si(v, unit) : sig3(v) + " " + unit; // "C", "errors", "bool"... as they come
    }
  }
}

/** A tick step for a ruler: 1, 2 or 5 times a power of ten, at least ``minStep``. */
export function niceStep(minStep: number): number {
  if (!(minStep > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(minStep)));
  for (const m of [1, 2, 5, 10]) if (p * m >= minStep) return p * m;
  return p * 10;
}

/** A ruler label for time ``t`` (ns) on ticks ``step`` ns apart: the unit follows the
 * size of ``t``, the digits follow ``step``, so neighbours always differ
 * ("800.30 ms", "800.32 ms", never "800300 µs"). */
export function fmtTick(t: number, step: number): string {
  const a = Math.max(Math.abs(t), step);
  let div = 1;
  let unit = "ns";
  for (const [d, u] of NS_UNITS) {
    if (a >= d) {
      div = d;
      unit = u;
      break;
    }
  }
  const digits = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / div) - 1e-9)));
  return (t / div).toFixed(digits) + " " + unit;
}

/** Ticks over [t0, t1] such that labels of ``labelPx`` pixels never overlap on ``widthPx``. */
export function rulerTicks(t0: number, t1: number, widthPx: number, labelPx: (step: number) => number): { step: number; ticks: number[] } {
  const dt = Math.max(1, t1 - t0);
  let step = niceStep(dt / Math.max(1, widthPx / 80));
  for (let i = 0; i < 8; i++) {
    const px = (step / dt) * widthPx;
    if (px >= labelPx(step) + 12) break;
    step = niceStep(step * 1.5);
  }
  const ticks: number[] = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1 && ticks.length < 1000; t += step) ticks.push(t);
  return { step, ticks };
}

/** The unit of a column: the one the server declares, else what its name ends in. */
export function columnUnit(name: string, unit?: string | null): string | null {
  if (unit) return unit;
  if (name.endsWith("_bytes") || name === "bytes") return "B";
  if (name.endsWith("_us")) return "µs";
  if (name.endsWith("_ms")) return "ms";
  if (name.endsWith("_ns") || name === "ts" || name === "dur") return "ns";
  if (name.endsWith("_pct")) return "%";
  if (name.endsWith("_j")) return "J";
  if (name.endsWith("_w")) return "W";
  return null;
}
