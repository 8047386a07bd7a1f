// The timeline's track tree, a model of its own (separate from how tracks draw):
// rank -> device -> stream and rank -> process -> thread, with counter tracks under
// their device. Groups collapse (then draw a summary line), tracks pin to the top,
// tracks without events are left out.

export interface TrackInfo {
  track: number;
  rank: number;
  pid: number;
  tid: number;
  device_type: string;
  device: number | null;
  is_device: boolean;
  name: string;
  process_name?: string | null;
  thread_name?: string | null;
  events: number;
  max_depth: number;
}

export interface CounterInfo {
  /** "memory" for allocator state (``metric`` "allocated" or "reserved"), else a counter metric. */
  type: "memory" | "counter";
  rank: number;
  device_type: string;
  device: number | null;
  metric: string;
  unit: string;
  max: number;
  min: number;
}

/** A thread's Python stack samples, drawn as a flame chart. */
export interface SampleInfo {
  key: string;
  rank: number;
  pid: number;
  tid: number;
  /** The deepest stack (rows the chart needs). */
  depth: number;
}

export interface TrackNode {
  id: string;
  title: string;
  /** Full name for the tooltip. */
  full: string;
  children: TrackNode[];
  collapsed: boolean;
  track?: TrackInfo;
  counter?: CounterInfo;
  samples?: SampleInfo;
}

/** A device's allocator peaks (the memory series' ``peaks``, as the Memory page reads them). */
export interface MemoryPeakInfo {
  rank: number;
  device_type: string;
  device?: number | null;
  peak_bytes: number;
  peak_reserved?: number | null;
}

/** The memory tracks of each device: "allocated" scaled to the peak of allocated (the
 * Memory page's "peak allocated"), and "reserved", scaled to the peak reserved, where
 * the allocator recorded it. Each track's max is the peak of what it plots. */
export function memoryCounters(peaks: MemoryPeakInfo[]): CounterInfo[] {
  const out: CounterInfo[] = [];
  for (const p of peaks) {
    if (p.device_type === "cpu") continue;
    const base = { type: "memory" as const, rank: p.rank, device_type: p.device_type, device: p.device ?? null, unit: "B", min: 0 };
    out.push({ ...base, metric: "allocated", max: p.peak_bytes });
    if (p.peak_reserved !== null && p.peak_reserved !== undefined && p.peak_reserved > 0) out.push({ ...base, metric: "reserved", max: p.peak_reserved });
  }
  return out;
}

/** Tracks, counters and sample charts are leaves; the rest are groups. */
export const isLeaf = (n: TrackNode): boolean => !!(n.track || n.counter || n.samples);

export interface Row {
  node: TrackNode;
  y: number;
  h: number;
  indent: number;
  pinned: boolean;
}

export const ROW_H = 18;
export const GROUP_H = 20;
export const COUNTER_H = 44;
export const GAP = 4;
export const MAX_DEPTH_ROWS = 16;
/** A host process with less than this share of the events starts collapsed. */
export const QUIET_SHARE = 0.01;

function group(id: string, title: string, full = title): TrackNode {
  return { id, title, full, children: [], collapsed: false };
}

function devLabel(type: string, device: number | null): string {
  const t = (type || "device").toUpperCase();
  return device !== null && device !== undefined && device >= 0 ? `${t} ${device}` : t;
}

