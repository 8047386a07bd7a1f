// The app's state: the profiles served, the current route (from the URL, lib/url.ts)
// and the debug handle that tests and bench/ui.py read (window.__aiprof).
import type { ProfileSummary } from "../lib/api";
import { formatHash, parseHash, type Route } from "../lib/url";

export interface Debug {
  state: AppState;
  frames: number[];
  ready: boolean;
  painted?: number;
  firstPaintAt?: number;
  lastFetchMs?: number;
  lastFrameMs?: number;
  items?: number;
  timeline?: unknown;
  flame?: unknown;
}

export interface AppState {
  profiles: ProfileSummary[];
  route: Route;
}

export const state: AppState = { profiles: [], route: parseHash(location.hash) };

declare global {
  interface Window {
    __aiprof: Debug;
  }
}
window.__aiprof = { state, frames: [], ready: false };

/** Go to ``r`` as a new history entry (Back returns here). */
export function navigate(r: Route): void {
  location.hash = formatHash(r);
}

/** Record ``patch`` in the URL without a new history entry (zoom, selection, sort...). */
export function updateRoute(patch: Partial<Route>): void {
  const r: Route = { ...state.route, ...patch };
  for (const [k, v] of Object.entries(patch)) if (v === undefined) delete (r as unknown as Record<string, unknown>)[k];
  state.route = r;
  history.replaceState(null, "", formatHash(r));
}

export const pid = (): string => state.route.pid ?? "";
