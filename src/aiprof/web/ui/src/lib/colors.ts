// Colours by event kind and by name (stable hash), and the theme's canvas colours.

export const KIND_COLORS: Record<string, string> = {
  kernel: "#2563eb", memcpy: "#d97706", memset: "#a16207", collective: "#7c3aed", runtime: "#059669",
  driver: "#0d9488", cpu_op: "#64748b", user_annotation: "#be185d", step: "#334155", python: "#0891b2",
  sync: "#dc2626", dataloader: "#ca8a04", other: "#9ca3af", instant: "#ef4444",
};
export const CAT_COLORS: Record<string, string> = {
  kernel: "#2563eb", memcpy: "#f59e0b", memset: "#a16207", communication: "#7c3aed", runtime: "#10b981",
  dataloader: "#eab308", cpu_exec: "#64748b", other: "#9ca3af", idle: "#e5e7eb",
};

export function hashHue(s: string): number {
  let x = 2166136261;
  for (let i = 0; i < s.length; i++) {
    x ^= s.charCodeAt(i);
    x = Math.imul(x, 16777619);
  }
  return (x >>> 0) % 360;
}

export function eventColor(kind: string, name: string): string {
  if (kind === "cpu_op" || kind === "python" || kind === "user_annotation") return `hsl(${hashHue(name)},45%,62%)`;
  if (kind === "kernel") return `hsl(${210 + (hashHue(name) % 40)},65%,${45 + (hashHue(name) % 15)}%)`;
  return KIND_COLORS[kind] || "#9ca3af";
}

export interface Theme {
  bg: string;
  fg: string;
  muted: string;
  line: string;
  panel: string;
  accent: string;
  merged: string;
  select: string;
  mark: string;
  flow: string;
  match: string;
}

/** The canvas colours of the current theme, from the CSS variables. */
export function theme(): Theme {
  const cs = getComputedStyle(document.documentElement);
  const v = (n: string, d: string) => cs.getPropertyValue(n).trim() || d;
  return {
    bg: v("--card", "#fff"), fg: v("--fg", "#111"), muted: v("--muted", "#6b7280"), line: v("--line", "#e5e7eb"),
    panel: v("--panel", "#f3f4f6"), accent: v("--accent", "#2563eb"), merged: v("--merged", "#9ca3af"),
    select: v("--select", "rgba(37,99,235,0.14)"), mark: v("--mark", "rgba(234,179,8,0.18)"),
    flow: v("--flow", "rgba(220,38,38,0.8)"), match: v("--match", "#facc15"),
  };
}
