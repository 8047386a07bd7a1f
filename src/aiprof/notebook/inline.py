"""What a notebook shows after ``%%aiprof``: the overview (step breakdown chart, device
utilization), the top advice with its evidence and fix, the top Python functions,
operators and kernels, and a flame graph of the Python samples (flame.py), as plain HTML.

The figures are those of ``aiprof report PROFILE`` (the same views, sorts and counts:
cli/report.py's overview) and the advice is ``aiprof advise``'s. The HTML has no script,
no style sheet and no external resource, only inline styles, so it renders the same in
JupyterLab, VS Code's notebooks and a saved notebook opened anywhere. The interactive
timeline is the web UI itself, in a frame (kernel_server.py).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis import Query, run
from ..errors import AiprofError
from ..render.terminal import format_cell
from .flame import flame_html

if TYPE_CHECKING:
    from .handle import ProfileHandle

#: Advice items shown (``aiprof report``'s overview shows as many).
TOP_ADVICE = 3
#: Rows of each top table (functions, operators, kernels).
TOP_ROWS = 5
#: Steps drawn as bars in the chart; the rest are counted in a note.
MAX_STEP_BARS = 300
#: Ranks drawn in the chart.
MAX_RANKS = 4
#: Characters of a name shown in a table cell (the full name is its tooltip).
NAME_CHARS = 110
CHART_HEIGHT_PX = 110

#: The step breakdown's categories in the web UI's order and colours (web/static/app.js).
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")
CAT_COLORS = {
    "kernel": "#2563eb",
    "memcpy": "#f59e0b",
    "memset": "#a16207",
    "communication": "#7c3aed",
    "runtime": "#10b981",
    "dataloader": "#eab308",
    "cpu_exec": "#64748b",
    "other": "#d1d5db",
}
SEVERITY_COLORS = {"high": "#dc2626", "medium": "#d97706", "low": "#6b7280"}
_MUTED = "opacity:.7"
_BOX = "font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;line-height:1.45;max-width:1200px"
_H = "font-size:14px;font-weight:600;margin:12px 0 4px"
_TABLE = "border-collapse:collapse;font-size:12px;margin:2px 0"
_CELL = "padding:2px 8px;border-bottom:1px solid rgba(128,128,128,.25);vertical-align:top"

esc = html.escape


def _ms(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} µs"


# -- the data (the CLI overview's) -------------------------------------------------------


def overview_data(handle: ProfileHandle) -> dict[str, Any]:
    """The figures shown: the overview, steps, advice and top rows, with an error
    message in place of each part that could not be computed."""
    prof = handle.profile
    out: dict[str, Any] = {"errors": {}}

    def part(key: str, fn: Any) -> None:
        try:
            out[key] = fn()
        except AiprofError as e:
            out[key] = None
            out["errors"][key] = str(e)

    part("overview", lambda: run(prof, "overview", Query()).rows)
    part("steps", lambda: run(prof, "steps", Query()).rows)

    def advice() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
        from ..advise import VERDICTS, advise, gain_of, not_judged
        from ..advise.base import Context

        ctx = Context(prof)
        items = [a.to_json() for a in advise(prof, ctx=ctx)]
        return items, not_judged(ctx.cache.get(VERDICTS) or []), gain_of(prof, ctx)

    out["not_judged"] = []
    out["gain_of"] = "step time"
    try:
        out["advice"], out["not_judged"], out["gain_of"] = advice()
    except Exception as e:  # the proposer failing must not hide the rest
        out["advice"] = None
        out["errors"]["advice"] = f"the proposer failed: {e}"
    part("kernels", lambda: run(prof, "kernels", Query.parse([], "-total_us", TOP_ROWS)).rows)
    part("operators", lambda: run(prof, "operators", Query.parse([], "-host_self_us", TOP_ROWS)).rows)
    if prof.tables.get("samples"):
        part("python", lambda: run(prof, "python", Query.parse([], "-self_samples", TOP_ROWS)).rows)
    else:
        out["python"] = []
    return out


# -- HTML pieces ---------------------------------------------------------------------------


def _swatch(color: str) -> str:
    return f'<i style="display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;background:{color}"></i>'


def _breakdown_bar(rows: list[dict[str, Any]]) -> str:
    """One stacked bar of the all-steps breakdown, with its legend; the categories the
    profile did not measure (null) are named under it, never drawn as 0."""
    by = {r["category"]: r for r in rows if r.get("time_us") is not None}
    unmeasured = [str(r["category"]) for r in rows if r.get("time_us") is None]
    if not by and unmeasured:
        return (
            f'<p style="{_MUTED};margin:2px 0">Not measured: the profile has no operators or device work to split '
            "the step time by (record with --ops); the phases from the Python samples: "
            "<code>_aiprof.report('phases')</code>.</p>"
        )
    cats = [c for c in CATEGORIES if c in by] + [c for c in by if c not in CATEGORIES]
    segs, legend = [], []
    for c in cats:
        r = by[c]
        pct = float(r.get("percent") or 0.0)
        color = CAT_COLORS.get(c, "#9ca3af")
        label = f"{c} {_ms(r.get('time_us'))} ({pct:.1f}%)"
        if pct > 0:
            segs.append(f'<div title="{esc(label)}" style="width:{pct:.3f}%;background:{color}"></div>')
        legend.append(f'<span style="white-space:nowrap">{_swatch(color)}{esc(label)}</span> ')
    if unmeasured:
        legend.append(f'<span style="{_MUTED};white-space:nowrap">not measured: {esc(", ".join(unmeasured))}</span>')
    return (
        '<div style="display:flex;height:16px;width:100%;max-width:900px;border-radius:3px;overflow:hidden;'
        f'background:rgba(128,128,128,.15)">{"".join(segs)}</div>'
        f'<div style="margin:2px 0 6px -10px">{"".join(legend)}</div>'
    )


def _step_chart(steps: list[dict[str, Any]]) -> str:
    """Stacked columns, one per step, as the web UI's overview draws them."""
    shown = steps[:MAX_STEP_BARS]
    top = max((float(s.get("duration_us") or 0.0) for s in shown), default=0.0)
    if top <= 0:
        return ""
    cols = []
    for s in shown:
        dur = float(s.get("duration_us") or 0.0)
        parts = [(c, float(s.get(f"{c}_us") or 0.0)) for c in CATEGORIES]
        if all(s.get(f"{c}_us") is None for c in CATEGORIES):
            parts = [("other", dur)]  # not split (no operators or device work): the step, grey
        total = sum(v for _, v in parts) or 1.0
        tip = f"step {s.get('step')}: {_ms(dur)} — " + ", ".join(f"{c} {_ms(v)}" for c, v in parts if v > 0)
        segs = "".join(
            f'<div style="height:{100 * v / total:.3f}%;background:{CAT_COLORS[c]}"></div>'
            for c, v in reversed(parts)
            if v > 0
        )
        cols.append(
            f'<div title="{esc(tip)}" style="flex:1 1 0;max-width:28px;min-width:2px;height:{100 * dur / top:.3f}%;'
            f'display:flex;flex-direction:column">{segs}</div>'
        )
    first, last = shown[0].get("step"), shown[-1].get("step")
    note = f"steps {first}–{last}" if len(shown) > 1 else f"step {first}"
    if len(steps) > len(shown):
        note += f" (the first {len(shown)} of {len(steps)} steps; all: _aiprof.report('steps'))"
    return (
        f'<div style="display:flex;gap:8px;align-items:stretch;max-width:900px">'
        f'<div style="font-size:11px;{_MUTED};display:flex;flex-direction:column;justify-content:space-between;'
        f'min-width:52px;text-align:right"><span>{esc(_ms(top))}</span><span>0</span></div>'
        f'<div class="aiprof-steps-chart" style="flex:1;display:flex;align-items:flex-end;gap:1px;'
        f"height:{CHART_HEIGHT_PX}px;border-left:1px solid rgba(128,128,128,.5);"
        f'border-bottom:1px solid rgba(128,128,128,.5)">{"".join(cols)}</div></div>'
        f'<div style="font-size:11px;{_MUTED};margin-left:60px">{esc(note)}</div>'
    )


