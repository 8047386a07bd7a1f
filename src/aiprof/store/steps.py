"""Give every event the step (iteration) it belongs to, once all events are known.

Steps are the ``kind = 'step'`` spans (``ProfilerStep#N`` in PyTorch). Importers
stream events in file order, where a step span may come after the events inside it,
so the assignment runs when the profile is committed:
- host events (``device_type = 'cpu'``) take the step whose span holds their ``ts``,
  on the same rank;
- device events take the step of the host call that launched them (same
  ``correlation``), as Holistic Trace Analysis does, and fall back to their ``ts``.
An event that already carries a step (an importer that knows better) keeps it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrow_np import from_numpy
from .vocabulary import step_number

#: Launches whose step is found at once (bounds the temporaries of _by_time).
_SLICE = 1 << 20


class StepIndex:
    """Step spans and launch correlations, gathered batch by batch, then applied."""

    def __init__(self) -> None:
        self._steps: list[tuple[int, int, int, int]] = []  # rank, start, end, step
        # Per batch of launches: key (rank << 40 + correlation), ts and rank.
        self._launch_key: list[np.ndarray] = []
        self._launch_ts: list[np.ndarray] = []
        self._launch_rank: list[np.ndarray] = []
        self._ready = False

    def observe(self, batch: pa.RecordBatch) -> None:
        """Collect what assignment needs from one events batch."""
        kind = batch.column("kind")
        is_step = pc.equal(kind, "step")
        if pc.any(is_step).as_py():
            sb = batch.filter(is_step)
            names = sb.column("name").to_pylist()
            ranks = sb.column("rank").to_pylist()
            ts = sb.column("ts").to_pylist()
            dur = sb.column("dur").to_pylist()
            steps = sb.column("step").to_pylist()
            for n, r, t, d, s in zip(names, ranks, ts, dur, steps):
                num = s if s is not None else step_number(n)
                if num is not None and t is not None:
                    self._steps.append((r or 0, t, t + (d or 0), num))
        host = pc.and_(pc.equal(batch.column("device_type"), "cpu"), pc.is_valid(batch.column("correlation")))
        if pc.any(host).as_py():
            hb = batch.filter(host)
            rank = hb.column("rank").fill_null(0).to_numpy(zero_copy_only=False)
            corr = hb.column("correlation").to_numpy(zero_copy_only=False)
            self._launch_key.append(rank.astype(np.int64) * (1 << 40) + corr)
            self._launch_ts.append(hb.column("ts").to_numpy(zero_copy_only=False))
            self._launch_rank.append(rank.astype(np.int32, copy=False))

    @property
    def has_steps(self) -> bool:
        return bool(self._steps)

    def repeated(self) -> list[tuple[int, int, int]]:
        """(rank, step, spans) of each step number that marks more than one span of its
        rank (at different times): their events all take that one number."""
        spans: dict[tuple[int, int], set[int]] = {}
        for r, t, _, n in self._steps:
            spans.setdefault((r, n), set()).add(t)
        return sorted((r, n, len(ts)) for (r, n), ts in spans.items() if len(ts) > 1)

    def _prepare(self) -> None:
        if self._ready:
            return
        self._ready = True
        st = sorted(self._steps)
        self.s_rank = np.array([s[0] for s in st], dtype=np.int64)
        self.s_start = np.array([s[1] for s in st], dtype=np.int64)
        self.s_end = np.array([s[2] for s in st], dtype=np.int64)
        self.s_num = np.array([s[3] for s in st], dtype=np.int64)
        if self._launch_key:
            # Each list freed as soon as it is joined, and the steps found a slice at a
            # time: a 10 GB trace has tens of millions of launches, and this runs
            # beside the writer (bench/huge_import.py).
            key = np.concatenate(self._launch_key)
            self._launch_key.clear()
            order = np.argsort(key, kind="stable")
            self.l_key = key[order]
            del key
            ts = np.concatenate(self._launch_ts)[order]
            self._launch_ts.clear()
            rank = np.concatenate(self._launch_rank)[order]
            self._launch_rank.clear()
            del order
            self.l_step = np.empty(len(ts), dtype=np.int64)
            for i in range(0, len(ts), _SLICE):
                self.l_step[i : i + _SLICE] = self._by_time(rank[i : i + _SLICE], ts[i : i + _SLICE])
        else:
            self.l_key = np.zeros(0, dtype=np.int64)
            self.l_step = np.zeros(0, dtype=np.int64)

    def _by_time(self, rank: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Step number holding each (rank, ts), or -1."""
        out = np.full(len(ts), -1, dtype=np.int64)
        # sorted(set()), not np.unique: NumPy 2's unique imports numpy.ma (tens of ms of
        # a small import); the step ranks are a handful.
        for r in sorted(set(self.s_rank.tolist())):
            sel_s = self.s_rank == r
            starts, ends, nums = self.s_start[sel_s], self.s_end[sel_s], self.s_num[sel_s]
            sel = rank == r
            if not sel.any():
                continue
            t = ts[sel]
            i = np.searchsorted(starts, t, side="right") - 1
            ok = (i >= 0) & (t < ends[np.clip(i, 0, None)])
            res = np.where(ok, nums[np.clip(i, 0, None)], -1)
            out[sel] = res
        return out

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Return ``batch`` with its null steps filled in."""
        if not self._steps:
            return batch
        self._prepare()
        step_col = batch.column("step")
        if step_col.null_count == 0:
            return batch
        n = batch.num_rows
        rank = batch.column("rank").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        ts = batch.column("ts").fill_null(0).to_numpy(zero_copy_only=False)
        result = self._by_time(rank, ts)
        is_dev = pc.not_equal(batch.column("device_type"), "cpu").fill_null(False).to_numpy(zero_copy_only=False)
        corr_arr = batch.column("correlation")
        has_corr = pc.is_valid(corr_arr).to_numpy(zero_copy_only=False)
        dev = np.flatnonzero(is_dev & has_corr)
        if len(dev) and len(self.l_key):
            corr = corr_arr.fill_null(0).to_numpy(zero_copy_only=False)[dev]
            key = rank[dev] * (1 << 40) + corr
            j = np.searchsorted(self.l_key, key)
            jc = np.clip(j, 0, len(self.l_key) - 1)
            found = self.l_key[jc] == key
            result[dev[found]] = self.l_step[jc[found]]
        new = from_numpy(result, pa.int32(), mask=result < 0)
        merged = pc.coalesce(step_col, new)
        idx = batch.schema.get_field_index("step")
        assert n == len(merged)
        return batch.set_column(idx, "step", merged)
