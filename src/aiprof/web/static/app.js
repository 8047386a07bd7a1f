/* aiprof web UI: vanilla JS, no build step, no network access beyond the REST API.
 * Every figure on screen comes from /api/v1 (or, in the one-file HTML report, from the
 * API responses embedded in window.AIPROF_EMBED). */
(function () {
  "use strict";
  const API = "/api/v1";
  const EMBED = window.AIPROF_EMBED || null;
  const $ = (sel, el) => (el || document).querySelector(sel);
  const h = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  };
  const state = { profiles: [], pid: null, page: "overview", views: [] };
  window.__aiprof = { state, frames: [], ready: false };

  // -- API -------------------------------------------------------------------------------
  async function api(path, body) {
    if (EMBED) {
      const key = path.split("?")[0];
      if (key in EMBED) return EMBED[key];
      throw new Error("not in this report: " + key);
    }
    const opts = { credentials: "same-origin", headers: {} };
    if (body !== undefined) { opts.method = "POST"; opts.body = JSON.stringify(body); opts.headers["Content-Type"] = "application/json"; }
    const r = await fetch(API + path, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { data = { error: r.statusText }; }
    if (!r.ok) throw new Error((data && data.error) || r.statusText);
    return data;
  }
  const P = (p) => "/profiles/" + encodeURIComponent(state.pid) + p;

  // -- formatting ------------------------------------------------------------------------
  function fmtNum(v, unit) {
    if (v === null || v === undefined) return "";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e15) return v.toLocaleString("en-US");
    const a = Math.abs(v);
    return (a >= 1000 ? v.toLocaleString("en-US", { maximumFractionDigits: 1 }) : a >= 1 ? v.toFixed(2) : v.toPrecision(3));
  }
  function fmtNs(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(3) + " µs";
    return Math.round(ns) + " ns";
  }
  function fmtTick(t, tick) {
    const [div, unit] = tick >= 1e8 ? [1e9, "s"] : tick >= 1e5 ? [1e6, "ms"] : tick >= 100 ? [1e3, "µs"] : [1, "ns"];
    const digits = Math.max(0, Math.ceil(-Math.log10(tick / div) + 1e-9));
    return (t / div).toFixed(Math.min(digits, 6)) + " " + unit;
  }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0; let v = b;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 2 : 0) + " " + u[i];
  }
  function hashHue(s) { let x = 2166136261; for (let i = 0; i < s.length; i++) { x ^= s.charCodeAt(i); x = Math.imul(x, 16777619); } return (x >>> 0) % 360; }
  const KIND_COLORS = { kernel: "#2563eb", memcpy: "#d97706", memset: "#a16207", collective: "#7c3aed", runtime: "#059669", driver: "#0d9488",
    cpu_op: "#64748b", user_annotation: "#be185d", step: "#111827", python: "#0891b2", sync: "#dc2626", dataloader: "#ca8a04", other: "#9ca3af", instant: "#ef4444" };
  const CAT_COLORS = { kernel: "#2563eb", memcpy: "#f59e0b", memset: "#a16207", communication: "#7c3aed", runtime: "#10b981", dataloader: "#eab308", cpu_exec: "#64748b", other: "#d1d5db" };

  // -- routing ---------------------------------------------------------------------------
  const PAGES = [
    ["overview", "Overview"], ["timeline", "Timeline"], ["operators", "Operators"], ["kernels", "Kernels"],
    ["steps", "Steps"], ["memory", "Memory"], ["counters", "Counters"], ["compare", "Compare"], ["advice", "Advice"],
  ];
  const REPORT_PAGES = new Set(["overview", "operators", "kernels", "steps", "memory", "advice"]);
  function go(page) { location.hash = "#/" + encodeURIComponent(state.pid) + "/" + page; }
  function parseHash() {
    const m = location.hash.match(/^#\/([^/]+)\/([a-z]+)/);
    if (m) { state.pid = decodeURIComponent(m[1]); state.page = m[2]; }
  }
  function renderNav() {
    const nav = $("#nav"); nav.textContent = "";
    for (const [id, title] of PAGES) {
      if (EMBED && !REPORT_PAGES.has(id)) continue;
      nav.append(h("a", { href: "#/" + encodeURIComponent(state.pid) + "/" + id, class: id === state.page ? "active" : "", "data-page": id }, title));
    }
    const sel = $("#profile"); sel.textContent = "";
    for (const p of state.profiles) {
      const o = h("option", { value: p.id }, p.name + (p.status === "broken" ? " (broken)" : ""));
      if (p.status === "broken") o.disabled = true;
      if (p.id === state.pid) o.selected = true;
      sel.append(o);
    }
  }
  let cleanup = null;
  async function route() {
    parseHash();
    if (!state.pid || !state.profiles.find((p) => p.id === state.pid)) {
      const ok = state.profiles.find((p) => p.status !== "broken");
      if (!ok) { $("#main").textContent = "No readable profile in the served folders."; return; }
      state.pid = ok.id; go(state.page || "overview"); return;
    }
    renderNav();
    if (cleanup) { cleanup(); cleanup = null; }
    const main = $("#main"); main.textContent = "";
    const fn = PAGE_FNS[state.page] || PAGE_FNS.overview;
    window.__aiprof.ready = false;
    try { cleanup = (await fn(main)) || null; } catch (e) { main.append(h("p", { class: "error" }, "Error: " + e.message)); }
    window.__aiprof.ready = true;
  }

  // -- tables (server-side sort, filter, page; local in the report) ---------------------------
  function makeTable(view, opts) {
    opts = opts || {};
    const st = { sort: opts.sort || "", filters: opts.filters || "", offset: 0, limit: opts.limit || 50 };
    const wrap = h("div", { class: "table", "data-view": view });
    const input = h("input", { type: "text", placeholder: "filters, ';' between: name~gemm; count>=10; kind=kernel", value: st.filters });
    const info = h("span", { class: "muted pageinfo" });
    const prev = h("button", { onclick: () => { st.offset = Math.max(0, st.offset - st.limit); load(); } }, "‹ prev");
    const next = h("button", { onclick: () => { st.offset += st.limit; load(); } }, "next ›");
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") { st.filters = input.value; st.offset = 0; load(); } });
    const apply = h("button", { onclick: () => { st.filters = input.value; st.offset = 0; load(); } }, "Filter");
    const tw = h("div", { class: "tablewrap" });
    const err = h("div", { class: "error" });
    wrap.append(h("div", { class: "tablebar" }, input, apply, prev, next, info), err, tw);
    async function fetchPage() {
      const filters = st.filters.split(";").map((s) => s.trim()).filter(Boolean);
      if (EMBED) {
        const all = await api(P("/views/" + view));
        let rows = localFilter(all.rows, filters);
        if (st.sort) {
          const desc = st.sort.startsWith("-"); const c = st.sort.replace(/^[-+]/, "");
          rows = rows.slice().sort((a, b) => cmp(a[c], b[c]) * (desc ? -1 : 1));
        }
        return { ...all, rows: rows.slice(st.offset, st.offset + st.limit), total: rows.length };
      }
      const q = new URLSearchParams();
      for (const f of filters) q.append("filter", f);
      if (st.sort) q.set("sort", st.sort);
      q.set("limit", st.limit); q.set("offset", st.offset);
      for (const [k, v] of Object.entries(opts.params || {})) q.set("param." + k, v);
      return api(P("/views/" + view + "?" + q.toString()));
    }
    async function load() {
      err.textContent = "";
      let res;
      try { res = await fetchPage(); } catch (e) { err.textContent = e.message; return; }
      if (!st.sort && res.query && res.query.sort && res.query.sort.length) {
        const s0 = res.query.sort[0]; st.sort = (s0.desc ? "-" : "") + s0.column;
      }
      const t = h("table", { class: "data" });
      const trh = h("tr");
      for (const c of res.columns) {
        const sortedCls = st.sort === c.name ? "sorted-asc" : st.sort === "-" + c.name ? "sorted-desc" : "";
        trh.append(h("th", { class: sortedCls, "data-col": c.name, title: c.unit ? c.name + " (" + c.unit + ")" : c.name,
          onclick: () => { st.sort = st.sort === "-" + c.name ? c.name : "-" + c.name; st.offset = 0; load(); } },
          c.name + (c.unit ? " (" + c.unit + ")" : "")));
      }
      t.append(h("thead", {}, trh));
      const tb = h("tbody");
      for (const r of res.rows) {
        const tr = h("tr");
        for (const c of res.columns) {
          const v = r[c.name];
          const num = typeof v === "number";
          tr.append(h("td", { class: num ? "num" : "", title: v === null ? "" : String(v) }, num ? fmtNum(v) : v === null ? "" : String(v)));
        }
        tb.append(tr);
      }
      t.append(tb);
      tw.textContent = ""; tw.append(t);
      const end = Math.min(res.total, st.offset + res.rows.length);
      info.textContent = res.total ? `rows ${st.offset + 1}–${end} of ${res.total.toLocaleString("en-US")}` : "no rows";
      info.dataset.total = res.total;
      prev.disabled = st.offset === 0; next.disabled = end >= res.total;
      if (opts.onload) opts.onload(res);
    }
    wrap.load = load;
    load();
    return wrap;
  }
  function cmp(a, b) { if (a === b) return 0; if (a === null || a === undefined) return 1; if (b === null || b === undefined) return -1; return a < b ? -1 : 1; }
  function localFilter(rows, filters) {
    const re = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(!=|!~|>=|<=|=|~|>|<)\s*(.*?)\s*$/;
    const preds = filters.map((f) => {
      const m = f.match(re); if (!m) return () => true;
      const [, c, op, raw] = m; const n = Number(raw);
      return (r) => {
        const v = r[c]; const s = v === null || v === undefined ? "" : String(v);
        switch (op) {
          case "=": return raw.split(",").includes(s);
          case "!=": return !raw.split(",").includes(s);
          case "~": return s.toLowerCase().includes(raw.toLowerCase());
          case "!~": return !s.toLowerCase().includes(raw.toLowerCase());
          case ">=": return v >= n; case ">": return v > n; case "<=": return v <= n; case "<": return v < n;
        }
        return true;
      };
    });
    return rows.filter((r) => preds.every((p) => p(r)));
  }

  // -- small canvas charts ---------------------------------------------------------------
  function setupCanvas(c, cssH) {
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth || 800;
    c.style.height = cssH + "px";
    c.width = Math.round(w * dpr); c.height = Math.round(cssH * dpr);
    const ctx = c.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { ctx, w, h: cssH };
  }
  function stackedBars(canvas, labels, series, colors, unit) {
    const { ctx, w, h: H } = setupCanvas(canvas, 260);
    const left = 60, bottom = 24, top = 8;
    const totals = labels.map((_, i) => series.reduce((s, [, vals]) => s + Math.max(0, vals[i] || 0), 0));
    const max = Math.max(1, ...totals);
    ctx.font = "11px system-ui"; ctx.fillStyle = "#6b7280";
    for (let g = 0; g <= 4; g++) {
      const y = top + (H - top - bottom) * (1 - g / 4);
      ctx.fillText(fmtNum(max * g / 4 / 1000) + " ms", 2, y + 4);
      ctx.strokeStyle = "#eee"; ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(w, y); ctx.stroke();
    }
    const bw = Math.max(4, Math.min(60, (w - left) / Math.max(1, labels.length) * 0.7));
    labels.forEach((lab, i) => {
      const x = left + ((w - left) / labels.length) * (i + 0.5) - bw / 2;
      let y = H - bottom;
      for (const [name, vals] of series) {
        const v = Math.max(0, vals[i] || 0); const hh = (v / max) * (H - top - bottom);
        ctx.fillStyle = colors[name] || "#999"; ctx.fillRect(x, y - hh, bw, hh); y -= hh;
      }
      ctx.fillStyle = "#374151"; ctx.fillText(String(lab), x, H - 8);
    });
  }
  function legend(colors, names) {
    return h("div", { class: "legend" }, names.map((n) => h("span", {}, h("i", { style: "background:" + colors[n] }), n)));
  }

  // -- pages -----------------------------------------------------------------------------
  const PAGE_FNS = {};

  PAGE_FNS.overview = async (main) => {
    const meta = await api(P(""));
    const head = h("div", { class: "cards" });
    const devs = (meta.devices || []).filter((d) => d.type !== "cpu");
    const card = (k, v) => h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v));
    head.append(card("profile", meta.name), card("ranks", (meta.ranks || []).join(", ") || "–"),
      card("devices", devs.length ? devs.length + " × " + (devs[0].name || devs[0].type) : "none"),
      card("steps", String((meta.steps || []).length)), card("span", fmtNs(meta.span_ns[1] - meta.span_ns[0])),
      card("events", fmtNum((meta.tables || {}).events || 0)));
    main.append(h("h2", {}, "Overview"), head);
    const g = h("div", { class: "grid2" });
    const left = h("div"), right = h("div");
    g.append(left, right); main.append(g);
    // Step breakdown: stacked bars per step.
    const cats = ["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other"];
    left.append(h("h3", {}, "Step time breakdown"));
    try {
      const steps = await api(P("/views/steps?limit=1000"));
      const rows = steps.rows;
      if (!rows.length) left.append(h("p", { class: "muted" }, "No steps."));
      else {
        const c = h("canvas", { class: "chart", id: "steps-chart" });
        left.append(legend(CAT_COLORS, cats), c);
        const labels = rows.map((r) => (r.step === null ? "all" : r.step) + (new Set(rows.map((x) => x.rank)).size > 1 ? "/r" + r.rank : ""));
        requestAnimationFrame(() => stackedBars(c, labels, cats.map((k) => [k, rows.map((r) => r[k + "_us"] || 0)]), CAT_COLORS));
      }
    } catch (e) { left.append(h("p", { class: "error" }, "steps: " + e.message)); }
    // Device utilization and the breakdown over all steps.
    right.append(h("h3", {}, "Device utilization"));
    try {
      const ov = await api(P("/views/overview?limit=10000"));
      const util = ov.rows.filter((r) => r.section === "device" && (r.step === null || r.step === undefined));
      const busy = ov.rows.filter((r) => r.section === "utilization" && (r.step === null || r.step === undefined));
      const t = h("table", { class: "data", id: "util-table" });
      t.append(h("tr", {}, h("th", {}, "rank"), h("th", {}, "device"), h("th", {}, "figure"), h("th", {}, "time (µs)"), h("th", {}, "%")));
      for (const r of busy.concat(util)) {
        t.append(h("tr", {}, h("td", {}, r.rank), h("td", {}, r.device === null || r.device === undefined ? "" : r.device), h("td", {}, r.category),
          h("td", { class: "num" }, fmtNum(r.time_us)), h("td", { class: "num" }, h("span", {}, fmtNum(r.percent)),
            h("span", { style: `display:inline-block;margin-left:6px;height:8px;width:${Math.max(0, Math.min(100, r.percent || 0))}px;background:#2563eb` }))));
      }
      right.append(t);
      const bd = ov.rows.filter((r) => r.section === "breakdown" && (r.step === null || r.step === undefined));
      if (bd.length) {
        right.append(h("h3", {}, "Where step time goes (all steps)"));
        const t2 = h("table", { class: "data", id: "breakdown-table" });
        t2.append(h("tr", {}, h("th", {}, "rank"), h("th", {}, "category"), h("th", {}, "time (µs)"), h("th", {}, "%")));
        for (const r of bd) t2.append(h("tr", {}, h("td", {}, r.rank), h("td", {}, h("i", { style: `display:inline-block;width:9px;height:9px;margin-right:5px;background:${CAT_COLORS[r.category] || "#999"}` }), r.category), h("td", { class: "num" }, fmtNum(r.time_us)), h("td", { class: "num" }, fmtNum(r.percent))));
        right.append(t2);
      }
    } catch (e) { right.append(h("p", { class: "error" }, "overview: " + e.message)); }
    main.append(h("h3", {}, "Top advice"));
    main.append(await adviceList(5));
  };

  async function adviceList(n) {
    const box = h("div", { id: "advice" });
    try {
      const a = await api(P("/advice"));
      if (!a.available) box.append(h("p", { class: "muted" }, "No advice: " + (a.reason || "the proposer is not available") + "."));
      else if (!a.advice.length) box.append(h("p", { class: "muted" }, "No advice: nothing stands out."));
      for (const item of (a.advice || []).slice(0, n || 1000)) {
        const title = item.title || item.rule || item.name || "advice";
        const div = h("div", { class: "advice" }, h("div", { class: "t" }, title));
        for (const k of ["message", "summary", "detail", "fix", "expected_gain", "gain", "evidence"]) {
          if (item[k] === undefined || item[k] === null) continue;
          const v = typeof item[k] === "object" ? JSON.stringify(item[k]) : String(item[k]);
          div.append(h("div", {}, h("span", { class: "muted" }, k + ": "), v));
        }
        box.append(div);
      }
    } catch (e) { box.append(h("p", { class: "muted" }, "Advice unavailable: " + e.message)); }
    return box;
  }

  PAGE_FNS.advice = async (main) => { main.append(h("h2", {}, "Advice"), await adviceList()); };
  for (const v of ["operators", "kernels", "steps", "counters"]) {
    PAGE_FNS[v] = async (main) => {
      main.append(h("h2", {}, v[0].toUpperCase() + v.slice(1)), makeTable(v));
      if (v === "counters" && !EMBED) main.append(await counterCharts());
    };
  }

  async function counterCharts() {
    const box = h("div");
    const m = await api(P("/counters"));
    if (!m.metrics.length) return box;
    box.append(h("h3", {}, "Counter over time"));
    const sel = h("select", { id: "counter-metric" }, m.metrics.map((x, i) => h("option", { value: i }, `${x.metric} (rank ${x.rank}, ${x.device_type} ${x.device})`)));
    const c = h("canvas", { class: "chart" });
    box.append(sel, c);
    async function draw() {
      const x = m.metrics[Number(sel.value)];
      const s = await api(P(`/counters/series?metric=${encodeURIComponent(x.metric)}&rank=${x.rank}&device=${x.device}&width=800`));
      lineChart(c, [{ name: x.metric, color: "#2563eb", ts: s.ts, v: s.max }], null, x.unit || "");
    }
    sel.addEventListener("change", draw);
    requestAnimationFrame(draw);
    return box;
  }

  function lineChart(canvas, series, peak, unit, fmt) {
    const { ctx, w, h: H } = setupCanvas(canvas, 260);
    fmt = fmt || ((v) => fmtNum(v) + (unit ? " " + unit : ""));
    const left = 80, bottom = 22, top = 10;
    let t0 = Infinity, t1 = -Infinity, vmax = 0;
    for (const s of series) for (let i = 0; i < s.ts.length; i++) { t0 = Math.min(t0, s.ts[i]); t1 = Math.max(t1, s.ts[i]); vmax = Math.max(vmax, s.v[i] || 0); }
    if (!isFinite(t0)) { ctx.fillText("no samples", 10, 20); return; }
    if (t1 === t0) t1 = t0 + 1; if (vmax === 0) vmax = 1;
    const X = (t) => left + (t - t0) / (t1 - t0) * (w - left - 10);
    const Y = (v) => top + (1 - v / vmax) * (H - top - bottom);
    ctx.font = "11px system-ui";
    for (let g = 0; g <= 4; g++) { ctx.fillStyle = "#6b7280"; ctx.fillText(fmt(vmax * g / 4), 2, Y(vmax * g / 4) + 4); ctx.strokeStyle = "#eee"; ctx.beginPath(); ctx.moveTo(left, Y(vmax * g / 4)); ctx.lineTo(w, Y(vmax * g / 4)); ctx.stroke(); }
    ctx.fillStyle = "#6b7280"; ctx.fillText(fmtNs(t0), left, H - 6); ctx.fillText(fmtNs(t1), w - 80, H - 6);
    for (const s of series) {
      ctx.strokeStyle = s.color; ctx.lineWidth = 1.5; ctx.beginPath();
      for (let i = 0; i < s.ts.length; i++) { const x = X(s.ts[i]), y = Y(s.v[i] || 0); if (i) { ctx.lineTo(x, ctx._lastY || y); } ctx.lineTo(x, y); ctx._lastY = y; }
      ctx.stroke();
    }
    if (peak) {
      const x = X(peak.ts), y = Y(peak.v);
      ctx.fillStyle = "#dc2626"; ctx.beginPath(); ctx.arc(x, y, 4, 0, 2 * Math.PI); ctx.fill();
      ctx.fillText("peak " + fmt(peak.v) + " at " + fmtNs(peak.ts), Math.min(x + 6, w - 220), Math.max(y + 4, 14));
    }
  }

  PAGE_FNS.memory = async (main) => {
    main.append(h("h2", {}, "Memory"));
    if (!EMBED) {
      const m = await api(P("/memory/series?width=1000"));
      const dev = m.series.filter((s) => s.device_type !== "cpu");
      const list = dev.length ? dev : m.series;
      if (!list.length) main.append(h("p", { class: "muted" }, "No allocator events in this profile (record with profile_memory=True)."));
      for (const s of list) {
        const pk = m.peaks.find((p) => p.rank === s.rank && p.device === s.device && p.device_type === s.device_type);
        main.append(h("h3", {}, `rank ${s.rank}, ${s.device_type} ${s.device}: allocated and reserved`));
        main.append(h("div", { class: "legend" }, h("span", {}, h("i", { style: "background:#2563eb" }), "allocated"), h("span", {}, h("i", { style: "background:#f59e0b" }), "reserved"), h("span", {}, h("i", { style: "background:#dc2626" }), "peak of allocated")));
        const c = h("canvas", { class: "chart", id: "mem-chart" });
        main.append(c);
        requestAnimationFrame(() => lineChart(c, [{ name: "reserved", color: "#f59e0b", ts: s.ts, v: s.reserved }, { name: "allocated", color: "#2563eb", ts: s.ts, v: s.allocated }],
          pk ? { ts: pk.peak_ts, v: pk.peak_bytes } : null, "", fmtBytes));
        if (pk) main.append(await liveAt(pk));
      }
    }
    main.append(h("h3", {}, "Memory by device (memory view)"), makeTable("memory"));
  };

  async function liveAt(pk) {
    // The operators live at the peak: the host spans covering that instant (timeline window).
    const box = h("div", { class: "panel", id: "live-at-peak" });
    box.append(h("b", {}, `Operators live at the peak (${fmtBytes(pk.peak_bytes)} at ${fmtNs(pk.peak_ts)})`));
    const w = await api(P(`/timeline?t0=${pk.peak_ts}&t1=${pk.peak_ts}&width=1`));
    const tracks = (await api(P("/tracks"))).tracks;
    const names = new Map(tracks.map((t) => [t.track, t]));
    const rows = [];
    for (let i = 0; i < w.items.ts.length; i++) {
      const t = names.get(w.items.track[i]);
      if (!t || t.is_device) continue;
      if (!["cpu_op", "user_annotation", "python", "step"].includes(w.items.kind[i])) continue;
      rows.push({ track: t.name, depth: w.items.depth[i], kind: w.items.kind[i], name: w.names[w.items.name[i]], dur: w.items.dur[i] });
    }
    rows.sort((a, b) => (a.track < b.track ? -1 : a.track > b.track ? 1 : a.depth - b.depth));
    const t = h("table", { class: "data" }, h("tr", {}, h("th", {}, "thread"), h("th", {}, "depth"), h("th", {}, "kind"), h("th", {}, "operator"), h("th", {}, "duration")));
    for (const r of rows) t.append(h("tr", {}, h("td", {}, r.track), h("td", {}, r.depth), h("td", {}, r.kind), h("td", {}, "  ".repeat(r.depth) + r.name), h("td", { class: "num" }, fmtNs(r.dur))));
    box.append(rows.length ? t : h("p", { class: "muted" }, "No host operator spans that instant."));
    return box;
  }

  PAGE_FNS.compare = async (main) => {
    main.append(h("h2", {}, "Compare two profiles"));
    const others = state.profiles.filter((p) => p.status !== "broken");
    const selA = h("select", { id: "cmp-a" }, others.map((p) => h("option", { value: p.id }, p.name)));
    const selB = h("select", { id: "cmp-b" }, others.map((p) => h("option", { value: p.id }, p.name)));
    selA.value = state.pid; selB.value = (others.find((p) => p.id !== state.pid) || others[0]).id;
    const out = h("div", { id: "cmp-out" });
    main.append(h("div", { class: "tablebar" }, "A ", selA, " B ", selB, h("button", { onclick: () => run() }, "Compare")), out);
    const get = (pid, path) => api("/profiles/" + encodeURIComponent(pid) + path);
    async function run() {
      out.textContent = "Loading…";
      const [a, b] = [selA.value, selB.value];
      const [sa, sb] = await Promise.all([get(a, "/views/steps?limit=1000"), get(b, "/views/steps?limit=1000")]);
      out.textContent = "";
      const mean = (rows, k) => rows.length ? rows.reduce((s, r) => s + (r[k] || 0), 0) / rows.length : 0;
      const cats = ["duration", "kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other", "idle"];
      const t = h("table", { class: "data", id: "cmp-steps" }, h("tr", {}, h("th", {}, "mean per step (µs)"), h("th", {}, "A"), h("th", {}, "B"), h("th", {}, "B − A"), h("th", {}, "B / A")));
      for (const c of cats) {
        const va = mean(sa.rows, c + "_us"), vb = mean(sb.rows, c + "_us");
        t.append(h("tr", {}, h("td", {}, c), h("td", { class: "num" }, fmtNum(va)), h("td", { class: "num" }, fmtNum(vb)), h("td", { class: "num" }, fmtNum(vb - va)), h("td", { class: "num" }, va ? (vb / va).toFixed(2) + "×" : "")));
      }
      out.append(h("h3", {}, `Step time (A: ${sa.rows.length} steps, B: ${sb.rows.length} steps)`), t);
      for (const [title, view, id, vk] of [["Operators", "operators", "cmp-ops", "host_total_us"], ["Kernels", "kernels", "cmp-kernels", "total_us"]]) {
        // The server compares every name (aiprof.analysis.compare); the largest changes either way first.
        const up = await api(`/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}&view=${view}&sort=-delta_us&limit=10`);
        const down = await api(`/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}&view=${view}&sort=delta_us&limit=10`);
        const seen = new Set();
        const diffs = [...up.rows, ...down.rows].filter((d) => d.status !== "same" && !seen.has(d.name) && seen.add(d.name))
          .sort((x, y) => Math.abs(y.delta_us) - Math.abs(x.delta_us));
        const tt = h("table", { class: "data", id }, h("tr", {}, h("th", {}, "name"), h("th", {}, "A " + vk), h("th", {}, "B " + vk), h("th", {}, "B − A"), h("th", {}, "calls A"), h("th", {}, "calls B"), h("th", {}, "status")));
        for (const d of diffs) tt.append(h("tr", {}, h("td", { title: d.name }, d.name), h("td", { class: "num" }, fmtNum(d.a_us)), h("td", { class: "num" }, fmtNum(d.b_us)), h("td", { class: "num" }, fmtNum(d.delta_us)), h("td", { class: "num" }, fmtNum(d.a_count)), h("td", { class: "num" }, fmtNum(d.b_count)), h("td", {}, d.status)));
        out.append(h("h3", {}, `Top differences: ${title.toLowerCase()} (${up.total} names compared)`), tt);
      }
    }
    await run();
  };

  // -- timeline --------------------------------------------------------------------------
  PAGE_FNS.timeline = async (main) => {
    const LABEL_W = 230, ROW_H = 18, COUNTER_H = 46, RULER_H = 22, MAX_DEPTH_ROWS = 16;
    const trk = await api(P("/tracks"));
    const tracks = trk.tracks.filter((t) => t.events > 0);
    const span = trk.span_ns;
    const memInfo = await api(P(`/memory/series?width=1`)).catch(() => ({ peaks: [] }));
    const metrics = (await api(P("/counters")).catch(() => ({ metrics: [] }))).metrics;
    const counterTracks = [];
    for (const p of memInfo.peaks || []) if (p.device_type !== "cpu") counterTracks.push({ type: "memory", label: `memory allocated (${p.device_type} ${p.device})`, rank: p.rank, device: p.device, max: p.peak_reserved || p.peak_bytes });
    for (const m of metrics.slice(0, 12)) counterTracks.push({ type: "counter", label: `${m.metric} (${m.device_type} ${m.device})`, metric: m.metric, rank: m.rank, device: m.device, max: m.max });
    // Layout: y of each track.
    let y = RULER_H; const layout = new Map();
    for (const t of tracks) { const rows = Math.min(MAX_DEPTH_ROWS, (t.max_depth || 0) + 1); layout.set(t.track, { y, rows, t }); y += rows * ROW_H + 6; }
    for (const c of counterTracks) { c.y = y; y += COUNTER_H + 4; }
    const contentH = y;
    const wrap = h("div", { id: "tl-wrap" });
    const canvas = h("canvas", { id: "tl-canvas", tabindex: "0" });
    wrap.append(canvas);
    const help = h("div", { id: "tl-help" }, "W/S or Ctrl+wheel: zoom · A/D, drag or Shift+wheel: pan · wheel: scroll tracks · click: event details · Shift+drag: select a range · 0: reset");
    const details = h("div", { class: "panel", id: "tl-details" }, h("span", { class: "muted" }, "Click an event for its details."));
    const summary = h("div", { class: "panel", id: "tl-summary" }, h("span", { class: "muted" }, "Shift+drag to select a range: the totals of what it covers show here."));
    main.append(h("h2", {}, "Timeline"), help, wrap, h("div", { id: "tl-side" }, details, summary));
    const V = { t0: span[0], t1: Math.max(span[1], span[0] + 1000), scrollY: 0 };
    let data = null, inflight = 0, cseries = new Map(), sel = null, picked = null;
    const viewH = Math.min(Math.max(300, window.innerHeight - 260), contentH + 4);
    let W = 0, ctx = null;
    function resize() {
      const dpr = window.devicePixelRatio || 1;
      W = canvas.clientWidth || 1000;
      canvas.style.height = viewH + "px";
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(viewH * dpr);
      ctx = canvas.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    }
    const plotW = () => W - LABEL_W;
    const xOf = (t) => LABEL_W + (t - V.t0) / (V.t1 - V.t0) * plotW();
    const tOf = (x) => V.t0 + (x - LABEL_W) / plotW() * (V.t1 - V.t0);
    const kindColor = (kind, name) => {
      if (kind === "cpu_op" || kind === "python" || kind === "user_annotation") return `hsl(${hashHue(name)},45%,62%)`;
      if (kind === "kernel") return `hsl(${210 + (hashHue(name) % 40)},65%,${45 + (hashHue(name) % 15)}%)`;
      return KIND_COLORS[kind] || "#9ca3af";
    };
    function draw() {
      const t_start = performance.now();
      ctx.clearRect(0, 0, W, viewH);
      ctx.font = "11px system-ui"; ctx.textBaseline = "middle";
      const oy = -V.scrollY;
      // Events.
      if (data) {
        const it = data.items, n = it.ts.length, scale = plotW() / (V.t1 - V.t0);
        ctx.save(); ctx.beginPath(); ctx.rect(LABEL_W, RULER_H, plotW(), viewH - RULER_H); ctx.clip();
        for (let i = 0; i < n; i++) {
          const L = layout.get(it.track[i]); if (!L) continue;
          const d = it.depth[i]; if (d >= L.rows) continue;
          const yy = L.y + d * ROW_H + oy; if (yy + ROW_H < RULER_H || yy > viewH) continue;
          let x = LABEL_W + (it.ts[i] - V.t0) * scale; let w = it.dur[i] * scale;
          if (x + w < LABEL_W || x > W) continue;
          if (w < 1) w = 1;
          const name = data.names[it.name[i]];
          ctx.fillStyle = it.n[i] > 1 ? "#9ca3af" : kindColor(it.kind[i], name);
          ctx.fillRect(x, yy + 1, w, ROW_H - 2);
          if (w > 28 && it.n[i] === 1) {
            const x0 = Math.max(x, LABEL_W) + 2, ww = Math.min(x + w, W) - x0 - 2;
            if (ww > 20) { ctx.fillStyle = it.kind[i] === "step" || it.kind[i] === "kernel" || it.kind[i] === "collective" ? "#fff" : "#111"; const ch = Math.floor(ww / 6.2); ctx.fillText(name.length > ch ? name.slice(0, Math.max(1, ch - 1)) + "…" : name, x0, yy + ROW_H / 2); }
          }
        }
        // Flow arrows: launch -> device work.
        const f = data.flows; ctx.strokeStyle = "rgba(220,38,38,0.7)"; ctx.fillStyle = "rgba(220,38,38,0.8)"; ctx.lineWidth = 1;
        for (let i = 0; i < f.to_ts.length; i++) {
          const a = layout.get(f.from_track[i]), b = layout.get(f.to_track[i]); if (!a || !b) continue;
          const x1 = xOf(f.from_ts[i]), y1 = a.y + Math.min(f.from_depth[i], a.rows - 1) * ROW_H + ROW_H / 2 + oy;
          const x2 = xOf(f.to_ts[i]), y2 = b.y + Math.min(f.to_depth[i], b.rows - 1) * ROW_H + ROW_H / 2 + oy;
          ctx.beginPath(); ctx.moveTo(x1, y1); ctx.bezierCurveTo(x1 + 20, y1, x2 - 20, y2, x2, y2); ctx.stroke();
          ctx.beginPath(); ctx.moveTo(x2, y2); ctx.lineTo(x2 - 5, y2 - 3); ctx.lineTo(x2 - 5, y2 + 3); ctx.fill();
        }
        // Counter tracks.
        for (const c of counterTracks) {
          const s = cseries.get(c.label); const yy = c.y + oy; if (!s || yy > viewH || yy + COUNTER_H < RULER_H) continue;
          const vals = s.v, ts = s.ts, max = c.max || Math.max(1, ...vals);
          ctx.fillStyle = c.type === "memory" ? "rgba(37,99,235,0.35)" : "rgba(5,150,105,0.35)";
          ctx.beginPath(); ctx.moveTo(LABEL_W, yy + COUNTER_H);
          for (let i = 0; i < ts.length; i++) {
            const x = xOf(ts[i]); const vy = yy + COUNTER_H - (vals[i] / max) * (COUNTER_H - 4);
            const xn = i + 1 < ts.length ? xOf(ts[i + 1]) : Math.min(W, xOf(V.t1));
            ctx.lineTo(x, vy); ctx.lineTo(xn, vy);
          }
          ctx.lineTo(W, yy + COUNTER_H); ctx.closePath(); ctx.fill();
        }
        ctx.restore();
      }
      // Selection band.
      if (sel) { ctx.fillStyle = "rgba(37,99,235,0.12)"; const a = xOf(Math.min(sel.t0, sel.t1)), b = xOf(Math.max(sel.t0, sel.t1)); ctx.fillRect(a, RULER_H, b - a, viewH); }
      if (picked) { const L = layout.get(picked.track); if (L) { ctx.strokeStyle = "#111"; ctx.lineWidth = 2; ctx.strokeRect(xOf(picked.ts), L.y + picked.depth * ROW_H + oy + 1, Math.max(2, picked.dur / (V.t1 - V.t0) * plotW()), ROW_H - 2); ctx.lineWidth = 1; } }
      // Labels column.
      ctx.fillStyle = "#f3f4f6"; ctx.fillRect(0, RULER_H, LABEL_W, viewH);
      ctx.fillStyle = "#111";
      for (const L of layout.values()) { const yy = L.y + oy; if (yy < RULER_H - ROW_H || yy > viewH) continue; ctx.fillStyle = L.t.is_device ? "#1d4ed8" : "#111"; ctx.fillText(L.t.name.slice(0, 36), 6, yy + ROW_H / 2); ctx.strokeStyle = "#e5e7eb"; ctx.beginPath(); ctx.moveTo(0, yy - 3); ctx.lineTo(W, yy - 3); ctx.stroke(); }
      for (const c of counterTracks) { const yy = c.y + oy; if (yy < RULER_H - COUNTER_H || yy > viewH) continue; ctx.fillStyle = "#065f46"; ctx.fillText(c.label.slice(0, 36), 6, yy + COUNTER_H / 2); }
      // Ruler.
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, RULER_H); ctx.strokeStyle = "#d1d5db"; ctx.beginPath(); ctx.moveTo(0, RULER_H); ctx.lineTo(W, RULER_H); ctx.stroke();
      const dt = V.t1 - V.t0; const step = Math.pow(10, Math.floor(Math.log10(dt / 8))); const mult = dt / step > 40 ? 5 : dt / step > 20 ? 2 : 1; const tick = step * mult;
      ctx.fillStyle = "#374151";
      for (let t = Math.ceil(V.t0 / tick) * tick; t <= V.t1; t += tick) { const x = xOf(t); if (x < LABEL_W) continue; ctx.fillRect(x, RULER_H - 6, 1, 6); ctx.fillText(fmtTick(t, tick), x + 2, 9); }
      ctx.fillText(`window ${fmtNs(dt)}`, 6, 9);
      const ms = performance.now() - t_start;
      window.__aiprof.frames.push(ms); if (window.__aiprof.frames.length > 1000) window.__aiprof.frames.shift();
      window.__aiprof.lastFrameMs = ms;
    }
    let fetchTimer = null;
    function requestData() {
      clearTimeout(fetchTimer);
      fetchTimer = setTimeout(fetchData, 60);
    }
    async function fetchData() {
      const id = ++inflight;
      const dt = V.t1 - V.t0;
      const t0 = Math.floor(V.t0 - dt * 0.25), t1 = Math.ceil(V.t1 + dt * 0.25);
      const width = Math.round(plotW() * 1.5);
      const started = performance.now();
      const [win, ...cs] = await Promise.all([
        api(P(`/timeline?t0=${t0}&t1=${t1}&width=${width}`)),
        ...counterTracks.map((c) => c.type === "memory"
          ? api(P(`/memory/series?t0=${t0}&t1=${t1}&width=${width}&rank=${c.rank}&device=${c.device}`)).then((m) => { const s = m.series[0] || { ts: [], allocated: [] }; return { ts: s.ts, v: s.allocated }; })
          : api(P(`/counters/series?metric=${encodeURIComponent(c.metric)}&rank=${c.rank}&device=${c.device}&t0=${t0}&t1=${t1}&width=${width}`)).then((s) => ({ ts: s.ts, v: s.max }))),
      ]);
      if (id !== inflight) return;
      data = win; cseries = new Map(counterTracks.map((c, i) => [c.label, cs[i]]));
      window.__aiprof.lastFetchMs = performance.now() - started;
      window.__aiprof.items = win.items.ts.length;
      draw();
      window.__aiprof.painted = (window.__aiprof.painted || 0) + 1;
      if (!window.__aiprof.firstPaintAt) window.__aiprof.firstPaintAt = performance.now();
      canvas.dataset.painted = String(window.__aiprof.painted);
    }
    function zoom(f, atX) {
      const tm = atX === undefined ? (V.t0 + V.t1) / 2 : tOf(atX);
      let t0 = tm - (tm - V.t0) * f, t1 = tm + (V.t1 - tm) * f;
      if (t1 - t0 < 1000) { t0 = tm - 500; t1 = tm + 500; }
      V.t0 = t0; V.t1 = t1; draw(); requestData();
    }
    function pan(frac) { const d = (V.t1 - V.t0) * frac; V.t0 += d; V.t1 += d; draw(); requestData(); }
    function scrollBy(dy) { V.scrollY = Math.max(0, Math.min(Math.max(0, contentH - viewH + 10), V.scrollY + dy)); draw(); }
    const onKey = (e) => {
      if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "SELECT")) return;
      const k = e.key.toLowerCase();
      if (k === "w") zoom(0.8); else if (k === "s") zoom(1.25); else if (k === "a") pan(-0.1); else if (k === "d") pan(0.1);
      else if (k === "0") { V.t0 = span[0]; V.t1 = Math.max(span[1], span[0] + 1000); draw(); requestData(); } else return;
      e.preventDefault();
    };
    document.addEventListener("keydown", onKey);
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      if (e.ctrlKey || e.metaKey) zoom(e.deltaY > 0 ? 1.2 : 1 / 1.2, e.offsetX);
      else if (e.shiftKey) pan((e.deltaY || e.deltaX) > 0 ? 0.1 : -0.1);
      else scrollBy(e.deltaY);
    }, { passive: false });
    let drag = null;
    canvas.addEventListener("mousedown", (e) => { canvas.focus(); drag = { x: e.offsetX, y: e.offsetY, t0: V.t0, t1: V.t1, sy: V.scrollY, moved: false, select: e.shiftKey }; if (e.shiftKey) sel = { t0: tOf(e.offsetX), t1: tOf(e.offsetX) }; });
    canvas.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const dx = e.offsetX - drag.x; if (Math.abs(dx) + Math.abs(e.offsetY - drag.y) > 3) drag.moved = true;
      if (drag.select) { sel.t1 = tOf(e.offsetX); draw(); return; }
      const dtp = (drag.t1 - drag.t0) / plotW(); V.t0 = drag.t0 - dx * dtp; V.t1 = drag.t1 - dx * dtp;
      V.scrollY = Math.max(0, drag.sy - (e.offsetY - drag.y)); draw();
    });
    const up = async (e) => {
      if (!drag) return;
      const d = drag; drag = null;
      if (d.select && d.moved) { await showSummary(); return; }
      if (d.select) { sel = null; draw(); return; }
      if (d.moved) { requestData(); return; }
      pick(e.offsetX, e.offsetY);
    };
    canvas.addEventListener("mouseup", up);
    function hit(x, y) {
      if (!data || x < LABEL_W) return null;
      const it = data.items; const tx = tOf(x), tol = 3 / plotW() * (V.t1 - V.t0);
      let best = null;
      for (const L of layout.values()) {
        const yy = L.y - V.scrollY; if (y < yy || y >= yy + L.rows * ROW_H) continue;
        const depth = Math.floor((y - yy) / ROW_H);
        for (let i = 0; i < it.ts.length; i++) {
          if (it.track[i] !== L.t.track || it.depth[i] !== depth) continue;
          if (it.ts[i] - tol <= tx && tx <= it.ts[i] + it.dur[i] + tol) { if (!best || it.dur[i] < best.dur) best = { i, track: L.t.track, depth, ts: it.ts[i], dur: it.dur[i], n: it.n[i], name: data.names[it.name[i]], kind: it.kind[i] }; }
        }
      }
      return best;
    }
    async function pick(x, y) {
      const b = hit(x, y); picked = b; draw();
      details.textContent = "";
      if (!b) { details.append(h("span", { class: "muted" }, "Nothing there.")); return; }
      if (b.n > 1) { details.append(h("b", {}, `${b.n} events merged`), h("div", {}, `longest: ${b.name} · ${fmtNs(b.ts)} – ${fmtNs(b.ts + b.dur)}`), h("div", { class: "muted" }, "Zoom in (W) to see them one by one.")); return; }
      try {
        const r = await api(P(`/timeline/event?track=${b.track}&ts=${b.ts}`));
        const ev = r.events.find((x) => x.dur === b.dur) || r.events[0];
        const kv = h("table", { class: "kv" });
        for (const k of ["name", "kind", "cat", "ts", "dur", "rank", "device_type", "device", "pid", "tid", "step", "correlation", "external_id", "bytes", "grid", "block"]) {
          if (ev[k] === null || ev[k] === undefined) continue;
          const v = k === "ts" ? fmtNs(ev[k]) + " (" + ev[k] + " ns)" : k === "dur" ? fmtNs(ev[k]) : String(ev[k]);
          kv.append(h("tr", {}, h("td", {}, k), h("td", { class: k === "name" ? "ev-name" : "" }, v)));
        }
        details.append(h("b", {}, "Event"), kv);
        if (ev.linked && ev.linked.length) {
          details.append(h("b", {}, "Linked by correlation"));
          for (const l of ev.linked) details.append(h("div", {}, `${l.kind}: ${l.name} @ ${fmtNs(l.ts)} (${fmtNs(l.dur)})`));
        }
        if (ev.args) details.append(h("b", {}, "args"), h("pre", {}, ev.args));
      } catch (e) { details.append(h("span", { class: "error" }, e.message)); }
    }
    async function showSummary() {
      const a = Math.floor(Math.min(sel.t0, sel.t1)), b = Math.ceil(Math.max(sel.t0, sel.t1));
      summary.textContent = "";
      const s = await api(P(`/timeline/summary?t0=${a}&t1=${b}`));
      summary.append(h("b", {}, `Selection ${fmtNs(a)} – ${fmtNs(b)} (${fmtNs(b - a)}): ${s.events.toLocaleString("en-US")} events`));
      const t = h("table", { class: "data", id: "sel-kinds" }, h("tr", {}, h("th", {}, "kind"), h("th", {}, "events"), h("th", {}, "time in selection")));
      for (const k of s.by_kind) t.append(h("tr", {}, h("td", {}, k.kind), h("td", { class: "num" }, fmtNum(k.events)), h("td", { class: "num" }, fmtNs(k.time_ns))));
      const t2 = h("table", { class: "data" }, h("tr", {}, h("th", {}, "name"), h("th", {}, "kind"), h("th", {}, "events"), h("th", {}, "time")));
      for (const k of s.top.slice(0, 10)) t2.append(h("tr", {}, h("td", { title: k.name }, k.name.slice(0, 60)), h("td", {}, k.kind), h("td", { class: "num" }, fmtNum(k.events)), h("td", { class: "num" }, fmtNs(k.time_ns))));
      summary.append(t, h("div", { class: "muted" }, "Top names"), t2);
    }
    window.__aiprof.timeline = { zoom, pan, view: V, draw: () => { draw(); return window.__aiprof.lastFrameMs; }, layout, tracks, hit, counterTracks,
      counterSamples: () => [...cseries.values()].reduce((s, c) => s + c.ts.length, 0),
      clickAt: (x, y) => pick(x, y), xOf, selectRange: async (a, b) => { sel = { t0: a, t1: b }; draw(); await showSummary(); } };
    resize(); draw();
    await fetchData();
    const onResize = () => { resize(); draw(); };
    window.addEventListener("resize", onResize);
    return () => { document.removeEventListener("keydown", onKey); window.removeEventListener("resize", onResize); delete window.__aiprof.timeline; };
  };

  // -- start -----------------------------------------------------------------------------
  async function start() {
    try {
      const r = await api("/profiles");
      state.profiles = r.profiles;
    } catch (e) { $("#main").textContent = "Cannot reach the aiprof API: " + e.message; return; }
    $("#profile").addEventListener("change", (e) => { state.pid = e.target.value; go(state.page); });
    if (EMBED) $("#status").textContent = "report · " + (EMBED.__generated || "");
    window.addEventListener("hashchange", route);
    await route();
  }
  start();
})();
