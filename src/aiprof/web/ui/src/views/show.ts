// "Show on timeline" from a table row: find the event (the longest instance of a
// name, or the step) through the search route and open the timeline on it, selected.
import { api, profilePath, type Row, type SearchResponse } from "../lib/api";
import { pid, navigate } from "../state/app";

export async function showName(name: string, kind?: string): Promise<void> {
  const s = await api<SearchResponse>(profilePath(pid(), "/timeline/search"), { q: name, exact: true, kind, order: "-dur", limit: 1 });
  const m = s.matches[0];
  if (!m) throw new Error(`no event named ${name} on the timeline`);
  openAt(m.track, m.ts, m.dur, name);
}

export async function showStep(row: Row): Promise<void> {
  const step = String(row.step);
  const s = await api<SearchResponse>(profilePath(pid(), "/timeline/search"), { q: step, kind: "step", order: "-dur", limit: 50 });
  // Step annotations are named like "ProfilerStep#12": the one whose number is the row's.
  const m = s.matches.find((x) => (x.name.match(/(\d+)\s*$/) || [])[1] === step) ?? s.matches[0];
  if (!m) throw new Error(`no step ${step} on the timeline`);
  openAt(m.track, m.ts, m.dur, m.name);
}

export function showTime(ts: number, around = 2_000_000): void {
  navigate({ pid: pid(), page: "timeline", t0: Math.round(ts - around / 2), t1: Math.round(ts + around / 2) });
}

function openAt(track: number, ts: number, dur: number, q?: string): void {
  const pad = Math.max(dur * 0.5, 1000);
  navigate({ pid: pid(), page: "timeline", t0: Math.round(ts - pad), t1: Math.round(ts + dur + pad), sel: { track, ts, dur }, q });
}