/** The tree of ``tracks`` and ``counters``; device groups first when there are any. */
export function buildTree(tracks: TrackInfo[], counters: CounterInfo[] = [], samplers: SampleInfo[] = []): TrackNode {
  const root = group("root", "");
  const ranks = [...new Set([...tracks.map((t) => t.rank), ...counters.map((c) => c.rank), ...samplers.map((x) => x.rank)])].sort((a, b) => a - b);
  const many = ranks.length > 1;
  const total = tracks.reduce((s, t) => s + t.events, 0) || 1;
  for (const rank of ranks) {
    const parent = many ? group(`r${rank}`, `rank ${rank}`) : root;
    if (many) root.children.push(parent);
    const devs = new Map<string, TrackNode>();
    const procs = new Map<string, TrackNode>();
    const devGroup = (type: string, device: number | null) => {
      const key = `${type}:${device}`;
      let g = devs.get(key);
      if (!g) {
        g = group(`r${rank}/d${key}`, devLabel(type, device), `rank ${rank} ${devLabel(type, device)}`);
        devs.set(key, g);
      }
      return g;
    };
    for (const t of tracks) {
      if (t.rank !== rank || t.events <= 0) continue;
      if (t.is_device) {
        const g = devGroup(t.device_type, t.device);
        const title = (t.thread_name || "").trim() || `stream ${t.tid}`;
        g.children.push({ id: `t${t.track}`, title, full: t.name, children: [], collapsed: false, track: t });
      } else {
        const key = String(t.pid);
        let g = procs.get(key);
        if (!g) {
          const pn = (t.process_name || "").trim();
          g = group(`r${rank}/p${key}`, pn ? `${pn} ${t.pid}` : `process ${t.pid}`);
          procs.set(key, g);
        }
        const tn = (t.thread_name || "").trim();
        // Kineto names threads "thread 1102 (pt_main_thread)": show the tid once.
        const title = !tn ? `thread ${t.tid}` : namesTid(tn, t.tid) ? tn : `${tn} ${t.tid}`;
        g.children.push({ id: `t${t.track}`, title, full: t.name, children: [], collapsed: false, track: t });
      }
    }
    for (const sm of samplers) {
      if (sm.rank !== rank) continue;
      const key = String(sm.pid);
      let g = procs.get(key);
      if (!g) {
        g = group(`r${rank}/p${key}`, `process ${sm.pid}`);
        procs.set(key, g);
      }
      const th = tracks.find((t) => t.rank === rank && t.pid === sm.pid && t.tid === sm.tid);
      const tn = (th?.thread_name || "").trim() || `thread ${sm.tid}`;
      g.children.unshift({ id: `s${sm.key}`, title: `Python samples · ${tn}`, full: `Python stack samples of rank ${rank} pid ${sm.pid} ${tn}`, children: [], collapsed: false, samples: sm });
    }
    const hostCounters = group(`r${rank}/hc`, "host counters");
    for (const c of counters) {
      if (c.rank !== rank) continue;
      const title = c.type === "memory" ? `memory ${c.metric}` : c.metric;
      const node: TrackNode = {
        id: `c${rank}/${c.device_type}:${c.device}/${c.type}/${c.metric}`,
        title: c.unit ? `${title} (${c.unit})` : title,
        full: `${title} · rank ${rank} ${devLabel(c.device_type, c.device)}${c.unit ? " · " + c.unit : ""}`,
        children: [],
        collapsed: false,
        counter: c,
      };
      if (c.device_type === "cpu" || c.device === null) hostCounters.children.push(node);
      else devGroup(c.device_type, c.device).children.push(node);
    }
    for (const g of procs.values()) {
      const ev = g.children.reduce((s, n) => s + (n.track?.events ?? 0), 0);
      if (devs.size && ev / total < QUIET_SHARE) g.collapsed = true;
    }
    const devList = [...devs.values()];
    const procList = [...procs.values()];
    parent.children.push(...devList, ...procList);
    if (hostCounters.children.length) parent.children.push(hostCounters);
  }
  return root;
}

/** Whether a thread name already carries its tid as a number of its own ("thread 1102 (x)"). */
export function namesTid(name: string, tid: number): boolean {
  return name.split(/[\s()#:,]+/).includes(String(tid));
}

export function nodeHeight(n: TrackNode): number {
  if (n.counter) return COUNTER_H;
  if (n.samples) return Math.min(MAX_DEPTH_ROWS, Math.max(1, n.samples.depth)) * ROW_H;
  if (n.track) return Math.min(MAX_DEPTH_ROWS, (n.track.max_depth || 0) + 1) * ROW_H;
  return GROUP_H;
}

/** Every node of the tree, depth first. */
export function* walk(n: TrackNode): Generator<TrackNode> {
  yield n;
  for (const c of n.children) yield* walk(c);
}

/** The leaves (tracks and counters) under ``n``. */
export function leaves(n: TrackNode): TrackNode[] {
  return [...walk(n)].filter(isLeaf);
}

/** The rows to draw: pinned leaves first (from y = top), then the tree (collapsed
 * groups as one row). y is in content pixels; pinned rows do not scroll. */
export function layout(root: TrackNode, pinned: ReadonlySet<string>, top = 0): { rows: Row[]; pinnedH: number; contentH: number } {
  const rows: Row[] = [];
  let y = top;
  for (const n of walk(root)) {
    if (!pinned.has(n.id) || !isLeaf(n)) continue;
    const h = nodeHeight(n);
    rows.push({ node: n, y, h, indent: 0, pinned: true });
    y += h + GAP;
  }
  const pinnedH = y - top;
  const visit = (n: TrackNode, indent: number) => {
    for (const c of n.children) {
      if (pinned.has(c.id) && isLeaf(c)) continue;
      const h = nodeHeight(c);
      rows.push({ node: c, y, h, indent, pinned: false });
      y += h + GAP;
      if (!c.collapsed && c.children.length) visit(c, indent + 1);
    }
  };
  visit(root, 0);
  return { rows, pinnedH, contentH: y - top };
}

/** The group nodes that hold ``id`` (to expand them when revealing a track). */
export function ancestors(root: TrackNode, id: string): TrackNode[] {
  const path: TrackNode[] = [];
  const find = (n: TrackNode): boolean => {
    if (n.id === id) return true;
    for (const c of n.children) {
      if (find(c)) {
        path.push(n);
        return true;
      }
    }
    return false;
  };
  find(root);
  return path.filter((n) => n !== root);
}