def _table(rows: list[dict[str, Any]], cols: list[str], numeric: Iterable[str] = ()) -> str:
    num = set(numeric)
    head = "".join(f'<th style="{_CELL};text-align:{"right" if c in num else "left"}">{esc(c)}</th>' for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            text = format_cell(r.get(c))
            shown = text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 1] + "…"
            align = "right" if c in num else "left"
            tip = f' title="{esc(text)}"' if shown != text else ""
            cells.append(f'<td style="{_CELL};text-align:{align};overflow-wrap:anywhere"{tip}>{esc(shown)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _device_table(ov: list[dict[str, Any]], accelerators: bool, no_steps: bool = False) -> str:
    rows = [r for r in ov if r["section"] in ("utilization", "device") and r.get("step") is None]
    if not rows:
        return f'<p style="{_MUTED};margin:2px 0">No device activity in this profile (host only).</p>'
    out = []
    busy = "busy (of profiled time)" if no_steps else "busy (of step time)"
    for r in rows:
        label = {"device_busy": busy}.get(r["category"], f"{r['category']} (of active span)")
        pct = float(r.get("percent") or 0.0)
        bar = (
            f'<span style="display:inline-block;vertical-align:middle;margin-left:6px;height:8px;'
            f'width:{max(0.0, min(100.0, pct)):.1f}px;background:#2563eb"></span>'
        )
        shown = "not measured" if r.get("time_us") is None else f"{pct:.1f}%{bar}"
        out.append(
            f'<tr><td style="{_CELL}">{esc(str(r["rank"]))}</td>'
            f'<td style="{_CELL}">{esc("" if r.get("device") is None else str(r["device"]))}</td>'
            f'<td style="{_CELL}">{esc(label)}</td>'
            f'<td style="{_CELL};text-align:right">{esc(format_cell(r.get("time_us")))}</td>'
            f'<td style="{_CELL};text-align:right;white-space:nowrap">{shown}</td></tr>'
        )
    head = "".join(
        f'<th style="{_CELL};text-align:{a}">{t}</th>'
        for t, a in (("rank", "left"), ("device", "left"), ("figure", "left"), ("time (µs)", "right"), ("%", "right"))
    )
    note = ""
    if not accelerators and all(not r.get("time_us") for r in rows):
        note = f'<p style="{_MUTED};margin:2px 0">No accelerator in this profile: the host did all the work.</p>'

    return f'<table class="aiprof-devices" style="{_TABLE}"><thead><tr>{head}</tr></thead><tbody>{"".join(out)}</tbody></table>{note}'


def not_judged_html(groups: list[dict[str, Any]], listed: bool = True) -> str:
    """The rules that could not judge for lack of data (``advise.not_judged``), in
    ``aiprof advise``'s words: a "Not judged" section with one line per missing datum and
    the rules it kept from judging; ``listed=False``: the count alone, pointing at the
    list. Nothing where every rule had its data."""
    n = sum(len(g["rules"]) for g in groups)
    if not n:
        return ""
    head = f"{n} rules could not judge for lack of data"
    if not listed:
        return f'<div class="aiprof-not-judged" style="{_MUTED}">{esc(head)} (<code>_aiprof.advise()</code> lists them).</div>'
    lines = "".join(
        f'<li><span style="font-weight:600">{esc(str(g["missing"]))}</span>: '
        f'<code style="font-size:12px">{esc(", ".join(str(r) for r in g["rules"]))}</code></li>'
        for g in groups
    )
    return (
        f'<div class="aiprof-not-judged" style="margin:6px 0">'
        f'<div><b>Not judged</b><span style="{_MUTED}"> · {esc(head)}:</span></div>'
        f'<ul style="margin:2px 0;padding-left:20px">{lines}</ul></div>'
    )


def advice_html(
    items: list[dict[str, Any]],
    total: int,
    not_judged: list[dict[str, Any]] | None = None,
    listed: bool = True,
    gain_of: str = "step time",
) -> str:
    """Advice items (``Advice.to_json()``) with their evidence and fix, then the rules
    that could not judge for lack of data (``not_judged``: :func:`not_judged_html`; where
    there is advice and not ``listed``, their count alone). Gains are shares of
    ``gain_of`` (``advise.gain_of``)."""
    from ..advise import shown_snippet

    groups = not_judged or []
    if not items:
        if not groups:
            return f'<p class="aiprof-advice" style="{_MUTED};margin:2px 0">No advice: no rule fired.</p>'
        # "No rule fired" would read as "nothing wrong" where rules lacked their data.
        return (
            f'<div class="aiprof-advice"><p style="{_MUTED};margin:2px 0">No advice: no rule fired on the data '
            f"this profile holds.</p>{not_judged_html(groups)}</div>"
        )
    out = []
    for a in items:
        sev = str(a.get("severity", "low"))
        color = SEVERITY_COLORS.get(sev, "#6b7280")
        ev = "; ".join(f"{k} = {format_cell(v)}" for k, v in (a.get("evidence") or {}).items())
        shown = shown_snippet(a)
        snippet = shown[1] if shown else None
        code = (
            f'<pre style="margin:4px 0;padding:6px 8px;background:rgba(128,128,128,.12);font-size:12px;'
            f'white-space:pre-wrap">{esc(snippet)}</pre>'
            if snippet
            else ""
        )
        out.append(
            f'<div class="aiprof-advice-item" style="border-left:3px solid {color};padding:3px 10px;margin:6px 0">'
            f"<div><b>{esc(str(a.get('title', a.get('rule', ''))))}</b> "
            f'<span style="color:{color};font-weight:600">{esc(sev)}</span>'
            f'<span style="{_MUTED}"> · expected gain {float(a.get("gain_pct") or 0):.1f}% of {esc(gain_of)}'
            f" · rule {esc(str(a.get('rule', '')))}</span></div>"
            f"<div>{esc(str(a.get('summary', '')))}</div>"
            f'<div style="{_MUTED}">Evidence: {esc(ev)}</div>'
            f"<div><b>Fix:</b> {esc(str(a.get('fix', '')))}</div>{code}</div>"
        )
    more = f'<div style="{_MUTED}">{total - len(items)} more: _aiprof.advise()</div>' if total > len(items) else ""
    return f'<div class="aiprof-advice">{"".join(out)}{more}{not_judged_html(groups, listed)}</div>'


def _facts(handle: ProfileHandle, data: dict[str, Any]) -> str:
    prof = handle.profile
    steps = [s for s in (data.get("steps") or []) if s.get("step") is not None]
    ranks = sorted({r for m in prof.metas for r in m.get("ranks", [])})
    devices = sorted({str(d.get("name") or d.get("type")) for d in prof.devices if d.get("type") != "cpu"})
    bits = [f"{len(steps)} steps" if steps else "no steps marked"]
    if steps:
        durs = sorted(float(s.get("duration_us") or 0.0) for s in steps)
        bits.append(f"median step {_ms(durs[len(durs) // 2])}")
    if prof.tables.get("samples"):
        bits.append(f"{prof.tables['samples']:,} Python samples")
    if prof.tables.get("events"):
        bits.append(f"{prof.tables['events']:,} events")
    if len(ranks) > 1:
        bits.append(f"{len(ranks)} ranks")
    bits.append("devices: " + (", ".join(devices) if devices else "CPU only"))
    return " · ".join(bits)


def summary_html(handle: ProfileHandle, data: dict[str, Any] | None = None) -> str:
    """The whole inline summary of a profile."""
    data = data if data is not None else overview_data(handle)
    prof = handle.profile
    errors: dict[str, str] = data["errors"]
    where = ", ".join(str(p) for p in handle.paths)
    parts = [
        f'<div class="aiprof-overview" style="{_BOX}">',
        f'<div style="font-size:15px"><b>aiprof</b> · {esc(handle.label)}</div>',
        f'<div style="{_MUTED}">{esc(_facts(handle, data))}</div>',
        f'<div style="{_MUTED};font-size:11px">profile: <code>{esc(where)}</code></div>',
    ]
    if any(m.get("partial") for m in prof.metas):
        parts.append('<div style="color:#d97706">This profile is partial: the recording or file was cut short.</div>')
    for w in prof.warnings + handle.notes:
        parts.append(f'<div style="color:#d97706">{esc(w)}</div>')

    ov = data.get("overview") or []
    steps_all = data.get("steps") or []
    # Without steps the breakdown and the busy share are of the whole profile (the CLI's words).
    no_steps = not any(s.get("step") is not None for s in steps_all)
    title = "Time breakdown over the whole profile (no steps found)" if no_steps else "Step time breakdown"
    parts.append(f'<div style="{_H}">{title}</div>')
    ranks = sorted({r["rank"] for r in ov if r["section"] == "breakdown"})
    for rank in ranks[:MAX_RANKS]:
        if len(ranks) > 1:
            parts.append(f"<div>rank {esc(str(rank))}</div>")
        rows = [r for r in ov if r["rank"] == rank and r["section"] == "breakdown" and r.get("step") is None]
        parts.append('<div class="aiprof-breakdown">' + _breakdown_bar(rows) + "</div>")
        steps = [s for s in steps_all if s.get("rank") == rank and s.get("step") is not None]
        if steps:
            parts.append(_step_chart(steps))
    if len(ranks) > MAX_RANKS:
        parts.append(f'<div style="{_MUTED}">{len(ranks) - MAX_RANKS} more ranks: _aiprof.report("overview")</div>')
    if not ranks:
        parts.append(f'<p style="{_MUTED}">{esc(errors.get("overview") or "No step time to break down.")}</p>')

    parts.append(f'<div style="{_H}">Device utilization</div>')
    parts.append(_device_table(ov, any(d.get("type") != "cpu" for d in prof.devices), no_steps))

    parts.append(f'<div style="{_H}">Top advice</div>')
    advice = data.get("advice")
    if advice is None:
        parts.append(f'<p style="{_MUTED}">{esc(errors.get("advice", "no advice"))}</p>')
    else:
        parts.append(
            advice_html(
                advice[:TOP_ADVICE],
                len(advice),
                data.get("not_judged"),
                listed=False,
                gain_of=data.get("gain_of") or "step time",
            )
        )

    tops = [
        (
            "python",
            "Top Python functions by sampled self time",
            ["function", "file", "self_pct", "self_us", "total_pct"],
        ),
        ("operators", "Top operators by host self time", ["name", "calls", "host_self_us", "device_total_us"]),
        ("kernels", "Top kernels by total time", ["name", "count", "total_us", "pct"]),
    ]
    # The Python view's rows are per rank: in a profile of several, each says whose.
    ranked = len({r for m in prof.metas for r in m.get("ranks", [])}) > 1
    for key, title, cols in tops:
        rows = data.get(key) or []
        if not rows:
            continue
        numeric = cols[1:]
        if key == "operators" and all(r.get("device_total_us") is None for r in rows):
            cols = cols[:-1]  # no device work in the profile: not measured, left out
        if key == "python":
            rows = [dict(r, file=_short_file(str(r.get("file") or ""))) for r in rows]
            numeric = cols[2:]
            if ranked:
                cols, numeric = ["rank", *cols], ["rank", *numeric]
        parts.append(f'<div style="{_H}">{esc(title)}</div>')
        parts.append(f'<div class="aiprof-top-{key}">' + _table(rows, cols, numeric) + "</div>")
    flame = flame_html(prof)
    if flame:
        parts.append(
            f'<div style="{_H}">Python flame graph <span style="{_MUTED};font-weight:normal;font-size:12px">'
            "(sampled stacks, callers above callees; hover a bar for its numbers)</span></div>"
        )
        parts.append(flame)
    parts.append(
        f'<div style="{_MUTED};margin-top:10px;font-size:12px">more: <code>_aiprof.report("steps" | "operators" | '
        f'"kernels" | "python" | "memory" | "events", filter=..., sort=...)</code>, <code>_aiprof.advise()</code>, '
        f"<code>_aiprof.sql(...)</code>; in a shell: <code>aiprof report {esc(where)}</code></div>"
    )
    parts.append("</div>")
    return "".join(parts)


def _short_file(path: str) -> str:
    p = Path(path)
    return "/".join(p.parts[-2:]) if len(p.parts) > 2 else path


def summary_text(handle: ProfileHandle, data: dict[str, Any] | None = None) -> str:
    """The summary as text (what a front end without HTML shows)."""
    data = data if data is not None else overview_data(handle)
    lines = [f"aiprof · {handle.label}", _facts(handle, data)]
    for r in data.get("overview") or []:
        if r["section"] == "breakdown" and r.get("step") is None and (r.get("percent") or 0) > 0:
            lines.append(f"  rank {r['rank']} {r['category']}: {_ms(r.get('time_us'))} ({r['percent']:.1f}%)")
    of = data.get("gain_of") or "step time"
    for a in (data.get("advice") or [])[:TOP_ADVICE]:
        lines.append(f"  advice [{a['severity']}] {a['title']} (expected gain {a['gain_pct']:.1f}% of {of})")
    unjudged = sum(len(g["rules"]) for g in data.get("not_judged") or [])
    if unjudged:
        none = "no advice: no rule fired on the data this profile holds; " if data.get("advice") == [] else ""
        lines.append(f"  {none}{unjudged} rules could not judge for lack of data (_aiprof.advise() lists them)")
    lines.append(f"profile: {', '.join(str(p) for p in handle.paths)}")
    return "\n".join(lines)


def display_profile(handle: ProfileHandle, *, timeline: bool = True) -> None:
    """Display the summary, then the timeline served by the kernel (when it starts)."""
    import sys

    from IPython.display import display

    data = overview_data(handle)
    display({"text/html": summary_html(handle, data), "text/plain": summary_text(handle, data)}, raw=True)  # type: ignore[no-untyped-call,unused-ignore]
    if not timeline:
        return
    try:
        server = handle.serve()
    except Exception as e:
        print(f"aiprof: no interactive timeline: {e}", file=sys.stderr)
        return
    display({"text/html": server._repr_html_(), "text/plain": repr(server)}, raw=True)  # type: ignore[no-untyped-call,unused-ignore]
