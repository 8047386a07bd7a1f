"""Framework operators: host time (total and self) and the device time they launched."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pyarrow as pa

from ..store import Profile
from .base import analyser
from .common import arrays_of, recode
from .tensor_cores import tensor_core_sql

#: The host spans the view nests, one thread at a time (its cost grows with their count).
HOST_KINDS = ("cpu_op", "user_annotation", "python", "runtime", "driver", "dataloader", "step")
_HOST_KINDS = "(" + ", ".join(f"'{k}'" for k in HOST_KINDS) + ")"
#: Kinds reported as operators.
_OP_SQL = "kind IN ('cpu_op', 'dataloader')"
_TIME_COLS = ("host_total_us", "host_self_us", "host_mean_us", "device_self_us", "device_total_us")


#: Host spans past which a profile is big: the operators view nests every host span (in
#: batches, NEST_BATCH, so its memory stays bounded, but its time grows with them: 50 s
#: and 1.28 GiB for the 26M spans of bench/huge_import.py's 10 GiB trace). The report
#: leaves out what nests them, and the advice drops each view's per-event
#: intermediates once it has its rows.
BIG_PROFILE_HOST_SPANS = 7_000_000
#: The environment variable that sets another bound (a machine with more memory, or a
#: test of the big-profile paths on a small one).
ENV_BIG_PROFILE = "AIPROF_BIG_PROFILE_SPANS"
#: The views that nest every host span (an operator for each row): on a big profile the
#: HTML report leaves them out and the web UI computes them only when asked.
NEST_HOST_SPANS = ("operators", "allocations")


def big_profile(metas: list[dict[str, Any]]) -> int | None:
    """The profiles' host spans (:func:`host_spans`) where they are past the bound
    (BIG_PROFILE_HOST_SPANS, or the ``AIPROF_BIG_PROFILE_SPANS`` environment variable):
    there the operators view and the advice, which reads it, take minutes and GiBs, and
    the report, the HTML report and the web UI leave them to be asked for. None for a
    profile below it."""
    import os

    raw = os.environ.get(ENV_BIG_PROFILE, "").strip()
    bound = int(raw) if raw.isdigit() else BIG_PROFILE_HOST_SPANS
    n = host_spans(metas)
    return n if n > bound else None


def left_out(what: str, spans: int, how: str) -> str:
    """Why ``what`` (a view, the advice) is not computed yet on a big profile of
    ``spans`` host spans, and ``how`` to have it: the one wording every face shows."""
    return f"on a profile this size ({spans:,} host spans) {what} takes minutes and GiBs to compute: {how}"


def not_computed(view: str, spans: int, how: str) -> dict[str, Any]:
    """A view of ``NEST_HOST_SPANS`` not computed on a big profile, as a view's answer:
    no rows, ``deferred`` and the reason (:func:`left_out`). The API answers it until
    asked with ``compute=true``; the HTML report embeds it."""
    return {
        "view": view,
        "columns": [],
        "rows": [],
        "total": 0,
        "offset": 0,
        "limit": None,
        "deferred": True,
        "reason": left_out(f"the {view} view", spans, how),
    }


def host_spans(metas: list[dict[str, Any]]) -> int:
    """How many host spans the view would nest, from the profiles' import summaries
    (their events counted by kind), without reading the events; a profile without a
    summary counts all its events."""
    n = 0
    for m in metas:
        by_kind = (m.get("import_summary") or {}).get("events_by_kind")
        if isinstance(by_kind, dict) and by_kind:
            n += sum(int(by_kind.get(k, 0)) for k in HOST_KINDS)
        else:
            n += int((m.get("tables") or {}).get("events", 0))
    return n


def nest(
    thread_change: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    is_op: np.ndarray,
    carried: int = 0,
    carried_op_parent: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """Nesting of host spans on each thread, in thread then start order (the longest
    first at one start); ``thread_change`` is true where a span is the first of its
    thread. The first ``carried`` spans are the stack a previous batch left open,
    outermost first, with the stack position of the innermost operator above each
    (``carried_op_parent``, -1 for none).

    Returns (parent, op_parent, depth, open): the index of the innermost span holding
    each span (-1 for roots; spans that only overlap without nesting get none), the
    index of the innermost *operator* above it, its depth, and the indexes of the spans
    still open after the last one (the stack, outermost first).
    """
    n = len(ts)
    # Typed arrays (array.array): element access on numpy arrays costs several times
    # more per item, and a Python list takes a 28-byte int per item besides its 8-byte
    # slot (a 10 GB trace has tens of millions of host spans: bench/huge_import.py).
    parent = array("q", [-1]) * n
    op_parent = array("q", [-1]) * n
    depth = array("q", [0]) * n
    ends = _q(ts + dur)
    starts = _q(ts)
    ops = array("b", np.ascontiguousarray(is_op, dtype=np.int8).tobytes())
    first = array("b", np.ascontiguousarray(thread_change, dtype=np.int8).tobytes())
    stack: list[int] = list(range(carried))
    op_stack: list[int] = []  # innermost operator at each stack level (or -1)
    for j in range(carried):
        parent[j], depth[j] = j - 1, j
        op_parent[j] = int(carried_op_parent[j]) if carried_op_parent is not None else -1
        op_stack.append(j if ops[j] else op_parent[j])
    for i in range(carried, n):
        if first[i]:
            stack.clear()
            op_stack.clear()
        t = starts[i]
        while stack and ends[stack[-1]] <= t:
            stack.pop()
            op_stack.pop()
        e = ends[i]
        while stack and ends[stack[-1]] < e:
            # Overlaps the span above without fitting in it: not its child.
            stack.pop()
            op_stack.pop()
        if stack:
            parent[i] = stack[-1]
            op_parent[i] = op_stack[-1]
            depth[i] = len(stack)
        stack.append(i)
        op_stack.append(i if ops[i] else op_parent[i])
    return (
        np.frombuffer(parent, dtype=np.int64),
        np.frombuffer(op_parent, dtype=np.int64),
        np.frombuffer(depth, dtype=np.int64),
        stack,
    )


def _q(a: np.ndarray) -> array[int]:
    """``a`` as a typed array of int64."""
    return array("q", np.ascontiguousarray(a, dtype=np.int64).tobytes())


#: group_by values beyond "name": the column each adds and the Kineto arg it holds.
GROUPS: dict[str, tuple[str, str]] = {"shapes": ("input_shapes", "Input Dims"), "stack": ("call_stack", "Call stack")}


def _empty(group: tuple[str, str] | None) -> pa.Table:
    cols: dict[str, Any] = {"name": pa.array([], pa.string())}
    if group:
        cols[group[0]] = pa.array([], pa.string())
    cols["calls"] = pa.array([], pa.int64())
    for c in _TIME_COLS:
        cols[c] = pa.array([], pa.float64())
    cols["kernels"] = pa.array([], pa.int64())
    return pa.table(cols)


#: Python frames kept of an operator's call stack (innermost), and frames left out:
#: torch's own code and built-ins (the stack names the user's code that called it).
STACK_FRAMES = 6
_LIBRARY_FRAMES = ("torch/", "<built-in", "threading.py", "runpy.py")


def _frames_of(parent: np.ndarray, py: np.ndarray, py_names: np.ndarray, memo: dict[int, tuple[str, ...]]) -> Any:
    """The Python frames around span ``j`` and itself (``python_function`` events of
    ``with_stack=True``; torch's own code and built-ins left out), outermost first, the
    innermost ``STACK_FRAMES`` kept; ``memo`` holds those known (the carried stack's)."""

    def frames(j: int) -> tuple[str, ...]:
        path: list[int] = []
        while j >= 0 and j not in memo:
            path.append(j)
            j = int(parent[j])
        out = memo.get(j, ())
        for k in reversed(path):
            name = str(py_names[py[k]]) if py[k] >= 0 else ""
            if name and not name.startswith(_LIBRARY_FRAMES):
                out = (*out, name)[-STACK_FRAMES:]
            memo[k] = out
        return out

    return frames


@analyser(
    "operators",
    "Operators",
    default_sort=("-host_total_us",),
    units={k: "µs" for k in _TIME_COLS},
)
def operators(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """One row per operator name (kinds cpu_op and dataloader), or per name and input
    shapes with params {"group_by": "shapes"} (column input_shapes), or per name and
    recorded call stack with {"group_by": "stack"} (column call_stack, Kineto's
    "Call stack" arg of ``with_stack=True``; empty when not recorded): calls, host_total_us, host_self_us
    (total minus direct children), host_mean_us, device_self_us (device time of the
    kernels, copies and sets it launched itself, through correlation), device_total_us
    (including what its child operators launched), kernels (launches it made itself);
    the three device columns are null, not 0, in a profile without device work (a
    CPU-only job: not measured)."""
    grouping = str(params.get("group_by", "name"))
    # The overview's top operators and the advice both ask: the nesting is computed once.
    return profile.memo(
        f"operators:{grouping}", lambda: _unmeasured(profile, _operators(profile, GROUPS.get(grouping)))
    )


#: The device columns of the operators view, null where the profile has no device work.
DEVICE_COLUMNS = ("device_self_us", "device_total_us", "kernels")


def _unmeasured(profile: Profile, table: pa.Table) -> pa.Table:
    """``table`` with its device columns null where the profile has no device work."""
    from .overview import measured_ranks  # the rule the other views' device figures follow

    if not table.num_rows or measured_ranks(profile, "device"):
        return table
    for c in DEVICE_COLUMNS:
        i = table.schema.get_field_index(c)
        table = table.set_column(i, c, pa.nulls(table.num_rows, table.schema.field(c).type))
    return table


#: Host spans read at a time: the nesting's memory is a batch's, whatever the profile's
#: size (about 200 bytes a span), and the stack of open spans carried between batches.
NEST_BATCH = 1 << 20


def _operators(profile: Profile, group: tuple[str, str] | None, rows: int = NEST_BATCH) -> pa.Table:
    key_sql = f"name || chr(0) || coalesce(json_extract_string(args, '$.\"{group[1]}\"'), '')" if group else "name"
    by_stack = group == GROUPS["stack"]
    # Thread, then start, the longest first: each span comes after every span that holds
    # it. Spans of one extent (a trace in µs rounds nested calls to one): an operator
    # before a launch, then by external id (an operator's, given at its start in call
    # order: aten::to before the aten::_to_copy it calls), then by key, for one answer.
    sql = (
        f"SELECT e.rank, e.pid, e.tid, e.ts, e.dur, {_OP_SQL} AS is_op, CASE WHEN {_OP_SQL} THEN {key_sql} END AS opkey, "
        "coalesce(d.d, 0) AS dev, coalesce(d.k, 0) AS launches, "
        f"CASE WHEN e.kind = 'python' AND {str(by_stack).lower()} THEN e.name END AS pyname "
        "FROM events e LEFT JOIN ("
        "  SELECT rank, correlation, sum(dur) AS d, count(*) AS k FROM events"
        "  WHERE device_type <> 'cpu' AND correlation IS NOT NULL AND kind IN ('kernel', 'collective', 'memcpy', 'memset')"
        "  GROUP BY rank, correlation) d"
        " ON e.kind IN ('runtime', 'driver') AND d.rank = e.rank AND d.correlation = e.correlation "
        f"WHERE e.device_type = 'cpu' AND e.kind IN {_HOST_KINDS} "
        "ORDER BY e.rank, e.pid, e.tid, e.ts, e.dur DESC, is_op DESC, e.external_id NULLS LAST, opkey, pyname"
    )
    nesting = _Nesting(by_stack)
    for batch in profile.batches(sql, rows):
        nesting.add(arrays_of(batch, codes=("opkey", "pyname")))
    nesting.close()
    return nesting.table(group)


#: An operator's sums: calls, host_total, host_self, device_self, device_total (ns), kernels.
_SUMS = ("calls", "host_total", "host_self", "dev_self", "dev_total", "kernels")


class _Nesting:
    """The operators' sums over host spans read in batches (thread, then start order).

    Each batch is nested after the stack of spans the previous one left open (carried
    with what their children gave them so far): a span's sums are final once it closes,
    as no later span can be its child. The answer is the one a single batch gives.
    """

    def __init__(self, by_stack: bool) -> None:
        self.by_stack = by_stack
        self.index: dict[str, int] = {}
        """Operator key (``name\0group``) -> its row."""
        self.sums = np.zeros((len(_SUMS), 0), dtype=np.int64)
        self.open: dict[str, Any] | None = None
        """The open stack: its spans' columns, and the thread it is on."""

    def add(self, h: dict[str, np.ndarray]) -> None:
        m = len(h["ts"])
        if m == 0:
            return
        change = np.empty(m, dtype=bool)
        thread = (int(h["rank"][0]), int(h["pid"][0]), int(h["tid"][0]))
        change[0] = self.open is None or self.open["thread"] != thread
        change[1:] = (np.diff(h["rank"]) != 0) | (np.diff(h["pid"]) != 0) | (np.diff(h["tid"]) != 0)
        last = (int(h["rank"][-1]), int(h["pid"][-1]), int(h["tid"][-1]))
        code = self._codes(h) if not self.by_stack else np.full(m, -1, dtype=np.int64)
        zeros = np.zeros(m, dtype=np.int64)
        new = {
            "change": change,
            "ts": h["ts"],
            "dur": h["dur"],
            "is_op": h["is_op"],
            "code": code,
            "child": zeros,
            "dev_self": zeros,
            "kernels": zeros,
            "dev_sub": zeros,
        }
        o = self.open
        k = 0 if o is None else len(o["ts"])
        cols = new if o is None else {c: np.concatenate([o[c], v]) for c, v in new.items()}
        parent, op_parent, depth, still = nest(
            cols["change"], cols["ts"], cols["dur"], cols["is_op"], k, None if o is None else o["op_parent"]
        )
        if self.by_stack:
            memo = {} if o is None else dict(enumerate(o["frames"]))
            frames = _frames_of(parent, np.concatenate([np.full(k, -1), h["pyname"]]), h["pyname__dict"], memo)
            cols["code"][k:] = self._stack_codes(h, parent[k:], frames)
        dur, is_op = cols["dur"], cols["is_op"]
        child, dev_self, kernels, dev_sub = (cols[c].copy() for c in ("child", "dev_self", "kernels", "dev_sub"))
        p = parent[k:]
        has = p >= 0
        np.add.at(child, p[has], dur[k:][has])
        # Device time: a launch's work counts for the innermost operator around it (self)
        # and for every operator above that one (total, once each closes).
        owner = np.where(is_op[k:], -1, op_parent[k:])  # launches are never operators themselves
        dev = h["dev"]
        mine = (owner >= 0) & (dev > 0)
        np.add.at(dev_self, owner[mine], dev[mine])
        np.add.at(kernels, owner[mine], h["launches"][mine])
        closed = np.ones(len(dur), dtype=bool)
        closed[still] = False
        self._close(closed, cols["code"], dur, is_op, op_parent, depth, child, dev_self, kernels, dev_sub)
        keep = np.asarray(still, dtype=np.int64)
        self.open = {c: v[keep] for c, v in cols.items()}
        self.open.update(child=child[keep], dev_self=dev_self[keep], kernels=kernels[keep], dev_sub=dev_sub[keep])
        self.open["change"][:] = False
        # Each open span's innermost operator above is open too (an ancestor): its place.
        opp = op_parent[keep]
        self.open["op_parent"] = np.where(opp >= 0, np.searchsorted(keep, opp), -1)
        self.open["thread"] = last
        if self.by_stack:
            self.open["frames"] = [frames(int(j)) for j in keep]

    def close(self) -> None:
        """The spans still open after the last batch close."""
        o = self.open
        if o is None or not len(o["ts"]):
            return
        n = len(o["ts"])
        depth = np.arange(n, dtype=np.int64)
        closed = np.ones(n, dtype=bool)
        sums = [o[c] for c in ("child", "dev_self", "kernels", "dev_sub")]
        self._close(closed, o["code"], o["dur"], o["is_op"], o["op_parent"], depth, *sums)
        self.open = None

    def _close(
        self,
        closed: np.ndarray,
        code: np.ndarray,
        dur: np.ndarray,
        is_op: np.ndarray,
        op_parent: np.ndarray,
        depth: np.ndarray,
        child: np.ndarray,
        dev_self: np.ndarray,
        kernels: np.ndarray,
        dev_sub: np.ndarray,
    ) -> None:
        """Add the closed operators to their rows; each gives its device total (its own
        and what the operators inside it gave) to the operator above it."""
        ops = np.flatnonzero(closed & is_op)
        if not len(ops):
            return
        dev_total = np.zeros(len(dur), dtype=np.int64)
        by_depth = ops[np.argsort(-depth[ops], kind="stable")]
        bounds = np.flatnonzero(np.diff(depth[by_depth])) + 1
        for idx in np.split(by_depth, bounds):  # the deepest first: a parent after its children
            tot = dev_self[idx] + dev_sub[idx]
            dev_total[idx] = tot
            up = op_parent[idx]
            has = up >= 0
            np.add.at(dev_sub, up[has], tot[has])
        c = code[ops]
        m = len(self.index)
        if self.sums.shape[1] < m:
            self.sums = np.pad(self.sums, ((0, 0), (0, m - self.sums.shape[1])))
        for row, v in enumerate((None, dur, dur - child, dev_self, dev_total, kernels)):
            w = None if v is None else v[ops]
            self.sums[row] += np.bincount(c, weights=w, minlength=m).astype(np.int64)

    def _codes(self, h: dict[str, np.ndarray]) -> np.ndarray:
        """The batch's operator keys as rows (-1 for the spans that are not operators)."""
        out: np.ndarray = recode(self.index, [str(k) for k in h["opkey__dict"].tolist()])[h["opkey"]]
        return out

    def _stack_codes(self, h: dict[str, np.ndarray], parent: np.ndarray, frames: Any) -> np.ndarray:
        """Rows of keys ``name\0stack``: the trace's ``Call stack`` arg, or else the Python
        frames around the call, outermost first, joined by ' > '."""
        out = np.full(len(parent), -1, dtype=np.int64)
        names, index = h["opkey__dict"], self.index
        for i in np.flatnonzero(h["is_op"]).tolist():
            name, _, arg = str(names[h["opkey"][i]]).partition("\x00")
            label = name + "\x00" + (arg or " > ".join(frames(int(parent[i]))))
            out[i] = index.setdefault(label, len(index))
        return out

    def table(self, group: tuple[str, str] | None) -> pa.Table:
        if not self.index:
            return _empty(group)
        labels = np.array(list(self.index), dtype=object)
        order = np.argsort(labels, kind="stable")  # rows by key, one order whatever the batches
        sums = {name: self.sums[i][order] for i, name in enumerate(_SUMS)}
        keep = np.flatnonzero(sums["calls"] > 0)
        keys = [str(x) for x in labels[order][keep].tolist()]
        calls = sums["calls"][keep]
        cols: dict[str, Any] = {"name": [x.split("\x00")[0] for x in keys]}
        if group:
            cols[group[0]] = [x.split("\x00", 1)[1] or None if "\x00" in x else None for x in keys]
        cols["calls"] = calls
        cols["host_total_us"] = sums["host_total"][keep] / 1000.0
        cols["host_self_us"] = sums["host_self"][keep] / 1000.0
        cols["host_mean_us"] = sums["host_total"][keep] / 1000.0 / calls
        cols["device_self_us"] = sums["dev_self"][keep] / 1000.0
        cols["device_total_us"] = sums["dev_total"][keep] / 1000.0
        cols["kernels"] = sums["kernels"][keep]
        return pa.table(cols)


def operator_names(profile: Profile, limit: int = 5, name: str | None = None) -> list[str]:
    """Names of the profile's operators, most host time first (for a message that asks
    for one); with ``name``, that name alone where an operator has it, else none."""
    where, args = [_OP_SQL, "device_type = 'cpu'", "name IS NOT NULL"], []
    if name is not None:
        where.append("name = ?")
        args.append(name)
    t = profile.sql(
        f"SELECT name FROM events WHERE {' AND '.join(where)} GROUP BY name ORDER BY sum(dur) DESC, name LIMIT {int(limit)}",
        args or None,
    )
    return [str(x) for x in t.column(0).to_pylist()]


@analyser(
    "operator-kernels",
    "Kernels an operator launched",
    default_sort=("-total_us",),
    units={"total_us": "µs", "mean_us": "µs"},
)
def operator_kernels(profile: Profile, params: dict[str, Any]) -> pa.Table:
    """The device work launched inside the operator named params["name"] (and, with
    params["input_shapes"], only its calls with those shapes, as the operators view
    groups them; of every call site when grouped by stack), itself or through its child operators (the operators
    view's device_total_us): one row per kernel name with kind, count, total_us, mean_us
    and tensor_core (tb-profiler's name rule). No rows without params["name"]."""
    name = params.get("name")
    if not name:  # no operator named: no rows (the columns stay)
        name = "\x00"
    where, args = [_OP_SQL, "device_type = 'cpu'", "name = ?"], [str(name)]
    col, arg = GROUPS["shapes"]
    if col in params:
        where.append(f"coalesce(json_extract_string(args, '$.\"{arg}\"'), '') = ?")
        args.append(str(params[col] or ""))
    return profile.sql(
        f"""
        WITH ops AS (SELECT rank, pid, tid, ts, ts + dur AS te FROM events WHERE {" AND ".join(where)}),
        launched AS (
            SELECT DISTINCT r.rank, r.correlation FROM events r JOIN ops o
              ON r.rank = o.rank AND r.pid = o.pid AND r.tid = o.tid AND r.ts >= o.ts AND r.ts + r.dur <= o.te
            WHERE r.kind IN ('runtime', 'driver') AND r.correlation IS NOT NULL)
        SELECT k.name, any_value(k.kind) AS kind, count(*) AS count, sum(k.dur) / 1000.0 AS total_us,
               avg(k.dur) / 1000.0 AS mean_us, {tensor_core_sql("k.name")} AS tensor_core
        FROM events k JOIN launched l ON k.rank = l.rank AND k.correlation = l.correlation
        WHERE k.device_type <> 'cpu' AND k.kind IN ('kernel', 'collective', 'memcpy', 'memset')
        GROUP BY k.name
        """,
        args,
    )
